package client

import (
	"context"
	"time"

	"github.com/okiba/okiba/api"
)

// member is the member loop's goroutine: the only one that pulls and heartbeats, and so
// the owner of the member's session and assignment as the broker answers them. It pulls
// while there is room for records and heartbeats while there is not (a third of the
// member lease after its last call), rejoins when the session is lost, and holds its
// calls while a revoked partition finishes, until ctx ends. Pulls use pullCtx, which
// ends when the drain begins; from then on it only heartbeats, so that the partitions
// stay while the handlers finish.
func (gc *groupConsumer) member(ctx, pullCtx context.Context) {
	var lastCall time.Time // when the last answered call was sent, by the client's clock
	failures := 0
	threshold := max(1, gc.opts.MaxRecords/2)
	wake := alarm{clock: gc.clock}
	defer wake.stop()
	for ctx.Err() == nil {
		lease, _, _ := gc.policy()
		gc.mu.Lock()
		session := gc.book.session
		draining := gc.book.draining || pullCtx.Err() != nil
		revoking, ready := gc.book.revokeReady()
		room := gc.book.room(gc.opts.MaxRecords)
		gc.mu.Unlock()

		pull, idle := false, false
		at := lastCall.Add(lease / 3) // when a heartbeat is due
		switch {
		case draining && session == "":
			idle = true // gone: nothing is left to keep
		case draining:
		case session == "":
			pull, at = true, time.Time{}
		case revoking && !ready:
			// Hold the call (which lets go of the partition) until its running record is
			// handled and committed, or the lease needs the call.
		case revoking || room >= threshold:
			pull, at = room >= threshold, time.Time{}
		}
		if idle {
			select {
			case <-ctx.Done():
			case <-gc.kicks.member:
			}
			continue
		}
		if !at.IsZero() && gc.clock.Now().Before(at) {
			select {
			case <-ctx.Done():
			case <-gc.kicks.member:
			case <-wake.set(at):
				wake.rang()
			}
			continue
		}

		// What was handled is committed first: the call may let go of partitions, and
		// what a partition's next owner finds committed it does not handle again.
		if session != "" {
			gc.commitPending()
		}
		gc.mu.Lock()
		m := gc.memberLocked()
		gc.mu.Unlock()
		if m.Session == "" {
			if draining {
				continue
			}
			pull = true // rejoin
		}
		sent := gc.clock.Now()
		var res *PullResult
		var err error
		what := "heartbeat"
		if pull {
			what = "pull"
			wait := min(gc.opts.PollWait, lease/3).Truncate(time.Millisecond)
			rctx, cancel := context.WithTimeout(pullCtx, wait+consumerRequestTimeout)
			res, err = gc.c.Pull(rctx, gc.topic, gc.group, m, PullOptions{Max: min(max(room, 1), api.MaxReadRecords), Wait: wait})
			cancel()
		} else {
			rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
			res, err = gc.c.Heartbeat(rctx, gc.topic, gc.group, m)
			cancel()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if pull && pullCtx.Err() != nil {
				continue // the drain cut the pull; what it was handed is committed by nobody
			}
			gc.mu.Lock()
			switch {
			case IsCode(err, api.CodeMemberUnknown):
				gc.memberLostLocked(m.Session, err)
				gc.mu.Unlock()
				gc.refreshPolicy(ctx)
				continue
			case !transient(err):
				gc.failRequestLocked(what, err)
				gc.mu.Unlock()
				return
			}
			gc.mu.Unlock()
			failures++
			gc.log.Warn("okiba: "+what+" failed; retrying", "error", err, "failures", failures)
			if !sleep(ctx, gc.clock, gc.retry.delay(failures)) {
				return
			}
			continue
		}
		failures, lastCall = 0, sent
		gc.mu.Lock()
		if m.Session != "" && gc.book.session != m.Session {
			// A commit found the session lost while this call was under way: its answer
			// is about a session that has ended. Rejoin.
			gc.mu.Unlock()
			continue
		}
		ap := gc.book.apply(res.Session, res.Assignment, res.Records)
		gc.startLocked(ap.started)
		gc.mu.Unlock()
		for _, p := range ap.lost {
			gc.log.Info("okiba: partition moved or was sought; dropping what is held of it", "partition", p.partition, "epoch", p.epoch)
		}
		if len(ap.handedLost) > 0 || len(ap.unrevoked) > 0 {
			if len(ap.handedLost) > 0 {
				gc.log.Warn("okiba: records handed to this member never reached it; rejoining so that they are handed again",
					"partitions", ap.handedLost)
			} else {
				gc.log.Info("okiba: partitions being revoked stay with this member after all; rejoining so that what it set aside is handed again",
					"partitions", ap.unrevoked)
			}
			// What was handled is committed first: a rejoin starts every partition again
			// from the committed offsets.
			gc.commitPending()
			gc.mu.Lock()
			if gc.book.session == res.Session {
				gc.book.sessionLost()
			}
			gc.mu.Unlock()
		}
	}
}

// refreshPolicy reads the group's configuration again after the member's lease ended,
// since a shorter lease may be why; on failure it keeps what it had.
func (gc *groupConsumer) refreshPolicy(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
	defer cancel()
	if g, err := gc.c.Group(rctx, gc.topic, gc.group); err == nil {
		gc.configure(g)
	}
}
