package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
)

func lines(t *testing.T, b *testkit.SyncBuffer) []Event {
	t.Helper()
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader([]byte(b.String())))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// A brute force costs the log one line per source per window, and the summary says how
// many; management actions are each a line.
func TestRefusalsAreAggregatedPerSourcePerWindow(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	var file testkit.SyncBuffer
	l := New(Config{File: &file, Clock: fc})
	for i := range 1000 {
		l.Refused(Event{Source: "203.0.113.9", Action: fmt.Sprintf("GET /v1/queues/q%d", i%3), Status: 401, Outcome: "unauthenticated"})
	}
	l.Refused(Event{Source: "198.51.100.1", Action: "sqs:ListQueues", Status: 403, Outcome: "unauthenticated"})
	l.Action(Event{Principal: "ops", Source: "10.0.0.1", Action: "DELETE /v1/queues/orders", Permission: "manage", Resource: "queue:orders", Status: 204, Outcome: "ok"})
	got := lines(t, &file)
	if len(got) != 3 || got[0].Kind != "refused" || got[1].Kind != "refused" || got[2].Kind != "action" || got[2].Principal != "ops" {
		t.Fatalf("before the window ends: %+v", got)
	}
	fc.Advance(time.Minute)
	l.Flush()
	got = lines(t, &file)
	if len(got) != 4 {
		t.Fatalf("after the window: %d lines: %+v", len(got), got)
	}
	s := got[3]
	if s.Kind != "refused_summary" || s.Source != "203.0.113.9" || s.Count != 999 || len(s.Actions) != 3 {
		t.Fatalf("summary: %+v", s)
	}
	// A new window: the source's next refusal is written again.
	l.Refused(Event{Source: "203.0.113.9", Action: "GET /v1/queues", Status: 401})
	if got = lines(t, &file); len(got) != 5 || got[4].Kind != "refused" {
		t.Fatalf("in the next window: %+v", got)
	}
}

func TestSourcesBeyondTheCapShareOneTally(t *testing.T) {
	var file testkit.SyncBuffer
	l := New(Config{File: &file, MaxSources: 2})
	for i := range 50 {
		l.Refused(Event{Source: fmt.Sprintf("10.0.0.%d", i), Action: "x"})
	}
	if got := lines(t, &file); len(got) != 3 || got[2].Source != "10.0.0.2" {
		// two sources, then the first refusal counted as "other" (written under its own address)
		t.Fatalf("%d lines: %+v", len(got), got)
	}
}

func TestRunFlushesOnTheClockAndAtTheEnd(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	var file testkit.SyncBuffer
	l := New(Config{File: &file, Clock: fc})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	for range 5 {
		l.Refused(Event{Source: "a", Action: "x"})
	}
	if err := fc.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Minute)
	testkit.Eventually(t, 5*time.Second, func() bool { return len(lines(t, &file)) == 2 }, "the window's summary")
	l.Refused(Event{Source: "b", Action: "y"})
	l.Refused(Event{Source: "b", Action: "y"})
	cancel()
	testkit.Recv(t, (<-chan struct{})(done), 5*time.Second, "Run's end")
	got := lines(t, &file)
	if len(got) != 4 || got[3].Kind != "refused_summary" || got[3].Source != "b" || got[3].Count != 1 {
		t.Fatalf("at the end: %+v", got)
	}
}
