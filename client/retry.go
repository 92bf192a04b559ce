package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// transient reports whether err may go away by itself: transport errors and answers the
// client cannot read (ErrUnreadableAnswer: not an *api.Error), 5xx
// (storage_failed, unavailable, internal), 429 and 408.
func transient(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Status >= 500 || e.Status == 429 || e.Status == 408 || e.Code == api.CodeStorageFailed || e.Code == api.CodeUnavailable
}

// unrecoverable reports whether err means the consumer cannot go on.
func unrecoverable(err error) bool {
	return IsCode(err, api.CodeQueueNotFound) || IsCode(err, api.CodeUnauthorized)
}

// backoff is how long to wait before retry n (1, 2, …) of a request that failed for a
// reason that may pass: doubling from first up to limit, with jitter over the upper half
// of each step, so that the clients a server's restart failed together do not all come
// back in the same instant.
type backoff struct {
	first, limit time.Duration
	// jitter returns a number in [0, n]; nil is math/rand/v2.N. Tests pin it.
	jitter func(n time.Duration) time.Duration
}

// retryBackoff is the consumer's backoff for receives, settles and reading the queue:
// from 100ms to 5s.
func retryBackoff() backoff { return backoff{first: 100 * time.Millisecond, limit: 5 * time.Second} }

// delay is the wait before retry n: between half of min(first·2ⁿ⁻¹, limit) and all of it.
func (b backoff) delay(n int) time.Duration {
	d := b.first
	for i := 1; i < n && d < b.limit; i++ {
		d *= 2
	}
	d = min(d, b.limit)
	half := d / 2
	if b.jitter != nil {
		return half + b.jitter(d-half)
	}
	return half + rand.N(d-half+1)
}

// sleep waits d on clk; it reports false if ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
