package payload

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/internal/partlog"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// Topic records: a publish is written once, into the write-ahead log, in the commit
// that makes it durable. The store then keeps, per partition, the log positions of the
// records not yet moved (the tail) and moves them in the background (MoveTopics) into
// the partition's own segment files (internal/partlog), which readers read sequentially
// and retention deletes a file at a time. A record in the tail holds its log segment
// like a message's body does; once its partition file is durable, the log position is
// let go and the segment can be removed. Memory per partition is its tail (16 bytes a
// record, for as long as the mover lags) and one struct per segment file.
//
// The tail's positions are this node's: they are in the store's checkpoint section
// (TopicSection), never in the semantic state.

type partKey struct {
	topic uint64
	part  int
}

type tpart struct {
	files *partlog.Partition // nil until opened
	moved uint64             // offsets below lie in the files, durably
	// written: offsets below are written into the files (WriteTopics) but, from moved
	// on, not yet synced. Those stay in the tail, holding their log segments, and are
	// read from there; a crash leaves them to be written again.
	written  uint64
	unsynced int64  // bytes written from moved to written
	start    uint64 // retention's start: offsets below are gone
	tailBase uint64 // offset of tail[0]
	tail     []tailEnt
	// removeBelow is a retention deletion the mover has yet to do in the files.
	removeBelow uint64
	deleted     bool // the topic is gone: the mover removes the directory
	moving      bool // the mover is writing to the files
	// arena is the chunk the tail cache's next encodings go into (tailChunk), and
	// arenaLast the offset of the last record it took.
	arena     []byte
	arenaLast uint64
	// full are the chunks before arena that still hold records of the tail, oldest
	// first, each with the offset of its last record: once the tail has dropped that one
	// and nobody reads the tail's bytes outside the lock, a chunk is used again
	// (topicState.free).
	full []usedChunk
	// readers counts reads of the tail's bytes outside the store's lock (reads of
	// fresh records); the mover's step (moving) is one too.
	readers int
}

type usedChunk struct {
	buf  []byte
	last uint64
}

type tailEnt struct {
	pos    wal.Pos
	size   uint32
	newSeg bool
	// raw is the record's encoding while the tail cache holds it (tailCacheBytes), so
	// that the mover and readers of fresh records need not read it back from the log:
	// one pread per record was a quarter of the broker's CPU in a publish benchmark.
	raw []byte
}

// tailCacheBytes bounds the records the tail cache holds, across partitions. Records
// beyond it are read back from the log, as all are after a restart.
const tailCacheBytes = 32 << 20

// tailChunk is the size of the chunks a partition's cached encodings are appended into,
// one after another: an allocation of its own for every record was half of what keeping
// them cost (Store.Published was a tenth of a publish benchmark's CPU). A chunk lives
// while any of its records is in the tail, and tails drop from the front, so a partition
// holds at most two chunks' worth beyond its cached records' bytes (which the budget
// counts), and none once its tail is empty.
const tailChunk = 64 << 10

// maxFreeChunks bounds the chunks kept for reuse (topicState.free): the ones a few
// partitions' moves release between two records' publishes.
const maxFreeChunks = 16

// topicState is the store's part for topics, under the store's mutex.
type topicState struct {
	fs     vfs.FS
	dir    string // <data dir>/topics; "" keeps nothing on disk (tests of the store alone)
	parts  map[partKey]*tpart
	cached int64 // bytes of tail entries' raw
	// unsynced is the bytes written into partition files and not yet synced, across
	// partitions (WriteTopics syncs once it reaches moveSyncBytes).
	unsynced  int64
	syncBytes int64 // moveSyncBytes unless a test sets it
	stats     moveCounters
	// free are chunks of the tail cache no record uses any more, for the next ones
	// (at most maxFreeChunks; none once the mover is at rest, Rest): a fresh chunk
	// is zeroed memory, and making one every 64 KiB of records was most of what keeping
	// them cost beyond the copy itself.
	free [][]byte
	// stepBuf is the mover's write buffer, lent to each partition for its step (Lend):
	// one for all of them while records keep coming, none once the mover rests (Rest).
	stepBuf []byte
}

// moveCounters count the mover's work since the store was made (MoveStats).
type moveCounters struct {
	steps, records, syncs atomic.Uint64
}

// MoveStats is what the mover has done since start: partition steps (one write and
// sync of one partition's files), records moved, and fsyncs of partition files.
type MoveStats struct {
	Steps, Records, Syncs uint64
}

// MoveStats returns the mover's counters.
func (s *Store) MoveStats() MoveStats {
	c := &s.topics.stats
	return MoveStats{Steps: c.steps.Load(), Records: c.records.Load(), Syncs: c.syncs.Load()}
}

func (s *Store) tp(k partKey) *tpart {
	if s.topics.parts == nil {
		s.topics.parts = make(map[partKey]*tpart)
	}
	p := s.topics.parts[k]
	if p == nil {
		p = &tpart{}
		s.topics.parts[k] = p
	}
	return p
}

func (s *Store) partDir(k partKey) string {
	return filepath.Join(s.topics.dir, strconv.FormatUint(k.topic, 10), strconv.Itoa(k.part))
}

// openLocked opens a partition's files if they are not open, and lets go of tail
// entries that the files already hold (moved before a crash, after the checkpoint).
func (s *Store) openLocked(k partKey, p *tpart) error {
	if p.files != nil || s.topics.dir == "" {
		return nil
	}
	f, err := partlog.Open(s.topics.fs, s.partDir(k))
	if err != nil {
		return err
	}
	if end := f.End(); end < p.moved {
		// The files end before what the store counts as moved: retention raised moved
		// over records written and not synced (Truncated), and a crash took them back,
		// with the files' deletion. Everything below the start is retention's: it goes.
		// Short of the start, the files lost records they had synced.
		if p.moved > p.start {
			f.Close()
			return fmt.Errorf("payload: partition %d/%d: the files end at offset %d, short of %d, which they had made durable (retained from %d)", k.topic, k.part, end, p.moved, p.start)
		}
		if err := f.RemoveBelow(p.start); err != nil {
			f.Close()
			return err
		}
	}
	p.files = f
	if end := f.End(); end > p.moved {
		p.moved = end
	}
	p.written = max(p.written, p.moved)
	s.dropTailBelow(p, max(p.moved, p.start))
	return nil
}

// dropTailBelow lets go of the tail entries below off.
func (s *Store) dropTailBelow(p *tpart, off uint64) {
	for len(p.tail) > 0 && p.tailBase < off {
		e := p.tail[0]
		s.count(e.pos, -1, -int64(e.size))
		s.topics.cached -= int64(len(e.raw))
		p.tail[0] = tailEnt{}
		p.tail = p.tail[1:]
		p.tailBase++
	}
	for len(p.full) > 0 && (len(p.tail) == 0 || p.full[0].last < p.tailBase) {
		s.releaseChunk(p, p.full[0].buf)
		p.full[0] = usedChunk{}
		p.full = p.full[1:]
	}
	switch {
	case len(p.tail) == 0:
		p.tail = nil
		s.releaseChunk(p, p.arena)
		p.arena, p.full = nil, nil // an idle partition keeps no chunk
		p.tailBase = max(p.tailBase, off)
	case len(p.tail) < cap(p.tail)/4 && cap(p.tail) > 1024:
		// Slicing from the front keeps the whole array: once most of it is behind, the
		// rest moves to one of its size, so a tail that drained holds what it has left
		// and not the largest it ever was.
		p.tail = append(make([]tailEnt, 0, 2*len(p.tail)), p.tail...)
	}
}

// releaseChunk keeps buf, none of whose records is in p's tail any more, for reuse —
// unless someone may still read it: a reader of p's fresh records or the mover's step
// of p, which copied tail entries under the lock and read their bytes without it.
func (s *Store) releaseChunk(p *tpart, buf []byte) {
	if cap(buf) != tailChunk || p.readers > 0 || p.moving || len(s.topics.free) >= maxFreeChunks {
		return
	}
	s.topics.free = append(s.topics.free, buf[:0])
}

// newChunk is a chunk for the tail cache's next records: one no record uses, if any.
func (s *Store) newChunk(size int) []byte {
	if n := len(s.topics.free); n > 0 && size <= tailChunk {
		buf := s.topics.free[n-1]
		s.topics.free[n-1] = nil
		s.topics.free = s.topics.free[:n-1]
		return buf
	}
	return make([]byte, 0, max(tailChunk, size))
}

// writeFrom is the first offset the mover has yet to write into p's files.
func (p *tpart) writeFrom() uint64 { return max(p.written, p.moved, p.tailBase) }

// recordSize is what a tail entry counts against its log segment.
func recordSize(r *topic.PublishRecord) uint32 {
	in := r.Input()
	return uint32(in.Size())
}

// Published implements topic.Bodies: the record being applied (at the position At
// named) is offset of its partition.
func (s *Store) Published(topicID uint64, part int, offset uint64, newSeg bool, r *topic.PublishRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := partKey{topicID, part}
	p := s.tp(k)
	if p.files == nil && s.topics.dir != "" {
		if err := s.openLocked(k, p); err != nil {
			s.fail(fmt.Errorf("payload: open partition %d/%d: %w", topicID, part, err))
		}
	}
	if offset < p.moved || offset < p.tailBase+uint64(len(p.tail)) {
		return // in the files already, or replayed twice
	}
	if len(p.tail) == 0 {
		p.tailBase = offset
	} else if offset != p.tailBase+uint64(len(p.tail)) {
		s.fail(fmt.Errorf("payload: partition %d/%d: record %d after %d", topicID, part, offset, p.tailBase+uint64(len(p.tail))-1))
		return
	}
	size := recordSize(r)
	e := tailEnt{pos: s.cur, size: size, newSeg: newSeg}
	if s.topics.cached+int64(size)+64 <= tailCacheBytes {
		if cap(p.arena)-len(p.arena) < int(size)+64 {
			if len(p.arena) > 0 {
				p.full = append(p.full, usedChunk{buf: p.arena, last: p.arenaLast})
			}
			p.arena = s.newChunk(int(size) + 64)
		}
		// Should the estimate fall short, AppendTo moves the chunk, and the record is
		// still the new array's own bytes.
		at := len(p.arena)
		p.arena = r.AppendTo(p.arena)
		e.raw = p.arena[at:len(p.arena):len(p.arena)]
		p.arenaLast = offset
		s.topics.cached += int64(len(e.raw))
	}
	p.tail = append(p.tail, e)
	s.count(s.cur, 1, int64(size))
}

// Truncated implements topic.Bodies: retention deleted the partition's records below
// start. The tail lets go at once; the files are deleted by the mover.
func (s *Store) Truncated(topicID uint64, part int, start uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.tp(partKey{topicID, part})
	p.start = max(p.start, start)
	s.dropTailBelow(p, start)
	p.removeBelow = max(p.removeBelow, start)
	if p.moved < start {
		p.moved = start
	}
}

// Deleted implements topic.Bodies: the topic is gone.
func (s *Store) Deleted(topicID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.topics.parts {
		if k.topic == topicID {
			s.dropTailBelow(p, ^uint64(0))
			p.deleted = true
		}
	}
	if s.topics.dir != "" {
		// The topic's directory, with any partition not touched since the node started:
		// the mover removes it after the partitions it knows.
		s.tp(partKey{topicID, -1}).deleted = true
	}
}

// fail records an error of the store that no caller can be given (the machine's
// callbacks return nothing): the next MoveTopics returns it, and the broker fails.
func (s *Store) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// ---------------------------------------------------------------------------------------
// The mover

// moveBatch bounds the records one partition moves in one step.
const moveBatch = 4096

// maxStepBuf bounds the mover's write buffer that it keeps between steps (stepBuf); a
// larger one, for a step of large records, goes after its step.
const maxStepBuf = 4 << 20

// moveSyncBytes is how much WriteTopics leaves written and not synced across partitions
// before it syncs them: each fsync of a partition file cost as much CPU as a few hundred
// records' writes (in a publish benchmark the files' fsyncs, two a step, were a tenth of
// the broker's CPU), and what is not synced keeps its records in the tail, so it is a
// quarter of the tail cache's budget, leaving the rest for the records not yet written.
const moveSyncBytes = tailCacheBytes / 4

type moveWork struct {
	k       partKey
	p       *tpart
	files   *partlog.Partition
	base    uint64
	ents    []tailEnt
	bytes   int64 // of ents
	remove  uint64
	deleted bool
	sync    bool
}

// MoveTopics moves tail records into their partitions' files and syncs them, does the
// file deletions retention asked for and removes deleted topics' directories. It returns
// how many records it moved; more reports whether tails remain (the caller calls again).
// Once it returns with more false, no tail holds a record the files hold durably.
func (s *Store) MoveTopics(ctx context.Context) (moved int, more bool, err error) {
	return s.moveTopics(ctx, true)
}

// Kept is the bytes the store keeps for the next records — the mover's write buffer and
// the tail cache's free chunks — until Rest.
func (s *Store) Kept() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(cap(s.topics.stepBuf))
	for _, c := range s.topics.free {
		n += int64(cap(c))
	}
	return n
}

// Rest lets go of the memory kept for the next records — the mover's write buffer and
// the tail cache's free chunks — once none have come for a while (the broker's mover
// calls it; a pause between two bursts of publishes keeps them).
func (s *Store) Rest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics.stepBuf, s.topics.free = nil, nil
}

// WriteTopics is MoveTopics that leaves the sync of the files for later, for a caller
// that knows more records are coming: it syncs only once the bytes written and not
// synced reach moveSyncBytes. Records written and not synced stay in their tails (and
// keep their log segments) until a sync covers them; MoveTopics syncs whatever is left.
func (s *Store) WriteTopics(ctx context.Context) (moved int, more bool, err error) {
	return s.moveTopics(ctx, false)
}

func (s *Store) moveTopics(ctx context.Context, syncAll bool) (moved int, more bool, err error) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, false, err
	}
	if s.topics.dir == "" {
		s.mu.Unlock()
		return 0, false, nil
	}
	var work []moveWork
	var writing int64 // bytes the step writes
	keys := make([]partKey, 0, len(s.topics.parts))
	for k := range s.topics.parts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].topic < keys[j].topic || keys[i].topic == keys[j].topic && keys[i].part < keys[j].part
	})
	parts := make(map[uint64]int) // partitions per topic, for the removal of a topic's directory
	for _, k := range keys {
		if k.part >= 0 {
			parts[k.topic]++
		}
	}
	for _, k := range keys {
		p := s.topics.parts[k]
		if p.moving {
			continue
		}
		if k.part < 0 && parts[k.topic] > 0 {
			more = true // a topic's directory goes after its partitions'
			continue
		}
		if p.deleted {
			work = append(work, moveWork{k: k, p: p, files: p.files, deleted: true})
			p.moving = true
			continue
		}
		if err := s.openLocked(k, p); err != nil {
			s.mu.Unlock()
			return 0, false, fmt.Errorf("payload: open partition %d/%d: %w", k.topic, k.part, err)
		}
		from := p.writeFrom()
		w := moveWork{k: k, p: p, files: p.files, base: from, remove: p.removeBelow}
		left := p.tail[from-p.tailBase:]
		n := min(len(left), moveBatch)
		if n < len(left) {
			more = true
		}
		w.ents = append([]tailEnt(nil), left[:n]...)
		for _, e := range w.ents {
			s.pins[e.pos.Segment()]++
			w.bytes += int64(e.size)
		}
		if n == 0 && w.remove == 0 && p.unsynced == 0 && from == p.moved {
			continue
		}
		p.removeBelow = 0
		p.moving = true
		work = append(work, w)
		writing += w.bytes
	}
	// Sync every partition in this step, or none: the bytes this step writes count.
	bound := s.topics.syncBytes
	if bound == 0 {
		bound = moveSyncBytes
	}
	syncNow := syncAll || s.topics.unsynced+writing >= bound
	kept := work[:0]
	for _, w := range work {
		w.sync = syncNow || w.deleted
		if !w.sync && len(w.ents) == 0 && w.remove == 0 {
			w.p.moving = false // only a sync to do, and it waits
			continue
		}
		kept = append(kept, w)
	}
	work = kept
	s.mu.Unlock()

	for i := range work {
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		w := &work[i]
		var end uint64
		var n int
		if err == nil {
			end, n, err = s.moveOne(ctx, w)
			moved += n
		}
		s.mu.Lock()
		for _, e := range w.ents {
			s.unpinLocked(e.pos)
		}
		p := w.p
		p.moving = false
		switch {
		case w.deleted && err == nil:
			s.topics.unsynced -= p.unsynced
			delete(s.topics.parts, w.k)
		case err == nil && w.sync:
			s.topics.unsynced -= p.unsynced
			p.unsynced = 0
			p.moved = max(p.moved, end)
			p.written = max(p.written, p.moved)
			s.dropTailBelow(p, p.moved)
		case err == nil:
			if end > p.written {
				p.written = end
				p.unsynced += w.bytes
				s.topics.unsynced += w.bytes
			}
		default:
			if w.remove > p.removeBelow {
				p.removeBelow = w.remove
			}
		}
		s.mu.Unlock()
	}
	return moved, more, err
}

func (s *Store) unpinLocked(pos wal.Pos) {
	if s.pins[pos.Segment()]--; s.pins[pos.Segment()] <= 0 {
		delete(s.pins, pos.Segment())
	}
}

// moveOne does one partition's step without the store's lock: deletions first, then the
// records, then one sync (or, when w.sync is false, only their write).
func (s *Store) moveOne(ctx context.Context, w *moveWork) (uint64, int, error) {
	if w.deleted {
		if w.files != nil {
			return 0, 0, w.files.Remove()
		}
		if w.k.part < 0 {
			return 0, 0, s.removeTopicDir(w.k.topic)
		}
		return 0, 0, nil
	}
	if w.remove > 0 {
		if err := w.files.RemoveBelow(w.remove); err != nil {
			return 0, 0, fmt.Errorf("payload: retention of partition %d/%d: %w", w.k.topic, w.k.part, err)
		}
	}
	if len(w.ents) == 0 {
		if w.sync {
			before := w.files.Fsyncs()
			end, err := w.files.Sync()
			s.countStep(w, w.files.Fsyncs()-before)
			return end, 0, err
		}
		return w.files.Written(), 0, nil
	}
	// A record goes into the files only once the log holds it durably: a crash must not
	// leave the files with a record the log lost (and then give its offset to another).
	// Reading it back from the log waited for that; its cached bytes do not.
	last := w.ents[len(w.ents)-1].pos
	if err := s.log.WaitDurable(ctx, last); err != nil {
		return 0, 0, fmt.Errorf("payload: partition %d/%d: %w", w.k.topic, w.k.part, err)
	}
	if s.gate != nil {
		if err := s.gate(ctx, last); err != nil {
			return 0, 0, fmt.Errorf("payload: partition %d/%d: %w", w.k.topic, w.k.part, err)
		}
	}
	// One buffer for the step's frames (16 bytes of header each), not one grown by steps:
	// the mover's, lent to the files for the step and taken back once they wrote it.
	s.mu.Lock()
	buf := s.topics.stepBuf
	s.topics.stepBuf = nil
	s.mu.Unlock()
	w.files.Lend(buf)
	giveBack := func() { // once written; again, a no-op, on the way out
		if buf := w.files.Return(); cap(buf) <= maxStepBuf {
			s.mu.Lock()
			if cap(buf) > cap(s.topics.stepBuf) {
				s.topics.stepBuf = buf
			}
			s.mu.Unlock()
		}
	}
	defer giveBack()
	w.files.Reserve(int(w.bytes) + 80*len(w.ents))
	before := w.files.Fsyncs()
	off := w.base
	skip := w.files.Written() // records the files hold already (a previous step's)
	for _, e := range w.ents {
		if off >= skip {
			// A cached record is the store's own encoding of the publish it was told of
			// at exactly this offset (Published), so it goes in as it is. One read back
			// from the log is checked to be that publish, and a publish that fanned out
			// is cut down to the record (the files keep it, not what the queues took).
			raw := e.raw
			if raw == nil {
				var err error
				if raw, err = s.log.ReadAt(e.pos); err != nil {
					return 0, 0, fmt.Errorf("payload: read record %d of partition %d/%d at %v: %w", off, w.k.topic, w.k.part, e.pos, err)
				}
				pr, err := checkPublish(raw, w.k, off)
				if err != nil {
					return 0, 0, fmt.Errorf("payload: record at %v: %w", e.pos, err)
				}
				if raw[0] != byte(topic.KindPublish) {
					raw = pr.AppendTo(nil)
				}
			}
			if err := w.files.Append(off, e.newSeg, raw); err != nil {
				return 0, 0, err
			}
		}
		off++
	}
	// Written first, then synced: the write empties the buffer, taken back before the
	// Sync, which lets go of its partition's.
	end, err := w.files.Flush()
	giveBack()
	if err == nil && w.sync {
		end, err = w.files.Sync()
	}
	s.countStep(w, w.files.Fsyncs()-before)
	return end, len(w.ents), err
}

// countStep counts one partition's step of the mover.
func (s *Store) countStep(w *moveWork, syncs uint64) {
	st := &s.topics.stats
	st.steps.Add(1)
	st.records.Add(uint64(len(w.ents)))
	st.syncs.Add(syncs)
}

// checkPublish checks that raw holds the publish of offset in partition k, and returns it
// (aliasing raw).
func checkPublish(raw []byte, k partKey, offset uint64) (*topic.PublishRecord, error) {
	pr, err := topic.DecodePublish(raw, true)
	if err != nil {
		return nil, err
	}
	if pr.TopicID != k.topic || pr.Partition != k.part || pr.Offset != offset {
		return nil, fmt.Errorf("found %d/%d@%d where the publish of %d/%d@%d belongs", pr.TopicID, pr.Partition, pr.Offset, k.topic, k.part, offset)
	}
	return pr, nil
}

func (s *Store) removeTopicDir(topicID uint64) error {
	dir := filepath.Join(s.topics.dir, strconv.FormatUint(topicID, 10))
	parts, err := s.topics.fs.ReadDir(dir)
	if err != nil {
		return nil // nothing there
	}
	for _, p := range parts {
		f, err := partlog.Open(s.topics.fs, filepath.Join(dir, p))
		if err != nil {
			return err
		}
		if err := f.Remove(); err != nil {
			return err
		}
	}
	return s.topics.fs.Remove(dir)
}

// ---------------------------------------------------------------------------------------
// Reading

// ErrRecordGone is returned by ReadTopic for records retention deleted while it read.
var ErrRecordGone = errors.New("payload: record no longer retained")

// ReadTopic returns the publish records of a partition from offset from (which the
// caller checked against the machine) up to end, at most max and about maxBytes: from
// the partition's files while from lies there, then on from the tail in the log. Where
// a node moved its records to does not change what one read returns (every node of a
// cluster answers the same read alike): it stops only at max, maxBytes or end.
func (s *Store) ReadTopic(topicID uint64, part int, from, end uint64, max, maxBytes int) ([]*topic.PublishRecord, error) {
	return s.readTopic(topicID, part, from, end, max, maxBytes, false)
}

// ReadTopicShared is ReadTopic for a caller that lets go of the records soon (a read's
// or a pull's answer): the bytes of records read from the files share buffers (one
// allocation for many records), so that keeping one keeps many.
func (s *Store) ReadTopicShared(topicID uint64, part int, from, end uint64, max, maxBytes int) ([]*topic.PublishRecord, error) {
	return s.readTopic(topicID, part, from, end, max, maxBytes, true)
}

func (s *Store) readTopic(topicID uint64, part int, from, end uint64, max, maxBytes int, shared bool) ([]*topic.PublishRecord, error) {
	var out []*topic.PublishRecord
	size := 0
	for from < end && len(out) < max && (size < maxBytes || len(out) == 0) {
		budget := maxBytes - size
		if budget < 1 {
			budget = 1 // the first record is returned whatever its size
		}
		rs, fromFiles, err := s.readTopicOnce(topicID, part, from, end, max-len(out), budget, shared)
		out = append(out, rs...)
		if err != nil || len(rs) == 0 {
			return out, err
		}
		for _, r := range rs {
			size += len(r.Body) + len(r.Key)
		}
		from = rs[len(rs)-1].Offset + 1
		if !fromFiles {
			break // the tail read took what there was
		}
	}
	return out, nil
}

// readTopicOnce reads from one place: the files while from lies there (saying so), or
// the tail.
func (s *Store) readTopicOnce(topicID uint64, part int, from, end uint64, max, maxBytes int, shared bool) (_ []*topic.PublishRecord, fromFiles bool, _ error) {
	if from >= end || max <= 0 {
		return nil, false, nil
	}
	k := partKey{topicID, part}
	s.mu.Lock()
	p := s.topics.parts[k]
	if p == nil {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: partition %d/%d holds nothing on this node", ErrRecordGone, topicID, part)
	}
	if err := s.openLocked(k, p); err != nil {
		s.mu.Unlock()
		return nil, false, err
	}
	if from < p.start {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: offset %d is below the partition's start %d", ErrRecordGone, from, p.start)
	}
	if from < p.moved && p.files != nil {
		files := p.files
		limit := int(min(uint64(max), p.moved-from, end-from))
		s.mu.Unlock()
		read := files.Read
		if shared {
			read = files.ReadShared
		}
		rs, err := read(from, limit, maxBytes)
		if errors.Is(err, partlog.ErrNotRetained) {
			return nil, true, fmt.Errorf("%w: %v", ErrRecordGone, err)
		}
		out := make([]*topic.PublishRecord, 0, len(rs))
		for _, r := range rs {
			// Each record's bytes are its own (partlog copies them out of its read
			// buffer), or shared as the caller asked, so the record may alias them rather
			// than be copied again.
			pr, derr := decodePublish(r.Data, true, k, r.Offset)
			if derr != nil {
				return out, true, derr
			}
			out = append(out, pr)
		}
		return out, true, err
	}
	i := from - p.tailBase
	if from < p.tailBase || i >= uint64(len(p.tail)) {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: offset %d of %d/%d is in neither the files (below %d) nor the log", ErrRecordGone, from, topicID, part, p.moved)
	}
	n := int(min(uint64(len(p.tail))-i, end-from, uint64(max)))
	ents := make([]tailEnt, 0, n)
	bytes := 0
	for _, e := range p.tail[i : i+uint64(n)] {
		if bytes >= maxBytes && len(ents) > 0 {
			break
		}
		ents = append(ents, e)
		bytes += int(e.size)
		s.pins[e.pos.Segment()]++
	}
	p.readers++ // the entries' bytes are read below without the lock: no chunk of p is reused meanwhile
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		p.readers--
		for _, e := range ents {
			if s.pins[e.pos.Segment()]--; s.pins[e.pos.Segment()] <= 0 {
				delete(s.pins, e.pos.Segment())
			}
		}
		s.mu.Unlock()
	}()
	out := make([]*topic.PublishRecord, 0, len(ents))
	if len(ents) > 0 {
		// No reader sees a record a crash could take back (reading it from the log waited
		// for this too).
		if err := s.log.WaitDurable(context.Background(), ents[len(ents)-1].pos); err != nil {
			return out, false, fmt.Errorf("payload: partition %d/%d: %w", topicID, part, err)
		}
	}
	for j, e := range ents {
		raw, err := e.raw, error(nil)
		if raw == nil {
			raw, err = s.log.ReadAt(e.pos)
		}
		if err != nil {
			return out, false, fmt.Errorf("payload: read record %d of partition %d/%d: %w", from+uint64(j), topicID, part, err)
		}
		pr, err := decodePublish(raw, false, k, from+uint64(j))
		if err != nil {
			return out, false, err
		}
		out = append(out, pr)
	}
	return out, false, nil
}

// decodePublish decodes the publish of offset in partition k; shared lets the record
// alias raw (which must then be the record's alone), otherwise its bytes are copied.
func decodePublish(raw []byte, shared bool, k partKey, offset uint64) (*topic.PublishRecord, error) {
	pr, err := topic.DecodePublish(raw, shared)
	if err != nil {
		return nil, fmt.Errorf("payload: record %d of partition %d/%d: %w", offset, k.topic, k.part, err)
	}
	if pr.TopicID != k.topic || pr.Partition != k.part || pr.Offset != offset {
		return nil, fmt.Errorf("payload: found %d/%d@%d where the publish of %d/%d@%d belongs", pr.TopicID, pr.Partition, pr.Offset, k.topic, k.part, offset)
	}
	return pr, nil
}

// TopicBacklog is how many records wait in tails for the mover, and their bytes.
func (s *Store) TopicBacklog() (records, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.topics.parts {
		records += int64(len(p.tail))
		for _, e := range p.tail {
			bytes += int64(e.size)
		}
	}
	return records, bytes
}

// ---------------------------------------------------------------------------------------
// Checkpoint section

const topicSectionMagic = "OKPT"

// TopicSection returns the topics' part of the store's checkpoint: per partition the
// offsets moved and retained and the tail's positions. It must be taken in the same
// critical section as Section (under the broker's lock), so that both describe one
// moment.
func (s *Store) TopicSection() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]partKey, 0, len(s.topics.parts))
	for k, p := range s.topics.parts {
		if !p.deleted {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].topic < keys[j].topic || keys[i].topic == keys[j].topic && keys[i].part < keys[j].part
	})
	b := append([]byte(nil), topicSectionMagic...)
	b = codec.AppendUvarint(b, 1)
	b = codec.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		p := s.topics.parts[k]
		b = codec.AppendUvarint(b, k.topic)
		b = codec.AppendUvarint(b, uint64(k.part))
		b = codec.AppendUvarint(b, p.moved)
		b = codec.AppendUvarint(b, p.start)
		b = codec.AppendUvarint(b, p.removeBelow)
		b = codec.AppendUvarint(b, p.tailBase)
		b = codec.AppendUvarint(b, uint64(len(p.tail)))
		var prev wal.Pos
		for _, e := range p.tail {
			b = codec.AppendVarint(b, int64(e.pos-prev))
			prev = e.pos
			v := uint64(e.size) << 1
			if e.newSeg {
				v |= 1
			}
			b = codec.AppendUvarint(b, v)
		}
	}
	return binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
}

// RestoreTopics fills the store's topic part from a TopicSection.
func (s *Store) RestoreTopics(b []byte) error {
	if len(b) < len(topicSectionMagic)+4 || string(b[:len(topicSectionMagic)]) != topicSectionMagic {
		return errors.New("payload: topic section: bad magic")
	}
	d := &codec.Decoder{B: b[len(topicSectionMagic) : len(b)-4]}
	if v := d.Uvarint(); d.Err == nil && v != 1 {
		return fmt.Errorf("payload: topic section version %d; this okiba reads 1", v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := d.Count()
	for i := 0; i < n && d.Err == nil; i++ {
		k := partKey{topic: d.Uvarint(), part: int(d.Uvarint())}
		p := s.tp(k)
		p.moved, p.start, p.removeBelow, p.tailBase = d.Uvarint(), d.Uvarint(), d.Uvarint(), d.Uvarint()
		m := d.Count()
		p.tail = make([]tailEnt, 0, m)
		var prev wal.Pos
		for j := 0; j < m && d.Err == nil; j++ {
			pos := prev + wal.Pos(d.Varint())
			prev = pos
			v := d.Uvarint()
			e := tailEnt{pos: pos, size: uint32(v >> 1), newSeg: v&1 != 0}
			p.tail = append(p.tail, e)
			s.count(pos, 1, int64(e.size))
		}
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("payload: topic section: %w", err)
	}
	if got := binary.LittleEndian.Uint32(b[len(b)-4:]); got != uint32(n) {
		return fmt.Errorf("payload: topic section says %d partitions, holds %d", got, n)
	}
	return nil
}
