package main

import "testing"

// TestRecvDelete: okiba recv --delete is a receive-and-delete: it prints the messages
// without a receipt or a lease, leaves nothing in flight and nothing to ack, and refuses
// --ack and --visibility, which have no meaning with it.
func TestRecvDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "telemetry")
	h.send("telemetry", "one")
	h.send("telemetry", "two")

	out := h.ok("recv", "telemetry", "--delete")
	contains(t, "recv --delete", out, "(delivery 1)", "receipt:   none (received and deleted)", "one")
	ms := decodeLines[recvJSON](t, h.ok("recv", "telemetry", "--delete", "--json"))
	if len(ms) != 1 || ms[0].Body != "two" || ms[0].Receipt != "" || ms[0].LeaseDeadline != nil {
		t.Fatalf("recv --delete --json: %+v", ms)
	}
	if q := h.queue("telemetry"); q.Stats.Ready != 0 || q.Stats.InFlight != 0 || q.Stats.Acked != 0 || q.Stats.ReceivedAndDeleted != 2 {
		t.Errorf("after recv --delete: %+v", q.Stats)
	}
	h.fails(2, "recv", "telemetry", "--delete", "--ack")
	r := h.fails(2, "recv", "telemetry", "--delete", "--visibility", "1m")
	contains(t, "stderr", r.err, "--delete settles the messages")
}
