package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fired reports whether tm fired, and at what fake time, without waiting.
func fired(tm clock.Timer) (time.Time, bool) {
	select {
	case at := <-tm.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTimersFireWhenTheirTimeComes(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	a, b := f.NewTimer(time.Second), f.NewTimer(3*time.Second)
	if f.Timers() != 2 {
		t.Fatalf("Timers() = %d, want 2", f.Timers())
	}
	f.Advance(999 * time.Millisecond)
	if _, ok := fired(a); ok {
		t.Fatal("a fired before its time")
	}
	f.Advance(time.Millisecond)
	if at, ok := fired(a); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("a at its time: fired %v at %v", ok, at)
	}
	if _, ok := fired(b); ok || f.Timers() != 1 {
		t.Fatalf("b fired early, or %d timers wait (want 1)", f.Timers())
	}
	if got := f.Now(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("Now() = %v", got)
	}
	f.Set(t0.Add(time.Hour))
	if _, ok := fired(b); !ok || f.Timers() != 0 {
		t.Fatalf("b after Set past it: fired %v, %d timers wait", ok, f.Timers())
	}
}

func TestFakeTimerStopAndReset(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a waiting timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm); ok {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Minute) {
		t.Fatal("Reset of a stopped timer reported it was waiting")
	}
	if !tm.Reset(2 * time.Minute) {
		t.Fatal("Reset of a waiting timer reported false")
	}
	f.Advance(time.Minute)
	if _, ok := fired(tm); ok {
		t.Fatal("the timer fired at its old time after Reset")
	}
	f.Advance(time.Minute)
	if _, ok := fired(tm); !ok {
		t.Fatal("the timer did not fire at its reset time")
	}
	// A timer for now or the past fires at once, and a clock stepping back does not
	// fire a timer still in the future.
	if _, ok := fired(f.NewTimer(0)); !ok {
		t.Fatal("NewTimer(0) did not fire at once")
	}
	later := f.NewTimer(time.Second)
	f.Set(t0)
	if _, ok := fired(later); ok {
		t.Fatal("stepping the clock back fired a future timer")
	}
}

func TestFakeStopAndResetDiscardAFiringNotReceived(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fired, not received
	tm.Reset(time.Minute)
	if _, ok := fired(tm); ok {
		t.Fatal("Reset kept the earlier firing")
	}
	f.Advance(time.Minute) // fired again, not received
	tm.Stop()
	if _, ok := fired(tm); ok {
		t.Fatal("Stop kept the firing")
	}
}

func TestFakeWaitTimersReturnsOnceEnoughTimersWait(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitTimers(ctx, 0); err != nil {
		t.Fatalf("WaitTimers(0): %v", err)
	}
	parked := make(chan clock.Timer)
	waited := make(chan error, 1)
	go func() { waited <- f.WaitTimers(ctx, 2) }()
	// The goroutine under test: it arms one timer, then another when told.
	go func() {
		parked <- f.NewTimer(time.Second)
		<-parked
		parked <- f.NewTimer(time.Second)
	}()
	first := <-parked
	select {
	case err := <-waited:
		t.Fatalf("WaitTimers(2) returned (%v) with one timer waiting", err)
	default:
	}
	parked <- nil
	second := <-parked
	if err := <-waited; err != nil {
		t.Fatalf("WaitTimers(2) with two timers waiting: %v", err)
	}
	// A fired timer no longer waits; re-arming it counts again.
	f.Advance(time.Second)
	if f.Timers() != 0 {
		t.Fatalf("%d timers wait after both fired", f.Timers())
	}
	go func() { first.Reset(time.Second); second.Reset(time.Second) }()
	if err := f.WaitTimers(ctx, 2); err != nil {
		t.Fatalf("WaitTimers after Reset: %v", err)
	}

	short, stop := context.WithCancel(context.Background())
	stop()
	if err := f.WaitTimers(short, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitTimers with a cancelled context: %v", err)
	}
}
