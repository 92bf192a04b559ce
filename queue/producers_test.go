package queue

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func msgs(bodies ...string) []SendInput {
	out := make([]SendInput, len(bodies))
	for i, b := range bodies {
		out[i] = SendInput{Payload: Payload{Body: []byte(b)}, Delay: -1}
	}
	return out
}

// A producer's request answered once is answered again with the same ids, emitting
// nothing and sending nothing; other requests of the producer, and other producers,
// send as usual; a sequence reused on another queue, or older than the window, is
// refused.
func TestSendFromAnswersARetryWithTheOriginal(t *testing.T) {
	m, s := newMachine(t, "jobs", nil)
	if _, err := m.PutQueue(t0, s, "other", testConfig("other")); err != nil {
		t.Fatal(err)
	}
	first, repeated, err := m.SendFrom(t0, s, "jobs", "p1", 7, msgs("a", "b"))
	if err != nil || repeated || len(first) != 2 {
		t.Fatalf("first: %v %v %v", first, repeated, err)
	}
	before := len(s.recs)
	again, repeated, err := m.SendFrom(t0+5, s, "jobs", "p1", 7, msgs("a", "b"))
	if err != nil || !repeated || len(s.recs) != before {
		t.Fatalf("retry: repeated %v, err %v, %d records emitted", repeated, err, len(s.recs)-before)
	}
	for i := range first {
		if again[i].ID != first[i].ID || again[i].Seq != first[i].Seq {
			t.Fatalf("retry answered %+v, the original %+v", again[i], first[i])
		}
	}
	if qi, _ := m.Queue("jobs"); qi.Stats.Ready != 2 {
		t.Fatalf("%d ready after a retried send", qi.Stats.Ready)
	}
	if _, rep, _ := m.SendFrom(t0, s, "jobs", "p2", 7, msgs("c")); rep {
		t.Fatal("another producer's sequence 7 was taken for p1's")
	}
	if _, _, err := m.SendFrom(t0, s, "other", "p1", 7, msgs("a")); !errors.Is(err, ErrSequenceReused) {
		t.Fatalf("sequence 7 on another queue: %v", err)
	}
	for seq := uint64(100); seq < 100+ProducerWindow; seq++ {
		if _, _, err := m.SendFrom(t0, s, "jobs", "p1", seq, msgs(fmt.Sprint(seq))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.SendFrom(t0, s, "jobs", "p1", 7, msgs("a")); !errors.Is(err, ErrSequenceTooOld) {
		t.Fatalf("a sequence past the window: %v", err)
	}
	for _, bad := range []struct {
		id  string
		seq uint64
	}{{"", 1}, {"p1", 0}, {string(bytes.Repeat([]byte("x"), MaxProducerIDLen+1)), 1}, {"p\x00", 1}} {
		var ie *InvalidError
		if _, _, err := m.SendFrom(t0, s, "jobs", bad.id, bad.seq, msgs("x")); !errors.As(err, &ie) {
			t.Fatalf("producer %q seq %d: %v", bad.id, bad.seq, err)
		}
	}
}

// The answers are replicated state: a machine that replays the records, or restores a
// snapshot, answers a retry as the original did, and forgets idle producers alike.
func TestProducersSurviveReplayAndSnapshot(t *testing.T) {
	m, s := newMachine(t, "jobs", nil)
	first, _, err := m.SendFrom(t0, s, "jobs", "p1", 1, msgs("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.SendFrom(t0+10, s, "jobs", "idle", 1, msgs("c")); err != nil {
		t.Fatal(err)
	}
	replayed := New()
	for _, r := range s.recs {
		if err := replayed.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	restored, err := Restore(m.AppendSnapshot(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(replayed.AppendSnapshot(nil), m.AppendSnapshot(nil)) || !bytes.Equal(restored.AppendSnapshot(nil), m.AppendSnapshot(nil)) {
		t.Fatal("replayed or restored producers differ from the original's")
	}
	for _, x := range []*Machine{replayed, restored} {
		got, repeated, err := x.SendFrom(t0+20, &memSink{}, "jobs", "p1", 1, msgs("a", "b"))
		if err != nil || !repeated || got[0].ID != first[0].ID || got[1].ID != first[1].ID {
			t.Fatalf("a retry on a rebuilt machine: %v %v %v", got, repeated, err)
		}
	}
	// A day later, the next answered request forgets the producers idle since.
	later := t0 + ProducerIdle + producerSweep
	if _, _, err := m.SendFrom(later, s, "jobs", "p1", 2, msgs("d")); err != nil {
		t.Fatal(err)
	}
	if m.Producers() != 1 {
		t.Fatalf("%d producers remembered a day later, want only the one that sent", m.Producers())
	}
}
