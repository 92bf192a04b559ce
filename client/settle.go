package client

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// readySettles takes the settles that may leave at now out of queued (whose array it
// reuses) and returns them, the rest, and when the first of the rest may leave (the zero
// time when none waits for a time). While holdNacks, nacks wait without a time: the stop
// releases them (stopFetching).
func readySettles(queued []*settleOp, now time.Time, holdNacks bool) (ready, waiting []*settleOp, next time.Time) {
	waiting = queued[:0]
	for _, op := range queued {
		if op.kind == settleNack && holdNacks {
			waiting = append(waiting, op)
			continue
		}
		if op.notBefore.After(now) {
			waiting = append(waiting, op)
			if next.IsZero() || op.notBefore.Before(next) {
				next = op.notBefore
			}
			continue
		}
		ready = append(ready, op)
	}
	clear(queued[len(waiting):])
	return ready, waiting, next
}

// settleRequests groups ready settles into requests: one per kind of settle (equal
// kind, delay, reason and description), in order of first appearance, of at most
// api.MaxBatch each.
func settleRequests(ready []*settleOp) [][]*settleOp {
	var reqs [][]*settleOp
	for len(ready) > 0 {
		first := ready[0]
		var same, rest []*settleOp
		for _, op := range ready {
			if op.sameRequest(first) && len(same) < api.MaxBatch {
				same = append(same, op)
			} else {
				rest = append(rest, op)
			}
		}
		reqs = append(reqs, same)
		ready = rest
	}
	return reqs
}

// settle is the settler's goroutine: it sends queued settles in batches, after
// AckLinger, until settleStop is closed and nothing is left. A settle that fails for a
// transient reason is retried with backoff while its lease lasts; after that the message
// comes back by itself.
func (co *consumer) settle() {
	stop := co.life.settleStop
	wake := alarm{clock: co.clock}
	defer wake.stop()
	holdEnds := alarm{clock: clock.Real} // the end of a hold on nacks, which measures the network
	defer holdEnds.stop()
	for {
		co.mu.Lock()
		n := len(co.held.settles)
		co.mu.Unlock()
		stopping := false
		select {
		case <-stop:
			stopping = true
		default:
		}
		if n == 0 {
			if stopping {
				return
			}
			select {
			case <-co.kicks.settle:
			case <-stop:
			}
			continue
		}
		if co.opts.AckLinger > 0 && !stopping {
			select {
			case <-wake.set(co.clock.Now().Add(co.opts.AckLinger)):
				wake.rang()
			case <-stop:
			}
		}
		now := co.clock.Now()
		co.mu.Lock()
		holdNacks, release := co.poll.nackHold(clock.Real.Now())
		ready, waiting, next := readySettles(co.held.settles, now, holdNacks)
		co.held.settles = waiting
		co.mu.Unlock()
		if len(ready) == 0 {
			select {
			case <-wake.set(next):
				wake.rang()
			case <-holdEnds.set(release):
				holdEnds.rang()
			case <-co.kicks.settle:
			}
			continue
		}
		for _, ops := range settleRequests(ready) {
			co.settleBatch(ops)
		}
	}
}

func (co *consumer) settleBatch(ops []*settleOp) {
	receipts := make([]string, len(ops))
	for i, op := range ops {
		receipts[i] = op.l.d.Receipt
	}
	op0 := ops[0]
	ctx, cancel := context.WithTimeout(context.Background(), consumerRequestTimeout)
	var errs []error
	var err error
	what := "ack"
	switch op0.kind {
	case settleAck:
		errs, err = co.c.Ack(ctx, co.queue, receipts...)
	case settleNack:
		what = "nack"
		var delay *time.Duration
		if op0.delay >= 0 {
			delay = &op0.delay
		}
		errs, err = co.c.NackError(ctx, co.queue, delay, op0.desc, receipts...)
	case settleDeadLetter:
		what = "dead-letter"
		errs, err = co.c.DeadLetter(ctx, co.queue, op0.reason, op0.desc, receipts...)
	}
	cancel()
	co.mu.Lock()
	defer co.mu.Unlock()
	if err != nil {
		switch {
		case transient(err):
			now := co.clock.Now()
			given := 0
			for _, op := range ops {
				op.tries++
				if !now.Before(op.l.end) {
					given++
					co.held.settled(op.l)
					continue
				}
				op.notBefore = now.Add(co.retry.delay(op.tries))
				co.held.settles = append(co.held.settles, op)
			}
			co.log.Warn("okiba: settle failed; retrying while the leases last", "queue", co.queue, "op", what,
				"messages", len(ops), "given_up", given, "error", err)
			kick(co.kicks.settle)
		case op0.kind == settleDeadLetter && !unrecoverable(err):
			// For example no_dead_letter_queue or an invalid reason: retry the message
			// instead, so that it is not lost.
			co.log.Error("okiba: dead-letter refused; nacking instead", "queue", co.queue, "reason", op0.reason,
				"messages", len(ops), "error", err)
			for _, op := range ops {
				co.held.settles = append(co.held.settles, &settleOp{l: op.l, kind: settleNack, delay: -1})
			}
			kick(co.kicks.settle)
		default:
			co.log.Error("okiba: settle failed", "queue", co.queue, "op", what, "messages", len(ops), "error", err)
			for _, op := range ops {
				co.held.settled(op.l)
			}
			if unrecoverable(err) {
				co.fail(fmt.Errorf("client: consume %s: %s: %w", co.queue, what, err))
			}
		}
		return
	}
	for i, op := range ops {
		if e := errs[i]; e != nil {
			if op.kind == settleAck && op.tries > 0 && IsCode(e, api.CodeAlreadySettled) {
				// A retried ack whose first try took effect (its answer was lost): done.
				co.log.Debug("okiba: retried ack found its message already settled", "queue", co.queue, "message", op.l.d.ID)
			} else if IsCode(e, api.CodeReceiptStale) {
				co.log.Warn("okiba: lease ended before its "+what+"; the message will be delivered again", "queue", co.queue, "message", op.l.d.ID, correlation(&op.l.d))
			} else if IsCode(e, api.CodeAlreadySettled) {
				co.log.Warn("okiba: message already settled before its "+what+" (acked, dead-lettered, deleted or purged elsewhere)", "queue", co.queue, "message", op.l.d.ID, correlation(&op.l.d))
			} else {
				co.log.Error("okiba: settle failed", "queue", co.queue, "op", what, "message", op.l.d.ID, correlation(&op.l.d), "error", e)
			}
		}
		co.held.settled(op.l)
	}
}
