package topic

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/okiba/okiba/queue"
)

// This file checks subscriptions against a naive model written from docs/semantics.md
// ("Subscriptions"), with a real queue machine on the other side: a caught-up
// subscription takes each matching record in the publish itself, unless its queue is
// full (it then pauses where it is); one that is behind is moved on by copies; records
// retention deletes before a subscription took them are counted lost. Both machines
// write one log, as the broker's do, and a restart rebuilds both from a checkpoint and
// that log.

// bothSink is the log of both machines, in emission order.
type bothSink struct {
	t    *rapid.T
	recs [][]byte
	// ids says which record each message the topic put into a queue carries: the payload
	// store's part, which the broker keeps from the same records.
	ids map[uint64][2]uint64 // message id → partition, offset
}

func (s *bothSink) Emit(r Record) {
	b := r.AppendTo(nil)
	if _, err := DecodeRecord(b); err != nil {
		s.t.Fatalf("decode own %s record: %v", r.Kind(), err)
	}
	switch x := r.(type) {
	case *PublishFanoutRecord:
		n := uint64(0)
		for _, tg := range x.Targets {
			if tg.QueueID != 0 {
				s.ids[x.BaseMsgID+n] = [2]uint64{uint64(x.Partition), x.Offset}
				n++
			}
		}
	case *SubCopyRecord:
		for i, e := range x.Entries {
			s.ids[x.BaseMsgID+uint64(i)] = [2]uint64{uint64(e.Record.Partition), e.Record.Offset}
		}
	}
	s.recs = append(s.recs, b)
}

// queueSink puts the queue machine's records into the same log.
type queueSink struct{ s *bothSink }

func (q queueSink) Emit(r queue.Record) { q.s.recs = append(q.s.recs, r.AppendTo(nil)) }

// recStore keeps every retained record whole, as the copier reads them.
type recStore struct {
	recs map[[3]uint64]*PublishRecord
}

func (b *recStore) Published(tid uint64, p int, off uint64, _ bool, r *PublishRecord) {
	c := *r
	c.Key, c.Body, c.Headers = slices.Clone(r.Key), slices.Clone(r.Body), slices.Clone(r.Headers)
	b.recs[[3]uint64{tid, uint64(p), off}] = &c
}

func (b *recStore) Truncated(tid uint64, p int, start uint64) {
	for k := range b.recs {
		if k[0] == tid && k[1] == uint64(p) && k[2] < start {
			delete(b.recs, k)
		}
	}
}

func (b *recStore) Deleted(tid uint64) {
	for k := range b.recs {
		if k[0] == tid {
			delete(b.recs, k)
		}
	}
}

type msub struct {
	queue                     string
	keys                      []string // the filter: records with one of these keys; nil takes all
	cursors                   []uint64
	delivered, filtered, lost uint64
	id                        uint64 // the machine's, for fan-out order
}

func (s *msub) matches(key string, hasKey bool) bool {
	return s.keys == nil || hasKey && slices.Contains(s.keys, key)
}

// mqueue is a queue's content as records: two subscriptions feeding one queue put two
// messages of a record there.
type mqueue struct {
	max  int
	msgs map[[2]uint64]int
	n    int
}

type sharness struct {
	tm     *Machine
	qm     *queue.Machine
	sink   *bothSink
	store  *recStore
	now    int64
	tsnap  []byte
	qsnap  []byte
	since  int
	parts  int
	keys   map[[2]uint64]string // partition, offset → key ("" and no key: absent)
	subs   map[string]*msub
	queues map[string]*mqueue
}

var subQueues = map[string]string{"s1": "qa", "s2": "qb", "s3": "qa"}

func TestSubscriptionsMatchModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		sink := &bothSink{t: t, ids: map[uint64][2]uint64{}}
		h := &sharness{tm: New(), qm: queue.New(), sink: sink, store: &recStore{recs: map[[3]uint64]*PublishRecord{}},
			now: 1_700_000_000_000, keys: map[[2]uint64]string{}, subs: map[string]*msub{},
			queues: map[string]*mqueue{}}
		h.tm.SetBodies(h.store)
		h.tm.SetQueues(h.qm)
		h.parts = rapid.IntRange(1, 3).Draw(t, "partitions")
		cfg := DefaultConfig()
		cfg.Partitions = h.parts
		cfg.RetentionAge = time.Duration(rapid.SampledFrom([]int64{0, 3000}).Draw(t, "age")) * time.Millisecond
		cfg.SegmentBytes, cfg.SegmentAge = MinSegmentBytes, time.Second
		if _, err := h.tm.PutTopic(h.now, h.sink, "t", cfg); err != nil {
			t.Fatal(err)
		}
		for name, max := range map[string]int{"qa": rapid.SampledFrom([]int{0, 2}).Draw(t, "qaMax"), "qb": 0} {
			qc := queue.DefaultConfig()
			qc.MaxMessages, qc.DeadLetterQueue, qc.MaxDeliveries = int64(max), queue.NoDeadLetterQueue, 0
			if _, err := h.qm.PutQueue(h.now, queueSink{h.sink}, name, qc); err != nil {
				t.Fatal(err)
			}
			h.queues[name] = &mqueue{max: max, msgs: map[[2]uint64]int{}}
		}
		h.checkpoint()
		t.Repeat(map[string]func(*rapid.T){
			"subscribe":   h.subscribe,
			"unsubscribe": h.unsubscribe,
			"publish":     h.publish,
			"copy":        h.copy,
			"drain":       h.drain,
			"clock":       h.clock,
			"restart":     h.restart,
			"":            h.check,
		})
	})
}

func (h *sharness) checkpoint() {
	h.tsnap, h.qsnap, h.since = h.tm.AppendSnapshot(nil), h.qm.AppendSnapshot(nil), len(h.sink.recs)
}

// starts returns each partition's first retained offset and end, from the machine (the
// retention model of TestMachineMatchesModel checks them).
func (h *sharness) starts(t *rapid.T) (start, end []uint64) {
	ti, err := h.tm.Topic("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ti.Partitions {
		start, end = append(start, p.Start), append(end, p.End)
	}
	return start, end
}

// retained applies retention to the model's cursors: what a subscription had not taken
// when retention deleted it is lost, and the cursor goes on from the new start.
func (h *sharness) retained(t *rapid.T) {
	start, _ := h.starts(t)
	for _, s := range h.subs {
		for p, c := range s.cursors {
			if c < start[p] {
				s.lost += start[p] - c
				s.cursors[p] = start[p]
			}
		}
	}
}

func (h *sharness) subscribe(t *rapid.T) {
	name := rapid.SampledFrom([]string{"s1", "s2", "s3"}).Draw(t, "sub")
	var keys []string
	var cfg SubscriptionConfig
	cfg.Queue = subQueues[name]
	if rapid.Bool().Draw(t, "filtered") {
		keys = []string{"a"}
		cfg.Filter = []byte(`{"okiba-key":["a"]}`)
	}
	start, end := h.starts(t)
	var from []uint64
	if rapid.Bool().Draw(t, "first") {
		from = start
	}
	qi, err := h.qm.QueueMeta(cfg.Queue)
	if err != nil {
		t.Fatal(err)
	}
	q := QueueInfo{ID: qi.ID, MaxMessageSize: qi.Config.MaxMessageSize, OrderedGroups: qi.Config.OrderedGroups}
	created, err := h.tm.Subscribe(h.now, h.sink, "t", name, cfg, q, from)
	if err != nil {
		t.Fatalf("Subscribe %s: %v", name, err)
	}
	s := h.subs[name]
	if created != (s == nil) {
		t.Fatalf("Subscribe %s: created %v, the model has it: %v", name, created, s != nil)
	}
	if s != nil { // only the filter changes
		s.keys = keys
		return
	}
	s = &msub{queue: cfg.Queue, keys: keys, cursors: slices.Clone(end)}
	if from != nil {
		s.cursors = slices.Clone(from)
	}
	si, err := h.tm.Subscription("t", name)
	if err != nil {
		t.Fatal(err)
	}
	s.id = h.tm.topics["t"].subs[name].id
	if !slices.Equal(si.Cursors, s.cursors) {
		t.Fatalf("new %s: cursors %v, model %v", name, si.Cursors, s.cursors)
	}
	h.subs[name] = s
}

func (h *sharness) unsubscribe(t *rapid.T) {
	name := rapid.SampledFrom([]string{"s1", "s2", "s3"}).Draw(t, "sub")
	err := h.tm.Unsubscribe(h.now, h.sink, "t", name)
	if h.subs[name] == nil {
		if err == nil {
			t.Fatalf("Unsubscribe %s: no error for a subscription that does not exist", name)
		}
		return
	}
	if err != nil {
		t.Fatalf("Unsubscribe %s: %v", name, err)
	}
	delete(h.subs, name) // what it put into its queue stays there
}

// subsInOrder returns the model's subscriptions in the order fan-out visits them.
func (h *sharness) subsInOrder() []*msub {
	out := make([]*msub, 0, len(h.subs))
	for _, s := range h.subs {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// offer is the model of one record meeting one subscription at its cursor: it passes
// (filtered out), enters the queue, or finds the queue full (false: stop there).
func (h *sharness) offer(s *msub, p int, off uint64) bool {
	key, hasKey := h.keys[[2]uint64{uint64(p), off}]
	if !s.matches(key, hasKey) {
		s.filtered++
		s.cursors[p]++
		return true
	}
	q := h.queues[s.queue]
	if q.max > 0 && q.n >= q.max {
		return false
	}
	q.msgs[[2]uint64{uint64(p), off}]++
	q.n++
	s.delivered++
	s.cursors[p]++
	return true
}

func (h *sharness) publish(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	in := make([]PublishInput, n)
	for i := range in {
		in[i] = PublishInput{Partition: AnyPartition, Body: []byte(fmt.Sprint(i))}
		if k := rapid.SampledFrom([]string{"", "a", "b", "-"}).Draw(t, "key"); k != "-" {
			in[i].Key, in[i].HasKey = []byte(k), true
		}
	}
	res, err := h.tm.Publish(h.now, h.sink, "t", in)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Publish %d: %v", i, r.Err)
		}
		if in[i].HasKey {
			h.keys[[2]uint64{uint64(r.Partition), r.Offset}] = string(in[i].Key)
		}
		for _, s := range h.subsInOrder() {
			if s.cursors[r.Partition] == r.Offset {
				h.offer(s, r.Partition, r.Offset)
			}
		}
	}
}

func (h *sharness) copy(t *rapid.T) {
	name := rapid.SampledFrom([]string{"s1", "s2", "s3"}).Draw(t, "sub")
	max := rapid.IntRange(1, 4).Draw(t, "max")
	plan, ok, err := h.tm.PlanCopy("t", name, max)
	s := h.subs[name]
	if s == nil {
		if err == nil {
			t.Fatalf("PlanCopy %s: no error for a subscription that does not exist", name)
		}
		return
	}
	if err != nil {
		t.Fatalf("PlanCopy %s: %v", name, err)
	}
	_, end := h.starts(t)
	behind := false
	for p := range end {
		behind = behind || s.cursors[p] < end[p]
	}
	if ok != behind {
		t.Fatalf("PlanCopy %s: %v, model behind: %v (cursors %v, ends %v)", name, ok, behind, s.cursors, end)
	}
	if !ok {
		return
	}
	// Where it starts is the machine's choice (a turn over the partitions); the range
	// from there is not.
	p := plan.Partition
	if s.cursors[p] >= end[p] || plan.From != s.cursors[p] || plan.To != min(end[p], s.cursors[p]+uint64(max)) {
		t.Fatalf("PlanCopy %s: %+v, model cursors %v ends %v", name, plan, s.cursors, end)
	}
	// The copier may read fewer records than planned (a short read); it copies those.
	read := rapid.IntRange(1, int(plan.To-plan.From)).Draw(t, "read")
	var recs []*PublishRecord
	for off := plan.From; off < plan.From+uint64(read); off++ {
		r := h.store.recs[[3]uint64{plan.TopicID, uint64(p), off}]
		if r == nil {
			t.Fatalf("%d/%d is not in the store", p, off)
		}
		recs = append(recs, r)
	}
	moved, full, err := h.tm.Copy(h.now, h.sink, plan, recs)
	if err != nil {
		t.Fatalf("Copy %s: %v", name, err)
	}
	wantMoved, wantFull := 0, false
	for _, r := range recs {
		before := s.delivered
		if !h.offer(s, p, r.Offset) {
			wantFull = true
			break
		}
		wantMoved += int(s.delivered - before)
	}
	if moved != wantMoved || full != wantFull {
		t.Fatalf("Copy %s: moved %d full %v, model %d %v", name, moved, full, wantMoved, wantFull)
	}
}

func (h *sharness) drain(t *rapid.T) {
	name := rapid.SampledFrom([]string{"qa", "qb"}).Draw(t, "queue")
	max := rapid.IntRange(1, 3).Draw(t, "max")
	ds, err := h.qm.Receive(h.now, queueSink{h.sink}, name, max, 30_000, 1<<30)
	if err != nil {
		t.Fatalf("Receive %s: %v", name, err)
	}
	leases := make([]queue.Lease, len(ds))
	for i, d := range ds {
		leases[i] = d.Lease
		po, ok := h.sink.ids[d.MsgID]
		q := h.queues[name]
		if !ok || q.msgs[po] == 0 {
			t.Fatalf("received message %d of %s, which no subscription put there (%v)", d.MsgID, name, po)
		}
		if q.msgs[po]--; q.msgs[po] == 0 {
			delete(q.msgs, po)
		}
		q.n--
	}
	if len(leases) > 0 {
		if errs, err := h.qm.Ack(h.now, queueSink{h.sink}, name, leases); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
			t.Fatalf("Ack: %v %v", err, errs)
		}
	}
}

func (h *sharness) clock(t *rapid.T) {
	h.now += rapid.Int64Range(1, 2500).Draw(t, "dt")
	h.tm.Tick(h.now, h.sink)
	h.retained(t)
}

// restart rebuilds both machines from the last checkpoint and the log since.
func (h *sharness) restart(t *rapid.T) {
	tm, err := Restore(h.tsnap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	qm, err := queue.Restore(h.qsnap, nil)
	if err != nil {
		t.Fatalf("queue.Restore: %v", err)
	}
	tm.SetBodies(h.store)
	tm.SetQueues(qm)
	for _, b := range h.sink.recs[h.since:] {
		if queue.Kind(b[0]) <= queue.MaxKind {
			r, err := queue.DecodeRecord(b)
			if err != nil {
				t.Fatalf("decode queue record: %v", err)
			}
			if err := qm.Apply(r); err != nil {
				t.Fatalf("replay %s: %v", r.Kind(), err)
			}
			continue
		}
		r, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if err := tm.Apply(r); err != nil {
			t.Fatalf("replay %s: %v", r.Kind(), err)
		}
	}
	if !bytes.Equal(tm.AppendSnapshot(nil), h.tm.AppendSnapshot(nil)) {
		t.Fatalf("topic state after replay differs from the live state")
	}
	if !bytes.Equal(qm.AppendSnapshot(nil), h.qm.AppendSnapshot(nil)) {
		t.Fatalf("queue state after replay differs from the live state")
	}
	h.tm, h.qm = tm, qm
	if rapid.Bool().Draw(t, "checkpoint") {
		h.checkpoint()
	}
}

func (h *sharness) check(t *rapid.T) {
	infos, err := h.tm.Subscriptions("t")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(h.subs) {
		t.Fatalf("%d subscriptions, model %d", len(infos), len(h.subs))
	}
	_, end := h.starts(t)
	for _, si := range infos {
		s := h.subs[si.Name]
		if s == nil {
			t.Fatalf("subscription %q not in the model", si.Name)
		}
		var lag uint64
		for p := range end {
			lag += end[p] - s.cursors[p]
		}
		if !slices.Equal(si.Cursors, s.cursors) || si.Delivered != s.delivered || si.Filtered != s.filtered ||
			si.LostToRetention != s.lost || si.Lag != lag || si.Queue != s.queue {
			t.Fatalf("%s: cursors %v delivered %d filtered %d lost %d lag %d; model %v %d %d %d %d",
				si.Name, si.Cursors, si.Delivered, si.Filtered, si.LostToRetention, si.Lag, s.cursors, s.delivered, s.filtered, s.lost, lag)
		}
	}
	for name, q := range h.queues {
		infos, err := h.qm.Peek(h.now, name, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got := map[[2]uint64]int{}
		for _, mi := range infos {
			got[h.sink.ids[mi.ID]]++
		}
		if len(infos) != q.n || !maps.Equal(got, q.msgs) {
			t.Fatalf("queue %s holds %d messages (%v), model %d (%v)", name, len(infos), got, q.n, q.msgs)
		}
	}
}
