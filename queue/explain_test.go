package queue

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func explainOf(t *testing.T, m *Machine, now int64, q string, id uint64) Explanation {
	t.Helper()
	ex, err := m.Explain(now, q, id)
	if err != nil {
		t.Fatalf("explain %s: %v", FormatID(id), err)
	}
	if ex.Summary == "" {
		t.Fatalf("explain %s: no words", FormatID(id))
	}
	return ex
}

// Explain walks one ordered group's messages through each state it names, and the
// handler's error travels from the nacks into the dead letter's description.
func TestExplainStates(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "orders", func(c *Config) { c.OrderedGroups = true; c.MaxDeliveries = 2; c.BackoffBase = 0 })
	ids := sendBodies(t, m, s, t0, "orders", "alice", "a1", "a2")
	x := sendBodies(t, m, s, t0, "orders", "", "x")[0]
	if ex := explainOf(t, m, t0, "orders", ids[0]); ex.Status != StatusReady || ex.Ahead != 0 || !strings.Contains(ex.Summary, "next in line") {
		t.Fatalf("a1: %+v", ex)
	}
	// a2 waits behind its group's head; x, sent after both, has one ahead: the head
	// (a2 does not count, it waits).
	if ex := explainOf(t, m, t0, "orders", ids[1]); ex.Status != StatusGroupWait || ex.Blocker == nil || ex.Blocker.ID != ids[0] || ex.Blocker.Status != StatusReady {
		t.Fatalf("a2: %+v", ex)
	}
	if ex := explainOf(t, m, t0, "orders", x); ex.Status != StatusReady || ex.Ahead != 1 {
		t.Fatalf("x: %+v", ex)
	}
	ds, err := m.Receive(t0+10, s, "orders", 2, 5000, 0)
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if ex := explainOf(t, m, t0+10, "orders", ids[0]); ex.Status != StatusLeased || ex.Until != t0+5010 || ex.Delivery != 1 || ex.LastDelivery {
		t.Fatalf("a1 leased: %+v", ex)
	}
	// a2 was leased with its head (one run).
	if ex := explainOf(t, m, t0+10, "orders", ids[1]); ex.Status != StatusLeased {
		t.Fatalf("a2 leased: %+v", ex)
	}
	// Nack a1 with the handler's error and a delay: it is delayed, a2 stays leased, so
	// a1 (ready again later) is held by a2.
	errs, err := m.Nack(t0+20, s, "orders", []NackInput{{Lease: ds[0].Lease, Delay: 100, Error: "parse error: line 3"}})
	if err != nil || errs[0] != nil {
		t.Fatalf("nack: %v %v", errs, err)
	}
	ex := explainOf(t, m, t0+20, "orders", ids[0])
	if ex.Status != StatusDelayed || ex.Until != t0+120 || ex.History.Nacks != 1 || ex.History.LastNackDelay != 100 || ex.History.LastError != "parse error: line 3" {
		t.Fatalf("a1 nacked: %+v", ex)
	}
	if ex := explainOf(t, m, t0+200, "orders", ids[0]); ex.Status != StatusGroupWait || ex.Blocker.ID != ids[1] || ex.Blocker.Status != StatusLeased || ex.Blocker.Until != t0+5010 {
		t.Fatalf("a1 behind its leased follower: %+v", ex)
	}
	// a2 acked; a1 delivered a second time, its last; the lease runs out with no ack:
	// a dead letter described by the handler's last error.
	if errs, _ := m.Ack(t0+300, s, "orders", []Lease{ds[1].Lease}); errs[0] != nil {
		t.Fatalf("ack a2: %v", errs[0])
	}
	if ex := explainOf(t, m, t0+300, "orders", ids[1]); ex.Status != StatusGone || ex.How != GoneAcked || ex.At != t0+300 {
		t.Fatalf("a2 acked: %+v", ex)
	}
	ds2, _ := m.Receive(t0+400, s, "orders", 1, 1000, 0)
	if len(ds2) != 1 || ds2[0].MsgID != ids[0] {
		t.Fatalf("second delivery: %+v", ds2)
	}
	ex = explainOf(t, m, t0+400, "orders", ids[0])
	if ex.Status != StatusLeased || ex.Delivery != 2 || !ex.LastDelivery || ex.History.FirstDelivered != t0+10 || ex.History.LastDelivered != t0+400 {
		t.Fatalf("a1 last delivery: %+v", ex)
	}
	m.Tick(t0+1400, s)
	ex = explainOf(t, m, t0+1400, "orders", ids[0])
	if ex.Status != StatusDeadLettered || ex.To != "orders-dlq" || ex.Dead == nil || ex.Dead.Reason != ReasonMaxDeliveries || ex.Dead.Description != "parse error: line 3" {
		t.Fatalf("a1 dead-lettered: %+v", ex)
	}
	// In the dead-letter queue it is a ready dead letter, with a fresh history.
	ex = explainOf(t, m, t0+1400, "orders-dlq", ids[0])
	if ex.Status != StatusReady || ex.Dead == nil || ex.History.Deliveries != 0 || ex.History.LastError != "" || !strings.Contains(ex.Summary, "parse error") {
		t.Fatalf("a1 in the DLQ: %+v", ex)
	}
	// Purge, then gone; an id never sent is unknown.
	if _, err := m.Purge(t0+1500, s, "orders"); err != nil {
		t.Fatal(err)
	}
	if ex := explainOf(t, m, t0+1500, "orders", x); ex.Status != StatusGone || ex.How != GonePurged {
		t.Fatalf("x purged: %+v", ex)
	}
	if ex := explainOf(t, m, t0+1500, "orders", m.lastID+1); ex.Status != StatusUnknown || !strings.Contains(ex.Summary, "sent yet") {
		t.Fatalf("unsent id: %+v", ex)
	}
	if _, err := m.Explain(t0, "nope", 1); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	// The history and the ring survive a snapshot and a replay.
	snap := m.AppendSnapshot(nil)
	r, err := Restore(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	replayed := New()
	for _, rec := range s.recs {
		if err := replayed.Apply(rec); err != nil {
			t.Fatal(err)
		}
	}
	for name, mm := range map[string]*Machine{"restored": r, "replayed": replayed} {
		if !bytes.Equal(mm.AppendSnapshot(nil), snap) {
			t.Fatalf("%s state differs", name)
		}
		if ex := explainOf(t, mm, t0+1500, "orders", ids[1]); ex.How != GoneAcked {
			t.Fatalf("%s: a2: %+v", name, ex)
		}
	}
}

// "Behind N others" is exact up to ExplainExact, then says more.
func TestExplainCountsAheadBoundedly(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "deep", nil)
	bodies := make([]string, ExplainExact+50)
	for i := range bodies {
		bodies[i] = "m"
	}
	var ids []uint64
	for i := 0; i < len(bodies); i += 1000 {
		ids = append(ids, sendBodies(t, m, s, t0, "deep", "", bodies[i:min(i+1000, len(bodies))]...)...)
	}
	if ex := explainOf(t, m, t0, "deep", ids[ExplainExact]); ex.Ahead != ExplainExact || ex.AheadMore || ex.AheadAtLeast {
		t.Fatalf("exactly %d ahead: %+v", ExplainExact, ex)
	}
	ex := explainOf(t, m, t0, "deep", ids[len(ids)-1])
	if !ex.AheadMore || ex.Ahead != ExplainExact || !strings.Contains(ex.Summary, "more than 10000") {
		t.Fatalf("more than %d ahead: %+v", ExplainExact, ex)
	}
}

// Asked by dedup id: deduplicated into the original, whose own explanation follows.
func TestExplainDedup(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "d", nil)
	res, err := m.Send(t0, s, "d", []SendInput{{Payload: Payload{Body: []byte("a"), DedupID: "order-7"}, Delay: -1}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	ex, err := m.ExplainDedup(t0+1, "d", "order-7", "")
	if err != nil || ex.Status != StatusDeduplicated || ex.Into != res[0].ID || ex.Target == nil || ex.Target.Status != StatusReady {
		t.Fatalf("dedup: %+v %v", ex, err)
	}
	if ex, _ := m.ExplainDedup(t0+1, "d", "order-8", ""); ex.Status != StatusUnknown {
		t.Fatalf("unknown dedup id: %+v", ex)
	}
}

// A receipt whose message left the queue is already settled; one whose lease merely
// ended is stale; a nack's error over the bound is refused and changes nothing.
func TestAlreadySettledAndHandlerErrorBound(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	sendBodies(t, m, s, t0, "q", "", "a", "b")
	ds, _ := m.Receive(t0, s, "q", 2, 1000, 0)
	if errs, _ := m.Ack(t0+1, s, "q", []Lease{ds[0].Lease}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	errs, _ := m.Ack(t0+2, s, "q", []Lease{ds[0].Lease, ds[1].Lease})
	if errs[0] != ErrAlreadySettled || errs[1] != nil {
		t.Fatalf("ack again: %v", errs)
	}
	if !errors.Is(ErrAlreadySettled, ErrReceiptStale) {
		t.Fatal("already settled is not stale too")
	}
	sendBodies(t, m, s, t0+3, "q", "", "c")
	ds, _ = m.Receive(t0+3, s, "q", 1, 10, 0)
	if errs, _ := m.Ack(t0+20, s, "q", []Lease{ds[0].Lease}); errs[0] != ErrReceiptStale {
		t.Fatalf("ack after the lease ended: %v", errs[0])
	}
	ds, _ = m.Receive(t0+30, s, "q", 1, 1000, 0)
	n := len(s.recs)
	_, err := m.Nack(t0+31, s, "q", []NackInput{{Lease: ds[0].Lease, Delay: 0, Error: strings.Repeat("x", MaxHandlerErrorLen+1)}})
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Field != "error" || len(s.recs) != n {
		t.Fatalf("long error: %v (%d records)", err, len(s.recs)-n)
	}
}

// Explain of a deferred message: deferred since its defer record's time, in the group it
// left, fetched by id (leased, and back to deferred when that lease runs out), across a
// snapshot and a replay. The group's next message, no longer behind it, is ready and next.
func TestExplainDeferred(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.OrderedGroups = true })
	ids := sendBodies(t, m, s, t0, "q", "order-7", "payment", "shipping")
	_, ls := receiveBodies(t, m, s, t0+1, "q", 1, 10_000)
	if errs, err := m.Defer(t0+5, s, "q", ls); err != nil || errs[0] != nil {
		t.Fatalf("defer: %v %v", errs, err)
	}
	check := func(m *Machine, now int64) {
		t.Helper()
		ex := explainOf(t, m, now, "q", ids[0])
		if ex.Status != StatusDeferred || ex.At != t0+5 || ex.Group != "order-7" || ex.Status.String() != "deferred" ||
			!strings.Contains(ex.Summary, "Deferred since") || !strings.Contains(ex.Summary, "fetch it by id") {
			t.Fatalf("deferred: %+v", ex)
		}
		if ex := explainOf(t, m, now, "q", ids[1]); ex.Status != StatusReady || ex.Ahead != 0 {
			t.Fatalf("the group's next, after its deferred head: %+v", ex)
		}
	}
	check(m, t0+10)
	r, err := Restore(m.AppendSnapshot(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(r, t0+10)
	ds, errs, err := m.ReceiveDeferred(t0+20, s, "q", []uint64{ids[0]}, 1_000)
	if err != nil || errs[0] != nil || len(ds) != 1 {
		t.Fatalf("fetch: %v %v %v", ds, errs, err)
	}
	if ex := explainOf(t, m, t0+20, "q", ids[0]); ex.Status != StatusLeased || ex.Until != t0+1020 || ex.Delivery != 2 ||
		!strings.Contains(ex.Summary, "goes back to deferred") || ex.History.LastDelivered != t0+20 {
		t.Fatalf("fetched: %+v", ex)
	}
	replayEqual(t, m, s) // records and a snapshot keep the fetched lease
	// The fetched lease ran out (not yet ticked): deferred again, since its first defer.
	check(m, t0+2000)
	m.Tick(t0+2000, s)
	check(m, t0+2000)
	if r, err = Restore(m.AppendSnapshot(nil), nil); err != nil {
		t.Fatal(err)
	}
	check(r, t0+2000)
}
