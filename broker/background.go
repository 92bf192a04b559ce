package broker

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// tickLoop runs the machine's time-driven work (delays ending, leases ending, dead
// letters for max_deliveries and retention) when it is due, and wakes receivers.
func (b *Broker) tickLoop(ctx context.Context) {
	for {
		b.mu.Lock()
		if b.usableLocked() != nil {
			b.mu.Unlock()
			b.nextTick.Store(math.MaxInt64)
			select {
			case <-ctx.Done():
				return
			case <-b.kickTick:
				continue
			}
		}
		now := b.nowLocked()
		next, ok := b.tickLocked(now)
		if !ok {
			next = math.MaxInt64
		}
		b.nextTick.Store(next)
		b.mu.Unlock()

		var timer <-chan time.Time
		var t interface{ Stop() bool }
		if ok {
			tm := b.clock.NewTimer(time.Duration(next-now) * time.Millisecond)
			timer, t = tm.C(), tm
		}
		select {
		case <-ctx.Done():
		case <-b.kickTick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// tickLocked runs the machine's time-driven work due at now and returns when the next is
// due (ok false: none).
func (b *Broker) tickLocked(now int64) (next int64, ok bool) {
	if b.repl != nil {
		if b.fenced || b.startCommandLocked() != nil {
			return 0, false // a follower's time moves with the leader's entries
		}
		if b.limitsTerm != b.term {
			// A new leader logs the limits its configuration asks for, once per term.
			b.limitsTerm = b.term
			if err := b.setLimitsLocked(); err != nil {
				b.logger.Warn("cannot set the configured limits", "error", err)
			}
			b.endCommandLocked(now)
			if err := b.startCommandLocked(); err != nil {
				return 0, false
			}
		}
	}
	next, ok = b.nextEventLocked()
	if ok && next <= now {
		b.sink.n, b.sink.err = 0, nil
		b.m.Tick(now, &b.sink)
		b.t.Tick(now, b.tsink)
		if b.sink.n > 0 {
			b.endCommandLocked(now)
			b.log.Commit() // nobody waits for these records
		}
		b.afterLocked()
		next, ok = b.nextEventLocked()
	}
	return next, ok
}

// nextEventLocked is the earlier of the two machines' next time-driven work.
func (b *Broker) nextEventLocked() (int64, bool) {
	next, ok := b.m.NextEvent()
	if tn, tok := b.t.NextEvent(); tok && (!ok || tn < next) {
		next, ok = tn, true
	}
	return next, ok
}

// redriveLoop drives running redrive tasks in committed batches: a task survives a
// restart because its cursor is logged with each batch.
func (b *Broker) redriveLoop(ctx context.Context) {
	for {
		b.mu.Lock()
		ids := b.m.RunningTasks()
		if !b.leadsLocked() {
			ids = nil // a follower's tasks move with the leader's entries
		}
		b.mu.Unlock()
		if len(ids) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-b.kickRedrive:
				continue
			}
		}
		pause := time.Duration(0)
		for _, id := range ids {
			d, err := b.redriveStep(ctx, id)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				b.logger.Error("redrive step failed", "task", id, "error", err)
				d = time.Second
			}
			if d > pause {
				pause = d
			}
		}
		if pause > 0 {
			t := b.clock.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-b.kickRedrive:
			case <-t.C():
			}
			t.Stop()
		}
	}
}

// redriveStep moves one batch of a task and says how long to wait before the next.
func (b *Broker) redriveStep(ctx context.Context, id uint64) (time.Duration, error) {
	var res queue.StepResult
	var task queue.Task
	err := b.do(ctx, func(now int64) error {
		t, err := b.m.Task(id)
		if err != nil {
			return err
		}
		batch := b.cfg.RedriveBatch
		if t.Rate > 0 {
			batch = min(batch, max(1, t.Rate/10)) // ten steps a second at the configured rate
		}
		res, err = b.m.RedriveStep(now, &b.sink, id, batch)
		task, _ = b.m.Task(id)
		return err
	})
	if err != nil {
		return 0, err
	}
	if res.Done {
		b.logger.Info("redrive finished", "task", id, "state", task.State.String(), "moved", task.Moved, "skipped", task.Skipped)
		return 0, nil
	}
	switch {
	case res.Paused:
		return 200 * time.Millisecond, nil
	case task.Rate > 0:
		return time.Duration(float64(res.Moved) / float64(task.Rate) * float64(time.Second)), nil
	}
	return 0, nil
}

// checkpointLoop takes checkpoints when enough log has accumulated, then deletes and
// compacts old segments.
func (b *Broker) checkpointLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kickCkpt:
		}
		if err := b.checkpoint(ctx, ckptIfWanted); err != nil && ctx.Err() == nil {
			b.logger.Error("checkpoint failed", "error", err)
		}
	}
}

// Checkpoint takes a checkpoint now and collects old segments. The broker does this by
// itself; tests and operators may force it.
func (b *Broker) Checkpoint(ctx context.Context) error { return b.checkpoint(ctx, ckptNow) }

// ckptMode says what a checkpoint is for.
type ckptMode int

const (
	ckptNow ckptMode = iota // asked for: Checkpoint
	// ckptIfWanted is the checkpointer's: it takes the checkpoint a kick asked for
	// unless one taken since has answered it. A kick the checkpointer has received
	// but not yet acted on when a Checkpoint runs is answered by that one, as the
	// kicks that arrive meanwhile are; a second right after would visit the whole
	// index again for nothing.
	ckptIfWanted
	ckptFinal // Close's: no compaction after it
)

// checkpoint writes the machine's state as of the current end of the log, once the log
// is durable up to there, then deletes segments no live message needs and compacts
// sparse ones (not for ckptFinal).
func (b *Broker) checkpoint(ctx context.Context, mode ckptMode) error {
	b.ckptMu.Lock() // one checkpoint at a time: the checkpointer, Checkpoint and Close
	defer b.ckptMu.Unlock()
	start := time.Now()
	b.mu.Lock()
	if err := b.log.Err(); err != nil {
		b.mu.Unlock()
		return err
	}
	if b.fenced {
		b.mu.Unlock()
		return ErrRebuilding // the machines hold what will not commit
	}
	if mode == ckptIfWanted && !b.ckptWanted && !b.checkpointDueLocked() {
		b.mu.Unlock()
		return nil
	}
	// In pieces of a megabyte: a large index is neither one allocation nor copied as a
	// buffer grows while the lock is held, and the pieces are written as they are. The
	// semantic snapshot and the payload store's section are written in one pass.
	locked := time.Now()
	var semantic [][]byte
	section, usage := b.store.Section(func(add func(queue.Ref, int64)) { semantic = b.m.Snapshot(add) })
	topics, topicSection := b.t.AppendSnapshot(nil), b.store.TopicSection()
	encoded := time.Since(locked)
	applied, proposal := b.applied, b.lastTicket.p
	if proposal != nil {
		b.repl.Seal() // the state ends with an entry: proposal's index says what it holds
	}
	principals := b.a.AppendSnapshot(nil)
	pos := b.log.End()
	t := b.lastTicket
	recs, msgs := b.sink.total, b.m.MessageCount()
	emptied := b.store.Emptied()
	b.mu.Unlock()
	// Everything before pos must be durable: the machine's records and the store's frames.
	if err := t.Wait(ctx); err != nil {
		return err
	}
	if err := b.store.Wait(ctx); err != nil {
		return err
	}
	if proposal != nil {
		// A leader's state holds its proposals: the checkpoint is of committed state once
		// the last of them is committed, at its index. If it fails, the state is not.
		idx, err := proposal.Wait(ctx)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		applied = max(applied, idx)
	}
	pieces := checkpointPieces(semantic, topics, principals, section, applied, topicSection)
	size := 0
	for _, c := range pieces {
		size += len(c)
	}
	if err := wal.SaveCheckpoint(b.fs, filepath.Join(b.cfg.Dir, "checkpoints"), pos, pieces...); err != nil {
		if o := b.cfg.Observer; o != nil {
			o.Checkpointed(time.Since(start), size, err)
		}
		return err
	}
	b.mu.Lock()
	b.ckptPos = pos
	b.ckptApplied = applied
	b.ckptSize = int64(size)
	b.ckptRecs, b.ckptMsgs = recs, msgs
	b.ckptEmptied = emptied
	b.ckptWanted = false
	// Commands that ended while this checkpoint was being taken asked for one by the
	// previous checkpoint's position: this one answers them (a second, right after, would
	// visit the whole index again for a few records). The next command asks again if the
	// log since pos calls for it.
	select {
	case <-b.kickCkpt:
	default:
	}
	b.mu.Unlock()
	removed, err := b.store.Collect(pos, usage)
	if err != nil {
		b.logger.Warn("segment removal failed", "error", err)
	}
	if removed > 0 {
		b.correctSpace() // what the removal freed counts at once
	}
	b.logger.Debug("checkpoint", "pos", pos.String(), "bytes", size, "messages", msgs, "segments_removed", removed,
		"duration", time.Since(start), "locked", encoded)
	if o := b.cfg.Observer; o != nil {
		o.Checkpointed(time.Since(start), size, nil)
	}
	if mode == ckptFinal {
		return nil
	}
	n, err := b.store.Compact(ctx, pos, usage, b.cfg.CompactRatio, b.cfg.SegmentSize)
	if err != nil && ctx.Err() == nil {
		b.logger.Error("compaction failed", "error", err)
	}
	if n > 0 {
		b.logger.Debug("compacted", "messages", n)
		// The next checkpoint covers the rewrites and frees the old segments, due or not.
		b.mu.Lock()
		b.ckptWanted = true
		b.mu.Unlock()
		kick(b.kickCkpt)
	}
	return nil
}

// sampleLoop records per-queue counters once a second, for rates over the last minute,
// and logs the dead letters the broker made itself (max_deliveries, expired) since the
// previous second; consumers' dead letters are logged when they are requested. logged
// holds the counts already seen at Open.
func (b *Broker) sampleLoop(ctx context.Context, logged map[string]autoDead) {
	for {
		t := b.clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		b.mu.Lock()
		now := b.nowLocked()
		cs := b.m.AllCounters()
		events := autoDeadLocked(cs, logged)
		b.mu.Unlock()
		b.rates.record(cs, now)
		for _, e := range events {
			if e.removed {
				b.logger.Info("expired and removed: the queue has no dead-letter queue", "queue", e.queue, "messages", e.n, "reason", queue.ReasonExpired)
			} else {
				b.logger.Info("dead-lettered", "queue", e.queue, "messages", e.n, "reason", e.reason)
			}
		}
	}
}

// autoDead counts a queue's dead letters made by the broker itself.
type autoDead struct{ maxDeliveries, expired, removed uint64 }

type autoDeadEvent struct {
	queue, reason string
	n             uint64
	removed       bool
}

// autoDeadLocked compares the counters with those last seen, updates seen, and returns
// what grew. It reads the counters' ByReason maps, so the caller holds b.mu.
func autoDeadLocked(cs map[string]queue.Counters, seen map[string]autoDead) []autoDeadEvent {
	var out []autoDeadEvent
	for name := range seen {
		if _, ok := cs[name]; !ok {
			delete(seen, name)
		}
	}
	for name, c := range cs {
		cur := autoDead{maxDeliveries: c.ByReason[queue.ReasonMaxDeliveries], expired: c.ByReason[queue.ReasonExpired]}
		cur.removed = c.Expired - min(c.Expired, cur.expired)
		prev, ok := seen[name]
		seen[name] = cur
		if !ok {
			prev = autoDead{} // a queue created since the last sample
		}
		if cur.maxDeliveries > prev.maxDeliveries {
			out = append(out, autoDeadEvent{queue: name, reason: queue.ReasonMaxDeliveries, n: cur.maxDeliveries - prev.maxDeliveries})
		}
		if cur.expired > prev.expired {
			out = append(out, autoDeadEvent{queue: name, reason: queue.ReasonExpired, n: cur.expired - prev.expired})
		}
		if cur.removed > prev.removed {
			out = append(out, autoDeadEvent{queue: name, n: cur.removed - prev.removed, removed: true})
		}
	}
	return out
}

// leadsLocked reports whether this broker runs the time-driven and background commands:
// always on a single node; in a cluster, while it leads.
func (b *Broker) leadsLocked() bool {
	return b.repl == nil || (!b.fenced && b.repl.Term() != 0)
}

// Lead wakes the background work of a broker whose node has just become the cluster's
// leader: the ticker, redrive tasks and subscriptions' copies, which followers leave to
// the leader.
func (b *Broker) Lead() {
	b.mu.Lock()
	defer b.mu.Unlock()
	kick(b.kickTick)
	kick(b.kickRedrive)
	kick(b.kickCopy)
}
