package main

import (
	"encoding/json"
	"testing"

	"github.com/okiba/okiba/api"
)

func TestStats(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run("stats")
	if r.code != 0 || r.err != "no queues\n" {
		t.Errorf("stats without queues: %+v", r)
	}
	h.ok("queue", "create", "q")
	h.ok("queue", "create", "idle", "--dead-letter-queue", "none")
	h.send("q", "a", "b", "c")
	h.recvJSON("q")

	out := h.ok("stats")
	matches(t, "stats", out, `QUEUE\s+READY\s+IN FLIGHT\s+SENT/S\s+DELIVERED/S\s+ACKED/S\s+WAIT L\s+WAIT W\s+WAIT W EST\s+SYS L\s+SYS W\s+SYS W EST`)
	matches(t, "stats", out, `\bq\s+2\s+1\s+\S+\s+\S+\s+\S+\s+2\s+\S+\s+\S+\s+3\s`)
	matches(t, "stats", out, `idle\s+0\s+0\s`)

	out = h.ok("stats", "q")
	matches(t, "stats q", out, `Queue\s+q\n`)
	matches(t, "stats q", out, `totals\s+sent 3, delivered 1, acked 0`)
	matches(t, "stats q", out, `waiting \(ready → first delivery\)\s+2\s`)
	matches(t, "stats q", out, `in system \(enqueue → ack\)\s+3\s`)

	var st api.Stats
	if err := json.Unmarshal([]byte(h.ok("stats", "q", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ready != 2 || st.InFlight != 1 || st.Waiting.L != 2 || st.InSystem.L != 3 || st.Sent != 3 {
		t.Errorf("stats q --json: %+v", st)
	}
	var all map[string]api.Stats
	if err := json.Unmarshal([]byte(h.ok("stats", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all["q"].InSystem.L != 3 { // q, idle and q's dead-letter queue
		t.Errorf("stats --json: %+v", all)
	}
	r = h.fails(1, "stats", "missing")
	contains(t, "stderr", r.err, "okiba stats: queue_not_found:")
	h.fails(2, "stats", "a", "b")
}
