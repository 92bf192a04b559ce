package client

import (
	"testing"
	"time"
)

func TestBackoffDoublesUpToItsLimitWithinItsJitter(t *testing.T) {
	t.Parallel()
	low := retryBackoff()
	low.jitter = func(time.Duration) time.Duration { return 0 }
	high := retryBackoff()
	high.jitter = func(n time.Duration) time.Duration { return n }
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		n := i + 1
		w *= time.Millisecond
		if got := high.delay(n); got != w {
			t.Errorf("retry %d: at most %v, want %v", n, got, w)
		}
		if got := low.delay(n); got != w/2 {
			t.Errorf("retry %d: at least %v, want %v", n, got, w/2)
		}
	}
	// Unpinned, it stays within the bounds.
	b := retryBackoff()
	for range 1000 {
		if d := b.delay(3); d < 200*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("retry 3 waits %v, outside [200ms, 400ms]", d)
		}
	}
}
