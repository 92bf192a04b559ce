package main

import (
	"strings"
	"testing"
	"time"
)

func TestQueueCreateUpdateGet(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	out := h.ok("queue", "create", "orders", "--max-deliveries", "3", "--tag", "team=a", "--tag", "tier=1")
	contains(t, "create", out, "created queue orders", "dead_letter_queue orders-dlq", "max_deliveries 3")
	// create again with the same configuration changes nothing; with another it is
	// refused, naming what differs, and the queue is left as it was.
	out = h.ok("queue", "create", "orders", "--max-deliveries", "3", "--tag", "team=a", "--tag", "tier=1")
	contains(t, "create again", out, "queue orders exists with this configuration: nothing changed")
	r := h.fails(1, "queue", "create", "orders", "--max-deliveries", "3", "--tag", "team=a", "--tag", "tier=1", "--visibility-timeout", "45s")
	contains(t, "create otherwise", r.err, "queue_exists", "visibility_timeout", "okiba queue update orders")
	if q := h.queue("orders"); q.Config.VisibilityTimeout.D() == 45*time.Second {
		t.Fatal("a refused create changed the queue")
	}
	out = h.ok("queue", "update", "orders", "--visibility-timeout", "45s")
	contains(t, "update", out, "updated queue orders: visibility_timeout=45s")

	q := h.queue("orders")
	if got := q.Config.VisibilityTimeout.D(); got != 45*time.Second {
		t.Errorf("visibility_timeout = %v, want 45s", got)
	}
	if *q.Config.MaxDeliveries != 3 || q.Config.Tags["team"] != "a" || q.Config.Tags["tier"] != "1" {
		t.Errorf("fields not given were changed: %+v", q.Config)
	}

	// update sends only the flags given.
	out = h.ok("queue", "update", "orders", "--max-messages", "100", "--max-bytes", "1MiB", "--ordered-groups=true", "--dedup-window", "0s")
	contains(t, "update", out, "updated queue orders: dedup_window=0s (off) max_bytes=1MiB max_messages=100 ordered_groups=true")
	q = h.queue("orders")
	if *q.Config.MaxMessages != 100 || *q.Config.MaxBytes != 1<<20 || q.Config.DedupWindow.D() != 0 {
		t.Errorf("update not applied: %+v", q.Config)
	}
	if q.Config.VisibilityTimeout.D() != 45*time.Second || *q.Config.MaxDeliveries != 3 {
		t.Errorf("update changed fields it was not given: %+v", q.Config)
	}

	r = h.fails(1, "queue", "update", "missing", "--delay", "1s")
	contains(t, "stderr", r.err, "okiba queue update: queue_not_found:", "okiba queue create missing")
	r = h.fails(1, "queue", "create", "bad*name")
	contains(t, "stderr", r.err, "okiba queue create: invalid_name:")
	r = h.fails(1, "queue", "create", "orders", "--visibility-timeout", "13h")
	contains(t, "stderr", r.err, "invalid_config: visibility_timeout")

	h.send("orders", "one", "two")
	out = h.ok("queue", "get", "orders")
	matches(t, "get", out, `Queue\s+orders`)
	matches(t, "get", out, `visibility_timeout\s+45s`)
	matches(t, "get", out, `max_messages\s+100\n`)
	matches(t, "get", out, `tags\s+team=a,tier=1`)
	matches(t, "get", out, `ready\s+2\n`)
	matches(t, "get", out, `sent\s+2\n`)
	contains(t, "get", out, "Little's law", "in system (enqueue → ack)")
}

func TestQueueListDeletePurge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "jobs-dlq", "--dead-letter-queue", "none")
	h.ok("queue", "create", "jobs", "--dead-letter-queue", "jobs-dlq")
	h.ok("queue", "create", "audit", "--dead-letter-queue", "none")
	h.send("jobs", "a", "b", "c")
	h.ok("send", "jobs", "later", "--delay", "1h")
	h.recvJSON("jobs")

	out := h.ok("queue", "list")
	matches(t, "list", out, `NAME\s+READY\s+DELAYED\s+IN FLIGHT\s+DEAD LETTERS\s+OLDEST`)
	matches(t, "list", out, `jobs\s+2\s+1\s+1\s+0\s+\S+`)
	matches(t, "list", out, `audit\s+0\s+0\s+0\s+-\s+-`)
	if out := h.ok("queue", "list", "--prefix", "au"); !strings.Contains(out, "audit") || strings.Contains(out, "jobs") {
		t.Errorf("list --prefix au:\n%s", out)
	}

	// purge: confirmation on a terminal, --yes otherwise.
	r := h.fails(2, "queue", "purge", "jobs")
	contains(t, "stderr", r.err, "stdin is not a terminal: pass --yes")
	r = h.failsWith(runOpts{stdinTTY: true, stdin: "n\n"}, 1, "queue", "purge", "jobs")
	contains(t, "stderr", r.err, "Purge 4 messages (ready 2, delayed 1, in flight 1) from queue jobs?", "not purged")
	if q := h.queue("jobs"); q.Stats.Ready != 2 {
		t.Fatalf("declined purge removed messages: %+v", q.Stats)
	}
	r = h.runWith(runOpts{stdinTTY: true, stdin: "y\n"}, "queue", "purge", "jobs")
	if r.code != 0 {
		t.Fatalf("purge with y: %+v", r)
	}
	contains(t, "purge", r.out, "purged 4 messages from jobs")
	contains(t, "purge --yes", h.ok("queue", "purge", "jobs", "--yes"), "purged 0 messages")

	// delete: a DLQ in use needs --force.
	r = h.fails(1, "queue", "delete", "jobs-dlq")
	contains(t, "stderr", r.err, "okiba queue delete: queue_in_use:", "--force")
	contains(t, "delete", h.ok("queue", "delete", "jobs-dlq", "--force"), "deleted queue jobs-dlq")
	// delete of a queue that holds messages: confirmation on a terminal, --yes otherwise.
	h.send("jobs", "kept")
	r = h.fails(2, "queue", "delete", "jobs")
	contains(t, "stderr", r.err, "queue jobs holds 1 messages", "pass --yes")
	r = h.failsWith(runOpts{stdinTTY: true, stdin: "n\n"}, 1, "queue", "delete", "jobs")
	contains(t, "stderr", r.err, "Delete queue jobs and its 1 messages (ready 1, delayed 0, in flight 0)?", "not deleted")
	if q := h.queue("jobs"); q.Stats.Ready != 1 {
		t.Fatalf("a declined delete changed the queue: %+v", q.Stats)
	}
	contains(t, "delete", h.ok("queue", "delete", "jobs", "--yes"), "deleted queue jobs")
	r = h.fails(1, "queue", "get", "jobs")
	contains(t, "stderr", r.err, "queue_not_found")
	h.fails(1, "queue", "delete", "jobs")
}
