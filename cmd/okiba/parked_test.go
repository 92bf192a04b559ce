package main

import "testing"

// okiba parked lists a group parked behind its dead letter, okiba explain says so, okiba
// release frees it, and park_group where it cannot apply is refused naming the field.
func TestParkedAndRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	contains(t, "park_group unordered", h.fails(1, "queue", "create", "std", "--ordered-groups=false", "--on-dead-letter", "park_group").err, "on_dead_letter", "ordered")
	h.ok("queue", "create", "orders", "--on-dead-letter", "park_group")
	contains(t, "queue get", h.ok("queue", "get", "orders"), "on_dead_letter", "park_group")
	h.ok("send", "orders", "pay", "--group", "order-7")
	h.ok("send", "orders", "ship", "--group", "order-7")
	got := h.recvJSON("orders")
	if len(got) != 1 || got[0].Body != "pay" {
		t.Fatalf("recv: %+v", got)
	}
	h.ok("deadletter", "orders", "--reason", "card-declined", got[0].Receipt)
	if next := h.recvJSON("orders"); len(next) != 0 {
		t.Fatalf("a parked group gave %+v", next)
	}
	matches(t, "parked", h.ok("parked", "orders"), `order-7\s+`+got[0].ID+`\s+orders-dlq\s+\d{4}-\d\d-\d\dT\S+\s+1`)
	ship := decodeLines[dlqLine](t, h.ok("peek", "orders", "--json"))
	if len(ship) != 1 {
		t.Fatalf("peek: %+v", ship)
	}
	matches(t, "explain", h.ok("explain", "orders", ship[0].ID), `Parked behind dead letter `+got[0].ID)
	contains(t, "release of a free group", h.fails(1, "release", "orders", "order-8").err, "not_parked")
	contains(t, "release", h.ok("release", "orders", "order-7"), "released group order-7 of orders")
	contains(t, "parked after release", h.ok("parked", "orders"), "no parked groups in orders")
	if next := h.recvJSON("orders"); len(next) != 1 || next[0].Body != "ship" {
		t.Fatalf("after release: %+v", next)
	}
}
