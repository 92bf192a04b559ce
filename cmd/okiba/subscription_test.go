package main

import (
	"encoding/json"
	"testing"

	"github.com/okiba/okiba/api"
)

func TestSubscriptionCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("topic", "create", "orders")
	h.ok("queue", "create", "points")
	out := h.ok("subscription", "create", "orders", "points", "--queue", "points", "--filter", `{"type":["OrderPaid"]}`)
	contains(t, "create", out, "subscription orders/points feeds queue points (0 records behind)")
	h.ok("topic", "publish", "orders", "--header", "type=OrderPaid", "paid")
	h.ok("topic", "publish", "orders", "--header", "type=OrderPlaced", "placed")
	var s api.Subscription
	if err := json.Unmarshal([]byte(h.ok("subscription", "get", "orders", "points", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Delivered != 1 || s.Filtered != 1 || s.Queue != "points" {
		t.Fatalf("subscription after two publishes: %+v", s)
	}
	contains(t, "get", h.ok("subscription", "get", "orders", "points"), `{"type":["OrderPaid"]} on attributes`)
	contains(t, "list", h.ok("subscription", "list", "orders"), "points")

	// Bad input: a message that says what to fix, and a non-zero exit.
	contains(t, "no queue", h.fails(2, "subscription", "create", "orders", "x").err, "--queue is required")
	contains(t, "bad filter", h.fails(2, "subscription", "create", "orders", "x", "--queue", "points", "--filter", "{").err, "--filter is not JSON")
	contains(t, "invalid policy", h.fails(1, "subscription", "create", "orders", "x", "--queue", "points", "--filter", `{"a":"b"}`).err, "invalid_filter")
	contains(t, "missing queue", h.fails(1, "subscription", "create", "orders", "x", "--queue", "nope").err, "queue_not_found")
	contains(t, "missing subscription", h.fails(1, "subscription", "get", "orders", "ghost").err, "subscription_not_found")

	h.ok("subscription", "delete", "orders", "points")
	contains(t, "empty list", h.run("subscription", "list", "orders").err, "no subscriptions")
}
