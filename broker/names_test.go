package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

// TestPutQueueAppliesTheFrontsNames: the broker, which every front and in-process user
// goes through, applies the name grammar and the rules that tie a .fifo name to a kind,
// which the machine itself no longer knows.
func TestPutQueueAppliesTheFrontsNames(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Dir: t.TempDir(), Clock: fakeClock()})
	defer b.Close()
	wantConfig := func(err error, field string) {
		t.Helper()
		var ce *queue.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Fatalf("got %v, want a ConfigError on %s", err, field)
		}
	}

	// The grammar: the machine would take a dotted name; the broker does not.
	_, _, err := b.PutQueue(ctx, "a.b", nil)
	var ne *queue.NameError
	if !errors.As(err, &ne) || ne.Rule != names.Rule {
		t.Fatalf("a.b: %v, want the grammar's NameError", err)
	}

	// Defaults: the dead-letter queue named by the fronts' rule, with the source's kind.
	info, created, err := b.PutQueue(ctx, "jobs.fifo", nil)
	if err != nil || !created {
		t.Fatalf("jobs.fifo: %v (created %v)", err, created)
	}
	if !info.Config.OrderedGroups || info.Config.DeadLetterQueue != "jobs-dlq.fifo" {
		t.Fatalf("jobs.fifo: ordered %v, dead-letter queue %q", info.Config.OrderedGroups, info.Config.DeadLetterQueue)
	}
	if d, err := b.QueueConfig("jobs-dlq.fifo"); err != nil || !d.Config.OrderedGroups {
		t.Fatalf("jobs-dlq.fifo: %+v %v", d.Config, err)
	}
	mustQueue(t, b, "plain", nil)
	if qi, _ := b.QueueConfig("plain"); qi.Config.DeadLetterQueue != "plain-dlq" {
		t.Fatalf("plain's dead-letter queue %q", qi.Config.DeadLetterQueue)
	}

	// The kind a .fifo name means, at creation: nothing is made.
	_, _, err = b.PutQueue(ctx, "x.fifo", func(c *queue.Config, _ bool) error { c.OrderedGroups = false; return nil })
	wantConfig(err, "ordered_groups")
	for _, q := range []string{"x.fifo", "x-dlq.fifo"} {
		if _, err := b.QueueConfig(q); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("%s exists after a refused create: %v", q, err)
		}
	}

	// Pairing by suffix.
	_, _, err = b.PutQueue(ctx, "plain", func(c *queue.Config, _ bool) error { c.DeadLetterQueue = "jobs-dlq.fifo"; return nil })
	wantConfig(err, "dead_letter_queue")
	_, _, err = b.PutQueue(ctx, "jobs.fifo", func(c *queue.Config, _ bool) error { c.DeadLetterQueue = "plain-dlq"; return nil })
	wantConfig(err, "dead_letter_queue")
	_, _, err = b.PutQueue(ctx, strings.Repeat("a", 77), nil)
	wantConfig(err, "dead_letter_queue")

	// Redrive by suffix: plain-dlq and jobs.fifo are both ordered, which the machine
	// allows, but one is FIFO and the other standard.
	_, err = b.StartRedrive(ctx, queue.RedriveSpec{Source: "plain-dlq", Target: "jobs.fifo"})
	wantConfig(err, "to")
	var ce *queue.ConfigError
	if errors.As(err, &ce) && !strings.Contains(ce.Reason, "not both FIFO or both standard") {
		t.Fatalf("redrive refused in other words: %v", err)
	}
	// A missing target is still reported as missing.
	if _, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "plain-dlq", Target: "gone.fifo"}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Fatalf("redrive into a missing queue: %v", err)
	}
	if _, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "plain-dlq", Target: "plain"}); err != nil {
		t.Fatalf("redrive between standard queues: %v", err)
	}
}
