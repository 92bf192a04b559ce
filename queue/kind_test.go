package queue

import (
	"errors"
	"testing"
)

// unordered is an unordered queue's configuration with no dead-letter queue (an SQS
// standard queue's shape).
func unordered() Config {
	c := DefaultConfig()
	c.OrderedGroups = false
	c.DeadLetterQueue = NoDeadLetterQueue
	c.MaxDeliveries = 0
	return c
}

func wantConfigError(t *testing.T, err error, field string) {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("got %v, want a ConfigError on %s", err, field)
	}
}

// TestOrderedQueueNeedsOrderedDeadLetterQueue: the kind rule is checked on the
// configuration, against the dead-letter queue that exists, whatever the names.
func TestOrderedQueueNeedsOrderedDeadLetterQueue(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	if _, err := m.PutQueue(t0, s, "plain", unordered()); err != nil {
		t.Fatal(err)
	}

	// An ordered queue cannot dead-letter into it; nothing is created.
	ord := testConfig("ord")
	ord.DeadLetterQueue = "plain"
	n := len(s.recs)
	_, err := m.PutQueue(t0, s, "ord", ord)
	wantConfigError(t, err, "dead_letter_queue")
	if len(s.recs) != n || m.queues["ord"] != nil {
		t.Fatalf("a refused queue emitted %d records", len(s.recs)-n)
	}

	// An unordered queue can use an ordered one.
	if _, err := m.PutQueue(t0, s, "ord", testConfig("ord")); err != nil {
		t.Fatal(err)
	}
	u := unordered()
	u.DeadLetterQueue, u.MaxDeliveries = "ord", 3
	if _, err := m.PutQueue(t0, s, "u", u); err != nil {
		t.Fatalf("unordered queue with an ordered dead-letter queue: %v", err)
	}

	// A dead-letter queue made for a queue has its kind.
	u2 := unordered()
	u2.DeadLetterQueue, u2.MaxDeliveries = "u2-dlq", 3
	if _, err := m.PutQueue(t0, s, "u2", u2); err != nil {
		t.Fatal(err)
	}
	if m.queues["u2-dlq"].cfg.OrderedGroups || !m.queues["ord-dlq"].cfg.OrderedGroups {
		t.Fatal("an auto-created dead-letter queue does not have its source's kind")
	}

	// Changing an ordered queue's dead-letter queue to an unordered one is refused too.
	moved := testConfig("ord")
	moved.DeadLetterQueue = "plain"
	_, err = m.PutQueue(t0, s, "ord", moved)
	wantConfigError(t, err, "dead_letter_queue")

	// A pairing that exists already (its dead-letter queue deleted and made again
	// unordered) does not stop other changes of the queue.
	if err := m.DeleteQueue(t0, s, "ord-dlq", true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutQueue(t0, s, "ord-dlq", unordered()); err != nil {
		t.Fatal(err)
	}
	other := testConfig("ord")
	other.VisibilityTimeout *= 2
	if _, err := m.PutQueue(t0, s, "ord", other); err != nil {
		t.Fatalf("changing the visibility of a queue whose pairing exists: %v", err)
	}
}

func TestRedriveStaysWithinKind(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	for name, c := range map[string]Config{"ord": testConfig("ord"), "ord2": testConfig("ord2"), "plain": unordered()} {
		if _, err := m.PutQueue(t0, s, name, c); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.StartRedrive(t0, s, RedriveSpec{Source: "ord-dlq", Target: "plain"})
	wantConfigError(t, err, "to")
	_, err = m.StartRedrive(t0, s, RedriveSpec{Source: "plain", Target: "ord"})
	wantConfigError(t, err, "to")
	if _, err := m.StartRedrive(t0, s, RedriveSpec{Source: "ord-dlq", Target: "ord2"}); err != nil {
		t.Fatalf("redrive between ordered queues: %v", err)
	}
}

// TestCoreIsNoGrammar: the core takes names and kinds that the fronts' rules refuse
// (a dot in the middle, a suffix that says FIFO on an unordered queue): those rules are
// the fronts' (internal/names, applied by the broker).
func TestCoreIsNoGrammar(t *testing.T) {
	t.Parallel()
	m, s := newTestMachine()
	c := testConfig("a.b")
	if _, err := m.PutQueue(t0, s, "a.b", c); err != nil {
		t.Fatalf("a dotted name: %v", err)
	}
	if _, err := m.PutQueue(t0, s, "x.fifo", unordered()); err != nil {
		t.Fatalf("an unordered queue named like a FIFO one: %v", err)
	}
	d := testConfig("y")
	d.DeadLetterQueue = "y-dlq.fifo"
	if _, err := m.PutQueue(t0, s, "y", d); err != nil {
		t.Fatalf("a FIFO-named dead-letter queue for another name: %v", err)
	}
	var ne *NameError
	if _, err := m.PutQueue(t0, s, "a\x00b", testConfig("a")); !errors.As(err, &ne) {
		t.Fatalf("a control character: %v", err)
	}
}
