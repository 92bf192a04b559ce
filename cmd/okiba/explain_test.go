package main

import (
	"encoding/json"
	"testing"

	"github.com/okiba/okiba/api"
)

// okiba explain says in words and fields why a message is where it is, by id and by
// dedup id, and refuses what it cannot answer.
func TestExplainCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "orders")
	h.ok("send", "orders", "first", "--dedup-id", "order-7")
	ms := decodeLines[dlqLine](t, h.ok("peek", "orders", "--json"))
	if len(ms) != 1 {
		t.Fatalf("peek: %+v", ms)
	}
	id := ms[0].ID
	contains(t, "explain", h.ok("explain", "orders", id), "Ready and next in line", "state", "ready", "deliveries")
	var ex api.Explanation
	if err := json.Unmarshal([]byte(h.ok("explain", "orders", id, "--json")), &ex); err != nil || ex.State != "ready" || ex.ID != id {
		t.Fatalf("explain --json: %+v %v", ex, err)
	}
	contains(t, "explain --dedup-id", h.ok("explain", "orders", "--dedup-id", "order-7"), "duplicate of", id)
	contains(t, "explain of an id never sent", h.ok("explain", "orders", "7fffffffffffffff"), "unknown")
	contains(t, "explain with both", h.fails(2, "explain", "orders", id, "--dedup-id", "x").err, "not both")
	contains(t, "explain of a bad id", h.fails(1, "explain", "orders", "xyz").err, "invalid_id")
	contains(t, "explain of a missing queue", h.fails(1, "explain", "nope", id).err, "queue_not_found")
}

// Durations take bare seconds, as the HTTP API's do.
func TestDurationFlagsTakeBareSeconds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "secs", "--visibility-timeout", "45", "--backoff-base", "1.5")
	q := h.queue("secs")
	if v := q.Config.VisibilityTimeout.D(); v.Seconds() != 45 {
		t.Fatalf("visibility_timeout %v, want 45s", v)
	}
	if v := q.Config.BackoffBase.D(); v.Milliseconds() != 1500 {
		t.Fatalf("backoff_base %v, want 1.5s", v)
	}
	contains(t, "a bad duration", h.fails(2, "queue", "create", "secs", "--visibility-timeout", "soon").err, "give seconds (30) or a duration")
}
