package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// recorder is a slog.Handler that hands every record to the test on a channel, so that
// the test waits for a line rather than polling a buffer.
type recorder struct{ records chan slog.Record }

func newRecorder() *recorder { return &recorder{records: make(chan slog.Record, 10000)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.records <- rec.Clone()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// logged takes the records logged so far whose message contains what.
func (r *recorder) logged(what string) []slog.Record {
	var out []slog.Record
	for {
		select {
		case rec := <-r.records:
			if strings.Contains(rec.Message, what) {
				out = append(out, rec)
			}
		default:
			return out
		}
	}
}

// next waits for the next record whose message contains what.
func (r *recorder) next(t *testing.T, what string) slog.Record {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case rec := <-r.records:
			if strings.Contains(rec.Message, what) {
				return rec
			}
		case <-timeout:
			t.Fatalf("timed out waiting for a log line %q", what)
		}
	}
}

func attrs(rec slog.Record) map[string]string {
	out := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value.String()
		return true
	})
	return out
}

const (
	failedLine  = "handler failed"
	summaryLine = "more handler errors"
)

// A handler that fails on a burst of messages is logged one by one only for the first
// HandlerLogBurst of each interval of the client's clock; one line counts the rest,
// exactly, when the interval ends or when Consume returns.
func TestConsumeLogsHandlerErrorsAtABoundedRate(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "q", noBackoff())
	clk := fakeClock()
	c, err := client.New(srv.URL, client.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each message fails once and succeeds when it comes back: its failure was logged,
	// or counted, before it came back (the line goes before the nack).
	succeeded := make(chan struct{}, 100)
	done := consume(t, ctx, c, "q", func(_ context.Context, d *client.Delivery) error {
		if d.Deliveries == 1 {
			return fmt.Errorf("cannot handle %s", d.Body)
		}
		succeeded <- struct{}{}
		return nil
	}, client.ConsumeOptions{Concurrency: 4, Visibility: time.Hour, AckLinger: client.NoLinger, Logger: slog.New(rec)})

	burst := client.HandlerLogBurst
	first := 2*burst + 5
	send(t, srv.Client, "q", "", bodiesN("a", first)...)
	for range first {
		testkit.Recv(t, succeeded, 10*time.Second, "the messages to succeed at their second delivery")
	}
	lines := rec.logged(failedLine)
	if len(lines) != burst {
		t.Fatalf("%d failures in one interval logged one by one, want %d", len(lines), burst)
	}
	for _, l := range lines {
		a := attrs(l)
		if l.Level != slog.LevelError || a["queue"] != "q" || len(a["message"]) != 16 || a["deliveries"] != "1" || !strings.HasPrefix(a["error"], "cannot handle a") {
			t.Fatalf("failure logged at %v with %v: want the queue, the message id, its delivery count and the error", l.Level, a)
		}
	}
	if got := rec.logged(summaryLine); len(got) != 0 {
		t.Fatalf("the count came before the interval ended: %v", attrs(got[0]))
	}
	clk.Advance(client.HandlerLogInterval)
	sum := rec.next(t, summaryLine)
	if a := attrs(sum); a["more"] != fmt.Sprint(first-burst) || a["interval"] != client.HandlerLogInterval.String() || sum.Level != slog.LevelError {
		t.Fatalf("count at the interval's end: %v at %v, want more=%d at ERROR", a, sum.Level, first-burst)
	}

	// The next interval logs a whole burst again; what it drops is counted when Consume
	// returns.
	second := burst + 2
	send(t, srv.Client, "q", "", bodiesN("b", second)...)
	for range second {
		testkit.Recv(t, succeeded, 10*time.Second, "the messages to succeed at their second delivery")
	}
	if got := len(rec.logged(failedLine)); got != burst {
		t.Fatalf("%d failures logged one by one in the second interval, want %d", got, burst)
	}
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	got := rec.logged(summaryLine)
	if len(got) != 1 || attrs(got[0])["more"] != "2" {
		t.Fatalf("count when Consume returned: %d lines %v, want one with more=2", len(got), got)
	}
}
