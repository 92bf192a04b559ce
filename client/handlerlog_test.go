package client

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

func TestLogLimitLogsABurstPerIntervalAndCountsTheRest(t *testing.T) {
	t.Parallel()
	l := logLimit{interval: 10 * time.Second, burst: 3}
	allow := func(at time.Duration, level slog.Level) (bool, drops) { return l.allow(t0.Add(at), level) }
	for i := range 3 {
		if ok, closed := allow(time.Duration(i)*time.Millisecond, slog.LevelInfo); !ok || closed.n != 0 {
			t.Fatalf("line %d of the burst: logged %v, closed %+v", i+1, ok, closed)
		}
	}
	if !l.due().IsZero() {
		t.Fatalf("a report is due at %v though nothing was dropped", l.due())
	}
	levels := []slog.Level{slog.LevelInfo, slog.LevelError, slog.LevelWarn, slog.LevelInfo}
	for i, level := range levels {
		if ok, _ := allow(time.Second+time.Duration(i), level); ok {
			t.Fatalf("line %d past the burst was logged", 4+i)
		}
	}
	if due := l.due(); due != t0.Add(10*time.Second) {
		t.Fatalf("the report is due at %v, want at the interval's end (10s)", due.Sub(t0))
	}
	if d := l.end(t0.Add(10*time.Second-time.Nanosecond), false); d.n != 0 {
		t.Fatalf("the interval ended early: %+v", d)
	}
	d := l.end(t0.Add(10*time.Second), false)
	if want := (drops{n: 4, level: slog.LevelError, over: 10 * time.Second}); d != want {
		t.Fatalf("report at the interval's end: %+v, want %+v (the count, at the highest level dropped)", d, want)
	}
	// The next line opens a new interval, with a whole burst.
	if ok, closed := allow(25*time.Second, slog.LevelInfo); !ok || closed.n != 0 {
		t.Fatalf("first line of a new interval: logged %v, closed %+v", ok, closed)
	}
	allow(26*time.Second, slog.LevelInfo)
	allow(27*time.Second, slog.LevelInfo)
	allow(28*time.Second, slog.LevelWarn) // dropped
	// A line past the interval's end, before the report's time was taken: the report
	// comes back with it, to be logged first.
	ok, closed := allow(35*time.Second, slog.LevelInfo)
	if want := (drops{n: 1, level: slog.LevelWarn, over: 10 * time.Second}); !ok || closed != want {
		t.Fatalf("a line that opens an interval: logged %v, closed %+v, want logged and %+v", ok, closed, want)
	}
	// When Consume returns, what was dropped so far is reported at once.
	allow(36*time.Second, slog.LevelInfo)
	allow(37*time.Second, slog.LevelInfo)
	allow(38*time.Second, slog.LevelDebug)
	if d := l.end(t0.Add(39*time.Second), true); d != (drops{n: 1, level: slog.LevelDebug, over: 4 * time.Second}) {
		t.Fatalf("forced report: %+v", d)
	}
	if d := l.end(t0.Add(40*time.Second), true); d.n != 0 {
		t.Fatalf("reported twice: %+v", d)
	}
}

func TestDescribeLogsEachOutcomeAtItsLevel(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		err           error
		lost, stopped bool
		level         slog.Level
	}{
		{boom, false, false, slog.LevelError},
		{&panicError{value: "nil map"}, true, true, slog.LevelError},
		{fmt.Errorf("parse: %w", DeadLetter("bad", "")), false, false, slog.LevelWarn},
		{fmt.Errorf("busy: %w", RetryAfter(time.Second)), false, false, slog.LevelInfo},
		{boom, false, true, slog.LevelInfo},
		{boom, true, false, slog.LevelInfo},
	} {
		if level, msg, _ := describe(c.err, c.lost, c.stopped); level != c.level {
			t.Errorf("describe(%v, lost %v, stopped %v) at %v (%q), want %v", c.err, c.lost, c.stopped, level, msg, c.level)
		}
	}
}
