package queue

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestReceiveAndDelete: a receive-and-delete settles what it returns with one record, no
// lease; an ordered group moves on at once; it counts as delivered and
// received_and_deleted, never as acked, and the count survives a snapshot and a replay.
func TestReceiveAndDelete(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	sendBodies(t, m, s, t0, "q", "g", "g1", "g2", "g3")
	sendBodies(t, m, s, t0, "q", "", "x")
	n := len(s.recs)
	ds, _, err := m.ReceiveWith(t0+5, s, "q", ReceiveSpec{Max: 2, Visibility: -1, Delete: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.recs) != n+1 || s.recs[n].Kind() != KindDeliverDelete {
		t.Fatalf("records: %d more, last %s; want one deliver_delete", len(s.recs)-n, s.recs[len(s.recs)-1].Kind())
	}
	if len(ds) != 2 || ds[0].Deadline != 0 || ds[0].Epoch != 1 || ds[0].FirstDelivered != t0+5 || ds[0].Group != "g" {
		t.Fatalf("deliveries: %+v", ds)
	}
	// The group moved on at once: its next message is deliverable, by an ordinary receive.
	got, _ := receiveBodies(t, m, s, t0+6, "q", 10, 1000)
	if strings.Join(got, ",") != "g3,x" {
		t.Fatalf("after receive-and-delete of g1,g2: %v, want g3,x", got)
	}
	// Nothing to ack: the messages are gone (already settled), receipts or not.
	if errs, _ := m.Ack(t0+7, s, "q", []Lease{ds[0].Lease}); errs[0] != ErrAlreadySettled || !errors.Is(errs[0], ErrReceiptStale) {
		t.Fatalf("ack of a receive-and-delete's lease: %v", errs[0])
	}
	qi, _ := m.Queue("q")
	st := qi.Stats
	if st.ReceivedAndDeleted != 2 || st.Delivered != 4 || st.Acked != 0 || st.InFlight != 2 || st.Ready != 0 {
		t.Fatalf("stats: %+v", st)
	}
	snap := m.AppendSnapshot(nil)
	r, err := Restore(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if qi, _ := r.Queue("q"); qi.Stats.ReceivedAndDeleted != 2 {
		t.Fatalf("restored received_and_deleted %d", qi.Stats.ReceivedAndDeleted)
	}
	replayed := New()
	for _, rec := range s.recs {
		b := rec.AppendTo(nil)
		d, err := DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.Apply(d); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(replayed.AppendSnapshot(nil), snap) {
		t.Fatal("replayed state differs")
	}
}

// TestReceiveAndDeleteIgnoresTheInFlightLimit: nothing of a receive-and-delete stays in
// flight, so a queue at its in-flight limit still answers one.
func TestReceiveAndDeleteIgnoresTheInFlightLimit(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", nil)
	if _, err := m.SetLimits(t0, s, Limits{MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, m, s, t0, "q", "", "a", "b")
	receiveBodies(t, m, s, t0, "q", 1, 10_000)
	if _, err := m.Receive(t0, s, "q", 1, 10_000, 0); err == nil {
		t.Fatal("a receive past the in-flight limit succeeded")
	}
	ds, _, err := m.ReceiveWith(t0, s, "q", ReceiveSpec{Max: 1, Delete: true})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive-and-delete at the in-flight limit: %v %v", ds, err)
	}
}
