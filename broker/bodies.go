package broker

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// What the broker does when a message's body cannot be read from this node's log
// (docs/reliability.md, "Bodies that cannot be read"):
//
//   - A checksum mismatch (*wal.CorruptionError, and only that) means the bytes on disk
//     are damaged: reading again will not help. A receive quarantines the message — it
//     dead-letters it with reason corrupt (queue.Machine.Quarantine), logs its id, queue
//     and location at ERROR and counts it (BodyStats.Corrupt) — and delivers the healthy
//     messages. Where there is no dead-letter queue to move it to (a queue with
//     dead_letter_queue none, a dead-letter queue, a dead letter already corrupt), it is
//     delivered with an empty body and the HeaderCorrupt and HeaderCorruptLocation
//     headers, so that a consumer settles it instead of meeting it as a real message.
//   - Any other failure (an I/O error) may pass: the message is not leased, no delivery
//     is counted, and it stays ready for a later receive; the failure is counted
//     (BodyStats.ReadErrors) and /healthz reports the broker degraded for a minute
//     (Health). readFailureRun failed reads in a row fail the log as a failed fsync
//     does (ErrStorageFailed).
//   - A peek or a lookup by id marks a body it cannot read (HeaderCorrupt, or
//     HeaderUnreadable for an I/O error) instead of failing the page.
//
// In a cluster a node will first repair a corrupt body from a replica, and quarantine
// only a body that is bad on every replica; this node-local behaviour is what remains
// when there is nobody to ask.

// Headers of a message whose body this node cannot read, delivered or peeked with an
// empty body in place of it. A message carries them only when its body is empty;
// okiba does not stop producers from sending headers of these names, so a consumer that
// acts on them should check that the body is empty too (and, for a dead letter, that its
// reason is corrupt).
const (
	// HeaderCorrupt ("true"): the body failed its checksum.
	HeaderCorrupt = "okiba-corrupt"
	// HeaderCorruptLocation: where the damaged body lies in this node's log, as
	// "<segment file>@<offset>", such as "00000003.wal@123456".
	HeaderCorruptLocation = "okiba-corrupt-location"
	// HeaderUnreadable ("true"), on a peeked message: its body could not be read now (an
	// I/O error); a later read may succeed. A receive never delivers such a message.
	HeaderUnreadable = "okiba-unreadable"
)

const (
	// readFailureRun failed body reads in a row — no read of the log succeeding between
	// them — within readFailureWindow of the first of them fail the broker's storage,
	// as a failed write does: a device that fails every read is gone, and what it
	// acknowledges can no longer be trusted. A read failing now and then does not add up:
	// a success, or a minute, starts the count again.
	readFailureRun    = 5
	readFailureWindow = time.Minute
	// degradedFor is how long /healthz reports the broker degraded after a failed read.
	degradedFor = time.Minute
	// receiveRounds bounds the critical sections of one receive: the first leases what
	// is cached, each further one what the previous one's refusals read from the log.
	receiveRounds = 3
)

// BodyStats counts what the broker met reading message bodies since Open.
type BodyStats struct {
	// Corrupt counts bodies a receive found failing their checksum: quarantined as dead
	// letters of reason corrupt, or delivered marked where they could not move. A
	// corrupt dead letter met again is not counted again.
	Corrupt uint64
	// ReadErrors counts body reads that failed otherwise (I/O errors), by receives, peeks
	// and lookups.
	ReadErrors uint64
}

// Health is what the broker tells /healthz.
type Health struct {
	// Err is Healthy's: set when the broker refuses writes (ErrStorageFailed, ErrClosed).
	Err error
	// Degraded, when not empty, says why a broker that serves is not well: the last
	// scrub found damage, or body reads failed in the last minute.
	Degraded string
}

// bodyReads is the broker's account of body reads: counters for metrics, and the run of
// failures that decides when reads have failed for good. Its mutex is a leaf: nothing is
// locked while it is held.
type bodyReads struct {
	corrupt, errs atomic.Uint64
	failing       atomic.Bool // run > 0, so that a success costs a load when all is well

	mu       sync.Mutex
	run      int       // failed reads since the last success
	runStart time.Time // when the first of them failed
	last     time.Time // when the last read failed
	lastErr  string
}

// BodyStats returns the counts of corrupt and unreadable bodies since Open.
func (b *Broker) BodyStats() BodyStats {
	return BodyStats{Corrupt: b.reads.corrupt.Load(), ReadErrors: b.reads.errs.Load()}
}

// Health reports whether the broker accepts writes and, if it does, whether body reads
// have failed lately.
func (b *Broker) Health() Health {
	if err := b.Healthy(); err != nil {
		return Health{Err: err}
	}
	if sr, ok := b.LastScrub(); ok && len(sr.Damaged) > 0 {
		return Health{Degraded: fmt.Sprintf("the last scrub (%s) found %d damaged frames, the first %s: the log names them all; restore from a backup",
			sr.Finished.UTC().Format(time.RFC3339), len(sr.Damaged), sr.Damaged[0])}
	}
	r := &b.reads
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.IsZero() || b.clock.Now().Sub(r.last) >= degradedFor {
		return Health{}
	}
	return Health{Degraded: fmt.Sprintf("message bodies could not be read from disk (%d failed reads since start; the last at %s: %s)",
		r.errs.Load(), r.last.UTC().Format(time.RFC3339), r.lastErr)}
}

// readOK notes a body read from the log that succeeded: the run of failures ends.
func (b *Broker) readOK() {
	r := &b.reads
	if !r.failing.Load() {
		return
	}
	r.mu.Lock()
	r.run = 0
	r.failing.Store(false)
	r.mu.Unlock()
}

// readFailed notes a body read that failed with an I/O error, and fails the log when it
// completes a run of readFailureRun; it reports whether it did.
func (b *Broker) readFailed(err error) bool {
	r := &b.reads
	r.errs.Add(1)
	now := b.clock.Now()
	r.mu.Lock()
	if r.run == 0 || now.Sub(r.runStart) > readFailureWindow {
		r.run, r.runStart = 0, now
	}
	r.run++
	r.failing.Store(true)
	r.last, r.lastErr = now, err.Error()
	n := r.run
	r.mu.Unlock()
	if n < readFailureRun {
		return false
	}
	b.logger.Error("message bodies cannot be read: the broker stops accepting writes", "failed_reads", n, "within", readFailureWindow, "error", err)
	b.log.Fail(fmt.Errorf("%d reads of message bodies failed in a row, the last: %w", n, err))
	return true
}

// bodyFault is what a failed body read means.
type bodyFault uint8

const (
	faultIO      bodyFault = iota + 1 // anything but the two below: it may pass
	faultCorrupt                      // a checksum mismatch: the bytes on disk are damaged
	faultStorage                      // the log has failed or is closed: nothing can be served
)

// classify says what a body read's error means; for corruption it returns the
// log's error, which names the file and offset.
func classify(err error) (bodyFault, *wal.CorruptionError) {
	var ce *wal.CorruptionError
	switch {
	case errors.As(err, &ce):
		return faultCorrupt, ce
	case errors.Is(err, wal.ErrFailed), errors.Is(err, wal.ErrClosed):
		return faultStorage, nil
	}
	return faultIO, nil
}

// storageError is the broker's error for a read that met a failed or closed log.
func (b *Broker) storageError(err error) error {
	if errors.Is(err, wal.ErrClosed) {
		return fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	return fmt.Errorf("%w (%v)", ErrStorageFailed, err)
}

// location names where a corrupt body lies: "00000003.wal@123456".
func location(ce *wal.CorruptionError) string {
	return filepath.Base(ce.File) + "@" + strconv.FormatInt(ce.Offset, 10)
}

// corruptPayload stands in for a body that failed its checksum: empty, with the headers
// that say so and where it lies. The group is the message's, which the machine keeps.
func corruptPayload(group, loc string) *queue.Payload {
	return &queue.Payload{Body: []byte{}, Group: group, Attrs: []queue.Attr{
		{Name: HeaderCorrupt, Type: "String", Value: []byte("true")},
		{Name: HeaderCorruptLocation, Type: "String", Value: []byte(loc)},
	}}
}

// unreadablePayload stands in, on a peek, for a body that could not be read now.
func unreadablePayload(group string) queue.Payload {
	return queue.Payload{Body: []byte{}, Group: group, Attrs: []queue.Attr{{Name: HeaderUnreadable, Type: "String", Value: []byte("true")}}}
}

// corruptDead reports whether a message is a dead letter the broker quarantined.
func corruptDead(d *queue.DeadInfo) bool { return d != nil && d.Reason == queue.ReasonCorrupt }
