package consumers

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func one(t *testing.T, tb *Table, queue string, now time.Time) (c struct{ waiting, leases int }) {
	t.Helper()
	l := tb.List(queue, now)
	if len(l) != 1 {
		t.Fatalf("%d receivers of %s, want 1: %+v", len(l), queue, l)
	}
	return struct{ waiting, leases int }{l[0].Waiting, l[0].Leases}
}

// TestPollsAndLeases follows one receiver: a long poll waiting, the leases it took,
// a settle and an extend, deadlines passing, and the window after its last receive.
func TestPollsAndLeases(t *testing.T) {
	tb := New(Options{})
	w := Who{Name: "billing/42", Remote: "10.0.0.7:51000", Via: "stream"}
	r := tb.Receiving("orders", w, true, t0)
	if c := one(t, tb, "orders", t0); c.waiting != 1 || c.leases != 0 {
		t.Fatalf("during the poll: %+v", c)
	}
	r.Done([]string{"r1", "r2", "r3"}, t0.Add(30*time.Second), t0.Add(time.Second))
	if c := one(t, tb, "orders", t0.Add(time.Second)); c.waiting != 0 || c.leases != 3 {
		t.Fatalf("after the poll: %+v", c)
	}
	tb.Settled("orders", []string{"r1", "unknown"})
	tb.Extended("orders", []string{"r2"}, t0.Add(2*time.Minute))
	if c := one(t, tb, "orders", t0.Add(2*time.Second)); c.leases != 2 {
		t.Fatalf("after an ack: %+v", c)
	}
	// r3's lease ends at 30 s; r2's, extended, at 2 min.
	if c := one(t, tb, "orders", t0.Add(31*time.Second)); c.leases != 1 {
		t.Fatalf("after r3's deadline: %+v", c)
	}
	// Past the window but holding r2: still listed.
	if c := one(t, tb, "orders", t0.Add(90*time.Second)); c.leases != 1 {
		t.Fatalf("idle with a lease: %+v", c)
	}
	if l := tb.List("orders", t0.Add(2*time.Minute+time.Second)); len(l) != 0 {
		t.Fatalf("idle past the window without leases: %+v", l)
	}
	// The same client from another connection is the same receiver; without a name,
	// one per principal and host, whatever the port.
	tb.Receiving("orders", w, false, t0).Done(nil, time.Time{}, t0)
	tb.Receiving("orders", Who{Name: "billing/42", Remote: "10.0.0.7:51999", Via: "http"}, false, t0).Done(nil, time.Time{}, t0)
	tb.Receiving("orders", Who{Principal: "app", Remote: "10.0.0.8:1", Via: "sqs"}, false, t0).Done(nil, time.Time{}, t0)
	tb.Receiving("orders", Who{Principal: "app", Remote: "10.0.0.8:2", Via: "sqs"}, false, t0).Done(nil, time.Time{}, t0)
	l := tb.List("orders", t0)
	if len(l) != 2 {
		t.Fatalf("%d receivers, want billing/42 and app@10.0.0.8: %+v", len(l), l)
	}
	for _, c := range l {
		if c.Name == "billing/42" && (c.Via != "http" || c.Remote != "10.0.0.7:51999" || c.Receives != 2) {
			t.Errorf("billing/42 as last seen: %+v", c)
		}
	}
	tb.Forget("orders")
	if l := tb.List("orders", t0); len(l) != 0 {
		t.Errorf("a forgotten queue lists %+v", l)
	}
}

// TestBounded checks the bounds: receivers per queue (the one seen least lately and not
// waiting goes) and leases per receiver (counted as at least).
func TestBounded(t *testing.T) {
	tb := New(Options{MaxPerQueue: 3, MaxLeases: 2})
	waiting := tb.Receiving("q", Who{Name: "a"}, true, t0)
	for i, n := range []string{"b", "c", "d"} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		tb.Receiving("q", Who{Name: n}, false, at).Done(nil, time.Time{}, at)
	}
	names := map[string]bool{}
	for _, c := range tb.List("q", t0.Add(5*time.Second)) {
		names[c.Name] = true
	}
	if len(names) != 3 || !names["a"] || names["b"] {
		t.Errorf("kept %v; want a (waiting), c, d", names)
	}
	waiting.Done([]string{"x", "y", "z"}, t0.Add(time.Minute), t0.Add(5*time.Second))
	for _, c := range tb.List("q", t0.Add(5*time.Second)) {
		if c.Name == "a" && (c.Leases != 2 || !c.LeasesCapped || c.Received != 3) {
			t.Errorf("a's leases past the bound: %+v", c)
		}
	}
	var nilTable *Table // a server without a table records nothing
	nilTable.Receiving("q", Who{}, true, t0).Done([]string{"x"}, t0, t0)
	nilTable.Settled("q", []string{"x"})
}
