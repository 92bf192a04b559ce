package topic

import (
	"errors"
	"fmt"

	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/internal/filter"
)

// Snapshot layout (version 1): the version, the latest logged time, the limits, the last
// topic and group ids, then each topic in id order — its id, name, configuration, times,
// round-robin counter, counters, each partition's start, end and segments, its live
// dedup entries oldest first, its groups by name (each partition's committed offset,
// position, owner, pending owner, epoch and losses; the members by name), and its
// subscriptions by id (queue, canonical filter, counters, cursors). Everything in it is replicated state: two machines that applied the same
// records write the same bytes.
const snapshotVersion = 1

// ErrSnapshotVersion is returned by Restore for a snapshot of a newer format.
var ErrSnapshotVersion = errors.New("topic snapshot from a newer okiba")

// AppendSnapshot appends the machine's state to b.
func (m *Machine) AppendSnapshot(b []byte) []byte {
	b = codec.AppendUvarint(b, snapshotVersion)
	b = codec.AppendVarint(b, m.now)
	b = appendLimits(b, &m.limits)
	b = codec.AppendUvarint(b, m.lastTID)
	b = codec.AppendUvarint(b, m.lastGID)
	b = codec.AppendUvarint(b, m.lastSID)
	ids := m.topicIDs()
	b = codec.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = m.byID[id].appendSnapshot(b)
	}
	return b
}

func (t *topicState) appendSnapshot(b []byte) []byte {
	b = codec.AppendUvarint(b, t.id)
	b = codec.AppendString(b, t.name)
	b = appendConfig(b, &t.cfg)
	b = codec.AppendVarint(b, t.createdAt)
	b = codec.AppendVarint(b, t.updatedAt)
	b = codec.AppendUvarint(b, t.rr)
	for _, v := range []uint64{t.stats.Published, t.stats.Bytes, t.stats.Truncated, t.stats.TruncatedSegs} {
		b = codec.AppendUvarint(b, v)
	}
	for i := range t.parts {
		p := &t.parts[i]
		b = codec.AppendUvarint(b, p.start)
		b = codec.AppendUvarint(b, p.next)
		b = codec.AppendUvarint(b, uint64(len(p.segs)))
		for _, s := range p.segs {
			b = codec.AppendUvarint(b, s.base)
			b = codec.AppendVarint(b, s.count)
			b = codec.AppendVarint(b, s.bytes)
			b = codec.AppendVarint(b, s.first)
			b = codec.AppendVarint(b, s.last)
		}
	}
	b = codec.AppendUvarint(b, uint64(t.dedup.len()))
	t.dedup.each(func(e *dedupEntry) {
		b = codec.AppendString(b, e.id)
		b = codec.AppendUvarint(b, uint64(e.partition))
		b = codec.AppendUvarint(b, e.offset)
		b = codec.AppendVarint(b, e.at)
		b = codec.AppendVarint(b, e.expires)
	})
	names := sortedGroupNames(t)
	b = codec.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = t.groups[n].appendSnapshot(b)
	}
	subs := t.subsByID()
	b = codec.AppendUvarint(b, uint64(len(subs)))
	for _, x := range subs {
		b = codec.AppendUvarint(b, x.id)
		b = codec.AppendString(b, x.name)
		b = codec.AppendString(b, x.queue)
		b = codec.AppendUvarint(b, x.queueID)
		b = codec.AppendBytes(b, x.filter)
		b = append(b, byte(x.scope))
		b = codec.AppendVarint(b, x.createdAt)
		b = codec.AppendUvarint(b, x.lost)
		b = codec.AppendUvarint(b, x.delivered)
		b = codec.AppendUvarint(b, x.filtered)
		for _, c := range x.cursors {
			b = codec.AppendUvarint(b, c)
		}
	}
	return b
}

func (g *group) appendSnapshot(b []byte) []byte {
	b = codec.AppendUvarint(b, g.id)
	b = codec.AppendString(b, g.name)
	b = appendGroupConfig(b, &g.cfg)
	b = codec.AppendVarint(b, g.createdAt)
	b = codec.AppendUvarint(b, g.lastSession)
	b = codec.AppendUvarint(b, g.commits)
	for _, gp := range g.parts {
		b = codec.AppendUvarint(b, gp.committed)
		b = codec.AppendUvarint(b, gp.position-gp.committed)
		b = codec.AppendString(b, gp.owner)
		b = codec.AppendString(b, gp.pending)
		b = codec.AppendVarint(b, gp.revokeAt)
		b = codec.AppendUvarint(b, gp.epoch)
		b = codec.AppendUvarint(b, gp.lost)
	}
	names := sortedMemberNames(g)
	b = codec.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		x := g.members[n]
		b = codec.AppendString(b, n)
		b = codec.AppendUvarint(b, x.session)
		b = codec.AppendVarint(b, x.expires)
		b = codec.AppendVarint(b, x.joined)
	}
	return b
}

func restoreGroup(d *codec.Decoder, parts int) *group {
	g := &group{members: make(map[string]*member)}
	g.id = d.Uvarint()
	g.name = d.String()
	g.cfg = decodeGroupConfig(d)
	g.createdAt = d.Varint()
	g.lastSession = d.Uvarint()
	g.commits = d.Uvarint()
	g.parts = make([]gpart, parts)
	for i := range g.parts {
		gp := &g.parts[i]
		gp.committed = d.Uvarint()
		gp.position = gp.committed + d.Uvarint()
		gp.owner = d.String()
		gp.pending = d.String()
		gp.revokeAt = d.Varint()
		gp.epoch = d.Uvarint()
		gp.lost = d.Uvarint()
	}
	n := d.Count()
	for i := 0; i < n && d.Err == nil; i++ {
		x := &member{name: d.String(), session: d.Uvarint(), expires: d.Varint(), joined: d.Varint()}
		g.members[x.name] = x
	}
	return g
}

// Restore rebuilds a machine from AppendSnapshot's bytes (all of b).
func Restore(b []byte) (*Machine, error) {
	d := &codec.Decoder{B: b}
	if v := d.Uvarint(); d.Err == nil && v != snapshotVersion {
		if v > snapshotVersion {
			return nil, fmt.Errorf("%w: version %d", ErrSnapshotVersion, v)
		}
		return nil, fmt.Errorf("topic snapshot version %d", v)
	}
	m := New()
	m.now = d.Varint()
	m.limits = decodeLimits(d)
	m.lastTID = d.Uvarint()
	m.lastGID = d.Uvarint()
	m.lastSID = d.Uvarint()
	n := d.Count()
	for i := 0; i < n && d.Err == nil; i++ {
		t := restoreTopic(d, m.limits.DedupCap)
		if d.Err != nil {
			break
		}
		if m.byID[t.id] != nil || m.topics[t.name] != nil || t.id > m.lastTID {
			return nil, fmt.Errorf("topic snapshot: topic %q (id %d) twice or past the last id", t.name, t.id)
		}
		m.byID[t.id], m.topics[t.name] = t, t
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("topic snapshot: %w", err)
	}
	if err := m.limits.validate(); err != nil {
		return nil, fmt.Errorf("topic snapshot: %w", err)
	}
	return m, nil
}

func restoreTopic(d *codec.Decoder, dedupCap int) *topicState {
	t := &topicState{}
	t.id = d.Uvarint()
	t.name = d.String()
	t.cfg = decodeConfig(d)
	t.createdAt = d.Varint()
	t.updatedAt = d.Varint()
	t.rr = d.Uvarint()
	for _, v := range []*uint64{&t.stats.Published, &t.stats.Bytes, &t.stats.Truncated, &t.stats.TruncatedSegs} {
		*v = d.Uvarint()
	}
	if t.cfg.Partitions < 1 || t.cfg.Partitions > MaxPartitions {
		d.Fail(fmt.Errorf("topic %q with %d partitions", t.name, t.cfg.Partitions))
		return t
	}
	t.parts = make([]partition, t.cfg.Partitions)
	for i := range t.parts {
		p := &t.parts[i]
		p.start = d.Uvarint()
		p.next = d.Uvarint()
		ns := d.Count()
		p.segs = make([]segment, ns)
		for j := range p.segs {
			s := &p.segs[j]
			s.base = d.Uvarint()
			s.count = d.Varint()
			s.bytes = d.Varint()
			s.first = d.Varint()
			s.last = d.Varint()
			t.bytes += s.bytes
			t.records += s.count
		}
	}
	nd := d.Count()
	for i := 0; i < nd && d.Err == nil; i++ {
		e := &dedupEntry{id: d.String(), partition: uint32(d.Uvarint()), offset: d.Uvarint(), at: d.Varint(), expires: d.Varint()}
		t.dedup.add(e, dedupCap)
	}
	ng := d.Count()
	for i := 0; i < ng && d.Err == nil; i++ {
		g := restoreGroup(d, len(t.parts))
		if t.groups == nil {
			t.groups = make(map[string]*group)
		}
		t.groups[g.name] = g
	}
	ns := d.Count()
	for i := 0; i < ns && d.Err == nil; i++ {
		x := &subscription{id: d.Uvarint(), name: d.String(), queue: d.String(), queueID: d.Uvarint(), filter: d.Bytes()}
		x.scope = filter.Scope(d.Byte())
		x.createdAt, x.lost, x.delivered, x.filtered = d.Varint(), d.Uvarint(), d.Uvarint(), d.Uvarint()
		x.cursors = make([]uint64, len(t.parts))
		for p := range x.cursors {
			x.cursors[p] = d.Uvarint()
		}
		if d.Err != nil {
			break
		}
		policy, err := parsePolicy(x.filter, x.scope)
		if err != nil {
			d.Fail(fmt.Errorf("subscription %q: %w", x.name, err))
			break
		}
		x.policy = policy
		t.setSub(x)
	}
	return t
}
