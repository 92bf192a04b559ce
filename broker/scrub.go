package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// Verification and scrubbing (docs/operations.md, "Verify and scrub"): read back what the
// broker would need after a restart and check every checksum, so that bit rot is found
// while a backup or replica can still replace it, not when a consumer meets it.
//
//   - Verify (okiba verify) runs on a stopped broker's directory: every frame of every
//     segment, every checkpoint file.
//   - Scrub runs in a serving broker, rate-limited (Config.ScrubRate) and on a schedule
//     (Config.ScrubEvery): every checkpoint file, every live body the latest checkpoint
//     covers (read where the payload store says it lies), and every durable frame of the
//     log from the checkpoint's segment on (what a restart replays).
//
// Both name each damaged frame's file and offset, and the messages whose bodies lie in
// it as far as the payload store knows them (the bodies the latest checkpoint places
// there, for Verify; every live body, for Scrub). Neither changes anything: a receive
// quarantines a corrupt body when it meets it, and salvage is the operator's decision.

// Defaults of the scrub.
const (
	DefaultScrubEvery = 24 * time.Hour
	DefaultScrubRate  = 20_000_000 // bytes a second
)

// DamagedFrame is a frame that failed its checksum (or is otherwise not what was written).
type DamagedFrame struct {
	File   string
	Offset int64
	// Next is where the next valid frame starts (or the end of what was checked): the
	// damage spans [Offset, Next).
	Next   int64
	Reason string
	// Messages are the ids of the live messages whose bodies lie in [Offset, Next), as
	// far as they are known (see Verify and Scrub).
	Messages []uint64
	// Torn: the torn end of an interrupted write, which the next start cuts off — not
	// damage (Verify only).
	Torn bool
}

func (d DamagedFrame) String() string {
	s := fmt.Sprintf("%s at offset %d: %s", d.File, d.Offset, d.Reason)
	if len(d.Messages) > 0 {
		ids := make([]string, len(d.Messages))
		for i, id := range d.Messages {
			ids[i] = queue.FormatID(id)
		}
		s += "; bodies of messages " + strings.Join(ids, ", ")
	}
	return s
}

// ScrubReport is what one scrub found.
type ScrubReport struct {
	Started, Finished time.Time
	// Bytes read; Checkpoints, Bodies and Segments checked; Records, the valid frames of
	// those segments.
	Bytes                                  int64
	Checkpoints, Bodies, Segments, Records int
	Damaged                                []DamagedFrame
	// Err is why the scrub did not finish (the broker closed, a read failed): not damage.
	Err error
}

// OK reports whether the scrub finished and found nothing damaged.
func (r ScrubReport) OK() bool { return r.Err == nil && len(r.Damaged) == 0 }

// scrubState is the last scrub's report, for metrics and /healthz. Its mutex is a leaf.
type scrubState struct {
	run  sync.Mutex // one scrub at a time
	mu   sync.Mutex
	last *ScrubReport
	runs uint64
}

// LastScrub returns the report of the last scrub that ended, and false before any.
func (b *Broker) LastScrub() (ScrubReport, bool) {
	b.scrub.mu.Lock()
	defer b.scrub.mu.Unlock()
	if b.scrub.last == nil {
		return ScrubReport{}, false
	}
	return *b.scrub.last, true
}

// scrubLoop scrubs every Config.ScrubEvery, the first time one period after Open.
func (b *Broker) scrubLoop(ctx context.Context) {
	if b.cfg.ScrubEvery < 0 {
		return
	}
	for {
		t := b.clock.NewTimer(b.cfg.ScrubEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if _, err := b.Scrub(ctx); err != nil && ctx.Err() == nil {
			b.logger.Warn("scrub did not finish", "error", err)
		}
	}
}

// Scrub reads back the checkpoints, the live bodies the latest checkpoint covers and
// the log after it, checking every checksum at up to Config.ScrubRate bytes a second, and
// logs every damaged frame at ERROR with its file, offset and messages. It returns the
// report, which LastScrub then answers, and the report's Err.
func (b *Broker) Scrub(ctx context.Context) (ScrubReport, error) {
	b.scrub.run.Lock()
	defer b.scrub.run.Unlock()
	rep := ScrubReport{Started: b.clock.Now()}
	rep.Err = b.scrubInto(ctx, &rep)
	rep.Finished = b.clock.Now()
	if rep.Err == nil {
		b.logger.Info("scrub finished", "bytes", rep.Bytes, "checkpoints", rep.Checkpoints, "bodies", rep.Bodies,
			"segments", rep.Segments, "records", rep.Records, "damaged_frames", len(rep.Damaged), "duration", rep.Finished.Sub(rep.Started))
	}
	b.scrub.mu.Lock()
	b.scrub.last = &rep
	b.scrub.runs++
	b.scrub.mu.Unlock()
	return rep, rep.Err
}

func (b *Broker) scrubInto(ctx context.Context, rep *ScrubReport) error {
	pace := b.pacer(b.cfg.ScrubRate, &rep.Bytes)
	cks, err := wal.VerifyCheckpoints(ctx, b.fs, filepath.Join(b.cfg.Dir, "checkpoints"), pace)
	if err != nil {
		return err
	}
	for _, c := range cks {
		rep.Checkpoints++
		if c.Err == nil {
			continue
		}
		var ce *wal.CorruptionError
		if !errors.As(c.Err, &ce) {
			return c.Err
		}
		rep.Damaged = append(rep.Damaged, DamagedFrame{File: c.File, Offset: ce.Offset, Next: c.Bytes, Reason: ce.Reason})
	}

	b.mu.Lock()
	if b.closed || b.log == nil {
		b.mu.Unlock()
		return ErrClosed
	}
	from, live, log := b.ckptPos, b.store.Live(), b.log
	b.mu.Unlock()
	var bad []wal.BadFrame
	for _, pos := range live {
		if pos.Segment() >= from.Segment() {
			break // the log from there on is checked whole below
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := log.ReadAt(pos)
		var ce *wal.CorruptionError
		switch {
		case err == nil:
			rep.Bodies++
			if err := pace(ctx, int64(len(raw))); err != nil {
				return err
			}
		case errors.As(err, &ce):
			rep.Bodies++
			bad = append(bad, wal.BadFrame{File: ce.File, Segment: pos.Segment(), Offset: ce.Offset, Next: ce.Offset + 1, Reason: ce.Reason})
		case errors.Is(err, wal.ErrNotFound):
			// Moved by compaction, or gone with its message, since the list was taken.
		default:
			return fmt.Errorf("scrub: read the body at %v: %w", pos, err)
		}
	}
	segs, err := log.VerifySince(ctx, from, pace)
	if err != nil {
		return err
	}
	for _, s := range segs {
		rep.Segments++
		rep.Records += s.Records
		for _, f := range s.Bad {
			f.Torn = false // nothing durable in a live log is a torn write
			bad = append(bad, f)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	b.mu.Lock()
	for _, f := range bad {
		d := DamagedFrame{File: f.File, Offset: f.Offset, Next: f.Next, Reason: f.Reason}
		for _, ref := range b.store.RefsIn(f.Segment, f.Offset, f.Next) {
			d.Messages = append(d.Messages, b.m.RefID(ref))
		}
		rep.Damaged = append(rep.Damaged, d)
	}
	b.mu.Unlock()
	for _, d := range rep.Damaged[len(rep.Damaged)-len(bad):] {
		b.logger.Error("scrub: damaged frame: bit rot or a bad sector; the messages named are quarantined when received, or restore the file from a backup",
			"file", d.File, "offset", d.Offset, "to", d.Next, "reason", d.Reason, "messages", messageIDs(d.Messages))
	}
	for _, d := range rep.Damaged[:len(rep.Damaged)-len(bad)] {
		b.logger.Error("scrub: damaged checkpoint: the next start will refuse it; take a checkpoint (a clean restart) or restore it from a backup",
			"file", d.File, "offset", d.Offset, "reason", d.Reason)
	}
	return nil
}

func messageIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = queue.FormatID(id)
	}
	return strings.Join(s, ",")
}

// pacer returns the rate limit of a scrub: told the bytes about to be read (or just
// read), it waits until reading them keeps the scrub at rate bytes a second since it
// began. rate <= 0: no limit.
func (b *Broker) pacer(rate int64, total *int64) func(ctx context.Context, n int64) error {
	start := b.clock.Now()
	return func(ctx context.Context, n int64) error {
		*total += n
		if err := ctx.Err(); err != nil || rate <= 0 {
			return err
		}
		due := start.Add(time.Duration(float64(*total) / float64(rate) * float64(time.Second)))
		d := due.Sub(b.clock.Now())
		if d <= 0 {
			return nil
		}
		t := b.clock.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
			return nil
		}
	}
}

// VerifyReport is what Verify found in a stopped broker's data directory.
type VerifyReport struct {
	Log         wal.VerifyReport
	Checkpoints []wal.CheckpointReport
	// Damaged lists every bad frame of the log and every checkpoint that does not
	// verify, torn tails included (Torn set: not damage).
	Damaged []DamagedFrame
	// Indexed: the latest checkpoint loaded, so that Messages of the frames it covers
	// are named; bodies of records after it are not known without replaying the log,
	// which a damaged log stops.
	Indexed bool
}

// OK reports whether nothing is damaged (a torn tail, which the next start cuts, is not).
func (r VerifyReport) OK() bool {
	for _, d := range r.Damaged {
		if !d.Torn {
			return false
		}
	}
	return true
}

// Verify checks a stopped broker's data directory dir offline: every frame of every
// log segment and every checkpoint file, reading only. It refuses a directory a broker
// holds (ErrLocked): a live log's unsynced tail would read as damage; the serving
// broker's scrub checks it instead. fsys nil means vfs.OS.
func Verify(fsys vfs.FS, dir string) (VerifyReport, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	logDir := filepath.Join(dir, "wal")
	if _, err := fsys.Stat(logDir); err != nil {
		return VerifyReport{}, fmt.Errorf("%s holds no okiba log: %w", dir, err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return VerifyReport{}, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return VerifyReport{}, fmt.Errorf("lock data directory: %w", err)
	}
	defer lock.Close()
	var rep VerifyReport
	if rep.Log, err = wal.Verify(wal.Options{FS: fsys, Dir: logDir}); err != nil {
		return rep, err
	}
	ckptDir := filepath.Join(dir, "checkpoints")
	if rep.Checkpoints, err = wal.VerifyCheckpoints(context.Background(), fsys, ckptDir, nil); err != nil {
		return rep, err
	}
	for _, c := range rep.Checkpoints {
		var ce *wal.CorruptionError
		switch {
		case c.Err == nil:
		case errors.As(c.Err, &ce):
			rep.Damaged = append(rep.Damaged, DamagedFrame{File: c.File, Offset: ce.Offset, Next: c.Bytes, Reason: ce.Reason})
		default:
			rep.Damaged = append(rep.Damaged, DamagedFrame{File: c.File, Reason: c.Err.Error()})
		}
	}
	var index *Broker
	if _, ckpt, ok, err := wal.LoadCheckpoint(fsys, ckptDir); err == nil && ok {
		index = verifyIndex(fsys, dir, ckpt)
		rep.Indexed = index != nil
	}
	for _, s := range rep.Log.Segments {
		for _, f := range s.Bad {
			d := DamagedFrame{File: f.File, Offset: f.Offset, Next: f.Next, Reason: f.Reason, Torn: f.Torn}
			if index != nil {
				for _, ref := range index.store.RefsIn(f.Segment, f.Offset, f.Next) {
					d.Messages = append(d.Messages, index.m.RefID(ref))
				}
			}
			rep.Damaged = append(rep.Damaged, d)
		}
	}
	return rep, nil
}

// verifyIndex restores a checkpoint into a broker that is never opened, for where its
// payload store places each body; nil if it does not restore.
func verifyIndex(fsys vfs.FS, dir string, ckpt []byte) *Broker {
	cfg, err := Config{Dir: dir, FS: fsys, MinFreeBytes: -1}.withDefaults()
	if err != nil {
		return nil
	}
	b := &Broker{cfg: cfg, fs: fsys, clock: cfg.Clock, logger: cfg.Logger}
	b.reset()
	if b.m, b.t, b.a, err = b.restore(ckpt); err != nil {
		return nil
	}
	return b
}
