package main

import (
	"strings"
	"testing"
)

// TestDeferAndFetch: okiba defer sets a received group head aside (the group moves on),
// okiba peek --deferred lists it, okiba fetch takes it again by id under a new lease,
// and a fetch of an id that is not deferred fails with not_deferred.
func TestDeferAndFetch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "orders")
	h.ok("send", "orders", "payment", "--group", "order-7")
	h.ok("send", "orders", "shipping", "--group", "order-7")

	got := h.recvJSON("orders")
	if len(got) != 1 || got[0].Body != "payment" {
		t.Fatalf("recv: %+v", got)
	}
	contains(t, "defer", h.ok("defer", "orders", got[0].Receipt), "deferred ")
	if next := h.recvJSON("orders"); len(next) != 1 || next[0].Body != "shipping" {
		t.Fatalf("after defer, the group's next: %+v", next)
	}
	ds := decodeLines[dlqLine](t, h.ok("peek", "orders", "--deferred", "--json"))
	if len(ds) != 1 || ds[0].ID != got[0].ID {
		t.Fatalf("peek --deferred: %+v", ds)
	}
	matches(t, "peek", h.ok("peek", "orders"), got[0].ID+`\s+deferred\s+1\s+order-7`)
	// explain says it is deferred, since when, and how to fetch it.
	ex := h.ok("explain", "orders", got[0].ID)
	for _, re := range []string{`Deferred since .*okiba fetch orders ` + got[0].ID, `state\s+deferred`, `deferred since\s+20`, `group\s+order-7`} {
		matches(t, "explain", ex, re)
	}
	if q := h.queue("orders"); q.Stats.Deferred != 1 || q.Stats.Deferrals != 1 || q.Stats.InFlight != 1 {
		t.Errorf("stats after defer: %+v", q.Stats)
	}

	fetched := decodeLines[recvJSON](t, h.ok("fetch", "orders", got[0].ID, "--json", "--visibility", "1m"))
	if len(fetched) != 1 || fetched[0].Body != "payment" || fetched[0].Deliveries != 2 || fetched[0].Receipt == "" || fetched[0].Group != "order-7" {
		t.Fatalf("fetch: %+v", fetched)
	}
	r := h.fails(1, "fetch", "orders", got[0].ID)
	contains(t, "fetch of a leased id", r.err, "not deferred in orders")
	h.ok("ack", "orders", fetched[0].Receipt)
	if q := h.queue("orders"); q.Stats.Deferred != 0 || q.Stats.Acked != 1 {
		t.Errorf("stats after ack: %+v", q.Stats)
	}
	r = h.runWith(runOpts{stdin: "zz\n"}, "fetch", "orders", "-")
	if r.code == 0 || !strings.Contains(r.err, "invalid_id") {
		t.Fatalf("fetch of a bad id: %+v", r)
	}
	h.fails(2, "peek", "orders", "--deferred", "--state", "ready")
}
