package queue

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// fairQueue is an unordered queue (an SQS standard queue's shape) named q.
func fairQueue(t *testing.T) (*Machine, *memSink) {
	t.Helper()
	m, s := newTestMachine()
	if _, err := m.PutQueue(t0, s, "q", unordered()); err != nil {
		t.Fatal(err)
	}
	return m, s
}

func sendNumbered(t *testing.T, m *Machine, s Sink, now int64, group string, from, n int) {
	t.Helper()
	const batch = 1000
	for i := from; i < from+n; i += batch {
		in := make([]SendInput, 0, batch)
		for j := i; j < min(i+batch, from+n); j++ {
			in = append(in, SendInput{Payload: Payload{Body: []byte(fmt.Sprintf("%s-%d", group, j)), Group: group}, Delay: -1})
		}
		res, err := m.Send(now, s, "q", in)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// TestFairDeliveryServesTheQuietTenant is the test, on the machine's own clock
// (time is passed in): tenant A has 100,000 messages ready and a consumer is working on
// some of them; one message of tenant B is sent after them; the next receive returns
// B's message, not A's 101st.
func TestFairDeliveryServesTheQuietTenant(t *testing.T) {
	t.Parallel()
	m, s := fairQueue(t)
	sendNumbered(t, m, s, t0, "A", 0, 100_000)
	got, _ := receiveBodies(t, m, s, t0+10, "q", 10, 30_000)
	if strings.Join(got, ",") != "A-0,A-1,A-2,A-3,A-4,A-5,A-6,A-7,A-8,A-9" {
		t.Fatalf("first receive: %v", got)
	}
	sendNumbered(t, m, s, t0+20, "B", 0, 1)
	got, _ = receiveBodies(t, m, s, t0+30, "q", 1, 30_000)
	if len(got) != 1 || got[0] != "B-0" {
		t.Fatalf("the receive after B's send returned %v, want B-0", got)
	}
	got, _ = receiveBodies(t, m, s, t0+40, "q", 1, 30_000)
	if len(got) != 1 || got[0] != "A-10" {
		t.Fatalf("then %v, want A-10", got)
	}
}

// TestFairDeliveryWithinOneReceive: what a receive selects counts as in flight for the
// rest of its selection, so one receive of 10 after 100 of A and 1 of B takes B's second
// (A's head is older; then A has one in flight and B none), not A-0…A-9 as arrival order
// would. Messages without a group are each a tenant of their own, and a tenant with
// nothing in flight goes before one with something, whatever their ages.
func TestFairDeliveryWithinOneReceive(t *testing.T) {
	t.Parallel()
	m, s := fairQueue(t)
	sendNumbered(t, m, s, t0, "A", 0, 100)
	sendNumbered(t, m, s, t0, "B", 0, 1)
	got, _ := receiveBodies(t, m, s, t0+1, "q", 10, 30_000)
	if want := "A-0,B-0,A-1,A-2,A-3,A-4,A-5,A-6,A-7,A-8"; strings.Join(got, ",") != want {
		t.Fatalf("receive of 10: %v, want %s", got, want)
	}

	// A has 9 in flight, B 1; C's two and an ungrouped message arrive last.
	sendNumbered(t, m, s, t0+2, "C", 0, 2)
	sendNumbered(t, m, s, t0+2, "", 0, 1)
	sendNumbered(t, m, s, t0+2, "B", 1, 1)
	got, _ = receiveBodies(t, m, s, t0+3, "q", 5, 30_000)
	// C-0 (nothing in flight, and older than the ungrouped one), the ungrouped one (its
	// own tenant, nothing in flight), C-1 (C and B have one each, C's head is older),
	// B-1 (one, against A's nine), A-9.
	if want := "C-0,-0,C-1,B-1,A-9"; strings.Join(got, ",") != want {
		t.Fatalf("second receive: %v, want %s", got, want)
	}
}

// TestFairDeliveryAfterRestart: the fair order is rebuilt from a snapshot and from the
// log alike (it is state, not history), so a restored machine and a replayed one answer
// the next receive as the live one does.
func TestFairDeliveryAfterRestart(t *testing.T) {
	t.Parallel()
	m, s := fairQueue(t)
	sendNumbered(t, m, s, t0, "A", 0, 50)
	receiveBodies(t, m, s, t0+1, "q", 5, 30_000)
	sendNumbered(t, m, s, t0+2, "B", 0, 3)
	sendNumbered(t, m, s, t0+2, "", 0, 2)
	snap := m.AppendSnapshot(nil)
	restored, err := Restore(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	replayed := New()
	for _, r := range s.recs {
		if err := replayed.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(replayed.AppendSnapshot(nil), snap) {
		t.Fatal("replayed state differs")
	}
	var want []uint64
	for i, x := range []*Machine{m, restored, replayed} {
		ds, err := x.Receive(t0+3, &memSink{}, "q", 8, 30_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := deliveryIDs(ds)
		if i == 0 {
			want = got
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("machine %d received %v, the live one %v", i, got, want)
		}
	}
}
