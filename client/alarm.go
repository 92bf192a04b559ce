package client

import (
	"time"

	"github.com/okiba/okiba/clock"
)

// alarm is one reusable timer on a clock, for a loop that waits until a time that moves
// as it goes (the next lease to extend, the end of a batch's linger). set arms it for a
// time and returns the channel to wait on, re-arming the timer only when the time
// changed; the zero time means no wake.
type alarm struct {
	clock clock.Clock
	t     clock.Timer
	at    time.Time // what t is armed for; zero when it is not armed
}

// set arms the alarm for when and returns its channel, or, for the zero time, disarms it
// and returns nil (a select never receives from it). After receiving from the channel,
// the loop calls rang.
func (a *alarm) set(when time.Time) <-chan time.Time {
	if when.IsZero() {
		a.stop()
		return nil
	}
	switch {
	case a.t == nil:
		a.t = a.clock.NewTimer(when.Sub(a.clock.Now()))
	case !when.Equal(a.at):
		a.t.Reset(when.Sub(a.clock.Now()))
	}
	a.at = when
	return a.t.C()
}

// rang records that the alarm's firing was received: it is no longer armed.
func (a *alarm) rang() { a.at = time.Time{} }

// stop disarms the alarm.
func (a *alarm) stop() {
	if !a.at.IsZero() {
		a.t.Stop()
		a.at = time.Time{}
	}
}
