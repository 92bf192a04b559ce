package client

import (
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
)

func TestAlarmArmsOnceForATimeAndDisarmsForNone(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(t0)
	a := alarm{clock: clk}
	if a.set(time.Time{}) != nil {
		t.Fatal("an alarm for no time has a channel")
	}
	c := a.set(t0.Add(time.Second))
	a.set(t0.Add(time.Second)) // the same time again: not re-armed
	if clk.Timers() != 1 {
		t.Fatalf("%d timers wait, want 1", clk.Timers())
	}
	a.set(t0.Add(2 * time.Second)) // later: the first time no longer rings
	clk.Advance(time.Second)
	select {
	case <-c:
		t.Fatal("the alarm rang at the time it was moved from")
	default:
	}
	clk.Advance(time.Second)
	select {
	case at := <-c:
		a.rang()
		if !at.Equal(t0.Add(2 * time.Second)) {
			t.Fatalf("rang at %v", at)
		}
	default:
		t.Fatal("the alarm did not ring at its time")
	}
	// Set again for the time it rang at (say, a loop that looked too early): armed anew,
	// in the past, so it rings at once.
	select {
	case <-a.set(t0.Add(2 * time.Second)):
		a.rang()
	default:
		t.Fatal("an alarm set for a time passed did not ring at once")
	}
	a.set(t0.Add(time.Hour))
	a.set(time.Time{})
	if clk.Timers() != 0 {
		t.Fatalf("%d timers wait after the alarm was disarmed", clk.Timers())
	}
}
