package queue

import (
	"bytes"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// This file checks the machine against a deliberately naive reference model: every
// operation is a linear scan over plain slices, written from docs/semantics.md rather than
// from the machine's code. Random sequences of commands, clock advances and restarts
// must give identical results, and the invariants below must hold after every step.

// logSink keeps every record's bytes and checks that each decodes back to the same bytes.
type logSink struct {
	t    *rapid.T
	recs [][]byte
}

func (s *logSink) Emit(r Record) {
	b := r.AppendTo(nil)
	d, err := DecodeRecord(b)
	if err != nil {
		s.t.Fatalf("decode own %s record: %v", r.Kind(), err)
	}
	if !bytes.Equal(d.AppendTo(nil), b) {
		s.t.Fatalf("%s record does not round-trip", r.Kind())
	}
	s.recs = append(s.recs, b)
}

type mmsg struct {
	id         uint64
	seq        uint64
	group      string
	state      State
	at         int64
	deliv      uint32
	entered    int64
	deadReason string
	deadDesc   string // the dead letter's description: the handler's last error for max_deliveries
	deadDeliv  uint32
	lastErr    string // the handler's error of its latest nack that carried one, in this queue
	moves      int    // dead-letters and redrives: a move restarts the delivery count
	// deferred: a consumer deferred it and it has not left the queue since (deferred, or
	// leased by a fetch by id); it is out of its group for ordering and fairness.
	deferred bool
	// rank: its place in its group (seq, but for a blocker redriven to its parked
	// group's front, and the dead letters of the group that came back with it).
	rank float64
}

// grouped says whether x takes part in its group (ordering, fairness).
func (x *mmsg) grouped() bool { return x.group != "" && !x.deferred }

type mqueue struct {
	name    string
	cfg     Config
	msgs    []*mmsg
	nextSeq uint64
	dedup   map[string]dedupEntry
	parked  map[string]uint64 // parked groups: the blocking dead letter's id, by key
}

// members is x's group in q in group order (by rank), x included; nil if ungrouped.
func (q *mqueue) members(key string) []*mmsg {
	var out []*mmsg
	for _, y := range q.msgs {
		if y.grouped() && y.group == key {
			out = append(out, y)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].rank < out[j].rank })
	return out
}

// isParked says whether x's group waits for a dead letter.
func (q *mqueue) isParked(x *mmsg) bool {
	return x.grouped() && q.parked[x.group] != 0
}

type mtask struct {
	id     uint64
	cursor uint64
	maxSeq uint64
	reason string
}

type model struct {
	now    int64
	lastID uint64
	q, dlq *mqueue
	acked  map[uint64]bool
	gone   map[uint64]bool // purged or deleted
	task   *mtask
	// settled is what left q, in order (explain's ring keeps the last SettledRingSize).
	settled []msettled
}

type msettled struct {
	id  uint64
	how GoneHow
}

func (md *model) settle(x *mmsg, how GoneHow) {
	md.settled = append(md.settled, msettled{x.id, how})
}

func (md *model) add(q *mqueue, x *mmsg, visibleAt int64) {
	q.nextSeq++
	x.seq = q.nextSeq
	x.rank = float64(x.seq)
	x.entered = md.now
	x.state = StateReady
	if visibleAt > md.now {
		x.state, x.at = StateDelayed, visibleAt
	}
	q.msgs = append(q.msgs, x)
}

func (md *model) remove(q *mqueue, x *mmsg) {
	i := slices.Index(q.msgs, x)
	q.msgs = slices.Delete(q.msgs, i, i+1)
}

func (md *model) deadLetter(x *mmsg, reason string) {
	md.deadLetterDesc(x, reason, "")
}

// deadLetterDesc dead-letters x; a dead letter for max_deliveries is described by desc,
// else by the handler's last error.
func (md *model) deadLetterDesc(x *mmsg, reason, desc string) {
	q := md.q
	if md.dlq.name != "" && q.cfg.OnDeadLetter == ParkGroup && x.grouped() && q.parked[x.group] == 0 && q.members(x.group)[0] == x {
		q.parked[x.group] = x.id // its head dead-lettered: the group parks behind it
	}
	md.remove(md.q, x)
	if md.dlq.name == "" { // no DLQ: only expiry gets here, and removes with a record
		md.gone[x.id] = true
		md.settle(x, GoneExpired)
		return
	}
	md.settle(x, GoneDeadLettered)
	if reason == ReasonMaxDeliveries && desc == "" {
		desc = x.lastErr
	}
	x.moves++
	x.deferred = false
	x.deadReason, x.deadDesc, x.deadDeliv, x.lastErr = reason, desc, x.deliv, ""
	x.deliv, x.at = 0, 0
	md.add(md.dlq, x, md.now)
}

func (md *model) mustDL(x *mmsg) string {
	cfg := md.q.cfg
	if cfg.MaxDeliveries > 0 && x.deliv >= uint32(cfg.MaxDeliveries) {
		return ReasonMaxDeliveries
	}
	if r := cfg.Retention.Milliseconds(); r > 0 && x.entered+r <= md.now {
		return ReasonExpired
	}
	return ""
}

// advance: delays end; ended leases become ready or dead letters in (deadline, seq)
// order; then messages past retention that are not leased are dead-lettered in seq order.
func (md *model) advance() {
	q := md.q
	var ended []*mmsg
	for _, x := range q.msgs {
		if x.state == StateDelayed && x.at <= md.now {
			x.state, x.at = StateReady, 0
		}
		if x.state == StateInFlight && x.at <= md.now {
			ended = append(ended, x)
		}
	}
	sort.SliceStable(ended, func(i, j int) bool {
		if ended[i].at != ended[j].at {
			return ended[i].at < ended[j].at
		}
		return ended[i].seq < ended[j].seq
	})
	var dls []*mmsg
	reasons := map[*mmsg]string{}
	for _, x := range ended {
		if r := md.mustDL(x); r != "" {
			dls = append(dls, x)
			reasons[x] = r
		} else if x.deferred {
			x.state, x.at = StateDeferred, 0
		} else {
			x.state, x.at = StateReady, 0
		}
	}
	if r := q.cfg.Retention.Milliseconds(); r > 0 {
		for _, x := range q.msgs {
			if x.entered+r <= md.now && x.state != StateInFlight {
				dls = append(dls, x)
				reasons[x] = ReasonExpired
			}
		}
	}
	md.deadLetterSorted(dls, func(x *mmsg) string { return reasons[x] })
}

// deadLetterSorted dead-letters xs in arrival order, as the contract wants.
func (md *model) deadLetterSorted(xs []*mmsg, reason func(*mmsg) string) {
	sort.Slice(xs, func(i, j int) bool { return xs[i].seq < xs[j].seq })
	for _, x := range xs {
		md.deadLetter(x, reason(x))
	}
}

func (md *model) send(in []SendInput) []SendResult {
	md.advance()
	q := md.q
	out := make([]SendResult, len(in))
	for i, s := range in {
		delay := s.Delay
		if delay < 0 {
			delay = q.cfg.Delay.Milliseconds()
		}
		if r := q.cfg.Retention.Milliseconds(); r > 0 && delay >= r {
			out[i] = SendResult{Err: ErrInvalidDelay}
			continue
		}
		key := s.Payload.DedupID
		if q.cfg.DedupWindow <= 0 {
			key = ""
		}
		if e, ok := q.dedup[key]; key != "" && ok && e.expires > md.now {
			out[i] = SendResult{ID: e.id, Seq: e.seq, Duplicate: true}
			continue
		}
		if q.cfg.MaxMessages > 0 && int64(len(q.msgs))+1 > q.cfg.MaxMessages {
			out[i] = SendResult{Err: ErrQueueFull}
			continue
		}
		id := uint64(md.now) << idTimeShift
		if id <= md.lastID {
			id = md.lastID + 1
		}
		md.lastID = id
		md.add(q, &mmsg{id: id, group: s.Payload.Group}, md.now+delay)
		if key != "" {
			q.dedup[key] = dedupEntry{id: id, seq: q.nextSeq, expires: md.now + q.cfg.DedupWindow.Milliseconds()}
		}
		out[i] = SendResult{ID: id, Seq: q.nextSeq}
	}
	return out
}

// receive leases as a receive does whose admission filter answers ask (nil: admit
// everything), and returns what it leased and what it deferred. It selects runs in
// arrival order — an ungrouped message, or a group's head with the consecutive ready
// messages after it — until max are selected; a skipped message is passed over (a skipped
// head holds its group, a skipped follower ends the run); a run with a deferred message
// in it, and every run selected after it, is deferred, not leased.
func (md *model) receive(max int, vis int64, ask func(*mmsg) Admission) ([]*mmsg, []*mmsg) {
	md.advance()
	if ask == nil {
		ask = func(*mmsg) Admission { return Admit }
	}
	q := md.q
	if !q.cfg.OrderedGroups {
		return md.receiveFair(max, vis, ask)
	}
	locked := map[string]bool{}
	head := map[string]*mmsg{}
	for _, x := range q.msgs {
		if !x.grouped() {
			continue
		}
		if head[x.group] == nil || x.rank < head[x.group].rank {
			head[x.group] = x
		}
		if x.state == StateInFlight || q.parked[x.group] != 0 {
			locked[x.group] = true
		}
	}
	var taken, deferred []*mmsg
	deferring := false
	for _, x := range q.msgs {
		if len(taken)+len(deferred) >= max {
			break
		}
		if x.state != StateReady || (x.grouped() && (locked[x.group] || head[x.group] != x)) {
			continue
		}
		if x.group != "" {
			locked[x.group] = true
		}
		a := ask(x)
		if a == Skip {
			continue
		}
		run := []*mmsg{x}
		var after []*mmsg
		if x.grouped() {
			after = q.members(x.group)[1:]
		}
		for _, y := range after {
			if len(taken)+len(deferred)+len(run) >= max || y.state != StateReady {
				break
			}
			ay := ask(y)
			if ay == Skip {
				break
			}
			if ay == Defer {
				a = Defer
			}
			run = append(run, y)
		}
		if deferring || a == Defer {
			deferring = true
			deferred = append(deferred, run...)
			continue
		}
		taken = append(taken, run...)
	}
	for _, x := range taken {
		x.state = StateInFlight
		x.deliv++
		x.at = md.now + vis
	}
	return taken, deferred
}

// receiveFair is receive on an unordered queue: one message at a time, from the group
// with the fewest messages in flight (those this receive selected count as in flight),
// ties by the oldest ready message; a message without a group is a group of its own,
// with none in flight.
func (md *model) receiveFair(max int, vis int64, ask func(*mmsg) Admission) ([]*mmsg, []*mmsg) {
	q := md.q
	load := map[string]int{}
	for _, x := range q.msgs {
		if x.grouped() && x.state == StateInFlight {
			load[x.group]++
		}
	}
	out := map[*mmsg]bool{} // selected or skipped
	var taken, deferred []*mmsg
	deferring := false
	for len(taken)+len(deferred) < max {
		var best *mmsg
		for _, x := range q.msgs {
			if x.state != StateReady || out[x] {
				continue
			}
			if best == nil || load[x.group] < load[best.group] || (load[x.group] == load[best.group] && x.seq < best.seq) {
				best = x
			}
		}
		if best == nil {
			break
		}
		out[best] = true
		a := ask(best)
		if a == Skip {
			continue
		}
		if best.group != "" {
			load[best.group]++
		}
		if deferring || a == Defer {
			deferring = true
			deferred = append(deferred, best)
			continue
		}
		taken = append(taken, best)
	}
	for _, x := range taken {
		x.state = StateInFlight
		x.deliv++
		x.at = md.now + vis
	}
	return taken, deferred
}

func (md *model) lease(l Lease) *mmsg {
	for _, x := range md.q.msgs {
		if x.seq == l.Seq && x.id == l.MsgID && x.state == StateInFlight && x.deliv == l.Epoch && x.at > md.now {
			return x
		}
	}
	return nil
}

// leaseErr is why a lease that names no live lease is refused: already settled when its
// message is no longer in q at all, stale when it is there under another lease.
func (md *model) leaseErr(l Lease) error {
	for _, x := range md.q.msgs {
		if x.seq == l.Seq {
			return ErrReceiptStale
		}
	}
	if l.Seq <= md.q.nextSeq {
		return ErrAlreadySettled
	}
	return ErrReceiptStale
}

// leaseMsg is the message of q a lease names by sequence, in whatever state.
func (md *model) leaseMsg(l Lease) *mmsg {
	for _, x := range md.q.msgs {
		if x.seq == l.Seq {
			return x
		}
	}
	return nil
}

func backoffModel(cfg Config, deliv uint32, jitter uint64) int64 {
	ceil := cfg.BackoffBase.Milliseconds()
	for i := uint32(1); i < deliv; i++ {
		ceil *= 2
		if ceil >= cfg.BackoffMax.Milliseconds() {
			break
		}
	}
	ceil = min(ceil, cfg.BackoffMax.Milliseconds())
	return int64(jitter % uint64(ceil+1))
}

func (md *model) find(id uint64) (*mqueue, *mmsg) {
	for _, q := range []*mqueue{md.q, md.dlq} {
		for _, x := range q.msgs {
			if x.id == id {
				return q, x
			}
		}
	}
	return nil, nil
}

type seenKey struct {
	id    uint64
	moves int
}

type harness struct {
	t     *rapid.T
	m     *Machine
	md    *model
	sink  *logSink
	ids   []uint64
	lease []Lease
	seen  map[seenKey]uint32 // last observed delivery count per message and move
}

func sameErr(got, want error) bool {
	if want == nil || got == nil {
		return got == want
	}
	if (got == ErrAlreadySettled) != (want == ErrAlreadySettled) {
		return false
	}
	return errors.Is(got, want)
}

func TestMachineMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg := testConfig("q")
		cfg.OrderedGroups = rapid.Bool().Draw(t, "ordered")
		cfg.VisibilityTimeout = time.Second
		cfg.MaxDeliveries = rapid.IntRange(0, 4).Draw(t, "maxDeliveries")
		cfg.Retention = time.Duration(rapid.SampledFrom([]int64{0, 6000, 20000}).Draw(t, "retention")) * time.Millisecond
		cfg.DedupWindow = time.Duration(rapid.SampledFrom([]int64{0, 2000}).Draw(t, "dedup")) * time.Millisecond
		cfg.BackoffBase = 100 * time.Millisecond
		cfg.BackoffMax = time.Second
		cfg.MaxMessages = rapid.SampledFrom([]int64{0, 6}).Draw(t, "maxMessages")
		if rapid.Bool().Draw(t, "dlqNone") && cfg.MaxDeliveries == 0 {
			cfg.DeadLetterQueue = NoDeadLetterQueue
		}
		if cfg.OrderedGroups && cfg.DeadLetterQueue != NoDeadLetterQueue && rapid.Bool().Draw(t, "parkGroup") {
			cfg.OnDeadLetter = ParkGroup
		}
		h := &harness{t: t, m: New(), sink: &logSink{t: t}, seen: map[seenKey]uint32{}}
		h.md = &model{now: 1_700_000_000_000, acked: map[uint64]bool{}, gone: map[uint64]bool{},
			q:   &mqueue{name: "q", cfg: cfg, dedup: map[string]dedupEntry{}, parked: map[string]uint64{}},
			dlq: &mqueue{name: cfg.DeadLetterQueue, cfg: DeadLetterConfig(cfg), dedup: map[string]dedupEntry{}}}
		created, err := h.m.PutQueue(h.md.now, h.sink, "q", cfg)
		if err != nil || !created {
			t.Fatalf("PutQueue: %v %v", created, err)
		}
		hasDLQ := cfg.DeadLetterQueue != NoDeadLetterQueue
		if !hasDLQ {
			h.md.dlq.name = ""
		}
		t.Repeat(map[string]func(*rapid.T){
			"send":       h.send,
			"receive":    h.receive,
			"rdelete":    h.receiveAndDelete,
			"defer":      h.deferMsgs,
			"fetch":      h.fetchDeferred,
			"ack":        h.ack,
			"nack":       h.nack,
			"extend":     h.extend,
			"deadletter": func(t *rapid.T) { h.deadLetter(t, hasDLQ) },
			"clock":      h.clock,
			"restart":    h.restart,
			"redrive": func(t *rapid.T) {
				if hasDLQ {
					h.redrive(t)
				}
			},
			"quarantine": func(t *rapid.T) { h.quarantine(t, hasDLQ) },
			"delete":     h.deleteMsg,
			"purge":      h.purge,
			"release":    h.release,
			"":           h.check,
		})
	})
}

func (h *harness) send(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	in := make([]SendInput, n)
	for i := range in {
		in[i] = SendInput{
			Payload: Payload{
				Body:    []byte(rapid.StringN(0, 40, -1).Draw(t, "body")),
				Group:   rapid.SampledFrom([]string{"", "", "a", "b", "c"}).Draw(t, "group"),
				DedupID: rapid.SampledFrom([]string{"", "", "", "d1", "d2"}).Draw(t, "dedup"),
			},
			Delay: rapid.SampledFrom([]int64{-1, 0, 500, 2500}).Draw(t, "delay"),
		}
	}
	got, err := h.m.Send(h.md.now, h.sink, "q", in)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	want := h.md.send(in)
	for i := range want {
		if !sameErr(got[i].Err, want[i].Err) || got[i].ID != want[i].ID || got[i].Seq != want[i].Seq || got[i].Duplicate != want[i].Duplicate {
			t.Fatalf("send %d: got %+v, want %+v", i, got[i], want[i])
		}
		if want[i].Err == nil && !want[i].Duplicate {
			h.ids = append(h.ids, want[i].ID)
		}
	}
}

func (h *harness) receive(t *rapid.T) {
	max := rapid.IntRange(1, 4).Draw(t, "max")
	vis := rapid.SampledFrom([]int64{-1, 0, 300, 2000}).Draw(t, "vis")
	// An admission filter defers the messages whose id is a multiple of deferMod and
	// skips those whose id is a multiple of skipMod, as the broker defers the bodies it
	// has not read and skips those it failed to read (0: no filter, plain Receive).
	deferMod := rapid.SampledFrom([]uint64{0, 0, 2, 3}).Draw(t, "deferMod")
	skipMod := rapid.SampledFrom([]uint64{0, 0, 0, 5}).Draw(t, "skipMod")
	answer := func(id uint64) Admission {
		switch {
		case skipMod > 0 && id%skipMod == 0:
			return Skip
		case deferMod > 0 && id%deferMod == 0:
			return Defer
		}
		return Admit
	}
	var got []Delivery
	var gotDeferred []Candidate
	var err error
	var ask func(*mmsg) Admission
	if deferMod == 0 && skipMod == 0 {
		got, err = h.m.Receive(h.md.now, h.sink, "q", max, vis, 0)
	} else {
		ask = func(x *mmsg) Admission { return answer(x.id) }
		var admitted []uint64
		got, gotDeferred, err = h.m.ReceiveWith(h.md.now, h.sink, "q", ReceiveSpec{Max: max, Visibility: vis,
			Admit: func(c Candidate) Admission {
				a := answer(c.MsgID)
				if a == Admit {
					admitted = append(admitted, c.MsgID)
				}
				return a
			}})
		// What was leased was admitted, in the same order.
		j := 0
		for _, id := range deliveryIDs(got) {
			for j < len(admitted) && admitted[j] != id {
				j++
			}
			if j == len(admitted) {
				t.Fatalf("receive leased %v, not all admitted in that order (%v)", deliveryIDs(got), admitted)
			}
			j++
		}
	}
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if vis < 0 {
		vis = h.md.q.cfg.VisibilityTimeout.Milliseconds()
	}
	want, wantDeferred := h.md.receive(max, vis, ask)
	if len(got) != len(want) {
		t.Fatalf("receive: got %d messages %v, want %d %v", len(got), deliveryIDs(got), len(want), modelIDs(want))
	}
	var deferredIDs []uint64
	for i, c := range gotDeferred {
		deferredIDs = append(deferredIDs, c.MsgID)
		if i < len(wantDeferred) && c.Seq != wantDeferred[i].seq {
			t.Fatalf("deferred candidate %d: seq %d, want %d", i, c.Seq, wantDeferred[i].seq)
		}
	}
	if !slices.Equal(deferredIDs, modelIDs(wantDeferred)) {
		t.Fatalf("receive deferred %v, want %v", deferredIDs, modelIDs(wantDeferred))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.MsgID != w.id || g.Epoch != w.deliv || g.Seq != w.seq || g.Deadline != w.at || g.Group != w.group {
			t.Fatalf("receive %d: got %+v, want id %d epoch %d seq %d", i, g.Lease, w.id, w.deliv, w.seq)
		}
		h.lease = append(h.lease, g.Lease)
	}
}

// receiveAndDelete: a receive-and-delete selects what a receive would and settles it at
// once: the messages leave the queue (an ordered group moves on), nothing is leased.
func (h *harness) receiveAndDelete(t *rapid.T) {
	max := rapid.IntRange(1, 4).Draw(t, "max")
	got, _, err := h.m.ReceiveWith(h.md.now, h.sink, "q", ReceiveSpec{Max: max, Visibility: -1, Delete: true})
	if err != nil {
		t.Fatalf("ReceiveWith delete: %v", err)
	}
	want, _ := h.md.receive(max, 0, nil)
	if len(got) != len(want) {
		t.Fatalf("receive-and-delete: got %v, want %v", deliveryIDs(got), modelIDs(want))
	}
	for i, w := range want {
		if g := got[i]; g.MsgID != w.id || g.Seq != w.seq || g.Epoch != w.deliv || g.Deadline != 0 || g.Group != w.group {
			t.Fatalf("receive-and-delete %d: got %+v deadline %d, want id %d epoch %d", i, g.Lease, g.Deadline, w.id, w.deliv)
		}
		h.md.settle(w, GoneReceivedAndDeleted)
		h.md.remove(h.md.q, w)
		h.md.acked[w.id] = true
	}
}

// deferMsgs defers leased messages: each valid lease ends, its message is set aside
// (deferred), out of its group.
func (h *harness) deferMsgs(t *rapid.T) {
	ls := h.pickLeases(t)
	if ls == nil {
		t.Skip("no leases")
	}
	got, err := h.m.Defer(h.md.now, h.sink, "q", ls)
	if err != nil {
		t.Fatalf("Defer: %v", err)
	}
	h.md.advance()
	for i, l := range ls {
		x := h.md.lease(l)
		var want error
		if x == nil {
			want = h.md.leaseErr(l)
		} else {
			x.state, x.at, x.deferred = StateDeferred, 0, true
		}
		if !sameErr(got[i], want) {
			t.Fatalf("defer %d %+v: got %v, want %v", i, l, got[i], want)
		}
	}
}

// fetchDeferred fetches messages by id: a deferred one is leased (a delivery), any other
// id answers ErrNotDeferred, as does an id named twice.
func (h *harness) fetchDeferred(t *rapid.T) {
	if len(h.ids) == 0 {
		t.Skip("no ids")
	}
	// Mostly ids of deferred messages (any id would seldom be one), sometimes any.
	var deferred []uint64
	for _, x := range h.md.q.msgs {
		if x.state == StateDeferred {
			deferred = append(deferred, x.id)
		}
	}
	n := rapid.IntRange(1, 3).Draw(t, "n")
	ids := make([]uint64, n)
	for i := range ids {
		from := h.ids
		if len(deferred) > 0 && rapid.IntRange(0, 3).Draw(t, "anyID") != 0 {
			from = deferred
		}
		ids[i] = rapid.SampledFrom(from).Draw(t, "id")
	}
	vis := rapid.SampledFrom([]int64{-1, 300, 2000}).Draw(t, "vis")
	got, errs, err := h.m.ReceiveDeferred(h.md.now, h.sink, "q", ids, vis)
	if err != nil {
		t.Fatalf("ReceiveDeferred: %v", err)
	}
	if vis < 0 {
		vis = h.md.q.cfg.VisibilityTimeout.Milliseconds()
	}
	h.md.advance()
	taken := map[*mmsg]bool{}
	for i, id := range ids {
		q, x := h.md.find(id)
		if q != h.md.q || x.state != StateDeferred || taken[x] {
			if !errors.Is(errs[i], ErrNotDeferred) {
				t.Fatalf("fetch %d of %d (not deferred): got %v", i, id, errs[i])
			}
			continue
		}
		taken[x] = true
		x.state, x.at = StateInFlight, h.md.now+vis
		x.deliv++
		if errs[i] != nil {
			t.Fatalf("fetch %d of deferred %d: %v", i, id, errs[i])
		}
		if g := got[i]; g.MsgID != x.id || g.Epoch != x.deliv || g.Seq != x.seq || g.Deadline != x.at || g.Group != x.group {
			t.Fatalf("fetch %d: got %+v group %q, want id %d epoch %d group %q", i, g.Lease, g.Group, x.id, x.deliv, x.group)
		}
		h.lease = append(h.lease, got[i].Lease)
	}
}

func deliveryIDs(ds []Delivery) []uint64 {
	var ids []uint64
	for _, d := range ds {
		ids = append(ids, d.MsgID)
	}
	return ids
}

func modelIDs(xs []*mmsg) []uint64 {
	var ids []uint64
	for _, x := range xs {
		ids = append(ids, x.id)
	}
	return ids
}

func (h *harness) pickLeases(t *rapid.T) []Lease {
	if len(h.lease) == 0 {
		return nil
	}
	n := rapid.IntRange(1, 3).Draw(t, "leases")
	out := make([]Lease, n)
	for i := range out {
		out[i] = rapid.SampledFrom(h.lease).Draw(t, "lease")
	}
	return out
}

func (h *harness) ack(t *rapid.T) {
	ls := h.pickLeases(t)
	if ls == nil {
		t.Skip("no leases")
	}
	got, err := h.m.Ack(h.md.now, h.sink, "q", ls)
	if err != nil {
		t.Fatalf("Ack: %v", err)
	}
	h.md.advance()
	acked := map[uint64]bool{}
	for i, l := range ls {
		x := h.md.lease(l)
		var want error
		if x == nil {
			want = h.md.leaseErr(l)
			if acked[l.Seq] {
				want = ErrReceiptStale // the same lease twice in one call
			}
		} else {
			acked[l.Seq] = true
			h.md.settle(x, GoneAcked)
			h.md.remove(h.md.q, x)
			h.md.acked[x.id] = true
		}
		if !sameErr(got[i], want) {
			t.Fatalf("ack %d %+v: got %v, want %v", i, l, got[i], want)
		}
	}
}

func (h *harness) nack(t *rapid.T) {
	ls := h.pickLeases(t)
	if ls == nil {
		t.Skip("no leases")
	}
	in := make([]NackInput, len(ls))
	for i, l := range ls {
		in[i] = NackInput{Lease: l, Delay: rapid.SampledFrom([]int64{-1, 0, 700}).Draw(t, "delay"), Jitter: rapid.Uint64().Draw(t, "jitter"),
			Error: rapid.SampledFrom([]string{"", "", "timeout", "parse error: line 3"}).Draw(t, "error")}
	}
	got, err := h.m.Nack(h.md.now, h.sink, "q", in)
	if err != nil {
		t.Fatalf("Nack: %v", err)
	}
	h.md.advance()
	var dead []*mmsg
	var reasons []string
	descs := map[*mmsg]string{}
	done := map[*mmsg]bool{}
	for i, it := range in {
		x := h.md.lease(it.Lease)
		if done[x] {
			x = nil
		}
		var want error
		if x == nil {
			want = h.md.leaseErr(it.Lease)
			if done[h.md.leaseMsg(it.Lease)] {
				want = ErrReceiptStale // the same lease twice in one call
			}
		} else if r := h.md.mustDL(x); r != "" {
			done[x] = true
			dead = append(dead, x)
			reasons = append(reasons, r)
			descs[x] = it.Error
		} else {
			done[x] = true
			if it.Error != "" {
				x.lastErr = it.Error
			}
			delay := it.Delay
			if delay < 0 {
				delay = backoffModel(h.md.q.cfg, x.deliv, it.Jitter)
			}
			x.state, x.at = StateReady, 0
			if x.deferred {
				x.state = StateDeferred
			} else if delay > 0 {
				x.state, x.at = StateDelayed, h.md.now+delay
			}
		}
		if !sameErr(got[i], want) {
			t.Fatalf("nack %d: got %v, want %v", i, got[i], want)
		}
	}
	rs := map[*mmsg]string{}
	for i, x := range dead {
		rs[x] = reasons[i]
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].seq < dead[j].seq })
	for _, x := range dead {
		h.md.deadLetterDesc(x, rs[x], descs[x])
	}
}

func (h *harness) extend(t *rapid.T) {
	ls := h.pickLeases(t)
	if ls == nil {
		t.Skip("no leases")
	}
	in := make([]ExtendInput, len(ls))
	for i, l := range ls {
		in[i] = ExtendInput{Lease: l, Visibility: rapid.SampledFrom([]int64{0, 400, 3000}).Draw(t, "vis")}
	}
	got, err := h.m.Extend(h.md.now, h.sink, "q", in)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	h.md.advance()
	done := map[*mmsg]bool{}
	for i, it := range in {
		x := h.md.lease(it.Lease)
		if done[x] {
			x = nil
		}
		var want error
		if x == nil {
			want = h.md.leaseErr(it.Lease)
		} else {
			done[x] = true
			x.at = h.md.now + it.Visibility
		}
		if !sameErr(got[i], want) {
			t.Fatalf("extend %d: got %v, want %v", i, got[i], want)
		}
	}
}

func (h *harness) deadLetter(t *rapid.T, hasDLQ bool) {
	ls := h.pickLeases(t)
	if ls == nil {
		t.Skip("no leases")
	}
	got, err := h.m.DeadLetter(h.md.now, h.sink, "q", ls, "poison", "bad input")
	if !hasDLQ {
		if !errors.Is(err, ErrNoDeadLetter) {
			t.Fatalf("DeadLetter without DLQ: got %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	h.md.advance()
	var dead []*mmsg
	for i, l := range ls {
		x := h.md.lease(l)
		if slices.Contains(dead, x) {
			x = nil
		}
		var want error
		if x == nil {
			want = h.md.leaseErr(l)
		} else {
			dead = append(dead, x)
		}
		if !sameErr(got[i], want) {
			t.Fatalf("deadletter %d: got %v, want %v", i, got[i], want)
		}
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].seq < dead[j].seq })
	for _, x := range dead {
		h.md.deadLetterDesc(x, "poison", "bad input")
	}
}

// quarantine dead-letters a message no consumer holds with reason corrupt, as the broker
// does with one whose body fails its checksum.
func (h *harness) quarantine(t *rapid.T, hasDLQ bool) {
	if len(h.ids) == 0 {
		t.Skip("no ids")
	}
	id := rapid.SampledFrom(h.ids).Draw(t, "id")
	var seq uint64
	if q, x := h.md.find(id); q == h.md.q {
		seq = x.seq
	}
	ok, err := h.m.Quarantine(h.md.now, h.sink, "q", seq, id, "checksum mismatch at 00000001.wal@4096")
	if !hasDLQ {
		if !errors.Is(err, ErrNoDeadLetter) || ok {
			t.Fatalf("Quarantine without DLQ: got %v %v", ok, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	h.md.advance()
	q, x := h.md.find(id)
	want := q == h.md.q && x.state != StateInFlight
	if ok != want {
		t.Fatalf("Quarantine of %d: got %v, want %v", id, ok, want)
	}
	if want {
		h.md.deadLetterDesc(x, ReasonCorrupt, "checksum mismatch at 00000001.wal@4096")
	}
}

func (h *harness) clock(t *rapid.T) {
	h.md.now += rapid.SampledFrom([]int64{1, 10, 150, 500, 1000, 2600, 7000}).Draw(t, "dt")
	h.m.Tick(h.md.now, h.sink)
	h.md.advance()
}

func (h *harness) deleteMsg(t *rapid.T) {
	if len(h.ids) == 0 {
		t.Skip("no ids")
	}
	id := rapid.SampledFrom(h.ids).Draw(t, "id")
	err := h.m.DeleteMessage(h.md.now, h.sink, "q", id)
	h.md.advance()
	q, x := h.md.find(id)
	if q != h.md.q {
		if !errors.Is(err, ErrMessageNotFound) {
			t.Fatalf("delete %d not in q: got %v", id, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	h.md.settle(x, GoneDeleted)
	h.md.remove(q, x)
	h.md.gone[id] = true
}

// release releases a group by hand: a parked one is free at once (its dead letter stays),
// any other answers ErrNotParked and changes nothing.
func (h *harness) release(t *rapid.T) {
	key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "releaseGroup")
	err := h.m.ReleaseGroup(h.md.now, h.sink, "q", key)
	h.md.advance()
	if h.md.q.parked[key] == 0 {
		if !errors.Is(err, ErrNotParked) {
			t.Fatalf("release of %q, not parked: got %v", key, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("release %q: %v", key, err)
	}
	delete(h.md.q.parked, key)
}

func (h *harness) purge(t *rapid.T) {
	if rapid.IntRange(0, 4).Draw(t, "rarely") != 0 {
		t.Skip("purge is rare")
	}
	if _, err := h.m.Purge(h.md.now, h.sink, "q"); err != nil {
		t.Fatalf("purge: %v", err)
	}
	h.md.advance()
	for _, x := range h.md.q.msgs {
		h.md.gone[x.id] = true
		h.md.settle(x, GonePurged)
	}
	h.md.q.msgs = nil
}

func (h *harness) redrive(t *rapid.T) {
	md := h.md
	if md.task == nil {
		reason := rapid.SampledFrom([]string{"", ReasonMaxDeliveries, "poison", ReasonCorrupt}).Draw(t, "reason")
		target := rapid.SampledFrom([]string{"", "q"}).Draw(t, "target")
		task, err := h.m.StartRedrive(md.now, h.sink, RedriveSpec{Source: md.dlq.name, Target: target, Filter: RedriveFilter{Reason: reason}})
		if reason == ReasonCorrupt {
			if !errors.Is(err, ErrMessageCorrupt) {
				t.Fatalf("StartRedrive of reason corrupt: got %v, want ErrMessageCorrupt", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("StartRedrive: %v", err)
		}
		md.task = &mtask{id: task.ID, maxSeq: md.dlq.nextSeq, reason: reason}
		var total int64
		for _, x := range md.dlq.msgs {
			if reason == "" || x.deadReason == reason {
				total++
			}
		}
		if task.Total != total {
			t.Fatalf("redrive total: got %d, want %d", task.Total, total)
		}
		return
	}
	got, err := h.m.RedriveStep(md.now, h.sink, md.task.id, 3)
	if err != nil {
		t.Fatalf("RedriveStep: %v", err)
	}
	var items []*mmsg
	end, paused, scanned := true, false, 0
	cursor := md.task.cursor
	for _, x := range md.dlq.msgs {
		if x.seq <= md.task.cursor {
			continue
		}
		if x.seq > md.task.maxSeq {
			break
		}
		if len(items) >= 3 || scanned >= 48 {
			end = false
			break
		}
		scanned++
		if (md.task.reason != "" && x.deadReason != md.task.reason) || x.deadReason == ReasonCorrupt {
			cursor = x.seq // not selected, or skipped: a corrupt body is not moved
			continue
		}
		if md.q.cfg.MaxMessages > 0 && int64(len(md.q.msgs)+len(items))+1 > md.q.cfg.MaxMessages {
			paused, end = true, false
			break
		}
		items = append(items, x)
		cursor = x.seq
	}
	md.task.cursor = cursor
	front := map[string]float64{} // groups this step released: the rank of the last moved to their front
	for _, x := range items {
		md.remove(md.dlq, x)
		x.deadReason, x.deadDesc, x.deadDeliv, x.deliv, x.at, x.lastErr = "", "", 0, 0, 0, ""
		x.moves++
		last, toFront := front[x.group]
		blocker := x.group != "" && md.q.parked[x.group] == x.id
		if blocker {
			delete(md.q.parked, x.group) // back to its group, which it heads
		}
		ms := md.q.members(x.group)
		md.add(md.q, x, md.now)
		switch {
		case x.group == "":
		case blocker:
			if len(ms) > 0 {
				x.rank = ms[0].rank - 1
			}
			front[x.group] = x.rank
		case toFront:
			// Right after the one before it from this step, ahead of what waited.
			for _, y := range ms {
				if y.rank > last {
					x.rank = (last + y.rank) / 2
					break
				}
			}
			front[x.group] = x.rank
		}
	}
	if len(items) > 0 {
		md.advance() // the machine brings a target queue up to date after moving into it
	}
	if got.Moved != len(items) || got.Done != end || got.Paused != paused {
		t.Fatalf("redrive step: got %+v, want moved %d done %v paused %v", got, len(items), end, paused)
	}
	if end {
		md.task = nil
	}
}

// restart replays the whole log into a fresh machine and restores a snapshot, and checks
// that both equal the live machine; then carries on with one of them.
func (h *harness) restart(t *rapid.T) {
	raw := h.m.AppendSnapshot(nil)
	live := h.settledSnapshot(raw)
	replayed := New()
	for i, b := range h.sink.recs {
		r, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("decode record %d: %v", i, err)
		}
		if err := replayed.Apply(r); err != nil {
			t.Fatalf("replay record %d (%s): %v", i, r.Kind(), err)
		}
	}
	if got := h.settledSnapshot(replayed.AppendSnapshot(nil)); !bytes.Equal(got, live) {
		t.Fatalf("replayed state differs from live state")
	}
	restored, err := Restore(raw, nil)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := restored.AppendSnapshot(nil); !bytes.Equal(got, raw) {
		t.Fatalf("restored state differs from live state")
	}
	if rapid.Bool().Draw(t, "useReplayed") {
		h.m = replayed
	} else {
		h.m = restored
	}
}

// settledSnapshot restores a copy of a snapshot, settles every queue at the model's clock
// (the pure, in-memory transitions the next command would make anyway) and snapshots it
// again, so that a live machine that ticked without records and a replayed one compare
// equal. The machines under test are not touched.
func (h *harness) settledSnapshot(snap []byte) []byte {
	m, err := Restore(snap, nil)
	if err != nil {
		h.t.Fatalf("Restore: %v", err)
	}
	for _, q := range m.byID {
		m.settle(q, h.md.now)
	}
	return m.AppendSnapshot(nil)
}

// check compares every message's observable state with the model and checks invariants.
func (h *harness) check(t *rapid.T) {
	md := h.md
	for _, mq := range []*mqueue{md.q, md.dlq} {
		if mq.name == "" {
			continue
		}
		got, err := h.m.Peek(md.now, mq.name, 0, 1<<20)
		if err != nil {
			t.Fatalf("peek %s: %v", mq.name, err)
		}
		if len(got) != len(mq.msgs) {
			t.Fatalf("%s holds %d messages %v, model %d %v", mq.name, len(got), infoIDs(got), len(mq.msgs), modelIDs(mq.msgs))
		}
		for i, x := range mq.msgs {
			g := got[i]
			st := x.state
			if (st == StateDelayed || st == StateInFlight) && x.at <= md.now {
				st = StateReady
				if x.deferred {
					st = StateDeferred
				}
			}
			reason := ""
			if g.Dead != nil {
				reason = g.Dead.Reason
			}
			if g.ID != x.id || g.Seq != x.seq || g.State != st || g.Deliveries != x.deliv || g.Group != x.group || reason != x.deadReason {
				t.Fatalf("%s[%d]: got id %d seq %d %s deliv %d group %q reason %q; want id %d seq %d %s deliv %d group %q reason %q",
					mq.name, i, g.ID, g.Seq, g.State, g.Deliveries, g.Group, reason, x.id, x.seq, st, x.deliv, x.group, x.deadReason)
			}
			if g.Dead != nil && (g.Dead.Deliveries != x.deadDeliv || g.Dead.Description != x.deadDesc) {
				t.Fatalf("%s[%d]: dead-letter delivery count %d description %q, want %d %q", mq.name, i, g.Dead.Deliveries, g.Dead.Description, x.deadDeliv, x.deadDesc)
			}
			// Delivery counts only grow while a message stays in a queue.
			key := seenKey{x.id, x.moves}
			if prev, ok := h.seen[key]; ok && g.Deliveries < prev {
				t.Fatalf("message %d: delivery count went from %d to %d", x.id, prev, g.Deliveries)
			}
			h.seen[key] = g.Deliveries
		}
	}
	// Every message sent is in exactly one place: a queue, acked, or removed.
	place := map[uint64]string{}
	for _, mq := range []*mqueue{md.q, md.dlq} {
		for _, x := range mq.msgs {
			if p, dup := place[x.id]; dup {
				t.Fatalf("message %d in %s and %s", x.id, p, mq.name)
			}
			place[x.id] = mq.name
		}
	}
	for _, id := range h.ids {
		n := 0
		if place[id] != "" {
			n++
		}
		if md.acked[id] {
			n++
		}
		if md.gone[id] {
			n++
		}
		if n == 0 {
			t.Fatalf("message %d is nowhere (not queued, acked, or removed)", id)
		}
		if n > 1 {
			t.Fatalf("message %d is in %d places", id, n)
		}
	}
	// Explain says of each message what the model does.
	for _, id := range h.ids[max(0, len(h.ids)-40):] {
		ex, err := h.m.Explain(md.now, "q", id)
		if err != nil {
			t.Fatalf("explain %d: %v", id, err)
		}
		st, ahead, how := md.explain(id)
		if ex.Status != st || ex.Ahead != ahead || ex.How != how || ex.Summary == "" {
			t.Fatalf("explain %d: got %s ahead %d how %s (%s); want %s ahead %d how %s", id, ex.Status, ex.Ahead, ex.How, ex.Summary, st, ahead, how)
		}
	}
	// Parked groups are the model's, each behind its dead letter.
	ps, err := h.m.Parked("q")
	if err != nil {
		t.Fatalf("parked: %v", err)
	}
	if len(ps) != len(md.q.parked) {
		t.Fatalf("parked groups %+v, model %v", ps, md.q.parked)
	}
	for _, p := range ps {
		if md.q.parked[p.Group] != p.Blocker || p.DLQ != md.dlq.name || p.Messages != len(md.q.members(p.Group)) {
			t.Fatalf("parked group %+v, model %v (%d messages)", p, md.q.parked, len(md.q.members(p.Group)))
		}
	}
	// No message has two live leases: at most one in-flight entry per id.
	infl := map[uint64]int{}
	got, err := h.m.Peek(md.now, "q", 0, 1<<20, StateInFlight)
	if err != nil {
		t.Fatalf("peek q in flight: %v", err)
	}
	for _, g := range got {
		if g.State != StateInFlight {
			t.Fatalf("peek of in-flight messages returned %d in state %s", g.ID, g.State)
		}
		infl[g.ID]++
		if infl[g.ID] > 1 {
			t.Fatalf("message %d leased twice", g.ID)
		}
	}
}

// explain is what Explain must say of id in q: its status, how many are ahead of a ready
// message, and how a gone one left — written from docs/semantics.md "Explain".
func (md *model) explain(id uint64) (Status, int, GoneHow) {
	q := md.q
	eff := func(y *mmsg) State {
		if y.deferred && y.state == StateInFlight && y.at <= md.now {
			return StateDeferred // a fetched deferred message whose lease ended
		}
		if (y.state == StateDelayed || y.state == StateInFlight) && y.at <= md.now {
			return StateReady
		}
		return y.state
	}
	blocked := func(x *mmsg) bool {
		if !q.cfg.OrderedGroups || !x.grouped() {
			return false
		}
		for _, y := range q.msgs {
			if y.grouped() && y.group == x.group && (y.rank < x.rank || eff(y) == StateInFlight) {
				return true
			}
		}
		return false
	}
	for _, x := range q.msgs {
		if x.id != id {
			continue
		}
		switch eff(x) {
		case StateDelayed:
			return StatusDelayed, 0, 0
		case StateInFlight:
			return StatusLeased, 0, 0
		case StateDeferred:
			return StatusDeferred, 0, 0
		}
		if q.isParked(x) {
			return StatusParked, 0, 0
		}
		if blocked(x) {
			return StatusGroupWait, 0, 0
		}
		n := 0
		for _, y := range q.msgs {
			if y.seq >= x.seq || eff(y) != StateReady {
				continue
			}
			if !q.cfg.OrderedGroups && x.grouped() {
				if y.grouped() && y.group == x.group {
					n++
				}
			} else if !blocked(y) && !(q.cfg.OrderedGroups && q.isParked(y)) {
				n++
			}
		}
		return StatusReady, n, 0
	}
	ring := md.settled[max(0, len(md.settled)-SettledRingSize):]
	for i := len(ring) - 1; i >= 0; i-- {
		if ring[i].id == id {
			if ring[i].how == GoneDeadLettered {
				return StatusDeadLettered, 0, GoneDeadLettered
			}
			return StatusGone, 0, ring[i].how
		}
	}
	return StatusUnknown, 0, 0
}

func infoIDs(xs []MessageInfo) []uint64 {
	var ids []uint64
	for _, x := range xs {
		ids = append(ids, x.ID)
	}
	return ids
}

func TestBackoffMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg := testConfig("q")
		cfg.BackoffBase = time.Duration(rapid.Int64Range(0, 5000).Draw(t, "base")) * time.Millisecond
		cfg.BackoffMax = cfg.BackoffBase + time.Duration(rapid.Int64Range(0, 600000).Draw(t, "extra"))*time.Millisecond
		deliv := rapid.Uint32Range(1, 80).Draw(t, "deliv")
		jitter := rapid.Uint64().Draw(t, "jitter")
		got := Backoff(&cfg, deliv, jitter)
		if cfg.BackoffBase == 0 {
			if got != 0 {
				t.Fatalf("zero base gave %d", got)
			}
			return
		}
		if want := backoffModel(cfg, deliv, jitter); got != want {
			t.Fatalf("Backoff(%v, %v, %d, %d) = %d, want %d", cfg.BackoffBase, cfg.BackoffMax, deliv, jitter, got, want)
		}
		if got < 0 || got > cfg.BackoffMax.Milliseconds() {
			t.Fatalf("backoff %d outside [0, %d]", got, cfg.BackoffMax.Milliseconds())
		}
	})
}

// TestDeferringDelaysButDoesNotChangeAReceive: a receive whose filter defers some
// candidates, followed by a second call that admits everything and continues it, leases
// what one plain Receive would, in the same order and with the same resulting state —
// so a node's cache, which decides what the broker defers, never decides what a receive
// takes.
func TestDeferringDelaysButDoesNotChangeAReceive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ordered := rapid.Bool().Draw(t, "ordered")
		var recs []Record
		a, sa := New(), &logSink{t: t}
		cfg := testConfig("q")
		cfg.OrderedGroups = ordered
		if _, err := a.PutQueue(t0, sa, "q", cfg); err != nil {
			t.Fatal(err)
		}
		n := rapid.IntRange(1, 30).Draw(t, "n")
		in := make([]SendInput, n)
		for i := range in {
			in[i] = SendInput{Payload: Payload{
				Body:  make([]byte, rapid.IntRange(0, 40).Draw(t, "size")),
				Group: rapid.SampledFrom([]string{"", "", "a", "b", "c"}).Draw(t, "group"),
			}, Delay: -1}
		}
		if _, err := a.Send(t0, sa, "q", in); err != nil {
			t.Fatal(err)
		}
		// Some leased already, so that groups are held.
		if _, err := a.Receive(t0, sa, "q", rapid.IntRange(0, 3).Draw(t, "pre"), 60_000, 0); err != nil {
			t.Fatal(err)
		}
		for _, raw := range sa.recs {
			r, err := DecodeRecord(raw)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		b, sb := New(), &logSink{t: t}
		for _, r := range recs {
			if err := b.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
		max := rapid.IntRange(1, 12).Draw(t, "max")
		maxBytes := rapid.SampledFrom([]int64{0, 30, 100}).Draw(t, "maxBytes")
		mod := rapid.Uint64Range(1, 4).Draw(t, "deferMod")
		want, err := a.Receive(t0+1, sa, "q", max, 1000, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		first, deferred, err := b.ReceiveWith(t0+1, sb, "q", ReceiveSpec{Max: max, Visibility: 1000, MaxBytes: maxBytes,
			Admit: func(c Candidate) Admission {
				if c.MsgID%mod == 0 {
					return Defer
				}
				return Admit
			}})
		if err != nil {
			t.Fatal(err)
		}
		got := first
		if len(deferred) > 0 {
			var size int64
			for _, d := range first {
				size += b.ar.get(d.Ref).size()
			}
			var rest int64 // what remains of the cap (0: none)
			if maxBytes > 0 {
				rest = maxBytes - size
			}
			if maxBytes == 0 || rest > 0 || len(first) == 0 {
				more, _, err := b.ReceiveWith(t0+1, sb, "q", ReceiveSpec{Max: max - len(first), Visibility: 1000, MaxBytes: rest, Continued: len(first) > 0})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, more...)
			}
		}
		if !slices.Equal(deliveryIDs(got), deliveryIDs(want)) {
			t.Fatalf("deferred then continued: leased %v; one receive: %v (deferred %d)", deliveryIDs(got), deliveryIDs(want), len(deferred))
		}
		if !bytes.Equal(a.AppendSnapshot(nil), b.AppendSnapshot(nil)) {
			t.Fatal("the two machines' states differ")
		}
	})
}
