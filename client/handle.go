package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
)

func (co *consumer) handle(ctx context.Context, l *lease, d *Delivery) {
	defer co.handlers.Done()
	err := errHandlerExited // kept if the handler calls runtime.Goexit (t.FailNow in a test)
	ctx, span := co.c.processSpan(ctx, co.queue, d)
	defer func() {
		endSpan(span, err)
		co.mu.Lock()
		co.finishLocked(l, err)
		co.mu.Unlock()
		kick(co.roomKick)
	}()
	err = co.call(ctx, d)
}

var errHandlerExited = errors.New("client: handler exited its goroutine without returning")

// call runs the handler, turning a panic into an error.
func (co *consumer) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			co.log.Error("okiba: handler panicked; the message will be retried", "queue", co.queue, "message", d.ID,
				correlation(d), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("client: handler panicked: %v", r)
		}
	}()
	return co.handler(ctx, d)
}

// finishLocked settles a message by what its handler returned and moves its group on.
func (co *consumer) finishLocked(l *lease, err error) {
	l.cancel()
	co.running--
	failed := false
	var dl *DeadLetterError
	var ra *RetryAfterError
	switch {
	case l.lost:
		l.state = leaseGone
		co.forgetLocked(l)
	case err == nil:
		co.queueSettleLocked(&settleOp{l: l, kind: settleAck})
	case errors.As(err, &dl):
		co.queueSettleLocked(&settleOp{l: l, kind: settleDeadLetter, reason: dl.Reason, desc: dl.Description})
	case errors.As(err, &ra):
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack, delay: nackDelay(ra.Delay)})
	case co.hctx.Err() != nil:
		// Stopped hard: not the message's fault, so no backoff.
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
	default:
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack, delay: -1})
	}
	if g := l.grp; g != nil {
		if failed {
			co.nackWaitingLocked(g.behind)
			g.behind = nil
		}
		if len(g.behind) > 0 {
			g.current = g.behind[0]
			g.behind[0] = nil
			g.behind = g.behind[1:]
			co.runnable = append(co.runnable, g.current)
		} else if co.groups[g.key] == g {
			delete(co.groups, g.key)
		}
	}
	co.startLocked()
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

// nackWaitingLocked hands back messages that were never started (delay 0: they did not
// fail).
func (co *consumer) nackWaitingLocked(ls []*lease) {
	for _, l := range ls {
		co.waiting--
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
	}
}

// loseLocked drops a lease that has ended under this process (an extension answered
// receipt_stale, or the message was delivered again). A running handler's context is
// cancelled and its outcome will be ignored. The messages of its group held behind it
// are handed back, since running them now would overtake it.
func (co *consumer) loseLocked(l *lease) {
	switch l.state {
	case leaseWaiting:
		co.waiting--
		l.state = leaseGone
		co.forgetLocked(l)
		g := l.grp
		switch {
		case g == nil:
			co.removeRunnableLocked(l)
		case g.current == l:
			co.removeRunnableLocked(l)
			co.nackWaitingLocked(g.behind)
			g.behind = nil
			if co.groups[g.key] == g {
				delete(co.groups, g.key)
			}
		default:
			i := slices.Index(g.behind, l)
			if i < 0 {
				break
			}
			rest := slices.Clone(g.behind[i+1:])
			g.behind = g.behind[:i]
			co.nackWaitingLocked(rest)
		}
		kick(co.roomKick)
	case leaseRunning:
		l.lost = true
		l.cancel()
		if g := l.grp; g != nil {
			co.nackWaitingLocked(g.behind)
			g.behind = nil
			kick(co.roomKick)
		}
	case leaseSettling, leaseGone:
		// The settle's answer says what happened.
	}
}

func (co *consumer) removeRunnableLocked(l *lease) {
	if i := slices.Index(co.runnable, l); i >= 0 {
		co.runnable = slices.Delete(co.runnable, i, i+1)
	}
}

// forgetLocked stops tracking l (unless a newer lease of the message replaced it).
func (co *consumer) forgetLocked(l *lease) {
	if co.leases[l.d.ID] == l {
		delete(co.leases, l.d.ID)
	}
}

// beginDrainLocked stops starting handlers and hands back every message that has not
// started. A group's messages behind a running one are handed back too; the group's
// order holds because the running one keeps its lease until it is settled.
func (co *consumer) beginDrainLocked() {
	co.draining = true
	co.nackWaitingLocked(co.runnable)
	co.runnable = nil
	for key, g := range co.groups {
		co.nackWaitingLocked(g.behind)
		g.behind = nil
		if g.current.state != leaseRunning {
			delete(co.groups, key)
		}
	}
}
