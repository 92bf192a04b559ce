package client

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// extendSchedule decides when leases are extended: an eighth of the lease before half of
// it has passed (at 3/8), so that a failed extension leaves most of the lease to retry
// in, together with every other lease due by then, so that leases received together
// travel in one request and keep doing so. It reads no clock: the extender passes the
// time.
type extendSchedule struct {
	vis time.Duration // the lease asked for; 0: a lease ends at once, nothing is extended
}

// renew records that l was received, or extended, by a request sent at at.
func (s extendSchedule) renew(l *lease, at time.Time) {
	l.end = at.Add(s.vis)
	l.extendAt = at.Add(s.vis / 2)
}

// retryAt is when to try again an extension sent at sent that failed: a tenth of the
// lease later, between 1ms and 1s, well before the lease ends.
func (s extendSchedule) retryAt(sent time.Time) time.Time {
	return sent.Add(min(time.Second, max(s.vis/10, time.Millisecond)))
}

// due returns the leases to extend at now, and when the next one falls due (the zero
// time when no lease waits for an extension). A lease being settled is not extended: its
// settle retries while the lease lasts, and extending it too would let a settle that
// keeps failing retry forever.
func (s extendSchedule) due(now time.Time, leases map[string]*lease) (due []*lease, wake time.Time) {
	slack := s.vis / 8
	var next time.Time
	for _, l := range leases {
		switch {
		case l.state == leaseSettling:
		case !l.extendAt.After(now.Add(slack)):
			due = append(due, l)
		case next.IsZero() || l.extendAt.Before(next):
			next = l.extendAt
		}
	}
	if next.IsZero() {
		return due, time.Time{}
	}
	return due, next.Add(-slack)
}

// extend is the extender's goroutine: it extends held leases when the schedule says,
// until ctx ends.
func (co *consumer) extend(ctx context.Context) {
	if co.sched.vis <= 0 {
		return // a zero lease ends at once: there is nothing to extend
	}
	wake := alarm{clock: co.clock}
	defer wake.stop()
	for {
		co.mu.Lock()
		due, next := co.sched.due(co.clock.Now(), co.held.leases)
		co.mu.Unlock()
		if len(due) > 0 {
			for len(due) > 0 && ctx.Err() == nil {
				n := min(len(due), api.MaxBatch)
				co.extendBatch(ctx, due[:n])
				due = due[n:]
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake.set(next):
			wake.rang()
		case <-co.kicks.extend:
		}
	}
}

func (co *consumer) extendBatch(ctx context.Context, ls []*lease) {
	receipts := make([]string, len(ls))
	for i, l := range ls {
		receipts[i] = l.d.Receipt
	}
	sent := co.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
	errs, err := co.c.Extend(rctx, co.queue, co.sched.vis, receipts...)
	cancel()
	if ctx.Err() != nil {
		return
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if err != nil {
		if !transient(err) {
			co.fail(fmt.Errorf("client: consume %s: extend leases: %w", co.queue, err))
		}
		co.log.Warn("okiba: extending leases failed; retrying", "queue", co.queue, "leases", len(ls), "error", err)
		retry := co.sched.retryAt(sent)
		for _, l := range ls {
			l.extendAt = retry
		}
		return
	}
	for i, l := range ls {
		if co.held.leases[l.d.ID] != l {
			continue // settled or replaced meanwhile
		}
		if errs[i] == nil {
			co.sched.renew(l, sent)
			continue
		}
		if l.state == leaseSettling {
			// Most likely settled while the extension was in flight; the settle's answer
			// tells. Stop extending it.
			l.extendAt = l.end.Add(time.Hour)
			continue
		}
		co.log.Warn("okiba: lease lost; another consumer may have the message", "queue", co.queue, "message", l.d.ID, correlation(&l.d), "error", errs[i])
		co.loseLocked(l)
	}
}
