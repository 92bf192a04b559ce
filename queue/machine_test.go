package queue

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// memSink collects records for scenario tests.
type memSink struct {
	recs []Record
	off  uint64
}

func (s *memSink) Emit(r Record) {
	s.recs = append(s.recs, r)
	s.off += 64
}

// memBodies keeps every body in memory by Ref: the payload store of the semantics' tests.
// The records it is handed are never reused, so it keeps the pointer.
type memBodies map[Ref]*Payload

func (b memBodies) Added(r Ref, p *Payload) { b[r] = p }
func (b memBodies) Removed(r Ref, _ int64)  { delete(b, r) }
func (b memBodies) body(r Ref) string       { return string(b[r].Body) }
func bodiesOf(m *Machine) memBodies         { return m.bodies.(memBodies) }
func newTestMachine() (*Machine, *memSink) {
	m := New()
	m.SetBodies(memBodies{})
	return m, &memSink{}
}

const t0 = int64(1_800_000_000_000)

// testConfig is okiba's defaults for a queue named name, with the dead-letter queue
// the fronts would name for a name without a suffix.
func testConfig(name string) Config {
	c := DefaultConfig()
	c.DeadLetterQueue = name + "-dlq"
	return c
}

func newMachine(t *testing.T, name string, edit func(*Config)) (*Machine, *memSink) {
	t.Helper()
	m, s := newTestMachine()
	cfg := testConfig(name)
	if edit != nil {
		edit(&cfg)
	}
	if _, err := m.PutQueue(t0, s, name, cfg); err != nil {
		t.Fatalf("PutQueue: %v", err)
	}
	return m, s
}

func sendBodies(t *testing.T, m *Machine, s Sink, now int64, q string, group string, bodies ...string) []uint64 {
	t.Helper()
	in := make([]SendInput, len(bodies))
	for i, b := range bodies {
		in[i] = SendInput{Payload: Payload{Body: []byte(b), Group: group}, Delay: -1}
	}
	res, err := m.Send(now, s, q, in)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("send %d: %v", i, r.Err)
		}
		ids[i] = r.ID
	}
	return ids
}

func receiveBodies(t *testing.T, m *Machine, s Sink, now int64, q string, max int, vis int64) ([]string, []Lease) {
	t.Helper()
	ds, err := m.Receive(now, s, q, max, vis, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	var ls []Lease
	for _, d := range ds {
		bodies = append(bodies, bodiesOf(m).body(d.Ref))
		ls = append(ls, d.Lease)
	}
	return bodies, ls
}

func TestGroupHeadHoldsItsGroupButNotOthers(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "orders", nil)
	sendBodies(t, m, s, t0, "orders", "alice", "a1", "a2")
	sendBodies(t, m, s, t0, "orders", "bob", "b1")
	sendBodies(t, m, s, t0, "orders", "", "x")
	got, ls := receiveBodies(t, m, s, t0, "orders", 1, 1000)
	if strings.Join(got, ",") != "a1" {
		t.Fatalf("first receive %v", got)
	}
	// alice is held by a1's lease; bob and the ungrouped message are free.
	got, _ = receiveBodies(t, m, s, t0, "orders", 10, 1000)
	if strings.Join(got, ",") != "b1,x" {
		t.Fatalf("second receive %v, want b1,x", got)
	}
	// Nack a1: it keeps its place at the head; a2 still waits behind it.
	if errs, _ := m.Nack(t0, s, "orders", []NackInput{{Lease: ls[0], Delay: 500}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got, _ = receiveBodies(t, m, s, t0+100, "orders", 10, 1000); len(got) != 0 {
		t.Fatalf("a delayed head let its group move: %v", got)
	}
	got, ls = receiveBodies(t, m, s, t0+500, "orders", 10, 1000)
	if strings.Join(got, ",") != "a1,a2" {
		t.Fatalf("after the delay: %v, want a1,a2 (one receive takes consecutive messages of a group)", got)
	}
	// Dead-lettering the head lets the group move on.
	if errs, _ := m.DeadLetter(t0+500, s, "orders", ls[:1], "poison", "bad"); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if errs, _ := m.Nack(t0+500, s, "orders", []NackInput{{Lease: ls[1], Delay: 0}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got, _ = receiveBodies(t, m, s, t0+500, "orders", 10, 1000); strings.Join(got, ",") != "a2" {
		t.Fatalf("after dead-lettering the head: %v, want a2", got)
	}
}

func TestIdleGroupsCostNothing(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	for i := 0; i < 1000; i++ {
		sendBodies(t, m, s, t0, "q", "k"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), "m")
	}
	for {
		_, ls := receiveBodies(t, m, s, t0, "q", 100, 1000)
		if len(ls) == 0 {
			break
		}
		if _, err := m.Ack(t0, s, "q", ls); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.queues["q"].groups); n != 0 {
		t.Fatalf("%d groups kept after every message was acked", n)
	}
}

func TestMaxDeliveriesFiresWhenTheLastLeaseEnds(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.MaxDeliveries = 2 })
	sendBodies(t, m, s, t0, "q", "", "m")
	receiveBodies(t, m, s, t0, "q", 1, 100)
	_, ls := receiveBodies(t, m, s, t0+100, "q", 1, 100)
	if len(ls) != 1 || ls[0].Epoch != 2 {
		t.Fatalf("second delivery: %+v", ls)
	}
	// The 2nd lease ends by expiry: dead-lettered at once, not on a 3rd receive.
	m.Tick(t0+200, s)
	if st := m.queues["q-dlq"]; st == nil || st.msgs.live != 1 {
		t.Fatalf("message not dead-lettered when its 2nd lease ended")
	}
	infos, _ := m.Peek(t0+200, "q-dlq", 0, 10)
	if infos[0].Dead.Reason != ReasonMaxDeliveries || infos[0].Dead.Deliveries != 2 || infos[0].Deliveries != 0 {
		t.Fatalf("dead letter info %+v / %+v", infos[0].Dead, infos[0])
	}
}

func TestRetentionNeverCutsALiveLease(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.Retention = 10 * time.Second })
	sendBodies(t, m, s, t0, "q", "", "leased", "idle")
	_, ls := receiveBodies(t, m, s, t0, "q", 1, 60_000)
	m.Tick(t0+10_000, s)
	infos, _ := m.Peek(t0+10_000, "q", 0, 10)
	if len(infos) != 1 || bodiesOf(m).body(infos[0].Ref) != "leased" {
		t.Fatalf("after retention: %+v (the idle one expires, the leased one stays)", infos)
	}
	// A late ack still settles it.
	if errs, _ := m.Ack(t0+30_000, s, "q", ls); errs[0] != nil {
		t.Fatalf("late ack: %v", errs[0])
	}
	dl, _ := m.Peek(t0+30_000, "q-dlq", 0, 10)
	if len(dl) != 1 || dl[0].Dead.Reason != ReasonExpired || bodiesOf(m).body(dl[0].Ref) != "idle" {
		t.Fatalf("DLQ after retention: %+v", dl)
	}
}

func TestRetentionWithoutDLQRemovesWithARecord(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) {
		c.Retention = time.Second
		c.DeadLetterQueue = NoDeadLetterQueue
		c.MaxDeliveries = 0
	})
	sendBodies(t, m, s, t0, "q", "", "m")
	n := len(s.recs)
	m.Tick(t0+1000, s)
	if q := m.queues["q"]; q.msgs.live != 0 || q.stats.Expired != 1 {
		t.Fatalf("not expired: live %d, expired %d", q.msgs.live, q.stats.Expired)
	}
	r, ok := s.recs[n].(*DeadLetterRecord)
	if !ok || r.Target != 0 || r.Reason != ReasonExpired {
		t.Fatalf("expiry without DLQ must leave a record, got %#v", s.recs[n:])
	}
}

func TestDedupWindowIsFixedAndSurvivesAck(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	in := []SendInput{{Payload: Payload{Body: []byte("x"), DedupID: "d"}, Delay: -1}}
	r1, err := m.Send(t0, s, "q", in)
	if err != nil || r1[0].Err != nil {
		t.Fatalf("first send: %v %+v", err, r1)
	}
	_, ls := receiveBodies(t, m, s, t0, "q", 1, 1000)
	// The ack must really happen, or "survives ack" is not what is tested.
	if errs, err := m.Ack(t0, s, "q", ls); err != nil || len(ls) != 1 || errs[0] != nil {
		t.Fatalf("ack of %d leases: %v %v", len(ls), err, errs)
	}
	r2, err := m.Send(t0+4*60_000, s, "q", in)
	if err != nil || !r2[0].Duplicate || r2[0].ID != r1[0].ID {
		t.Fatalf("duplicate after ack inside the window: %+v %v", r2, err)
	}
	// Fixed from the first send: the duplicate did not extend it.
	r3, err := m.Send(t0+5*60_000, s, "q", in)
	if err != nil || r3[0].Err != nil || r3[0].Duplicate {
		t.Fatalf("window slid with the duplicate: %+v %v", r3, err)
	}
}

func TestBackpressureRefusesSendsButNotDeadLetters(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.MaxMessages = 2 })
	if _, err := m.PutQueue(t0, s, "q-dlq", func() Config { c := DeadLetterConfig(testConfig("q")); c.MaxMessages = 1; return c }()); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, m, s, t0, "q", "", "a", "b")
	res, _ := m.Send(t0, s, "q", []SendInput{{Payload: Payload{Body: []byte("c")}, Delay: -1}})
	var fe *FullError
	if !errors.As(res[0].Err, &fe) || fe.Limit != "max_messages" {
		t.Fatalf("third send: %v, want max_messages refusal", res[0].Err)
	}
	_, ls := receiveBodies(t, m, s, t0, "q", 2, 1000)
	if errs, _ := m.DeadLetter(t0, s, "q", ls, "bad", ""); errs[0] != nil || errs[1] != nil {
		t.Fatalf("dead-lettering into a full DLQ refused: %v", errs)
	}
	if d := m.queues["q-dlq"]; d.msgs.live != 2 || d.stats.Overflow != 1 {
		t.Fatalf("DLQ live %d overflow %d, want 2 and 1", d.msgs.live, d.stats.Overflow)
	}
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		edit  func(*Config)
		field string
	}{
		{func(c *Config) { c.VisibilityTimeout = 13 * time.Hour }, "visibility_timeout"},
		{func(c *Config) { c.VisibilityTimeout = -1 }, "visibility_timeout"},
		{func(c *Config) { c.MaxDeliveries = -1 }, "max_deliveries"},
		{func(c *Config) { c.DeadLetterQueue = NoDeadLetterQueue }, "max_deliveries"},
		{func(c *Config) { c.DeadLetterQueue = "bad name" }, "dead_letter_queue"},
		{func(c *Config) { c.DeadLetterQueue = "" }, "dead_letter_queue"},
		{func(c *Config) { c.DeadLetterQueue = "a\x00" }, "dead_letter_queue"},
		{func(c *Config) { c.BackoffMax = 0 }, "backoff_max"},
		{func(c *Config) { c.Delay = 8 * 24 * time.Hour }, "delay"},
		{func(c *Config) { c.Retention = time.Millisecond }, "retention"},
		{func(c *Config) { c.Retention = time.Minute; c.Delay = time.Minute }, "delay"},
		{func(c *Config) { c.DedupWindow = -time.Second }, "dedup_window"},
		{func(c *Config) { c.MaxMessages = -5 }, "max_messages"},
		{func(c *Config) { c.MaxBytes = -5 }, "max_bytes"},
		{func(c *Config) { c.MaxMessageSize = 2 << 20 }, "max_message_size"},
		{func(c *Config) { c.MaxMessageSize = 0 }, "max_message_size"},
		{func(c *Config) { c.ReceiveWait = 61 * time.Second }, "receive_wait"},
	}
	for _, tc := range cases {
		c := testConfig("q")
		tc.edit(&c)
		err := c.Validate("q")
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	if d := DefaultConfig(); d.Validate("q") == nil {
		t.Error("defaults without a dead-letter queue name accepted")
	}
	for _, bad := range []string{"", "a b", strings.Repeat("a", 81), "é", "a/b", "a:b", "a\x00", "a\n", "a\x7f"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	// The core is no grammar: it takes what some front may refuse.
	for _, good := range []string{"a", "A-b_9", strings.Repeat("a", 80), "a.b", ".", "x.fifo.fifo", strings.Repeat("a", 75) + ".fifo"} {
		if err := CheckName(good); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
}

func TestDLQCyclesAndInUse(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "a", func(c *Config) { c.DeadLetterQueue = "b" })
	_, err := m.PutQueue(t0, s, "b", func() Config { c := testConfig("b"); c.DeadLetterQueue = "a"; return c }())
	var ce *CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("a -> b -> a accepted: %v", err)
	}
	if err := m.DeleteQueue(t0, s, "b", false); !errors.Is(err, ErrQueueInUse) {
		t.Fatalf("deleting a used DLQ: %v", err)
	}
	if err := m.DeleteQueue(t0, s, "b", true); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	// The DLQ is recreated when next needed: nothing is lost.
	sendBodies(t, m, s, t0, "a", "", "m")
	_, ls := receiveBodies(t, m, s, t0, "a", 1, 1000)
	if errs, _ := m.DeadLetter(t0, s, "a", ls, "r", ""); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if q := m.queues["b"]; q == nil || q.msgs.live != 1 {
		t.Fatalf("dead letter did not land in a recreated DLQ")
	}
}

func TestRecreatedQueueMakesReceiptsStale(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	sendBodies(t, m, s, t0, "q", "", "m")
	_, ls := receiveBodies(t, m, s, t0, "q", 1, 60_000)
	if err := m.DeleteQueue(t0, s, "q", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutQueue(t0, s, "q", testConfig("q")); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, m, s, t0, "q", "", "n")
	errs, _ := m.Ack(t0, s, "q", ls)
	if !errors.Is(errs[0], ErrReceiptStale) {
		t.Fatalf("receipt of a deleted queue: %v", errs[0])
	}
}

func TestReceiveByteCapReturnsAtLeastOne(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	sendBodies(t, m, s, t0, "q", "", strings.Repeat("a", 600), strings.Repeat("b", 600), "c")
	ds, _ := m.Receive(t0, s, "q", 10, 1000, 1000)
	if len(ds) != 1 {
		t.Fatalf("cap 1000 bytes returned %d messages", len(ds))
	}
	ds, _ = m.Receive(t0, s, "q", 10, 1000, 10)
	if len(ds) != 1 {
		t.Fatalf("a message above the cap must still come alone: %d", len(ds))
	}
}

func TestSendRejectsBadPayloadsAndRecordsNothing(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.MaxMessageSize = 10; c.Retention = time.Hour })
	n := len(s.recs)
	res, _ := m.Send(t0, s, "q", []SendInput{
		{Payload: Payload{Body: []byte("01234567890")}, Delay: -1},
		{Payload: Payload{Body: []byte("x"), Group: "bad\ngroup"}, Delay: -1},
		{Payload: Payload{Body: []byte("x"), Attrs: []Attr{{Name: "a", Type: "Blob", Value: []byte("v")}}}, Delay: -1},
		{Payload: Payload{Body: []byte("x")}, Delay: 3_600_000},
	})
	for i, want := range []error{ErrMessageTooLarge, ErrInvalidMessage, ErrInvalidMessage, ErrInvalidDelay} {
		if !errors.Is(res[i].Err, want) {
			t.Errorf("entry %d: %v, want %v", i, res[i].Err, want)
		}
	}
	if len(s.recs) != n {
		t.Fatalf("rejected sends wrote %d records", len(s.recs)-n)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	cfg := testConfig("q")
	cfg.Tags = map[string]string{"team": "pay"}
	for _, r := range []Record{
		&QueuePutRecord{Now: t0, QueueID: 1, Name: "q", Config: cfg},
		&SendRecord{Now: t0, QueueID: 1, MsgID: 99, VisibleAt: t0 + 5, Payload: Payload{Body: []byte("hi"), Group: "g", DedupID: "d", Attrs: []Attr{{Name: "a", Type: "String", Value: []byte("v")}}}},
		&DeliverRecord{Now: t0, QueueID: 1, Deadline: t0 + 30000, Seqs: []uint64{1, 2, 5}},
		&NackRecord{Now: t0, QueueID: 1, Items: []SeqTime{{1, t0 + 9}}},
		&DeadLetterRecord{Now: t0, QueueID: 1, Target: 2, Reason: "r", Description: "d", Seqs: []uint64{3}},
		&TaskCreateRecord{Now: t0, TaskID: 1, Source: 2, Filter: RedriveFilter{Reason: "r", IDs: []uint64{7}}},
		&TaskMoveRecord{Now: t0, TaskID: 1, Cursor: 9, Items: []SeqTarget{{3, 1}}},
		&LimitsRecord{Now: t0, Limits: Limits{}.WithDefaults()},
		&RelocateRecord{Now: t0, QueueID: 1, Seq: 1, MsgID: 99, Payload: Payload{Body: []byte("moved")}},
	} {
		f.Add(r.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same record.
		again, err := DecodeRecord(r.AppendTo(nil))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(again.AppendTo(nil), r.AppendTo(nil)) {
			t.Fatalf("record does not round-trip")
		}
	})
}

func FuzzRestore(f *testing.F) {
	m, s := newTestMachine()
	m.PutQueue(t0, s, "q", testConfig("q"))
	m.Send(t0, s, "q", []SendInput{{Payload: Payload{Body: []byte("x"), Group: "g", DedupID: "d"}, Delay: -1}})
	m.Receive(t0, s, "q", 1, 1000, 0)
	f.Add(m.AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Restore(b, nil)
		if err != nil {
			return
		}
		// A restored machine must be usable and snapshot deterministically.
		if !bytes.Equal(r.AppendSnapshot(nil), r.AppendSnapshot(nil)) {
			t.Fatal("snapshot not deterministic")
		}
		r.AdvanceAll(t0+1_000_000, &memSink{})
	})
}

// Limits are replicated configuration: they travel in the log as a record, so a replay
// into a machine that was told nothing evicts dedup entries and prunes tasks exactly as
// the live one did.
func TestLimitsTravelInTheLog(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	if _, err := m.SetLimits(t0, s, Limits{DedupCap: 2, MaxTasks: 1}); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.SetLimits(t0, s, Limits{DedupCap: 2, MaxTasks: 1}); again {
		t.Fatal("limits already in force were logged again")
	}
	cfg := testConfig("q")
	cfg.DedupWindow = time.Hour
	if _, err := m.PutQueue(t0, s, "q", cfg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, err := m.Send(t0, s, "q", []SendInput{{Payload: Payload{Body: []byte(id), DedupID: id}, Delay: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := m.Send(t0, s, "q", []SendInput{{Payload: Payload{Body: []byte("again"), DedupID: "d1"}, Delay: -1}})
	if res[0].Duplicate {
		t.Fatal("d1 still deduplicated beyond a cap of 2")
	}
	replayed := New()
	for _, r := range s.recs {
		if err := replayed.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(replayed.AppendSnapshot(nil), m.AppendSnapshot(nil)) {
		t.Fatal("a replay without the node's options built another state")
	}
	if got := replayed.Limits(); got.DedupCap != 2 || got.MaxTasks != 1 || got.MaxQueues != DefaultMaxQueues {
		t.Fatalf("replayed limits %+v", got)
	}
	if _, err := m.SetLimits(t0, s, Limits{DedupCap: -1}); err == nil {
		t.Fatal("a negative limit accepted")
	}
}

// TestQuarantineMovesACorruptHeadOutOfItsGroup: a head whose body the broker cannot read
// is dead-lettered with reason corrupt, its delivery count unchanged, and the rest of
// its group moves on in order; a leased message is not quarantined, nor a message of a
// queue without a dead-letter queue; consumers cannot give the reason themselves.
func TestQuarantineMovesACorruptHeadOutOfItsGroup(t *testing.T) {
	m, s := newMachine(t, "orders", nil)
	ids := sendBodies(t, m, s, t0, "orders", "alice", "a1", "a2", "a3")
	mi, err := m.Message(t0, "orders", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	ok, err := m.Quarantine(t0, s, "orders", mi.Seq, ids[0], "checksum mismatch at 00000001.wal@4096")
	if err != nil || !ok {
		t.Fatalf("Quarantine: %v %v", ok, err)
	}
	if got, _ := receiveBodies(t, m, s, t0, "orders", 10, 1000); strings.Join(got, ",") != "a2,a3" {
		t.Fatalf("after quarantining the head: %v, want a2,a3", got)
	}
	dl, err := m.Peek(t0, "orders-dlq", 0, 10)
	if err != nil || len(dl) != 1 || dl[0].ID != ids[0] || dl[0].Dead == nil || dl[0].Dead.Reason != ReasonCorrupt ||
		dl[0].Dead.Description != "checksum mismatch at 00000001.wal@4096" || dl[0].Dead.Deliveries != 0 || dl[0].Group != "alice" {
		t.Fatalf("dead-letter queue: %+v %v", dl, err)
	}
	// Once gone, or now another message, or leased: nothing happens.
	if ok, err := m.Quarantine(t0, s, "orders", mi.Seq, ids[0], ""); ok || err != nil {
		t.Fatalf("second Quarantine: %v %v", ok, err)
	}
	leased, _ := m.Message(t0, "orders", ids[1])
	if ok, err := m.Quarantine(t0, s, "orders", leased.Seq, ids[1], ""); ok || err != nil {
		t.Fatalf("Quarantine of a leased message: %v %v", ok, err)
	}
	if ok, err := m.Quarantine(t0, s, "orders", leased.Seq, ids[2], ""); ok || err != nil {
		t.Fatalf("Quarantine with another message's id: %v %v", ok, err)
	}
	if err := m.CheckDeadLetter("orders", ReasonCorrupt, ""); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a consumer's reason corrupt: %v, want ErrInvalidMessage", err)
	}

	n, ns := newMachine(t, "plain", func(c *Config) { c.DeadLetterQueue, c.MaxDeliveries = NoDeadLetterQueue, 0 })
	pid := sendBodies(t, n, ns, t0, "plain", "", "p")[0]
	if ok, err := n.Quarantine(t0, ns, "plain", 1, pid, ""); ok || !errors.Is(err, ErrNoDeadLetter) {
		t.Fatalf("Quarantine without a dead-letter queue: %v %v", ok, err)
	}
}

// TestRedriveRefusesAndSkipsCorruptDeadLetters: a redrive naming a corrupt dead letter by
// id, or the reason corrupt, is refused; one of everything moves the others and counts
// the corrupt one as skipped.
func TestRedriveRefusesAndSkipsCorruptDeadLetters(t *testing.T) {
	m, s := newMachine(t, "orders", nil)
	ids := sendBodies(t, m, s, t0, "orders", "", "bad", "good")
	if ok, err := m.Quarantine(t0, s, "orders", 1, ids[0], "checksum mismatch"); !ok || err != nil {
		t.Fatalf("Quarantine: %v %v", ok, err)
	}
	_, ls := receiveBodies(t, m, s, t0, "orders", 1, 1000)
	if _, err := m.DeadLetter(t0, s, "orders", ls, "poison", ""); err != nil {
		t.Fatal(err)
	}
	for _, f := range []RedriveFilter{{IDs: []uint64{ids[1], ids[0]}}, {Reason: ReasonCorrupt}} {
		before := len(s.recs)
		if _, err := m.StartRedrive(t0, s, RedriveSpec{Source: "orders-dlq", Filter: f}); !errors.Is(err, ErrMessageCorrupt) {
			t.Fatalf("redrive %+v: %v, want ErrMessageCorrupt", f, err)
		} else if f.IDs != nil && !strings.Contains(err.Error(), FormatID(ids[0])) {
			t.Fatalf("the refusal does not name the corrupt message: %v", err)
		}
		if len(s.recs) != before {
			t.Fatalf("a refused redrive logged %d records", len(s.recs)-before)
		}
	}
	task, err := m.StartRedrive(t0, s, RedriveSpec{Source: "orders-dlq"})
	if err != nil || task.Total != 2 {
		t.Fatalf("redrive of everything: %+v %v", task, err)
	}
	if st, err := m.RedriveStep(t0, s, task.ID, 10); err != nil || st.Moved != 1 || !st.Done {
		t.Fatalf("step: %+v %v", st, err)
	}
	if task, _ = m.Task(task.ID); task.Moved != 1 || task.Skipped != 1 {
		t.Fatalf("task after the step: moved %d skipped %d, want 1 and 1", task.Moved, task.Skipped)
	}
	if dl, _ := m.Peek(t0, "orders-dlq", 0, 10); len(dl) != 1 || dl[0].ID != ids[0] {
		t.Fatalf("the corrupt dead letter moved: %+v", dl)
	}
}

// RedriveTargets names the queues a redrive would move messages into, as RedriveStep
// picks them: the target, or each selected dead letter's source that still exists.
func TestRedriveTargetsAreWhereMessagesWouldGo(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "a", func(c *Config) { c.DeadLetterQueue = "shared" })
	for _, q := range []string{"b", "c"} {
		cfg := testConfig(q)
		cfg.DeadLetterQueue = "shared"
		if _, err := m.PutQueue(t0, s, q, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"a", "b", "c"} {
		sendBodies(t, m, s, t0, q, "", q+"1")
		_, ls := receiveBodies(t, m, s, t0, q, 1, 1000)
		if _, err := m.DeadLetter(t0, s, q, ls, "poison-"+q, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DeleteQueue(t0, s, "c", false); err != nil {
		t.Fatal(err)
	}
	before := len(s.recs)
	for _, c := range []struct {
		spec RedriveSpec
		want string
	}{
		{RedriveSpec{Source: "shared"}, "a,b"}, // c is gone: its dead letter is skipped
		{RedriveSpec{Source: "shared", From: "b"}, "b"},
		{RedriveSpec{Source: "shared", Filter: RedriveFilter{Reason: "poison-a"}}, "a"},
		{RedriveSpec{Source: "shared", Filter: RedriveFilter{Reason: "other"}}, ""},
		{RedriveSpec{Source: "shared", Target: "elsewhere"}, "elsewhere"},
		{RedriveSpec{Source: "a"}, ""}, // no dead letters there
	} {
		got, err := m.RedriveTargets(t0, c.spec)
		if err != nil || strings.Join(got, ",") != c.want {
			t.Errorf("RedriveTargets(%+v) = %v, %v; want %q", c.spec, got, err, c.want)
		}
	}
	if _, err := m.RedriveTargets(t0, RedriveSpec{Source: "nope"}); !errors.Is(err, ErrQueueNotFound) {
		t.Errorf("a missing source: %v", err)
	}
	if len(s.recs) != before {
		t.Fatalf("RedriveTargets emitted %d records", len(s.recs)-before)
	}
}

// DedupTotal bounds dedup ids across queues (three empty queues once held 300k ids, 71
// MiB, seen nowhere): at the bound the sending queue gives up its oldest id, or, holding
// none, does not remember the new one; expiry and deletion free room; and the count is a
// function of the records, the same in a machine replayed or restored from a snapshot,
// where the queues' own tables differ (a quiet queue keeps its expired entries).
func TestDedupTotalBoundsEveryQueue(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	if _, err := m.SetLimits(t0, s, Limits{DedupTotal: 4}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b", "c"} {
		cfg := testConfig(q)
		cfg.DedupWindow = time.Minute
		if _, err := m.PutQueue(t0, s, q, cfg); err != nil {
			t.Fatal(err)
		}
	}
	send := func(now int64, q, id string) bool {
		t.Helper()
		res, err := m.Send(now, s, q, []SendInput{{Payload: Payload{Body: []byte(id), DedupID: id}, Delay: -1}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("send %s %s: %v %+v", q, id, err, res)
		}
		return res[0].Duplicate
	}
	evicted := func(q string) uint64 { i, _ := m.Queue(q); return i.Stats.DedupEvictedEarly }
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		send(t0, "a", id)
	}
	if live, limit := m.DedupIDs(); live != 4 || limit != 4 {
		t.Fatalf("dedup ids %d of %d, want 4 of 4", live, limit)
	}
	// b holds none: its id is not remembered, and a keeps all of its own.
	send(t0+1, "b", "b1")
	if !send(t0+1, "a", "a1") || send(t0+2, "b", "b1") || evicted("b") != 2 || evicted("a") != 0 {
		t.Fatalf("at the bound: a1 dup? b1 remembered? evicted a %d b %d", evicted("a"), evicted("b"))
	}
	// a pays for its own: its oldest goes.
	send(t0+3, "a", "a5")
	if !send(t0+3, "a", "a2") || send(t0+3, "a", "a1") || evicted("a") != 2 {
		t.Fatalf("a's oldest kept past the bound (evicted %d)", evicted("a"))
	}
	if live, _ := m.DedupIDs(); live != 4 {
		t.Fatalf("dedup ids %d, want the bound, 4", live)
	}

	snap := m.AppendSnapshot(nil)
	// A minute on, a's ids have expired (a keeps them in its table, quiet), and c's are
	// remembered again; deleting a frees nothing more (its ids are counted out already).
	later := t0 + time.Minute.Milliseconds() + 10
	send(later, "c", "c1")
	send(later, "c", "c2")
	if !send(later, "c", "c1") {
		t.Fatal("c1 forgotten after a's ids expired")
	}
	if live, _ := m.DedupIDs(); live != 2 {
		t.Fatalf("after expiry: %d ids, want c's 2", live)
	}
	if err := m.DeleteQueue(later, s, "c", true); err != nil {
		t.Fatal(err)
	}
	if live, _ := m.DedupIDs(); live != 0 {
		t.Fatalf("after deleting c: %d ids", live)
	}

	// The same records replayed (through their encoding), and the snapshot restored then
	// fed the records after it, agree with the live machine.
	replayed := New()
	for _, r := range s.recs {
		dec, err := DecodeRecord(r.AppendTo(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.Apply(dec); err != nil {
			t.Fatal(err)
		}
	}
	restored, err := Restore(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if live, limit := restored.DedupIDs(); live != 4 || limit != 4 {
		t.Fatalf("restored: %d of %d", live, limit)
	}
	n := 0
	for i, r := range s.recs {
		if r.Time() >= later && n == 0 {
			n = i
		}
	}
	for _, r := range s.recs[n:] {
		if err := restored.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	for name, other := range map[string]*Machine{"replayed": replayed, "restored": restored} {
		if !bytes.Equal(other.AppendSnapshot(nil), m.AppendSnapshot(nil)) {
			t.Errorf("%s machine's state differs", name)
		}
		if live, _ := other.DedupIDs(); live != 0 {
			t.Errorf("%s machine counts %d ids", name, live)
		}
	}
}

// A redrive back to the source finds it by name when the source was deleted and created
// again: the dead letter goes to the queue that has its name now.
func TestRedriveFindsARecreatedSourceByName(t *testing.T) {
	m, s := newMachine(t, "orders", nil)
	ids := sendBodies(t, m, s, t0, "orders", "", "poison")
	_, ls := receiveBodies(t, m, s, t0, "orders", 1, 1000)
	if _, err := m.DeadLetter(t0, s, "orders", ls, "poison", ""); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteQueue(t0, s, "orders", true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutQueue(t0+1, s, "orders", testConfig("orders")); err != nil {
		t.Fatal(err)
	}
	if got, err := m.RedriveTargets(t0+1, RedriveSpec{Source: "orders-dlq"}); err != nil || len(got) != 1 || got[0] != "orders" {
		t.Fatalf("targets: %v %v", got, err)
	}
	task, err := m.StartRedrive(t0+1, s, RedriveSpec{Source: "orders-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := m.RedriveStep(t0+1, s, task.ID, 10); err != nil || st.Moved != 1 {
		t.Fatalf("step: %+v %v", st, err)
	}
	if got, _ := m.Peek(t0+1, "orders", 0, 10); len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("the recreated source holds %+v", got)
	}
}
