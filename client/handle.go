package client

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

// handle runs the handler for one delivery on its own goroutine and books the outcome.
func (co *consumer) handle(ctx context.Context, l *lease, d *Delivery) {
	defer co.life.handlers.Done()
	err := errHandlerExited // kept if the handler calls runtime.Goexit (t.FailNow in a test)
	ctx, span := co.c.processSpan(ctx, co.queue, d)
	defer func() {
		endSpan(span, err)
		if err != nil {
			// Logged before the settle is queued, so that a message's failure is in the
			// log before the message can come back.
			co.mu.Lock()
			lost := l.lost
			co.mu.Unlock()
			co.hlog.outcome(d, err, lost, co.life.hctx.Err() != nil)
		}
		co.mu.Lock()
		co.held.finish(l, judge(err, co.life.hctx.Err() != nil))
		co.startLocked()
		co.changedLocked()
		co.mu.Unlock()
	}()
	err = co.call(ctx, d)
}

var errHandlerExited = errors.New("client: handler exited its goroutine without returning")

// call runs the handler, turning a panic into a *panicError.
func (co *consumer) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return co.handler(ctx, d)
}

// judge says what a handler's error makes of its message (see Handler); stopped says
// whether the consumer had cancelled the handler's context by stopping hard.
func judge(err error, stopped bool) verdict {
	var dl *DeadLetterError
	var ra *RetryAfterError
	switch {
	case err == nil:
		return verdict{kind: settleAck}
	case errors.As(err, &dl):
		return verdict{kind: settleDeadLetter, reason: dl.Reason, desc: dl.Description}
	case errors.As(err, &ra):
		return verdict{kind: settleNack, delay: nackDelay(ra.Delay), desc: handlerError(err), failed: true}
	case stopped:
		// Stopped hard: not the message's fault, so no backoff and no error of its own.
		return verdict{kind: settleNack, failed: true}
	default:
		return verdict{kind: settleNack, delay: -1, desc: handlerError(err), failed: true}
	}
}

// maxHandlerError is the most of a handler's error a nack carries (the server's bound).
const maxHandlerError = 1024

// handlerError is the text a nack carries of a handler's error: the server stores it with
// the message (okiba explain shows it) and makes it the description of the dead letter
// if the message runs out of deliveries. Cut at maxHandlerError bytes, on a rune's edge.
func handlerError(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= maxHandlerError {
		return s
	}
	s = s[:maxHandlerError]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// nackDelay turns a requested retry delay into one the server accepts: whole
// milliseconds, 0..7 days.
func nackDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return min(d, 7*24*time.Hour)
}
