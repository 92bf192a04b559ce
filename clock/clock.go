// Package clock abstracts time so that the broker's waiting (long polls, lease expiry,
// redrive pacing) and the client's (lease extension, linger, backoff, drain) can run on
// a fake clock in tests. Production code uses Real.
package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the broker and the client use. As with time.Timer
// since Go 1.23, Stop and Reset discard a firing not yet received, so a timer can be
// re-armed without draining its channel.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Fake is a manual clock: time moves only when Advance or Set is called, and timers whose
// time has come fire then, before Advance or Set returns. It is safe for concurrent use.
//
// A test drives a goroutine that waits on a Fake in steps: WaitTimers until the goroutine
// has armed its timer (it is parked), Advance, and WaitTimers again for the next park.
// Since a timer leaves the waiting set when it fires, Timers right after an Advance says
// whether it fired.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
	// armed is closed, and cleared, when a timer starts waiting (WaitTimers waits on it).
	armed chan struct{}
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: make(map[*fakeTimer]struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.fireLocked()
	f.mu.Unlock()
}

// Set moves the clock to t (which may be earlier: a wall clock can step back) and fires
// due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.fireLocked()
	f.mu.Unlock()
}

// Timers reports how many timers are waiting; tests use it to know a goroutine is parked.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitTimers waits until at least n timers are waiting, or ctx ends. A goroutine that
// has not armed its timer yet when the clock moves would wait a whole period more; a test
// that waits for the timers first moves the clock only when every goroutine it drives is
// parked.
func (f *Fake) WaitTimers(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have := len(f.timers)
		if have >= n {
			f.mu.Unlock()
			return nil
		}
		if f.armed == nil {
			f.armed = make(chan struct{})
		}
		armed := f.armed
		f.mu.Unlock()
		select {
		case <-armed:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d timers waiting, want %d: %w", have, n, ctx.Err())
		}
	}
}

func (f *Fake) fireLocked() {
	for t := range f.timers {
		if !t.when.After(f.now) {
			delete(f.timers, t)
			select {
			case t.c <- f.now:
			default:
			}
		}
	}
}

// NewTimer returns a timer that fires when the fake clock reaches now + d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.resetLocked(d)
	return t
}

type fakeTimer struct {
	f    *Fake
	c    chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.timers[t]
	delete(t.f.timers, t)
	t.drain()
	return ok
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.timers[t]
	t.resetLocked(d)
	return ok
}

func (t *fakeTimer) resetLocked(d time.Duration) {
	t.drain()
	t.when = t.f.now.Add(d)
	if d <= 0 {
		delete(t.f.timers, t)
		t.c <- t.f.now // drained above: there is room
		return
	}
	t.f.timers[t] = struct{}{}
	if t.f.armed != nil {
		close(t.f.armed)
		t.f.armed = nil
	}
}

// drain discards a firing not yet received.
func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}
