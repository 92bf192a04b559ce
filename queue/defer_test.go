package queue

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// replayEqual checks that replaying s's records rebuilds m's state, and that m's
// snapshot restores to the same bytes.
func replayEqual(t *testing.T, m *Machine, s *memSink) {
	t.Helper()
	snap := m.AppendSnapshot(nil)
	r, err := Restore(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.AppendSnapshot(nil), snap) {
		t.Fatal("restored state differs")
	}
	replayed := New()
	for _, rec := range s.recs {
		d, err := DecodeRecord(rec.AppendTo(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.Apply(d); err != nil {
			t.Fatalf("replay %s: %v", d.Kind(), err)
		}
	}
	if !bytes.Equal(replayed.AppendSnapshot(nil), snap) {
		t.Fatal("replayed state differs")
	}
}

func peekState(t *testing.T, m *Machine, now int64, q string, id uint64) MessageInfo {
	t.Helper()
	mi, err := m.Message(now, q, id)
	if err != nil {
		t.Fatal(err)
	}
	return mi
}

// TestDeferTakesTheHeadOutOfItsGroup: deferring an ordered group's head ends its lease
// and lets the group move on; no receive returns the deferred message; a fetch by id
// leases it again (a delivery); an ack settles it. Stats and peek show it deferred, with
// its group's key, and a restart keeps all of it.
func TestDeferTakesTheHeadOutOfItsGroup(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	ids := sendBodies(t, m, s, t0, "q", "order-7", "payment", "shipping")
	_, ls := receiveBodies(t, m, s, t0+1, "q", 1, 10_000)
	if got, _ := receiveBodies(t, m, s, t0+2, "q", 10, 10_000); len(got) != 0 {
		t.Fatalf("the held group gave %v", got)
	}
	errs, err := m.Defer(t0+3, s, "q", []Lease{ls[0], ls[0]})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], ErrReceiptStale) {
		t.Fatalf("defer: %v %v", errs, err)
	}
	if k := s.recs[len(s.recs)-1].Kind(); k != KindDefer {
		t.Fatalf("last record %s, want defer", k)
	}
	// The group moved on: shipping is next, and payment stays aside.
	got, ls2 := receiveBodies(t, m, s, t0+4, "q", 10, 10_000)
	if strings.Join(got, ",") != "shipping" {
		t.Fatalf("after deferring the head: %v, want shipping", got)
	}
	mi := peekState(t, m, t0+4, "q", ids[0])
	if mi.State != StateDeferred || mi.Group != "order-7" || mi.Deliveries != 1 {
		t.Fatalf("peek of the deferred message: %+v", mi)
	}
	qi, _ := m.Queue("q")
	if qi.Stats.Deferred != 1 || qi.Stats.Deferrals != 1 || qi.Stats.InFlight != 1 || qi.Stats.Ready != 0 {
		t.Fatalf("stats: %+v", qi.Stats)
	}
	if infos, _ := m.Peek(t0+4, "q", 0, 10, StateDeferred); len(infos) != 1 || infos[0].ID != ids[0] {
		t.Fatalf("peek of deferred: %+v", infos)
	}
	replayEqual(t, m, s)

	// Only a fetch by id takes it: one of the two ids is deferred, the other is in flight.
	ds, errs, err := m.ReceiveDeferred(t0+5, s, "q", []uint64{ids[1], ids[0], ids[0]}, 2000)
	if err != nil || !errors.Is(errs[0], ErrNotDeferred) || errs[1] != nil || !errors.Is(errs[2], ErrNotDeferred) {
		t.Fatalf("fetch: %v %v", errs, err)
	}
	if d := ds[1]; d.MsgID != ids[0] || d.Epoch != 2 || d.Deadline != t0+5+2000 || d.Group != "order-7" {
		t.Fatalf("fetched delivery: %+v", d)
	}
	// It is out of its group: the group's follower is acked, and a new message of the
	// group is delivered while the fetched one is still leased.
	if errs, _ := m.Ack(t0+6, s, "q", ls2); errs[0] != nil {
		t.Fatal(errs[0])
	}
	sendBodies(t, m, s, t0+6, "q", "order-7", "invoice")
	if got, _ := receiveBodies(t, m, s, t0+7, "q", 10, 10_000); strings.Join(got, ",") != "invoice" {
		t.Fatalf("the group with its old head fetched: %v, want invoice", got)
	}
	replayEqual(t, m, s)
	if errs, _ := m.Ack(t0+8, s, "q", []Lease{ds[1].Lease}); errs[0] != nil {
		t.Fatalf("ack of the fetched message: %v", errs[0])
	}
	qi, _ = m.Queue("q")
	if qi.Stats.Deferred != 0 || qi.Stats.Acked != 2 || qi.Stats.Delivered != 4 {
		t.Fatalf("stats after ack: %+v", qi.Stats)
	}
	replayEqual(t, m, s)
}

// TestFetchedDeferredGoesBackToDeferred: a nack (whatever its delay) and an ended lease
// of a fetched deferred message return it to deferred, never to the ready set; at
// max_deliveries it is dead-lettered instead.
func TestFetchedDeferredGoesBackToDeferred(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.MaxDeliveries = 3; c.OrderedGroups = false })
	ids := sendBodies(t, m, s, t0, "q", "", "a")
	_, ls := receiveBodies(t, m, s, t0, "q", 1, 1000)
	m.Defer(t0, s, "q", ls)

	ds, errs, _ := m.ReceiveDeferred(t0+10, s, "q", ids, 1000)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if errs, _ := m.Nack(t0+20, s, "q", []NackInput{{Lease: ds[0].Lease, Delay: 500}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if mi := peekState(t, m, t0+20, "q", ids[0]); mi.State != StateDeferred || mi.Deliveries != 2 {
		t.Fatalf("after nack: %+v", mi)
	}
	if got, _ := receiveBodies(t, m, s, t0+2000, "q", 10, 1000); len(got) != 0 {
		t.Fatalf("a receive returned the nacked deferred message: %v", got)
	}
	replayEqual(t, m, s)

	// Fetched again (delivery 3 of 3), its lease ends: max_deliveries dead-letters it.
	_, errs, _ = m.ReceiveDeferred(t0+3000, s, "q", ids, 1000)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if mi := peekState(t, m, t0+3500, "q", ids[0]); mi.State != StateInFlight {
		t.Fatalf("fetched: %+v", mi)
	}
	replayEqual(t, m, s) // a snapshot with a leased deferred message
	m.Tick(t0+4000, s)
	dl, _ := m.Peek(t0+4000, "q-dlq", 0, 10)
	if len(dl) != 1 || dl[0].ID != ids[0] || dl[0].Dead.Reason != ReasonMaxDeliveries || dl[0].Dead.Deliveries != 3 || dl[0].State != StateReady {
		t.Fatalf("dead letters: %+v", dl)
	}
	qi, _ := m.Queue("q")
	if qi.Stats.Deferred != 0 || qi.Stats.InFlight != 0 {
		t.Fatalf("stats: %+v", qi.Stats)
	}
	replayEqual(t, m, s)
}

// TestFetchedDeferredLeaseEndsIntoDeferred: a lease that ends without an ack, below
// max_deliveries, leaves the message deferred.
func TestFetchedDeferredLeaseEndsIntoDeferred(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	ids := sendBodies(t, m, s, t0, "q", "g", "a")
	_, ls := receiveBodies(t, m, s, t0, "q", 1, 1000)
	m.Defer(t0, s, "q", ls)
	m.ReceiveDeferred(t0, s, "q", ids, 1000)
	if mi := peekState(t, m, t0+1000, "q", ids[0]); mi.State != StateDeferred {
		t.Fatalf("peek after the lease ended: %s, want deferred", mi.State)
	}
	m.Tick(t0+1000, s)
	if qi, _ := m.Queue("q"); qi.Stats.Deferred != 1 || qi.Stats.InFlight != 0 {
		t.Fatalf("stats: %+v", qi.Stats)
	}
	if _, errs, _ := m.ReceiveDeferred(t0+1001, s, "q", ids, -1); errs[0] != nil {
		t.Fatalf("fetch again: %v", errs[0])
	}
	replayEqual(t, m, s)
}

// TestDeferredExpiresIntoTheDeadLetterQueue: retention applies to deferred messages,
// which go to the dead-letter queue with reason expired (unlike Service Bus, where they
// wait until received); purge and delete-by-id remove them, and they count toward
// max_messages.
func TestDeferredExpiresIntoTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.Retention = time.Minute; c.MaxMessages = 2 })
	ids := sendBodies(t, m, s, t0, "q", "", "a", "b")
	_, ls := receiveBodies(t, m, s, t0, "q", 2, 1000)
	m.Defer(t0+1, s, "q", ls)
	if res, _ := m.Send(t0+2, s, "q", []SendInput{{Payload: Payload{Body: []byte("c")}, Delay: -1}}); !errors.Is(res[0].Err, ErrQueueFull) {
		t.Fatalf("a send beyond max_messages with two deferred: %v", res[0].Err)
	}
	if err := m.DeleteMessage(t0+3, s, "q", ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, errs, _ := m.ReceiveDeferred(t0+4, s, "q", ids[1:], -1); !errors.Is(errs[0], ErrNotDeferred) {
		t.Fatalf("fetch of a deleted message: %v", errs[0])
	}
	m.Tick(t0+60_000, s)
	dl, _ := m.Peek(t0+60_000, "q-dlq", 0, 10)
	if len(dl) != 1 || dl[0].ID != ids[0] || dl[0].Dead.Reason != ReasonExpired {
		t.Fatalf("dead letters after retention: %+v", dl)
	}
	replayEqual(t, m, s)

	m2, s2 := newMachine(t, "q", nil)
	sendBodies(t, m2, s2, t0, "q", "g", "a", "b")
	_, ls = receiveBodies(t, m2, s2, t0, "q", 2, 1000)
	m2.Defer(t0, s2, "q", ls)
	if n, _ := m2.Purge(t0+1, s2, "q"); n != 2 {
		t.Fatalf("purged %d", n)
	}
	if qi, _ := m2.Queue("q"); qi.Stats.Deferred != 0 || qi.Stats.Purged != 2 {
		t.Fatalf("stats after purge: %+v", qi.Stats)
	}
	replayEqual(t, m2, s2)
}

// A message deferred after its retention passed while it was leased (retention never cuts
// a live lease) expires at the next step, as a lease that ends does: the retention sweep
// had passed it by while it was leased.
func TestDeferredPastRetentionExpiresAtOnce(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.Retention = 6 * time.Second })
	ids := sendBodies(t, m, s, t0, "q", "", "a", "b")
	m.Tick(t0+5200, s)
	_, ls := receiveBodies(t, m, s, t0+5200, "q", 1, 2000)
	m.Tick(t0+6200, s) // b expires; a is leased until 7.2 s
	if errs, _ := m.Defer(t0+6200, s, "q", ls); errs[0] != nil {
		t.Fatalf("defer: %v", errs[0])
	}
	if _, errs, _ := m.ReceiveDeferred(t0+6200, s, "q", ids[:1], 1000); !errors.Is(errs[0], ErrNotDeferred) {
		t.Fatalf("fetch of a deferred message past retention: %v", errs[0])
	}
	if dl, _ := m.Peek(t0+6200, "q-dlq", 0, 10); len(dl) != 2 || dl[0].Dead.Reason != ReasonExpired || dl[1].Dead.Reason != ReasonExpired {
		t.Fatalf("dead letters: %+v", dl)
	}
	replayEqual(t, m, s)
}
