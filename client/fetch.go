package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// fetch long-polls for as many messages as there is room for, until ctx ends or an
// unrecoverable error.
func (co *consumer) fetch(ctx context.Context) {
	wait, vis := co.opts.PollWait, co.sched.vis
	failures, unreadable := 0, 0
	for ctx.Err() == nil {
		co.mu.Lock()
		room := co.held.room()
		if co.held.draining {
			co.mu.Unlock()
			return
		}
		co.poll.open, co.poll.started = room > 0, clock.Real.Now()
		co.mu.Unlock()
		if room <= 0 {
			select {
			case <-co.kicks.room:
			case <-ctx.Done():
			}
			continue
		}
		// Bounded, so that a server that stops answering (a half-open connection) is
		// noticed and retried instead of stalling the consumer.
		rctx, cancel := context.WithTimeout(ctx, wait+consumerRequestTimeout)
		ds, err := co.c.Receive(rctx, co.queue, ReceiveOptions{Max: min(room, api.MaxBatch), Wait: &wait, Visibility: &vis})
		cancel()
		at := co.clock.Now()
		co.mu.Lock()
		co.poll.open = false
		co.poll.cut = err != nil && ctx.Err() != nil
		if len(ds) > 0 {
			co.addLocked(ds, at)
		}
		co.mu.Unlock()
		if err == nil {
			failures, unreadable = 0, 0
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
		switch {
		case errors.Is(err, ErrUnreadableAnswer) && unreadable > 0:
			// Logged once until a receive succeeds: something between the client and the
			// broker answers in its own way, and says nothing new each time.
			co.log.Debug("okiba: receive answer unreadable again; retrying", "queue", co.queue, "error", err, "failures", failures)
			unreadable++
		case errors.Is(err, ErrUnreadableAnswer):
			co.log.Warn("okiba: a receive's answer cannot be read; retrying (logged once until one succeeds)", "queue", co.queue, "error", err)
			unreadable++
		default:
			co.log.Warn("okiba: receive failed; retrying", "queue", co.queue, "error", err, "failures", failures)
		}
		if !sleep(ctx, co.clock, co.retry.delay(failures)) {
			return
		}
	}
}

// addLocked takes in received deliveries (at is when the answer arrived) and starts
// handlers for them if there is room.
func (co *consumer) addLocked(ds []Delivery, at time.Time) {
	for i := range ds {
		l := &lease{d: ds[i]}
		co.sched.renew(l, at)
		if old := co.held.leases[l.d.ID]; old != nil {
			// Delivered again: the old lease has ended, whatever this process thought.
			co.log.Warn("okiba: message delivered again while held; its earlier lease was lost", "queue", co.queue, "message", l.d.ID, correlation(&l.d))
			co.held.lose(old)
		}
		co.held.add(l)
	}
	co.startLocked()
	co.changedLocked()
	kick(co.kicks.extend)
}
