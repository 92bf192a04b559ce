package client

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// fetch long-polls for as many messages as there is room for, until ctx ends or an
// unrecoverable error.
func (co *consumer) fetch(ctx context.Context) {
	wait, vis := co.opts.PollWait, co.vis
	failures := 0
	for ctx.Err() == nil {
		co.mu.Lock()
		room := co.capacity - co.waiting - co.running
		if co.draining {
			co.mu.Unlock()
			return
		}
		co.polling, co.pollStarted = room > 0, time.Now()
		co.mu.Unlock()
		if room <= 0 {
			select {
			case <-co.roomKick:
			case <-ctx.Done():
			}
			continue
		}
		// Bounded, so that a server that stops answering (a half-open connection) is
		// noticed and retried instead of stalling the consumer.
		rctx, cancel := context.WithTimeout(ctx, wait+consumerRequestTimeout)
		ds, err := co.c.Receive(rctx, co.queue, ReceiveOptions{Max: min(room, api.MaxBatch), Wait: &wait, Visibility: &vis})
		cancel()
		at := time.Now()
		co.mu.Lock()
		co.polling = false
		co.pollCut = err != nil && ctx.Err() != nil
		if len(ds) > 0 {
			co.addLocked(ds, at)
		}
		co.mu.Unlock()
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !transient(err) {
			co.fail(fmt.Errorf("client: consume %s: %w", co.queue, err))
			return
		}
		failures++
		co.log.Warn("okiba: receive failed; retrying", "queue", co.queue, "error", err, "failures", failures)
		if !sleepCtx(ctx, retryDelay(failures)) {
			return
		}
	}
}

// addLocked takes in received deliveries (at is when the answer arrived) and starts
// handlers for them if there is room.
func (co *consumer) addLocked(ds []Delivery, at time.Time) {
	for i := range ds {
		l := &lease{d: ds[i], end: at.Add(co.vis), extendAt: at.Add(co.vis / 2)}
		if old := co.leases[l.d.ID]; old != nil {
			// Delivered again: the old lease has ended, whatever this process thought.
			co.log.Warn("okiba: message delivered again while held; its earlier lease was lost", "queue", co.queue, "message", l.d.ID, correlation(&l.d))
			co.loseLocked(old)
		}
		co.leases[l.d.ID] = l
		if co.draining {
			co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
			continue
		}
		co.waiting++
		if key := l.d.Group; key != "" {
			g := co.groups[key]
			if g == nil {
				g = &group{key: key, current: l}
				co.groups[key] = g
				co.runnable = append(co.runnable, l)
			} else {
				g.behind = append(g.behind, l)
			}
			l.grp = g
		} else {
			co.runnable = append(co.runnable, l)
		}
	}
	co.startLocked()
	kick(co.extendKick)
}

// startLocked starts handlers for runnable messages while there is room.
func (co *consumer) startLocked() {
	for !co.draining && co.running < co.opts.Concurrency && len(co.runnable) > 0 {
		l := co.runnable[0]
		co.runnable[0] = nil
		co.runnable = co.runnable[1:]
		co.waiting--
		co.running++
		l.state = leaseRunning
		ctx, cancel := context.WithCancel(co.hctx)
		l.cancel = cancel
		d := l.d // the handler's own copy
		co.handlers.Add(1)
		go co.handle(ctx, l, &d)
	}
}
