package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// The data directory's free space, as the broker accounts for it (docs/operations.md,
// "A full disk"):
//
//   - The broker knows the bytes it appends. It keeps an estimate of the free space —
//     what statfs said at the last look, less what the log has grown since — and checks a
//     send (or a publish) against it with the bytes the send brings, under the lock that
//     appends the send's records: no writer, however fast, runs past the mark between two
//     looks at the disk, as one did when a timer looked every 2 s.
//   - Statfs corrects the estimate when the log has moved into a new segment (the moment
//     a whole segment's space is taken), after a checkpoint has removed segments, when a
//     send the estimate refuses finds the last look older than spaceRecheck, and every
//     spaceCorrectEvery in the background (other writers of the same file system).
//   - Below the send mark lies the reserve: a segment, for the records of receives, acks,
//     nacks, deletes and purges, and the next checkpoint's size, since an ack frees
//     nothing until a checkpoint lets the segments it emptied go. Only what adds data is
//     refused (sends, publishes); what drains goes on, and while sends are refused the
//     broker checkpoints after every half segment of log instead of after
//     Config.CheckpointBytes, so that draining frees space soon.
//   - The log creates a segment ahead of need only while there is room for it beside the
//     reserve (wal.Options.Room); else the roll creates it, so that a broker starts on a
//     nearly full disk.

const (
	// spaceCorrectEvery is how often the background corrects the estimate by statfs.
	spaceCorrectEvery = time.Second
	// spaceRecheck: a send the estimate refuses looks at the disk again when the last
	// look is at least this old (the operator may have made room, or a checkpoint freed
	// segments), so that a refusal is never of a stale estimate for long.
	spaceRecheck = 100 * time.Millisecond
	// ckptBytesPerMessage is what a message is taken to add to a checkpoint before one
	// has measured it (an entry of the index and its body's position, rounded up).
	ckptBytesPerMessage = 128
	// sendOverhead is what a message adds to its record beyond its body and attributes
	// (the frame, ids, times, group), rounded up.
	sendOverhead = 64
)

// diskSpace is the broker's account of free space. Its mutex is taken after the
// broker's, before the log's; statfs runs under it.
type diskSpace struct {
	mu    sync.Mutex
	known bool      // a statfs has answered; until then nothing is refused
	free  int64     // its answer at the last look
	at    wal.Pos   // the log's end then
	when  time.Time // when it was
	// reserve is the room kept for draining: a segment and the next checkpoint's
	// estimated size, as of the last look; mark, the send mark (Config.MinFreeBytes,
	// at least the reserve and a segment).
	reserve, mark int64
	low           atomic.Bool // sends are refused (the last check found the estimate below the mark)
}

// DiskSpace is the broker's view of its data directory's free space.
type DiskSpace struct {
	// Known: the file system has said how much is free (statfs); without it nothing is
	// refused, and the other fields are zero.
	Known bool
	// Free is the estimate: free bytes at the last statfs less the log's growth since.
	Free int64
	// Mark is the send mark: a send that would bring Free below it is refused
	// (ErrDiskFull). Reserve is the part of it kept for draining: a segment and the
	// next checkpoint.
	Mark, Reserve int64
	// Refusing says that sends are refused now.
	Refusing bool
	// Checked is when statfs last answered.
	Checked time.Time
}

// Margin is how far the estimate is above the send mark (negative while refusing).
func (d DiskSpace) Margin() int64 { return d.Free - d.Mark }

// DiskSpace reports the free-space estimate and the marks (for metrics and /healthz).
func (b *Broker) DiskSpace() DiskSpace {
	if b.cfg.MinFreeBytes < 0 {
		return DiskSpace{}
	}
	s := &b.space
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known {
		return DiskSpace{}
	}
	return DiskSpace{Known: true, Free: s.estimateLocked(b), Mark: s.mark, Reserve: s.reserve, Refusing: s.low.Load(), Checked: s.when}
}

// estimateLocked is the free space now: the last look less the log grown since.
func (s *diskSpace) estimateLocked(b *Broker) int64 {
	return s.free - b.logBytesSince(s.at)
}

// reserveLocked computes the reserve from the last checkpoint, scaled by the messages
// held now (a checkpoint grows with the backlog, which is what fills a disk). The caller
// holds b.mu.
func (b *Broker) reserveLocked() int64 {
	msgs := b.m.MessageCount()
	ckpt := msgs * ckptBytesPerMessage
	if b.ckptMsgs > 0 {
		ckpt = max(ckpt, b.ckptSize*max(msgs, b.ckptMsgs)/b.ckptMsgs)
	}
	return b.cfg.SegmentSize + max(ckpt, b.ckptSize)
}

// lookLocked asks the file system how much is free and restarts the estimate from its
// answer. An error leaves the estimate as it was (unknown at first: nothing refused).
// The caller holds s.mu.
func (s *diskSpace) lookLocked(b *Broker, end wal.Pos, reserve int64) {
	free, err := b.cfg.FreeSpace(b.cfg.Dir)
	if err != nil {
		return
	}
	s.setLocked(b, free, end, reserve)
}

func (s *diskSpace) setLocked(b *Broker, free int64, end wal.Pos, reserve int64) {
	s.known, s.free, s.at, s.when = true, free, end, b.clock.Now()
	s.reserve = reserve
	s.mark = max(b.cfg.MinFreeBytes, reserve+b.cfg.SegmentSize)
}

// roomLocked refuses a write that adds need bytes of data (a send, a publish) when the
// estimate says it would bring the free space below the send mark. It runs in the
// command, under b.mu, so that the check and the append are one step.
func (b *Broker) roomLocked(need int64) error {
	if b.cfg.MinFreeBytes < 0 {
		return nil
	}
	s := &b.space
	s.mu.Lock()
	defer s.mu.Unlock()
	end := b.log.End()
	if !s.known || end.Segment() != s.at.Segment() {
		s.lookLocked(b, end, b.reserveLocked()) // the log took a new segment: see what is left
	}
	if !s.known {
		return nil
	}
	free := s.estimateLocked(b)
	if free-need < s.mark && b.clock.Now().Sub(s.when) >= spaceRecheck {
		s.lookLocked(b, end, b.reserveLocked())
		free = s.estimateLocked(b)
	}
	if free-need >= s.mark {
		s.noteLocked(b, free, false)
		return nil
	}
	s.noteLocked(b, free, true)
	return fmt.Errorf("%w (about %d bytes free in %s; sends stop at %d, of which %d is kept for receives, acks and the checkpoint that frees space)",
		ErrDiskFull, max(free, 0), b.cfg.Dir, s.mark, s.reserve)
}

// noteLocked records whether sends are refused, and logs the change.
func (s *diskSpace) noteLocked(b *Broker, free int64, low bool) {
	if s.low.Load() == low {
		return
	}
	s.low.Store(low)
	if low {
		b.logger.Warn("disk nearly full: refusing sends; receives, acks and deletes go on and checkpoints come sooner to free space",
			"free_bytes", free, "send_mark_bytes", s.mark, "reserve_bytes", s.reserve)
		kick(b.kickCkpt)
		return
	}
	b.logger.Info("disk space recovered: sends accepted again", "free_bytes", free, "send_mark_bytes", s.mark)
}

// correctSpace looks at the disk (outside the broker's lock, which statfs need not
// hold) and restarts the estimate from what it says.
func (b *Broker) correctSpace() {
	if b.cfg.MinFreeBytes < 0 {
		return
	}
	free, err := b.cfg.FreeSpace(b.cfg.Dir)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log == nil {
		return
	}
	s := &b.space
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(b, free, b.log.End(), b.reserveLocked())
	s.noteLocked(b, s.estimateLocked(b), s.estimateLocked(b) < s.mark)
}

// diskLoop corrects the estimate every spaceCorrectEvery: the check itself is on the
// write path (roomLocked); this catches what others write to the same file system.
func (b *Broker) diskLoop(ctx context.Context) {
	for {
		t := b.clock.NewTimer(spaceCorrectEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		b.correctSpace()
	}
}

// segmentRoom is the log's wal.Options.Room: whether a segment of need bytes fits
// beside the reserve. It reads statfs afresh and takes no lock of the broker's (the log
// calls it from its own goroutines, Open included, before the broker has a log).
func (b *Broker) segmentRoom(need int64) bool {
	if b.cfg.MinFreeBytes < 0 {
		return true
	}
	free, err := b.cfg.FreeSpace(b.cfg.Dir)
	if err != nil {
		return true
	}
	s := &b.space
	s.mu.Lock()
	reserve := s.reserve
	s.mu.Unlock()
	if reserve == 0 {
		reserve = b.cfg.SegmentSize
	}
	return free-need >= reserve
}

// sendNeed is about what a send adds to the log.
func sendNeed(msgs []queue.SendInput) int64 {
	n := int64(0)
	for i := range msgs {
		n += msgs[i].Payload.Size() + int64(len(msgs[i].Payload.Group)+len(msgs[i].Payload.DedupID)) + sendOverhead
	}
	return n
}

// publishNeed is about what a publish adds to the log.
func publishNeed(in []topic.PublishInput) int64 {
	n := int64(0)
	for i := range in {
		n += int64(len(in[i].Key)+len(in[i].Body)+len(in[i].DedupID)) + sendOverhead
		for _, h := range in[i].Headers {
			n += int64(len(h.Name) + len(h.Value))
		}
	}
	return n
}
