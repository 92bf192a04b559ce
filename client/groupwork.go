package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
)

// work is the goroutine of one partition held under one epoch: it runs the partition's
// records in offset order, one at a time, until the partition moves, is revoked, or the
// consumer stops.
func (gc *groupConsumer) work(p *gpart) {
	defer gc.life.workers.Done()
	defer func() {
		close(p.exited)
		kick(gc.kicks.member) // a revoke may be complete, and there is room
	}()
	var current *TopicRecord
	defer func() {
		if current != nil { // the handler ended the goroutine (runtime.Goexit)
			gc.mu.Lock()
			gc.book.finish(p, *current, recordAbandoned, gc.clock.Now())
			gc.mu.Unlock()
			gc.log.Error("okiba: handler exited its goroutine without returning; nothing more of its partition is handled here until the partition moves or the consumer restarts",
				"partition", current.Partition, "offset", current.Offset)
		}
	}()
	if p.prev != nil {
		<-p.prev // the partition's previous epoch here: its handler returns first
	}
	for {
		gc.mu.Lock()
		r, run, exit := gc.book.next(p)
		gc.mu.Unlock()
		if exit {
			return
		}
		if !run {
			select {
			case <-p.wake:
			case <-p.stop:
			}
			continue
		}
		current = &r
		out := gc.process(p, r)
		current = nil
		gc.mu.Lock()
		gc.book.finish(p, r, out, gc.clock.Now())
		// The committer learns when a commit becomes due: the first record handled
		// since the last commit starts CommitInterval, CommitRecords ends it.
		kickCommit := gc.book.handled == 1 || gc.book.handled >= gc.opts.CommitRecords
		gc.mu.Unlock()
		if kickCommit {
			kick(gc.kicks.commit)
		}
		kick(gc.kicks.member)
	}
}

// process runs the handler on r until it succeeds, the record is dead-lettered, or it is
// given up because the partition moves or the consumer stops.
func (gc *groupConsumer) process(p *gpart, r TopicRecord) recordOutcome {
	for {
		if !gc.acquire(p) {
			return recordAbandoned
		}
		err := gc.call(p.ctx, r)
		gc.release()
		if err == nil {
			return recordHandled
		}
		if p.ctx.Err() != nil {
			// Cut short: the partition moved, or the consumer stops hard. Not the
			// record's fault, and not to be committed.
			gc.mu.Lock()
			gone := p.gone
			gc.mu.Unlock()
			msg := "okiba: handler cut short by the consumer's stop; the record is handled again after a restart or by another member"
			if gone {
				msg = "okiba: handler returned after its partition moved to another member; its outcome is ignored"
			}
			gc.recordLine(slog.LevelInfo, msg, &r, err)
			return recordAbandoned
		}
		_, deadLetter, maxFailures := gc.policy()
		gc.mu.Lock()
		n := gc.book.failed(p, r.Offset)
		gc.mu.Unlock()
		var dl *DeadLetterError
		var ra *RetryAfterError
		var pe *panicError
		explicit := errors.As(err, &dl)
		exhausted := deadLetter && n >= maxFailures
		attrs := []slog.Attr{slog.Int("failures", n)}
		switch {
		case errors.As(err, &pe):
			attrs = append(attrs, slog.String("panic", fmt.Sprint(pe.value)), slog.String("stack", string(pe.stack)))
			gc.recordLine(slog.LevelError, "okiba: handler panicked", &r, err, attrs...)
		case explicit:
			gc.recordLine(slog.LevelWarn, "okiba: handler dead-lettered the record", &r, err, append(attrs, slog.String("reason", dl.Reason))...)
		case exhausted:
			gc.recordLine(slog.LevelWarn, "okiba: record failed max_failures times; dead-lettering it", &r, err, append(attrs, slog.Int("max_failures", maxFailures))...)
		case !deadLetter && n >= maxFailures:
			gc.recordLine(slog.LevelError, "okiba: record failed max_failures times; retrying it, since the group's on_failure is block (its partition waits)", &r, err, attrs...)
		default:
			gc.recordLine(slog.LevelError, "okiba: handler failed; the record will be retried (its partition waits)", &r, err, attrs...)
		}
		if explicit || exhausted {
			reason, desc := "max_failures", err.Error()
			if explicit {
				reason, desc = cmp.Or(dl.Reason, "consumer"), dl.Description
			}
			// Cut to what the broker takes, so that a long reason does not turn a dead
			// letter into a retry for ever.
			switch gc.deadLetterRecord(p, r, truncate(reason, maxReason), truncate(desc, maxDescription)) {
			case deadLettered:
				return recordDeadLettered
			case deadLetterLost:
				return recordAbandoned
			case deadLetterRefused:
				// Retried as a failure, so that the record is not lost.
			}
		}
		delay := gc.records.delay(n)
		if errors.As(err, &ra) {
			delay = max(ra.Delay, 0)
		}
		if !gc.pause(p, delay) {
			return recordAbandoned
		}
	}
}

// acquire takes a handler slot (when Concurrency bounds them); it reports false if p
// stops feeding first.
func (gc *groupConsumer) acquire(p *gpart) bool {
	if gc.sem == nil {
		return p.ctx.Err() == nil
	}
	select {
	case gc.sem <- struct{}{}:
		return true
	case <-p.stop:
		return false
	case <-p.ctx.Done():
		return false
	}
}

func (gc *groupConsumer) release() {
	if gc.sem != nil {
		<-gc.sem
	}
}

// pause waits d on the client's clock before a record's next try; it reports false if p
// stops feeding first (the record is then handled by the next owner, or after a restart).
func (gc *groupConsumer) pause(p *gpart, d time.Duration) bool {
	if d <= 0 {
		return p.ctx.Err() == nil
	}
	t := gc.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-p.stop:
		return false
	case <-p.ctx.Done():
		return false
	}
}

// call runs the handler, turning a panic into a *panicError.
func (gc *groupConsumer) call(ctx context.Context, r TopicRecord) (err error) {
	err = errHandlerExited // kept if the handler calls runtime.Goexit
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return gc.handler(ctx, r)
}

// recordLine logs a handler outcome about r, rate-limited (see handlerLog).
func (gc *groupConsumer) recordLine(level slog.Level, msg string, r *TopicRecord, err error, more ...slog.Attr) {
	attrs := append(append(gc.hlog.scope[:len(gc.hlog.scope):len(gc.hlog.scope)],
		slog.String("member", gc.name), slog.Int("partition", r.Partition), slog.Uint64("offset", r.Offset),
		slog.String("error", err.Error())), more...)
	gc.hlog.line(level, msg, attrs)
}

type deadLetterResult uint8

const (
	deadLettered      deadLetterResult = iota
	deadLetterLost                     // the partition moved or the member is gone: the record is not ours
	deadLetterRefused                  // the broker will not take it (no such endpoint, a bad reason): retry the record
)

// deadLetterRecord writes r to the group's dead-letter queue, which commits past it,
// retrying transient errors while p is held.
func (gc *groupConsumer) deadLetterRecord(p *gpart, r TopicRecord, reason, desc string) deadLetterResult {
	for try := 1; ; try++ {
		res, err := gc.deadLetterOnce(p, r, reason, desc)
		if err == nil {
			return res
		}
		gc.log.Warn("okiba: dead-lettering a record failed; retrying", "partition", r.Partition, "offset", r.Offset, "error", err)
		if !gc.pause(p, gc.retry.delay(try)) {
			return deadLetterLost
		}
	}
}

// deadLetterOnce makes one dead-letter request; a transient error is returned for the
// caller to retry.
func (gc *groupConsumer) deadLetterOnce(p *gpart, r TopicRecord, reason, desc string) (deadLetterResult, error) {
	gc.wire.Lock()
	defer gc.wire.Unlock()
	gc.mu.Lock()
	m, gone := gc.memberLocked(), p.gone
	gc.mu.Unlock()
	if gone || m.Session == "" {
		return deadLetterLost, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), consumerRequestTimeout)
	err := gc.c.DeadLetterRecord(ctx, gc.topic, gc.group, m, HandedRecord{Partition: r.Partition, Offset: r.Offset, Epoch: p.epoch}, reason, desc)
	cancel()
	gc.mu.Lock()
	defer gc.mu.Unlock()
	switch {
	case err == nil:
		// Booked before the wire is free: the broker has committed past r, and a commit
		// collected after this one must not send less.
		if !p.gone {
			p.done, p.committed = max(p.done, r.Offset+1), max(p.committed, r.Offset+1)
		}
		gc.log.Debug("okiba: record dead-lettered", "partition", r.Partition, "offset", r.Offset, "reason", reason)
		return deadLettered, nil
	case transient(err):
		return 0, err
	case IsCode(err, api.CodeEpochStale):
		gc.movedLocked(p, err)
		return deadLetterLost, nil
	case IsCode(err, api.CodeMemberUnknown):
		gc.memberLostLocked(m.Session, err)
		return deadLetterLost, nil
	case unrecoverableGroup(err):
		gc.failRequestLocked("dead-letter", err)
		return deadLetterLost, nil
	}
	gc.log.Error("okiba: dead-letter refused; retrying the record instead", "partition", r.Partition, "offset", r.Offset, "reason", reason, "error", err)
	return deadLetterRefused, nil
}

// movedLocked drops p, which a commit or dead letter found moved (epoch_stale): another
// member holds it now, or the group was sought. Logged once: p is dropped.
func (gc *groupConsumer) movedLocked(p *gpart, err error) {
	if p.gone {
		return
	}
	gc.book.drop(p)
	gc.log.Info("okiba: partition moved or was sought; dropping what is held of it", "partition", p.partition, "epoch", p.epoch, "error", err)
	kick(gc.kicks.member)
}

// memberLostLocked drops every partition when the broker no longer knows the session
// (member_unknown): the member rejoins with its next pull, and what it had not
// committed is handed out again.
func (gc *groupConsumer) memberLostLocked(session string, err error) {
	if gc.book.session != session || session == "" {
		return // already rejoined, or already lost
	}
	lost := gc.book.sessionLost()
	if gc.book.draining {
		gc.log.Warn("okiba: the member's lease ended while it stopped; what it had not committed is handed out again", "error", err)
	} else {
		gc.log.Warn("okiba: the member's lease ended; rejoining, and what it had not committed is handed out again", "partitions", len(lost), "error", err)
	}
	kick(gc.kicks.member)
}

// unrecoverableGroup reports whether err means the member cannot go on: the group or
// topic is gone, the token is wrong, or the request is one the broker will never take.
func unrecoverableGroup(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case api.CodeGroupDeleted, api.CodeGroupNotFound, api.CodeTopicNotFound, api.CodeUnauthorized, api.CodeForbidden,
		api.CodeTooManyMembers, api.CodeInvalidRequest, api.CodeInvalidName:
		return true
	}
	return false
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
