package client

import (
	"testing"
	"time"
)

func TestLingerPolicySaysLeaveNowOrWaitUntil(t *testing.T) {
	t.Parallel()
	opened := t0
	for _, c := range []struct {
		name     string
		lp       lingerPolicy
		now      time.Duration // after opened
		inFlight int
		leave    bool
		until    time.Duration
	}{
		{"no linger", lingerPolicy{wait: NoLinger}, 0, 3, true, -1},
		{"fixed, nothing out", lingerPolicy{wait: 5 * time.Millisecond}, 0, 0, false, 5 * time.Millisecond},
		{"fixed, a moment before its end", lingerPolicy{wait: 5 * time.Millisecond}, 5*time.Millisecond - 1, 2, false, 5 * time.Millisecond},
		{"fixed, at its end", lingerPolicy{wait: 5 * time.Millisecond}, 5 * time.Millisecond, 2, true, 5 * time.Millisecond},
		{"adaptive, nothing out", lingerPolicy{wait: time.Millisecond, adaptive: true}, 0, 0, true, -1},
		{"adaptive, a request out", lingerPolicy{wait: time.Millisecond, adaptive: true}, 0, 1, false, time.Millisecond},
		{"adaptive, at its cap", lingerPolicy{wait: time.Millisecond, adaptive: true}, time.Millisecond, 8, true, time.Millisecond},
	} {
		leave, until := c.lp.decide(opened.Add(c.now), opened, c.inFlight)
		wantUntil := time.Time{}
		if c.until >= 0 {
			wantUntil = opened.Add(c.until)
		}
		if leave != c.leave || !until.Equal(wantUntil) {
			t.Errorf("%s: leave %v until %v, want leave %v until %v", c.name, leave, until, c.leave, wantUntil)
		}
	}
}
