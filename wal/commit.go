package wal

import (
	"fmt"
	"os"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// flushLoop is the background committer. Each cycle takes everything
// appended since the last one (the appenders meanwhile fill a fresh batch),
// writes it at its offsets, fsyncs once, publishes the new durable position
// and wakes every waiter of the batch by closing one channel. With nothing
// pending it sleeps on l.wake: no timers, so a lone record is committed at
// once and a crowd shares one fsync.
//
// A waiter whose batch is still pending while no cycle runs commits it
// itself (see lead), so the common case of one writer waiting for its own
// record pays no hand-off to this goroutine and back. l.inflight, set while a
// cycle runs, makes sure that exactly one goroutine runs a cycle at a time;
// this loop covers the records nobody waits for (see Commit), and the batches
// that filled while another cycle ran.
//
// Any I/O error fails the log for good (see ErrFailed) and ends the loop.
func (l *Log) flushLoop() {
	defer close(l.flusherDone)
	for {
		l.mu.Lock()
		for l.inflight != nil || (l.pending.records == 0 && !l.closed && l.failed == nil) {
			l.wake.Wait()
		}
		if l.failed != nil { // a waiter's cycle failed the log
			l.mu.Unlock()
			return
		}
		if l.pending.records == 0 { // closed, and nothing left to write
			l.mu.Unlock()
			return
		}
		b := l.takeLocked()
		l.mu.Unlock()
		if !l.cycle(b) {
			return
		}
	}
}

// lead commits b in the calling goroutine if b is the pending batch and no
// cycle is running; otherwise it returns at once and the caller waits for
// b.done. It does not watch a context: once started, a cycle is one write
// and one fsync, and abandoning it would leave the batch to nobody.
func (l *Log) lead(b *batch) {
	l.mu.Lock()
	if l.inflight != nil || l.pending != b || b.records == 0 || l.failed != nil {
		l.mu.Unlock()
		return
	}
	b = l.takeLocked()
	l.mu.Unlock()
	l.cycle(b)
}

// takeLocked starts a cycle: the caller becomes the only committer and
// takes the pending batch, which holds records, sealed with its trailer; a
// fresh one replaces it.
func (l *Log) takeLocked() *batch {
	b := l.pending
	l.sealLocked(b)
	l.pending = l.newBatchLocked()
	l.inflight = b
	return b
}

// cycle writes and fsyncs b, taken by takeLocked, publishes its durability
// (or fails the log) and ends the cycle. It reports whether the log is
// still usable.
func (l *Log) cycle(b *batch) bool {
	var c Commit
	var t0 time.Time
	if l.observer != nil {
		c.Records, c.Bytes, l.syncTime = b.records, len(b.buf), 0
		t0 = time.Now()
	}
	err := l.commit(b)
	if l.observer != nil {
		c.Sync = l.syncTime
		c.Write = time.Since(t0) - c.Sync
	}

	l.mu.Lock()
	l.inflight = nil
	if err != nil {
		l.failLocked(err, b)
		l.wake.Signal() // the flusher ends too
		l.mu.Unlock()
		return false
	}
	l.durable = b.end
	for _, sp := range b.spans {
		if s := l.segments[sp.seg]; s != nil {
			s.used = sp.off + int64(sp.hi-sp.lo)
		}
	}
	if cap(b.buf) <= maxSpare && l.spare == nil {
		l.spare = b.buf[:0]
	}
	b.buf, b.spans = nil, nil
	// Closed under the lock, so that batches complete in order even when the
	// next cycle runs in another goroutine.
	close(b.done)
	if l.pending.records > 0 || l.closed {
		l.wake.Signal() // work for the flusher, which waited for this cycle
	}
	l.mu.Unlock()
	if l.observer != nil {
		c.Wait = time.Since(b.first)
		l.observer.Committed(c)
	}
	return true
}

// failLocked makes the log failed for good and fails the batches that will
// now never be durable: b (the one being written, if any) and the pending
// one.
//
// The log may have failed already (Fail, then a cycle that was running fails too): the
// first failure stays the log's, and a batch is failed once.
func (l *Log) failLocked(cause error, b *batch) {
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %w", ErrFailed, cause)
		l.logger.Error("wal: log failed; every later append fails until the log is reopened", "err", cause)
	}
	for _, x := range []*batch{b, l.pending} {
		if x != nil && x.err == nil {
			x.err = l.failed
			close(x.done)
		}
	}
}

// Fail stops the log for good, as a failed write or fsync does: every later Append, and
// every wait for a record not yet durable, fails with an error wrapping ErrFailed and
// cause. It is for a caller that finds the storage under the log unusable by other means
// (the broker, when reads of bodies keep failing), so that nothing more is acknowledged
// on a device it no longer trusts; the way on is the same, to close the log and open it
// again. Records already durable stay readable. Fail does nothing on a log that has
// failed or is closed.
func (l *Log) Fail(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil || l.closed {
		return
	}
	l.failLocked(cause, nil)
	l.wake.Signal() // the flusher ends
}

// commit writes b and fsyncs it. A batch crossing into a new segment first
// fsyncs the old one: recovery treats any damage in a segment that has a
// successor as corruption, which is only sound if a segment is complete on
// disk before its successor receives anything.
func (l *Log) commit(b *batch) error {
	for _, sp := range b.spans {
		if sp.seg != l.w.idx {
			if err := l.roll(sp.seg); err != nil {
				return err
			}
		}
		if _, err := l.w.f.WriteAt(b.buf[sp.lo:sp.hi], sp.off); err != nil {
			return fmt.Errorf("write %s at offset %d: %w", l.w.path, sp.off, err)
		}
		l.wDirty = true
	}
	if err := l.syncW(); err != nil {
		return err
	}
	l.stats.batches.Add(1)
	l.stats.records.Add(uint64(b.records))
	l.stats.bytes.Add(uint64(len(b.buf)))
	return nil
}

func (l *Log) syncW() error {
	if !l.wDirty {
		return nil
	}
	var t0 time.Time
	if l.observer != nil {
		t0 = time.Now()
	}
	if err := l.w.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.w.path, err)
	}
	if l.observer != nil {
		l.syncTime += time.Since(t0)
	}
	l.wDirty = false
	l.stats.syncs.Add(1)
	return nil
}

// roll moves the flusher to segment idx, the successor of the current one.
func (l *Log) roll(idx uint32) error {
	if idx != l.w.idx+1 {
		return fmt.Errorf("internal error: roll from segment %d to %d", l.w.idx, idx)
	}
	if err := l.syncW(); err != nil {
		return err
	}
	var seg *segment
	if p := l.prep; p != nil && p.idx == idx {
		<-p.done
		l.prep = nil
		seg = p.seg // nil when it was skipped for want of room, or failed: try again now
	}
	if seg == nil {
		var err error
		if seg, err = l.createSegment(idx); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.segments[idx] = seg
	l.mu.Unlock()
	l.w = seg
	if !l.noPrecreate {
		l.startPrepare(idx + 1)
	}
	return nil
}

// startPrepare creates segment idx in the background, if Options.Room says
// there is room for it. Neither the want of room nor a failure fails the
// log: nothing needs the segment yet, and the roll creates it (or fails, in
// the commit that needs it) when the records get there — a disk that is
// nearly full now may have room by then, and a log on it keeps writing into
// the room its segments have meanwhile.
func (l *Log) startPrepare(idx uint32) {
	p := &prepared{idx: idx, done: make(chan struct{})}
	l.prep = p
	l.preparers.Add(1)
	go func() {
		defer l.preparers.Done()
		defer close(p.done)
		if l.room != nil && !l.room(l.segSize) {
			l.logger.Warn("wal: no room to create the next segment ahead of need; the roll will create it", "segment", segmentName(idx), "bytes", l.segSize)
			return
		}
		if p.seg, p.err = l.createSegment(idx); p.err != nil {
			l.logger.Warn("wal: creating the next segment ahead of need failed; the roll will try again", "segment", segmentName(idx), "error", p.err)
		}
	}()
}

// createSegment makes segment idx durable before anything is written to
// it: a temporary file is preallocated, given its header, fsynced, renamed
// to its final name, and the directory fsynced. A crash at any point leaves
// either no segment (a leftover .tmp, which Open removes) or a valid empty
// one, never a named segment with a bad header.
func (l *Log) createSegment(idx uint32) (*segment, error) {
	path := segmentPath(l.dir, idx)
	tmp := path + tmpExt
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, vfs.FileMode)
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w", tmp, err)
	}
	fail := func(op string, err error) (*segment, error) {
		f.Close()
		_ = l.fs.Remove(tmp) // a partial preallocation gives its space back; Open removes it otherwise
		return nil, fmt.Errorf("create segment %s: %s: %w", tmp, op, err)
	}
	if err := f.Preallocate(l.segSize); err != nil {
		return fail("preallocate", err)
	}
	if _, err := f.WriteAt(encodeSegmentHeader(idx, l.segSize), 0); err != nil {
		return fail("write header", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("create segment %s: close: %w", tmp, err)
	}
	if err := l.fs.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return nil, fmt.Errorf("create segment %s: sync directory: %w", path, err)
	}
	// Reopen under the final name, so that the file's operations carry
	// its real name (in errors, logs and fault-injection hooks).
	if f, err = l.fs.OpenFile(path, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("create segment %s: reopen: %w", path, err)
	}
	return &segment{idx: idx, path: path, version: SegmentVersion, capacity: l.segSize, used: headerSize, f: f}, nil
}
