package client

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// settle sends queued settles in batches, after AckLinger, until settleStop is closed
// and nothing is left. A settle that fails for a transient reason is retried with
// backoff while its lease lasts; after that the message comes back by itself.
func (co *consumer) settle() {
	stop := co.life.settleStop
	var timer *time.Timer
	// wait waits for the next retry to be due, or for new settles.
	wait := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-co.kicks.settle:
		}
		timer.Stop()
	}
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
			t := time.NewTimer(co.opts.AckLinger)
			select {
			case <-t.C:
			case <-stop:
			}
			t.Stop()
		}
		now := time.Now()
		var ready []*settleOp
		var next time.Time
		co.mu.Lock()
		kept := co.held.settles[:0]
		for _, op := range co.held.settles {
			notBefore := op.notBefore
			if op.kind == settleNack {
				if co.poll.nacksHeld {
					notBefore = now.Add(time.Hour) // until stopFetching kicks
				} else if co.poll.holdNacksUntil.After(notBefore) {
					notBefore = co.poll.holdNacksUntil
				}
			}
			if notBefore.After(now) {
				kept = append(kept, op)
				if next.IsZero() || notBefore.Before(next) {
					next = notBefore
				}
				continue
			}
			ready = append(ready, op)
		}
		clear(co.held.settles[len(kept):])
		co.held.settles = kept
		co.mu.Unlock()
		if len(ready) == 0 {
			wait(next.Sub(now))
			continue
		}
		for len(ready) > 0 {
			// One request per kind of settle, in order of first appearance.
			first := ready[0]
			var same, rest []*settleOp
			for _, op := range ready {
				if op.sameRequest(first) && len(same) < api.MaxBatch {
					same = append(same, op)
				} else {
					rest = append(rest, op)
				}
			}
			co.settleBatch(same)
			ready = rest
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
		errs, err = co.c.Nack(ctx, co.queue, delay, receipts...)
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
			now := time.Now()
			given := 0
			for _, op := range ops {
				op.tries++
				if !now.Before(op.l.end) {
					given++
					co.held.settled(op.l)
					continue
				}
				op.notBefore = now.Add(retryDelay(op.tries))
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
			if IsCode(e, api.CodeReceiptStale) {
				co.log.Warn("okiba: lease ended before its "+what+"; the message will be delivered again", "queue", co.queue, "message", op.l.d.ID, correlation(&op.l.d))
			} else {
				co.log.Error("okiba: settle failed", "queue", co.queue, "op", what, "message", op.l.d.ID, correlation(&op.l.d), "error", e)
			}
		}
		co.held.settled(op.l)
	}
}
