package client

import (
	"context"
	"time"

	"github.com/okiba/okiba/api"
)

// committer is the committer's goroutine: it commits handled records when the book
// says they are due (CommitInterval after the first, or CommitRecords of them), until
// stop is closed. Other commits — before a pull or heartbeat, at a revoke, at the end —
// are made by whoever needs them, through commitPending as well.
func (gc *groupConsumer) committer(stop <-chan struct{}) {
	wake := alarm{clock: gc.clock}
	defer wake.stop()
	for {
		gc.mu.Lock()
		due := gc.book.commitDue(gc.opts.CommitInterval, gc.opts.CommitRecords)
		if !due.IsZero() && gc.commitRetryAt.After(due) {
			due = gc.commitRetryAt
		}
		gc.mu.Unlock()
		if !due.IsZero() && !due.After(gc.clock.Now()) {
			gc.commitPending()
			continue
		}
		select {
		case <-stop:
			return
		case <-gc.kicks.commit:
		case <-wake.set(due):
			wake.rang()
		}
	}
}

// commitPending commits, in one request, each held partition's handled offset that is
// past its committed one, and books the answers.
func (gc *groupConsumer) commitPending() {
	gc.wire.Lock()
	defer gc.wire.Unlock()
	gc.mu.Lock()
	offs, ps := gc.book.toCommit()
	m := gc.memberLocked()
	gc.mu.Unlock()
	if len(offs) == 0 || m.Session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), consumerRequestTimeout)
	errs, err := gc.c.Commit(ctx, gc.topic, gc.group, m, offs...)
	cancel()
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if err != nil {
		switch {
		case IsCode(err, api.CodeMemberUnknown):
			gc.memberLostLocked(m.Session, err)
		case transient(err):
			// Kept: the offsets are collected again when the retry is due.
			gc.commitFailures++
			now := gc.clock.Now()
			gc.commitRetryAt = now.Add(gc.retry.delay(gc.commitFailures))
			if gc.book.handled == 0 {
				gc.book.handled, gc.book.pendingSince = 1, now
			}
			kick(gc.kicks.commit) // the committer times the retry
			gc.log.Warn("okiba: commit failed; retrying", "partitions", len(offs), "failures", gc.commitFailures, "error", err)
		default:
			gc.failRequestLocked("commit", err)
		}
		return
	}
	gc.commitFailures, gc.commitRetryAt = 0, time.Time{}
	for i, e := range errs {
		p := ps[i]
		switch {
		case e == nil:
			p.committed = max(p.committed, offs[i].Offset)
		case IsCode(e, api.CodeEpochStale):
			gc.movedLocked(p, e)
		case p.gone:
		case IsCode(e, api.CodeOffsetRegressed):
			// The broker has committed past this offset already (retention passed the
			// group): nothing of it is owed, and the next answer says how far.
			p.committed = max(p.committed, offs[i].Offset)
		default:
			// offset_out_of_range: this process's book of the partition disagrees with
			// the broker's. Rejoining starts every partition
			// again from the committed offsets.
			gc.log.Error("okiba: commit refused; rejoining the group to start again from the committed offsets",
				"partition", p.partition, "offset", offs[i].Offset, "epoch", p.epoch, "error", e)
			gc.memberLostLocked(m.Session, e)
		}
	}
}
