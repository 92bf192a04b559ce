package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
)

// deadLetter sends bodies to queue, receives them and dead-letters them with reason.
func (h *harness) deadLetter(queue, reason string, bodies ...string) {
	h.t.Helper()
	h.send(queue, bodies...)
	ms := h.recvJSON(queue, "--max", "1000")
	if len(ms) != len(bodies) {
		h.t.Fatalf("received %d of %d", len(ms), len(bodies))
	}
	args := []string{"deadletter", queue, "--reason", reason}
	for _, m := range ms {
		args = append(args, m.Receipt)
	}
	h.ok(args...)
}

func TestDLQListAndRedrive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "orders")
	contains(t, "dlq list before any dead letter", h.ok("dlq", "list", "orders"), "orders-dlq: 0 dead letters")
	contains(t, "dlq redrive before any dead letter", h.ok("dlq", "redrive", "orders"), "nothing to redrive: orders-dlq is empty")
	h.deadLetter("orders", "poison", "m1", "m2\nwith a newline", "m3")

	out := h.ok("dlq", "list", "orders")
	contains(t, "dlq list", out, "orders-dlq: 3 dead letters\n", "ID", "REASON", "SOURCE", "DEAD-LETTERED AT", `"m2\nwith a newline"`)
	matches(t, "dlq list", out, `[0-9a-f]{16}\s+poison\s+1\s+orders\s+\d{4}-\d\d-\d\dT`)
	contains(t, "dlq list --limit", h.ok("dlq", "list", "orders", "--limit", "2"), "showing the first 2")
	lines := decodeLines[dlqLine](t, h.ok("dlq", "list", "orders", "--json"))
	if len(lines) != 3 || lines[0].Body != "m1" || lines[0].DeadLetter == nil || lines[0].DeadLetter.Reason != "poison" {
		t.Fatalf("dlq list --json: %+v", lines)
	}
	r := h.fails(1, "dlq", "list", "orders-dlq")
	contains(t, "stderr", r.err, "okiba dlq list: orders-dlq is itself the dead-letter queue of orders")

	// Redrive back to the source; progress as plain lines when stderr is not a terminal.
	r = h.runWith(runOpts{}, "dlq", "redrive", "orders")
	if r.code != 0 {
		t.Fatalf("dlq redrive: %+v", r)
	}
	contains(t, "redrive stdout", r.out, "started: 3 messages from orders-dlq", "completed: moved 3 of 3 messages")
	contains(t, "redrive stderr", r.err, "3/3 moved")
	if q := h.queue("orders"); q.Stats.Ready != 3 || q.Stats.DeadLetters != 0 {
		t.Errorf("after redrive: %+v", q.Stats)
	}
	ms := h.recvJSON("orders", "--max", "10")
	if len(ms) != 3 || ms[0].ID != lines[0].ID || ms[0].Deliveries != 1 {
		t.Errorf("redriven messages keep their id and restart their delivery count: %+v", ms)
	}

	// On a terminal the bar is redrawn in place.
	args := []string{"deadletter", "orders", "--reason", "again"}
	for _, m := range ms {
		args = append(args, m.Receipt)
	}
	h.ok(args...)
	r = h.fails(1, "dlq", "redrive", "orders", "--to", "elsewhere")
	contains(t, "stderr", r.err, `queue_not_found: queue not found: "elsewhere"`)
	h.ok("queue", "create", "elsewhere")
	r = h.runWith(runOpts{stderrTTY: true}, "dlq", "redrive", "orders", "--to", "elsewhere")
	if r.code != 0 {
		t.Fatalf("dlq redrive --to: %+v", r)
	}
	contains(t, "redrive stderr", r.err, "\r[", "3/3 moved (100%)")
	contains(t, "redrive stdout", r.out, "to elsewhere")
	if q := h.queue("elsewhere"); q.Stats.Ready != 3 {
		t.Errorf("redrive --to elsewhere: %+v", q.Stats)
	}

	tasks := h.ok("dlq", "tasks")
	matches(t, "dlq tasks", tasks, `TASK\s+STATE\s+FROM\s+TO\s+MOVED`)
	matches(t, "dlq tasks", tasks, `completed\s+orders-dlq\s+elsewhere\s+3\s+3\s+0`)
	r = h.fails(1, "dlq", "cancel", "1")
	contains(t, "stderr", r.err, "okiba dlq cancel: task_finished:")

	// A force-deleted dead-letter queue comes back with the next dead letter.
	h.ok("queue", "delete", "orders-dlq", "--force")
	r = h.run("dlq", "list", "orders")
	if r.code != 0 || !strings.Contains(r.err, "orders-dlq does not exist") {
		t.Errorf("dlq list with the DLQ deleted: %+v", r)
	}
	contains(t, "redrive", h.ok("dlq", "redrive", "orders"), "nothing to redrive")

	h.ok("queue", "create", "plain", "--dead-letter-queue", "none")
	r = h.fails(1, "dlq", "redrive", "plain")
	contains(t, "stderr", r.err, "queue plain has no dead-letter queue")
}

func TestDLQRedriveSharedDeadLetterQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "shared-dlq", "--dead-letter-queue", "none")
	h.ok("queue", "create", "a", "--dead-letter-queue", "shared-dlq")
	h.ok("queue", "create", "b", "--dead-letter-queue", "shared-dlq")
	h.deadLetter("a", "x", "from-a")
	h.deadLetter("b", "x", "from-b")

	out := h.ok("dlq", "list", "a")
	contains(t, "dlq list", out, "shared-dlq: 2 dead letters", `"from-a"`, `"from-b"`)
	out = h.ok("dlq", "redrive", "a")
	contains(t, "redrive", out, "moved 1 of 1")
	if q := h.queue("a"); q.Stats.Ready != 1 {
		t.Errorf("a after redrive: %+v", q.Stats)
	}
	lines := decodeLines[dlqLine](t, h.ok("dlq", "list", "b", "--json"))
	if len(lines) != 1 || lines[0].Body != "from-b" {
		t.Errorf("b's dead letter must stay: %+v", lines)
	}
	contains(t, "redrive again", h.ok("dlq", "redrive", "a"), "nothing to redrive")
}

func TestDLQRedriveInterruptCancelsTheTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "slow")
	h.deadLetter("slow", "x", "1", "2", "3", "4", "5")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- h.runWith(runOpts{ctx: ctx}, "dlq", "redrive", "slow", "--rate", "1")
	}()
	var task api.RedriveTask
	testkit.Eventually(t, 15*time.Second, func() bool {
		ts, err := h.srv.Client.RedriveTasks(context.Background())
		if err != nil || len(ts) == 0 {
			return false
		}
		task = ts[0]
		return true
	}, "the redrive task to start")
	cancel() // what Ctrl-C does
	r := <-done
	if r.code != 130 {
		t.Fatalf("interrupted redrive: exit %d, want 130\nstdout: %s\nstderr: %s", r.code, r.out, r.err)
	}
	contains(t, "stderr", r.err, "interrupted: cancelling redrive task "+task.ID, "cancelled after moving")
	got, err := h.srv.Client.RedriveTask(context.Background(), task.ID)
	if err != nil || got.State != "cancelled" || got.Moved >= 5 {
		t.Fatalf("task after interrupt: %+v, %v", got, err)
	}

	// --no-wait leaves the task running and says how to follow it.
	out := h.ok("dlq", "redrive", "slow", "--no-wait")
	contains(t, "--no-wait", out, "started", "okiba dlq cancel")
	testkit.Eventually(t, 15*time.Second, func() bool {
		ts, err := h.srv.Client.RedriveTasks(context.Background())
		return err == nil && len(ts) == 2 && ts[0].State == "completed"
	}, "the second task to complete")
	if q := h.queue("slow"); q.Stats.Ready != 5 || q.Stats.DeadLetters != 0 {
		t.Errorf("after both redrives: %+v", q.Stats)
	}
}

// okiba peek lists without leasing; okiba dlq delete removes dead letters by id, each
// with its own result, and leaves the others.
func TestPeekAndDLQDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "orders")
	h.send("orders", "first", "second")
	h.ok("send", "orders", "later", "--delay", "1h", "--group", "g")

	out := h.ok("peek", "orders")
	contains(t, "peek", out, "ID", "STATE", "first", "second", "later")
	matches(t, "peek", out, `[0-9a-f]{16}\s+delayed \((1h|59m\d+s) more\)\s+0\s+g\s+`)
	ms := decodeLines[dlqLine](t, h.ok("peek", "orders", "--state", "ready", "--json"))
	if len(ms) != 2 || ms[0].Body != "first" || ms[1].Body != "second" {
		t.Fatalf("peek --state ready --json: %+v", ms)
	}
	contains(t, "peek --limit", h.runWith(runOpts{}, "peek", "orders", "--limit", "1").err, "showing the first 1")
	if q := h.queue("orders"); q.Stats.Ready != 2 || q.Stats.InFlight != 0 || q.Stats.Delayed != 1 {
		t.Errorf("peek leased or moved something: %+v", q.Stats)
	}
	contains(t, "peek --state", h.fails(2, "peek", "orders", "--state", "leased").err, "--state must be ready, delayed, in_flight or deferred")
	contains(t, "peek of a missing queue", h.fails(1, "peek", "nope").err, "queue_not_found")

	h.ok("queue", "create", "jobs")
	h.deadLetter("jobs", "poison", "p1", "p2", "p3")
	dead := decodeLines[dlqLine](t, h.ok("dlq", "list", "jobs", "--json"))
	if len(dead) != 3 {
		t.Fatalf("dlq list: %+v", dead)
	}
	contains(t, "dlq delete", h.ok("dlq", "delete", "jobs", dead[0].ID), "deleted 1 of 1 from jobs-dlq")
	r := h.runWith(runOpts{stdin: dead[1].ID + "\n" + dead[0].ID + "\n"}, "dlq", "delete", "jobs", "-")
	if r.code != 1 || !strings.Contains(r.out, "deleted 1 of 2") || !strings.Contains(r.err, dead[0].ID+": message_not_found") {
		t.Fatalf("dlq delete of one present and one gone: %+v", r)
	}
	left := decodeLines[dlqLine](t, h.ok("dlq", "list", "jobs", "--json"))
	if len(left) != 1 || left[0].ID != dead[2].ID {
		t.Errorf("after the deletes: %+v, want only %s", left, dead[2].ID)
	}
	contains(t, "dlq delete without ids", h.fails(2, "dlq", "delete", "jobs").err, "missing arguments")
}
