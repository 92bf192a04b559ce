package nativeapi_test

import (
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// TestFIFONamesAreFIFOQueues: a .fifo name is a FIFO queue natively as through SQS, so
// its groups are ordered and its dead-letter queue is FIFO; asking for anything else is
// refused with the field named, and nothing is created.
func TestFIFONamesAreFIFOQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	before := e.snapshot()

	r := e.do("PUT", "/v1/queues/x.fifo", `{"ordered_groups": false}`)
	expectError(t, r, api.CodeInvalidConfig, "ordered_groups", "x.fifo", "FIFO queue", "in order")
	e.unchanged(t, before, "an unordered .fifo queue")

	q := e.putQueue("x.fifo", `{}`)
	if !*q.Config.OrderedGroups || *q.Config.DeadLetterQueue != "x-dlq.fifo" {
		t.Fatalf("x.fifo: ordered_groups %v, dead_letter_queue %q", *q.Config.OrderedGroups, *q.Config.DeadLetterQueue)
	}
	if d := e.queue("x-dlq.fifo"); !*d.Config.OrderedGroups {
		t.Fatal("x-dlq.fifo is not ordered")
	}
	// Saying ordered_groups true, as it is, is fine.
	e.putQueue("x.fifo", `{"ordered_groups": true}`)

	// An ordered queue's dead-letter queue is ordered, whatever the names.
	e.putQueue("loose", `{"ordered_groups": false, "dead_letter_queue": "none"}`)
	before = e.snapshot()
	r = e.do("PUT", "/v1/queues/strict", `{"dead_letter_queue": "loose"}`)
	expectError(t, r, api.CodeInvalidConfig, "dead_letter_queue", "loose", "ordered")
	e.unchanged(t, before, "an ordered queue dead-lettering into an unordered one")
	// The other way round is fine: an unordered queue may use an ordered one.
	e.putQueue("strict", `{}`)
	e.putQueue("loose2", `{"ordered_groups": false, "dead_letter_queue": "strict"}`)
}

// TestInvalidNamesAnswerAsBefore: the grammar moved out of the queue core, and a name
// outside it is answered exactly as before.
func TestInvalidNamesAnswerAsBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	for _, name := range []string{"bad.name", ".fifo", strings.Repeat("x", 81)} {
		r := e.do("PUT", "/v1/queues/"+name, `{}`)
		got := expectError(t, r, api.CodeInvalidName)
		want := `invalid queue name "` + name + `": a name is 1 to 80 characters from A-Z a-z 0-9 _ -, optionally ending in .fifo`
		if got.Message != want {
			t.Errorf("PUT %s:\n got %s\nwant %s", name, got.Message, want)
		}
	}
	r := e.do("PUT", "/v1/queues/q", `{"dead_letter_queue": "a.b"}`)
	got := expectError(t, r, api.CodeInvalidConfig)
	const want = `dead_letter_queue: "a.b" is not a valid queue name (1 to 80 characters from A-Z a-z 0-9 _ -, optionally ending in .fifo); for a long queue name give dead_letter_queue explicitly`
	if got.Message != want {
		t.Errorf("dead_letter_queue a.b:\n got %s\nwant %s", got.Message, want)
	}
	r = e.do("PUT", "/v1/queues/q", `{"dead_letter_queue": "q-dlq.fifo"}`)
	got = expectError(t, r, api.CodeInvalidConfig)
	const pairing = `dead_letter_queue: a FIFO queue needs a FIFO dead-letter queue and a standard queue a standard one ("q", "q-dlq.fifo")`
	if got.Message != pairing {
		t.Errorf("dead_letter_queue q-dlq.fifo:\n got %s\nwant %s", got.Message, pairing)
	}

	// Redrive between a FIFO and a standard queue, both ordered, answers as before.
	e.putQueue("s", `{}`)
	e.putQueue("f.fifo", `{}`)
	r = e.do("POST", "/v1/queues/s-dlq/redrive", `{"to": "f.fifo"}`)
	got = expectError(t, r, api.CodeInvalidConfig)
	const redrive = `to: redrive moves messages between queues of the same kind: "s-dlq" and "f.fifo" are not both FIFO or both standard`
	if got.Message != redrive {
		t.Errorf("redrive s-dlq to f.fifo:\n got %s\nwant %s", got.Message, redrive)
	}
}
