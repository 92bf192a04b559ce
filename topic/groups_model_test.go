package topic

import (
	"errors"
	"slices"
	"sort"
	"time"

	"pgregory.net/rapid"
)

// The reference model of consumer groups, from docs/semantics.md ("Consumer groups"):
// plain maps and linear scans.

type mgpart struct {
	committed, position uint64
	owner, pending      string
	revokeAt            int64 // when pending was set
	epoch, lost         uint64
}

type mmember struct {
	session uint64
	expires int64
}

type mgroup struct {
	cfg         GroupConfig
	parts       []*mgpart
	members     map[string]*mmember
	lastSession uint64
}

// truncated applies retention's deletion in partition p to every group.
func (t *mtopic) truncated(p int) {
	start := t.parts[p].start
	for _, g := range t.groups {
		gp := g.parts[p]
		if gp.committed < start {
			gp.lost += start - gp.committed
			gp.committed = start
			gp.position = max(gp.position, start)
		}
	}
}

func (g *mgroup) names() []string {
	var out []string
	for n := range g.members {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// rebalance: quota P/M (+1 for the first P%M names); a member keeps what it holds or is
// getting up to its quota, in partition order; the rest go, in partition order, to the
// first member (by name) still below quota. A partition whose owner is alive and must
// move gets the target as pending; one without a live owner is granted at once.
func (g *mgroup) rebalance(now int64) {
	names := g.names()
	target := make([]string, len(g.parts))
	if len(names) > 0 {
		quota := map[string]int{}
		for i, n := range names {
			quota[n] = len(g.parts) / len(names)
			if i < len(g.parts)%len(names) {
				quota[n]++
			}
		}
		var free []int
		for p, gp := range g.parts {
			c := gp.owner
			if gp.pending != "" {
				c = gp.pending
			}
			if q, ok := quota[c]; ok && q > 0 {
				target[p] = c
				quota[c]--
			} else {
				free = append(free, p)
			}
		}
		for _, p := range free {
			for _, n := range names {
				if quota[n] > 0 {
					target[p] = n
					quota[n]--
					break
				}
			}
		}
	}
	for p, gp := range g.parts {
		want := target[p]
		_, alive := g.members[gp.owner]
		switch {
		case gp.owner == "" || !alive:
			if want != gp.owner || gp.pending != "" {
				gp.owner, gp.pending = want, ""
				gp.epoch++
				gp.position = gp.committed
			}
		case want == gp.owner:
			gp.pending = ""
		default:
			if gp.pending != want {
				gp.pending, gp.revokeAt = want, now
			}
		}
	}
}

func (g *mgroup) leave(name string) {
	delete(g.members, name)
	for _, gp := range g.parts {
		if gp.owner == name {
			gp.owner, gp.pending = "", ""
			gp.epoch++
			gp.position = gp.committed
		}
		if gp.pending == name {
			gp.pending = ""
		}
	}
}

func (t *mtopic) expireMembers(now int64) {
	var names []string
	for n := range t.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := t.groups[n]
		gone := false
		for _, m := range g.names() {
			if g.members[m].expires <= now {
				g.leave(m)
				gone = true
			}
		}
		if gone {
			g.rebalance(now)
		}
	}
}

func (h *tharness) drawTopic(t *rapid.T) (string, *mtopic) {
	name := rapid.SampledFrom(h.names).Draw(t, "topic")
	return name, h.md.topics[name]
}

func (h *tharness) putGroup(t *rapid.T) {
	name, mt := h.drawTopic(t)
	gname := rapid.SampledFrom([]string{"g1", "g2"}).Draw(t, "group")
	cfg := DefaultGroupConfig()
	cfg.MemberLease = time.Duration(rapid.SampledFrom([]int{1000, 3000}).Draw(t, "lease")) * time.Millisecond
	if rapid.Bool().Draw(t, "last") {
		cfg.Start = StartLast
	}
	created, err := h.m.PutGroup(h.md.now, h.sink, name, gname, cfg)
	if mt == nil {
		if !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("PutGroup on a missing topic: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("PutGroup: %v", err)
	}
	if mt.groups == nil {
		mt.groups = map[string]*mgroup{}
	}
	g := mt.groups[gname]
	if created != (g == nil) {
		t.Fatalf("PutGroup created %v, model has the group: %v", created, g != nil)
	}
	if g != nil {
		cfg.Start = g.cfg.Start
		g.cfg = cfg
		return
	}
	g = &mgroup{cfg: cfg, members: map[string]*mmember{}}
	for _, p := range mt.parts {
		off := p.start
		if cfg.Start == StartLast {
			off = p.next
		}
		g.parts = append(g.parts, &mgpart{committed: off, position: off})
	}
	mt.groups[gname] = g
}

func (h *tharness) drawGroup(t *rapid.T) (string, string, *mgroup) {
	name, mt := h.drawTopic(t)
	gname := rapid.SampledFrom([]string{"g1", "g2"}).Draw(t, "group")
	if mt == nil || mt.groups[gname] == nil {
		t.Skip("no such group")
	}
	return name, gname, mt.groups[gname]
}

// session draws the session a member calls with: its own, 0 (join), or a wrong one.
func (h *tharness) session(t *rapid.T, g *mgroup, member string) uint64 {
	x := g.members[member]
	switch rapid.IntRange(0, 5).Draw(t, "sessionKind") {
	case 0:
		return 0
	case 1:
		return 999
	}
	if x == nil {
		return 0
	}
	return x.session
}

func (h *tharness) attendModel(g *mgroup, member string, session uint64) (error, bool) {
	x := g.members[member]
	switch {
	case x == nil && session != 0:
		return ErrMemberUnknown, false
	case x != nil && session != 0 && x.session != session:
		return ErrMemberUnknown, false
	}
	lease := g.cfg.MemberLease.Milliseconds()
	if x == nil || session == 0 {
		g.lastSession++
		if x != nil {
			for _, gp := range g.parts {
				if gp.owner == member {
					gp.epoch++
					gp.position = gp.committed
				}
			}
		}
		g.members[member] = &mmember{session: g.lastSession, expires: h.md.now + lease}
		g.rebalance(h.md.now)
	} else if x.expires-h.md.now < lease*2/3 {
		x.expires = h.md.now + lease
	}
	g.release(member, h.md.now)
	return nil, true
}

// release: a partition being revoked goes to its new owner once its owner committed all
// it was handed, or a member lease after the revocation began.
func (g *mgroup) release(member string, now int64) {
	for _, gp := range g.parts {
		if gp.owner == member && gp.pending != "" && (gp.committed >= gp.position || now-gp.revokeAt >= g.cfg.MemberLease.Milliseconds()) {
			gp.owner, gp.pending = gp.pending, ""
			gp.epoch++
			gp.position = gp.committed
		}
	}
}

func (h *tharness) attend(t *rapid.T) {
	name, gname, g := h.drawGroup(t)
	member := rapid.SampledFrom([]string{"m1", "m2", "m3"}).Draw(t, "member")
	session := h.session(t, g, member)
	s, err := h.m.Attend(h.md.now, h.sink, name, gname, member, session)
	werr, _ := h.attendModel(g, member, session)
	if !sameErr(err, werr) {
		t.Fatalf("Attend %s/%s %s session %d: %v, want %v", name, gname, member, session, err, werr)
	}
	if err == nil && s.Session != g.members[member].session {
		t.Fatalf("Attend gave session %d, model %d", s.Session, g.members[member].session)
	}
}

// pull attends, plans and hands out a prefix of each planned range (as a read capped
// by bytes would).
func (h *tharness) pull(t *rapid.T) {
	name, gname, g := h.drawGroup(t)
	member := rapid.SampledFrom([]string{"m1", "m2", "m3"}).Draw(t, "member")
	x := g.members[member]
	if x == nil {
		t.Skip("not a member")
	}
	if _, err := h.m.Attend(h.md.now, h.sink, name, gname, member, x.session); err != nil {
		t.Fatalf("Attend before pull: %v", err)
	}
	h.attendModel(g, member, x.session)
	max := rapid.IntRange(1, 6).Draw(t, "max")
	plan, err := h.m.PlanPull(name, gname, member, max)
	if err != nil {
		t.Fatalf("PlanPull: %v", err)
	}
	mt := h.md.topics[name]
	// The model's plan.
	var want []PullRange
	left := max
	var positions []uint64
	for _, gp := range g.parts {
		positions = append(positions, gp.position)
	}
	first := turn(positions, len(g.parts)) // where the walk starts is the machine's choice; the rest is checked
	for i := 0; i < len(g.parts) && left > 0; i++ {
		p := (first + i) % len(g.parts)
		gp := g.parts[p]
		if gp.owner != member || gp.pending != "" || gp.position >= mt.parts[p].next {
			continue
		}
		to := min(mt.parts[p].next, gp.position+uint64(left))
		want = append(want, PullRange{Partition: p, Epoch: gp.epoch, From: gp.position, To: to})
		left -= int(to - gp.position)
	}
	if !slices.Equal(plan.Ranges, want) {
		t.Fatalf("PlanPull: %+v, model %+v", plan.Ranges, want)
	}
	got := make([]PullRange, len(plan.Ranges))
	for i, r := range plan.Ranges {
		r.To = r.From + uint64(rapid.IntRange(1, int(r.To-r.From)).Draw(t, "handed"))
		got[i] = r
	}
	ok, err := h.m.Handed(h.md.now, h.sink, plan.TopicID, plan.GroupID, member, got)
	if err != nil {
		t.Fatalf("Handed: %v", err)
	}
	for i, r := range got {
		if !ok[i] {
			t.Fatalf("Handed refused %+v right after planning it", r)
		}
		g.parts[r.Partition].position = r.To
	}
}

func (h *tharness) commit(t *rapid.T) {
	name, gname, g := h.drawGroup(t)
	member := rapid.SampledFrom([]string{"m1", "m2", "m3"}).Draw(t, "member")
	session := h.session(t, g, member)
	n := rapid.IntRange(1, 3).Draw(t, "n")
	offs := make([]PartitionOffset, n)
	for i := range offs {
		p := rapid.IntRange(0, len(g.parts)-1).Draw(t, "partition")
		gp := g.parts[p]
		base := gp.committed
		if rapid.Bool().Draw(t, "fromPosition") {
			base = gp.position
		}
		off := int64(base) + int64(rapid.IntRange(-2, 2).Draw(t, "delta"))
		epoch := gp.epoch
		if rapid.IntRange(0, 4).Draw(t, "staleEpoch") == 0 {
			epoch++
		}
		offs[i] = PartitionOffset{Partition: p, Offset: uint64(max(off, 0)), Epoch: epoch}
	}
	errs, err := h.m.Commit(h.md.now, h.sink, name, gname, member, session, offs)
	x := g.members[member]
	if x == nil || x.session != session {
		if !errors.Is(err, ErrMemberUnknown) {
			t.Fatalf("commit by a non-member: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	seen := map[int]uint64{}
	for i, o := range offs {
		gp := g.parts[o.Partition]
		committed := gp.committed
		if c, ok := seen[o.Partition]; ok {
			committed = c
		}
		var want error
		switch {
		case gp.owner != member || gp.epoch != o.Epoch:
			want = ErrEpochStale
		case o.Offset < committed:
			want = ErrOffsetRegressed
		case o.Offset > gp.position:
			want = ErrOffsetOutOfRange
		case o.Offset > committed:
			seen[o.Partition] = o.Offset
		}
		if !sameErr(errs[i], want) {
			t.Fatalf("commit %+v (committed %d position %d owner %q epoch %d): %v, want %v", o, committed, gp.position, gp.owner, gp.epoch, errs[i], want)
		}
	}
	for p, off := range seen {
		g.parts[p].committed = off
	}
	if len(seen) > 0 {
		g.release(member, h.md.now)
	}
}

func (h *tharness) seek(t *rapid.T) {
	name, gname, g := h.drawGroup(t)
	mt := h.md.topics[name]
	p := rapid.IntRange(0, len(g.parts)-1).Draw(t, "partition")
	mp := mt.parts[p]
	off := int64(mp.start) + int64(rapid.IntRange(-1, int(mp.next-mp.start)+1).Draw(t, "to"))
	o := PartitionOffset{Partition: p, Offset: uint64(max(off, 0))}
	err := h.m.SeekGroup(h.md.now, h.sink, name, gname, []PartitionOffset{o})
	if o.Offset < mp.start || o.Offset > mp.next {
		if !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("seek to %d outside %d..%d: %v", o.Offset, mp.start, mp.next, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("SeekGroup: %v", err)
	}
	gp := g.parts[p]
	gp.committed, gp.position = o.Offset, o.Offset
	gp.epoch++
}

func (h *tharness) leave(t *rapid.T) {
	name, gname, g := h.drawGroup(t)
	member := rapid.SampledFrom([]string{"m1", "m2", "m3"}).Draw(t, "member")
	session := h.session(t, g, member)
	err := h.m.Leave(h.md.now, h.sink, name, gname, member, session)
	x := g.members[member]
	if x == nil || session != 0 && x.session != session {
		if !errors.Is(err, ErrMemberUnknown) {
			t.Fatalf("leave by a non-member: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Leave: %v", err)
	}
	g.leave(member)
	g.rebalance(h.md.now)
}

func (h *tharness) deleteGroup(t *rapid.T) {
	name, gname, _ := h.drawGroup(t)
	if err := h.m.DeleteGroup(h.md.now, h.sink, name, gname); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	delete(h.md.topics[name].groups, gname)
}

// checkGroups compares every group of a topic with the model, and checks the
// invariants: owners are live members, balanced when nothing is pending, committed ≤
// position ≤ end, committed ≥ start.
func (h *tharness) checkGroups(t *rapid.T, name string, mt *mtopic) {
	gis, err := h.m.Groups(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(gis) != len(mt.groups) {
		t.Fatalf("%s: %d groups, model %d", name, len(gis), len(mt.groups))
	}
	for _, gi := range gis {
		g := mt.groups[gi.Name]
		if g == nil {
			t.Fatalf("group %s not in the model", gi.Name)
		}
		if len(gi.Members) != len(g.members) {
			t.Fatalf("group %s: %d members, model %d", gi.Name, len(gi.Members), len(g.members))
		}
		for _, mi := range gi.Members {
			x := g.members[mi.Name]
			if x == nil || x.session != mi.Session || x.expires != mi.Expires {
				t.Fatalf("group %s member %+v, model %+v", gi.Name, mi, x)
			}
		}
		held := map[string]int{}
		pending := false
		for p, gp := range gi.Partitions {
			w := g.parts[p]
			if gp.Committed != w.committed || gp.Position != w.position || gp.Owner != w.owner || gp.Pending != w.pending || gp.Epoch != w.epoch || gp.LostToRetention != w.lost {
				t.Fatalf("group %s partition %d: %+v, model %+v", gi.Name, p, gp, *w)
			}
			if gp.Committed > gp.Position || gp.Position > gp.End || gp.Committed < gp.Start {
				t.Fatalf("group %s partition %d: committed %d position %d outside %d..%d", gi.Name, p, gp.Committed, gp.Position, gp.Start, gp.End)
			}
			if gp.Owner != "" {
				if g.members[gp.Owner] == nil {
					t.Fatalf("group %s partition %d owned by %q, not a member", gi.Name, p, gp.Owner)
				}
				held[gp.Owner]++
			}
			pending = pending || gp.Pending != ""
		}
		if !pending && len(g.members) > 0 {
			lo, hi := len(g.parts), 0
			for n := range g.members {
				lo, hi = min(lo, held[n]), max(hi, held[n])
			}
			if hi-lo > 1 {
				t.Fatalf("group %s unbalanced with nothing pending: %v", gi.Name, held)
			}
		}
	}
}
