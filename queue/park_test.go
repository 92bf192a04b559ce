package queue

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func parkMachine(t *testing.T) (*Machine, *memSink, *[]Release) {
	t.Helper()
	m, s := newMachine(t, "q", func(c *Config) { c.OnDeadLetter = ParkGroup })
	var log []Release
	m.SetReleaseLog(func(r Release) { log = append(log, r) })
	return m, s, &log
}

// deadLetterHead receives the next message of q (a group's head) and dead-letters it.
func deadLetterHead(t *testing.T, m *Machine, s Sink, now int64, want string) {
	t.Helper()
	bodies, ls := receiveBodies(t, m, s, now, "q", 1, 10_000)
	if len(bodies) != 1 || bodies[0] != want {
		t.Fatalf("receive before dead-lettering: %v, want %s", bodies, want)
	}
	if errs, err := m.DeadLetter(now, s, "q", ls, "bad-input", "field x"); err != nil || errs[0] != nil {
		t.Fatalf("dead-letter: %v %v", errs, err)
	}
}

func TestParkGroupNeedsAnOrderedQueueWithADeadLetterQueue(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	for _, edit := range []func(*Config){
		func(c *Config) { c.OrderedGroups = false },
		func(c *Config) { c.DeadLetterQueue = NoDeadLetterQueue; c.MaxDeliveries = 0 },
	} {
		cfg := testConfig("p")
		cfg.OnDeadLetter = ParkGroup
		edit(&cfg)
		var ce *ConfigError
		if _, err := m.PutQueue(t0, s, "p", cfg); !errors.As(err, &ce) || ce.Field != "on_dead_letter" {
			t.Fatalf("PutQueue %+v: %v, want a ConfigError on on_dead_letter", cfg, err)
		}
	}
	if len(s.recs) != 0 || len(m.queues) != 0 {
		t.Fatalf("a refused configuration changed state: %d records", len(s.recs))
	}
	if _, err := ParseDeadLetterAction("park"); err == nil {
		t.Fatal("ParseDeadLetterAction accepted park")
	}
}

// Dead-lettering a head parks its group: no receive gets the rest (other groups and
// ungrouped messages flow), sends join the tail, explain and Parked say behind what.
// Redriving the blocker back puts it first, then the rest in order; a restart (snapshot
// and replay) keeps all of it, the group's order included.
func TestParkedGroupWaitsForItsDeadLetterRedrivenBack(t *testing.T) {
	t.Parallel()
	m, s, log := parkMachine(t)
	a := sendBodies(t, m, s, t0, "q", "alice", "a1", "a2")
	sendBodies(t, m, s, t0, "q", "", "x")
	deadLetterHead(t, m, s, t0+1, "a1")
	a = append(a, sendBodies(t, m, s, t0+2, "q", "alice", "a3")...)
	if bodies, ls := receiveBodies(t, m, s, t0+3, "q", 10, 10_000); !slices.Equal(bodies, []string{"x"}) {
		t.Fatalf("a parked group gave %v", bodies)
	} else if errs, _ := m.Ack(t0+3, s, "q", ls); errs[0] != nil {
		t.Fatal(errs[0])
	}
	ps, err := m.Parked("q")
	if err != nil || len(ps) != 1 || ps[0] != (ParkedGroup{Group: "alice", Blocker: a[0], DLQ: "q-dlq", Since: t0 + 1, Messages: 2}) {
		t.Fatalf("parked: %+v %v", ps, err)
	}
	ex := explainOf(t, m, t0+3, "q", a[1])
	if ex.Status != StatusParked || ex.Blocker == nil || ex.Blocker.ID != a[0] || ex.To != "q-dlq" || ex.At != t0+1 || !strings.Contains(ex.Summary, "Parked behind dead letter "+FormatID(a[0])) {
		t.Fatalf("explain a2: %+v", ex)
	}
	if qi, _ := m.Queue("q"); qi.Stats.ParkedGroups != 1 {
		t.Fatalf("stats: %d parked groups", qi.Stats.ParkedGroups)
	}
	replayEqual(t, m, s)

	task, err := m.StartRedrive(t0+4, s, RedriveSpec{Source: "q-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := m.RedriveStep(t0+4, s, task.ID, 10); err != nil || st.Moved != 1 || !st.Done {
		t.Fatalf("redrive: %+v %v", st, err)
	}
	if ps, _ := m.Parked("q"); len(ps) != 0 {
		t.Fatalf("still parked after its blocker came back: %+v", ps)
	}
	if len(*log) != 0 {
		t.Fatalf("a redrive back logged a release: %+v", *log)
	}
	replayEqual(t, m, s) // the group's order (blocker first) survives a snapshot
	for _, want := range []string{"a1", "a2", "a3"} {
		bodies, ls := receiveBodies(t, m, s, t0+5, "q", 1, 10_000)
		if !slices.Equal(bodies, []string{want}) {
			t.Fatalf("after the redrive got %v, want %s", bodies, want)
		}
		if errs, _ := m.Ack(t0+5, s, "q", ls); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
}

// An operator's release frees the group at once (the dead letter stays); a second
// release is ErrNotParked and logs nothing.
func TestReleaseParkedGroupByHand(t *testing.T) {
	t.Parallel()
	m, s, _ := parkMachine(t)
	sendBodies(t, m, s, t0, "q", "alice", "a1", "a2")
	deadLetterHead(t, m, s, t0+1, "a1")
	if err := m.ReleaseGroup(t0+2, s, "q", "alice"); err != nil {
		t.Fatal(err)
	}
	before := len(s.recs)
	if err := m.ReleaseGroup(t0+2, s, "q", "alice"); !errors.Is(err, ErrNotParked) || len(s.recs) != before {
		t.Fatalf("second release: %v (%d records)", err, len(s.recs)-before)
	}
	if bodies, _ := receiveBodies(t, m, s, t0+3, "q", 10, 10_000); !slices.Equal(bodies, []string{"a2"}) {
		t.Fatalf("after release: %v", bodies)
	}
	if dl, _ := m.Peek(t0+3, "q-dlq", 0, 10); len(dl) != 1 {
		t.Fatalf("the dead letter left with the release: %+v", dl)
	}
	replayEqual(t, m, s)
}

// A blocker that leaves the dead-letter queue otherwise (deleted here, purged, expired,
// redriven elsewhere) releases its group, with a line for the log: never parked behind
// nothing. An empty parked group stays parked for what is sent next.
func TestBlockerLeavingTheDeadLetterQueueReleases(t *testing.T) {
	t.Parallel()
	m, s, log := parkMachine(t)
	a := sendBodies(t, m, s, t0, "q", "alice", "a1")
	deadLetterHead(t, m, s, t0+1, "a1")
	sendBodies(t, m, s, t0+2, "q", "alice", "a2")
	if bodies, _ := receiveBodies(t, m, s, t0+3, "q", 10, 10_000); len(bodies) != 0 {
		t.Fatalf("an emptied parked group did not hold what came after: %v", bodies)
	}
	if err := m.DeleteMessage(t0+4, s, "q-dlq", a[0]); err != nil {
		t.Fatal(err)
	}
	if len(*log) != 1 || (*log)[0].Group != "alice" || (*log)[0].Blocker != a[0] || !strings.Contains((*log)[0].Why, "deleted") {
		t.Fatalf("release log: %+v", *log)
	}
	if bodies, _ := receiveBodies(t, m, s, t0+5, "q", 10, 10_000); !slices.Equal(bodies, []string{"a2"}) {
		t.Fatalf("after the blocker's delete: %v", bodies)
	}
	replayEqual(t, m, s)

	// Purged: the same.
	sendBodies(t, m, s, t0+6, "q", "bob", "b1", "b2")
	deadLetterHead(t, m, s, t0+7, "b1")
	if _, err := m.Purge(t0+8, s, "q-dlq"); err != nil {
		t.Fatal(err)
	}
	if ps, _ := m.Parked("q"); len(ps) != 0 || len(*log) != 2 || !strings.Contains((*log)[1].Why, "purged") {
		t.Fatalf("after purge: %+v %+v", ps, *log)
	}
}

// Switching on_dead_letter back to move_on releases every parked group.
func TestMoveOnReleasesParkedGroups(t *testing.T) {
	t.Parallel()
	m, s, log := parkMachine(t)
	sendBodies(t, m, s, t0, "q", "alice", "a1", "a2")
	deadLetterHead(t, m, s, t0+1, "a1")
	cfg := testConfig("q")
	if _, err := m.PutQueue(t0+2, s, "q", cfg); err != nil {
		t.Fatal(err)
	}
	if ps, _ := m.Parked("q"); len(ps) != 0 || len(*log) != 1 {
		t.Fatalf("after move_on: %+v %+v", ps, *log)
	}
	if bodies, _ := receiveBodies(t, m, s, t0+3, "q", 10, 10_000); !slices.Equal(bodies, []string{"a2"}) {
		t.Fatalf("after move_on: %v", bodies)
	}
	replayEqual(t, m, s)
}

// The two records park group adds decode to what was written: a queue_put whose
// configuration parks is a queue_put2 (a move_on one keeps queue_put's bytes), and a
// queue_put2 without on_dead_letter is refused as not canonical.
func TestParkRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	cfg := testConfig("q")
	cfg.OnDeadLetter = ParkGroup
	for _, r := range []Record{
		&QueuePutRecord{Now: t0, QueueID: 2, Name: "q", Config: cfg},
		&GroupReleaseRecord{Now: t0, QueueID: 2, Group: "alice"},
	} {
		b := r.AppendTo(nil)
		d, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", r.Kind(), err)
		}
		if d.Kind() != r.Kind() || !bytes.Equal(d.AppendTo(nil), b) {
			t.Fatalf("%s decoded to %s %+v", r.Kind(), d.Kind(), d)
		}
	}
	if k := (&QueuePutRecord{Config: testConfig("q")}).Kind(); k != KindQueuePut {
		t.Fatalf("a move_on queue_put is %s", k)
	}
	b := (&QueuePutRecord{Now: t0, QueueID: 2, Name: "q", Config: cfg}).AppendTo(nil)
	b[len(b)-1] = byte(MoveOn)
	if _, err := DecodeRecord(b); err == nil {
		t.Fatal("a queue_put2 without on_dead_letter decoded")
	}
}
