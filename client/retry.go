package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/okiba/okiba/api"
)

// transient reports whether err may go away by itself: transport errors, 5xx
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

// retryDelay is the wait before retry n (1, 2, …): exponential from 100ms to 5s, with
// jitter over its upper half.
func retryDelay(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d; it reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
