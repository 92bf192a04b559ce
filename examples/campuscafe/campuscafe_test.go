package campuscafe_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/examples/campuscafe"
	"github.com/okiba/okiba/internal/dbtest"
)

// The CampusCafe scenario under heavy faults: most acks lost, consumers crashing,
// duplicates from the producer, the broker restarting. The idempotent consumers must not
// drift; the naive ones must.
//
// The dialects run in turn: the scenario runs on the real clock and must settle within
// its timeout, which two runs at once miss on a small machine under the race detector.
func TestScenarioUnderChaos(t *testing.T) {
	dbtest.EachInTurn(t, func(t *testing.T, db *dbtest.DB) {
		// Small enough to settle in seconds under the race detector, large enough that
		// every fault happens many times (the checks below insist).
		orders := 60
		if db.Dialect.Name() == "postgres" {
			orders = 40
		}
		ctx := context.Background()
		// The café's own warnings and errors (a failed restart, say) go to the test's log,
		// so that a failure says what happened.
		logs := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
		app, err := campuscafe.Start(ctx, db.DB, campuscafe.Options{
			DataDir: t.TempDir(), Seed: 42, Lease: 250 * time.Millisecond,
			AckFailRate: 0.8, CrashRate: 0.05, DuplicateRate: 0.2, RestartEvery: 1500 * time.Millisecond,
			Logger: logs,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close()
		// It settles in about 10 s alone and 25 s under the race detector beside the other
		// packages' tests; the bound is for a machine that is busy besides (the broker
		// keeps restarting every 1.5 s while it settles).
		s, err := app.RunScenario(ctx, campuscafe.ScenarioOptions{Orders: orders, Timeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		s.Write(&b)
		t.Log("\n" + b.String())
		if !s.OK() {
			t.Fatalf("invariants failed: %v", s.Failures)
		}
		if s.NaiveDrift() == 0 {
			t.Fatal("the naive consumers did not drift: the faults did not reach them")
		}
		var skipped, crashes, lost int64
		for _, c := range s.Consumers {
			skipped += c.Skipped
			crashes += c.Crashes
			lost += c.AcksLost
		}
		if skipped == 0 || crashes == 0 || lost == 0 || s.Injected == 0 || s.Restarts == 0 {
			t.Fatalf("some fault never happened: skipped %d, crashes %d, acks lost %d, injected %d, restarts %d",
				skipped, crashes, lost, s.Injected, s.Restarts)
		}
	})
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
