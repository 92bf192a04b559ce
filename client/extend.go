package client

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// extend extends held leases at about half their length, batching those due close
// together, until ctx ends.
func (co *consumer) extend(ctx context.Context) {
	if co.vis <= 0 {
		return // a zero lease ends at once: there is nothing to extend
	}
	slack := co.vis / 8 // extend leases due this soon together with the due ones
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		co.mu.Lock()
		var due []*lease
		var next time.Time
		for _, l := range co.held.leases {
			switch {
			case l.state == leaseSettling:
				// Its settle retries while the lease lasts; extending it too would let a
				// settle that keeps failing retry forever.
			case !l.extendAt.After(now.Add(slack)):
				due = append(due, l)
			case next.IsZero() || l.extendAt.Before(next):
				next = l.extendAt
			}
		}
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
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Add(-slack).Sub(now)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-co.kicks.extend:
		}
	}
}

func (co *consumer) extendBatch(ctx context.Context, ls []*lease) {
	receipts := make([]string, len(ls))
	for i, l := range ls {
		receipts[i] = l.d.Receipt
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
	errs, err := co.c.Extend(rctx, co.queue, co.vis, receipts...)
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
		retry := sent.Add(min(time.Second, max(co.vis/10, time.Millisecond)))
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
			l.end = sent.Add(co.vis)
			l.extendAt = sent.Add(co.vis / 2)
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
