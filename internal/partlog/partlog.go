// Package partlog keeps one topic partition's records in segment files on this node:
// the files a partition's retained records move into once they are durable in the
// write-ahead log, read sequentially by consumers and deleted a whole file at a time by
// retention. It knows nothing of topics' semantics: records are opaque bytes with an
// offset, segments are named by the offset of their first record, and which segment a
// record begins is the caller's decision (the topic machine's segment boundaries).
//
// Layout of a partition's directory:
//
//	<base offset, 20 digits>.log   frames: | u32 length | u32 CRC32C of the rest | u64 offset | record |
//	<base offset, 20 digits>.idx   every IndexEvery bytes of the log: | u32 offset − base | u32 file position |
//
// Offsets inside a file are dense and ascending. A file is written only at its end (Flush
// writes without syncing) and made durable by Sync; a segment is synced whole when the
// next one begins, so only the newest can hold records that are not durable. The newest
// segment's index is never synced: after a crash Open keeps each file's longest valid
// prefix (a torn last frame is cut off), rebuilds the newest file's index from its log and
// syncs that log, so that what it reads back stays. Memory is one
// small struct per segment file, and the index of the files being read, loaded on demand:
// nothing per record.
package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/okiba/okiba/internal/vfs"
)

const (
	frameHeader = 16
	// IndexEvery is the spacing of index entries in a segment's log file.
	IndexEvery = 4096
	// MaxRecord bounds one record (a corrupt length must not make a reader allocate
	// gigabytes).
	MaxRecord = 32 << 20
	logExt    = ".log"
	idxExt    = ".idx"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrNotRetained is returned for an offset below the partition's first file, or past
// what the files hold.
var ErrNotRetained = errors.New("partlog: offset not in the partition's files")

// CorruptionError reports a frame that fails its checksum in a file that Open had
// accepted: bit rot, not a torn write.
type CorruptionError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("partlog: %s at byte %d: %s", e.File, e.Offset, e.Reason)
}

// Partition is one partition's segment files. It is safe for concurrent use: one
// writer (Append, Sync, RemoveBelow) and any number of readers.
type Partition struct {
	fs  vfs.FS
	dir string

	mu   sync.Mutex
	segs []*segment // by base, ascending
	end  uint64     // offset after the last durable record
	// pending is appended but not yet written: frames of the newest segment.
	pending    []byte
	pendingIdx []byte
	pendEnd    uint64 // offset after the last pending record
	dirSynced  bool
	loaded     []*segment // sealed segments whose index is in memory, least recent first
	fsyncs     atomic.Uint64
}

type segment struct {
	base   uint64
	end    uint64 // offset after its last record (durable or pending)
	size   int64  // bytes of its log file written (durable once Sync returns)
	synced int64  // bytes of its log file known durable
	f      vfs.File
	idx    vfs.File
	// index entries loaded for reading; nil until a reader needs them.
	index []indexEntry
	// lastIndexed is the file position of the last index entry written.
	lastIndexed int64
	refs        int  // readers holding the file open
	removed     bool // deleted by retention: close and unlink once refs is 0
}

type indexEntry struct {
	rel uint32
	pos uint32
}

func segName(base uint64, ext string) string { return fmt.Sprintf("%020d%s", base, ext) }

// Open opens (creating if needed) the partition's directory and checks its files.
func Open(fsys vfs.FS, dir string) (*Partition, error) {
	if err := fsys.MkdirAll(dir, vfs.DirMode); err != nil {
		return nil, fmt.Errorf("partlog: create %s: %w", dir, err)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("partlog: list %s: %w", dir, err)
	}
	p := &Partition{fs: fsys, dir: dir}
	var bases []uint64
	for _, n := range names {
		if !strings.HasSuffix(n, logExt) {
			continue
		}
		b, err := strconv.ParseUint(strings.TrimSuffix(n, logExt), 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	for i, base := range bases {
		s, err := p.openSegment(base, i == len(bases)-1)
		if err != nil {
			p.Close()
			return nil, err
		}
		if s.end == s.base && i == len(bases)-1 && len(p.segs) > 0 {
			// An empty newest file (created, nothing durable in it): drop it.
			s.f.Close()
			s.idx.Close()
			_ = fsys.Remove(filepath.Join(dir, segName(base, logExt)))
			_ = fsys.Remove(filepath.Join(dir, segName(base, idxExt)))
			continue
		}
		if len(p.segs) > 0 && p.segs[len(p.segs)-1].end != base {
			p.Close()
			return nil, fmt.Errorf("partlog: %s: segment %d does not follow the previous one, which ends at %d", dir, base, p.segs[len(p.segs)-1].end)
		}
		p.segs = append(p.segs, s)
	}
	if len(p.segs) > 0 {
		p.end = p.segs[len(p.segs)-1].end
	}
	p.pendEnd = p.end
	return p, nil
}

// openSegment opens one segment's files. For the newest, it scans the log for its valid
// prefix, cuts a torn tail and rewrites the index from the log; older ones are trusted up
// to their size, their last record found through the index.
func (p *Partition) openSegment(base uint64, newest bool) (*segment, error) {
	lp, ip := filepath.Join(p.dir, segName(base, logExt)), filepath.Join(p.dir, segName(base, idxExt))
	f, err := p.fs.OpenFile(lp, os.O_RDWR, vfs.FileMode)
	if err != nil {
		return nil, fmt.Errorf("partlog: open %s: %w", lp, err)
	}
	idx, err := p.fs.OpenFile(ip, os.O_RDWR|os.O_CREATE, vfs.FileMode)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("partlog: open %s: %w", ip, err)
	}
	s := &segment{base: base, end: base, f: f, idx: idx}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if !newest {
		ents, err := readIndex(idx)
		if err != nil {
			return nil, fmt.Errorf("partlog: %s: %w", ip, err)
		}
		from, off := int64(0), base
		if len(ents) > 0 {
			last := ents[len(ents)-1]
			from, off = int64(last.pos), base+uint64(last.rel)
		}
		end, pos, err := scan(f, from, size, off, nil)
		if err != nil || pos != size {
			return nil, fmt.Errorf("partlog: %s: sealed segment is damaged at byte %d (%v)", lp, pos, err)
		}
		s.end, s.size, s.synced = end, size, size
		if len(ents) > 0 {
			s.lastIndexed = int64(ents[len(ents)-1].pos)
		}
		return s, nil
	}
	var index []byte
	s.lastIndexed = -IndexEvery
	s.index = []indexEntry{}
	end, pos, _ := scan(f, 0, size, base, func(off uint64, at int64) {
		if at-s.lastIndexed >= IndexEvery {
			index = binary.LittleEndian.AppendUint32(index, uint32(off-base))
			index = binary.LittleEndian.AppendUint32(index, uint32(at))
			s.index = append(s.index, indexEntry{rel: uint32(off - base), pos: uint32(at)})
			s.lastIndexed = at
		}
	})
	if pos != size {
		if err := f.Truncate(pos); err != nil {
			return nil, fmt.Errorf("partlog: cut the torn tail of %s: %w", lp, err)
		}
	}
	// What the scan found may be written and not durable (Flush before a crash of the
	// process, not of the machine): the caller takes it as durable, so it is made so.
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("partlog: sync %s: %w", lp, err)
	}
	if err := idx.Truncate(0); err != nil {
		return nil, err
	}
	if len(index) > 0 {
		if _, err := idx.WriteAt(index, 0); err != nil {
			return nil, err
		}
	}
	s.end, s.size, s.synced = end, pos, pos
	return s, nil
}

// scan reads frames from file position from (holding offset off) up to size; it returns
// the offset after the last valid frame and the position after it. visit is told each
// frame's offset and position.
func scan(f vfs.File, from, size int64, off uint64, visit func(off uint64, at int64)) (uint64, int64, error) {
	const chunk = 1 << 20
	buf := make([]byte, 0, chunk)
	bufAt := from
	pos := from
	for pos < size {
		// Make sure the frame header, then the frame, is in buf.
		need := func(n int64) bool {
			if pos+n > size {
				return false
			}
			if pos >= bufAt && pos+n <= bufAt+int64(len(buf)) {
				return true
			}
			m := max(int64(chunk), n)
			if pos+m > size {
				m = size - pos
			}
			buf = buf[:m]
			if _, err := f.ReadAt(buf, pos); err != nil {
				return false
			}
			bufAt = pos
			return true
		}
		if !need(frameHeader) {
			return off, pos, nil
		}
		h := buf[pos-bufAt:]
		n := binary.LittleEndian.Uint32(h)
		if n < 8 || n > MaxRecord+8 {
			return off, pos, fmt.Errorf("impossible frame length %d", n)
		}
		if !need(8 + int64(n)) {
			return off, pos, nil
		}
		fr := buf[pos-bufAt : pos-bufAt+8+int64(n)]
		if binary.LittleEndian.Uint32(fr[4:]) != crc32.Checksum(fr[8:], castagnoli) {
			return off, pos, errors.New("checksum mismatch")
		}
		if got := binary.LittleEndian.Uint64(fr[8:]); got != off {
			return off, pos, fmt.Errorf("frame holds offset %d where %d belongs", got, off)
		}
		if visit != nil {
			visit(off, pos)
		}
		off++
		pos += 8 + int64(n)
	}
	return off, pos, nil
}

func readIndex(f vfs.File) ([]indexEntry, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	size -= size % 8
	raw := make([]byte, size)
	if size > 0 {
		if _, err := f.ReadAt(raw, 0); err != nil {
			return nil, err
		}
	}
	out := make([]indexEntry, 0, size/8)
	for i := 0; i+8 <= len(raw); i += 8 {
		out = append(out, indexEntry{rel: binary.LittleEndian.Uint32(raw[i:]), pos: binary.LittleEndian.Uint32(raw[i+4:])})
	}
	return out, nil
}

// Start is the offset of the first record the files hold; End the offset after the
// last durable one. Start == End: none.
func (p *Partition) Start() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.segs {
		if !s.removed {
			return s.base
		}
	}
	return p.end
}

// End is the offset after the last durable record.
func (p *Partition) End() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end
}

// Append adds the record at offset, which must be the offset after the last one
// appended (or, for the first record of an empty partition, any offset). newSegment
// begins a new segment file at it. Nothing is written until Sync.
func (p *Partition) Append(offset uint64, newSegment bool, rec []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.segs) > 0 && offset != p.pendEnd {
		return fmt.Errorf("partlog: %s: append of offset %d, expected %d", p.dir, offset, p.pendEnd)
	}
	if len(rec) > MaxRecord {
		return fmt.Errorf("partlog: record of %d bytes", len(rec))
	}
	if len(p.segs) == 0 || newSegment {
		if err := p.sealLocked(); err != nil {
			return err
		}
		s, err := p.createSegment(offset)
		if err != nil {
			return err
		}
		p.segs = append(p.segs, s)
		if len(p.segs) == 1 {
			p.end = offset
		}
		p.pendEnd = offset
	}
	s := p.segs[len(p.segs)-1]
	at := s.size + int64(len(p.pending))
	if at-s.lastIndexed >= IndexEvery {
		p.pendingIdx = binary.LittleEndian.AppendUint32(p.pendingIdx, uint32(offset-s.base))
		p.pendingIdx = binary.LittleEndian.AppendUint32(p.pendingIdx, uint32(at))
		s.index = append(s.index, indexEntry{rel: uint32(offset - s.base), pos: uint32(at)})
		s.lastIndexed = at
	}
	var h [frameHeader]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(8+len(rec)))
	binary.LittleEndian.PutUint64(h[8:], offset)
	crc := crc32.Update(crc32.Checksum(h[8:], castagnoli), castagnoli, rec)
	binary.LittleEndian.PutUint32(h[4:], crc)
	p.pending = append(p.pending, h[:]...)
	p.pending = append(p.pending, rec...)
	p.pendEnd = offset + 1
	s.end = p.pendEnd
	return nil
}

func (p *Partition) createSegment(base uint64) (*segment, error) {
	lp, ip := filepath.Join(p.dir, segName(base, logExt)), filepath.Join(p.dir, segName(base, idxExt))
	f, err := p.fs.OpenFile(lp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, vfs.FileMode)
	if err != nil {
		return nil, fmt.Errorf("partlog: create %s: %w", lp, err)
	}
	idx, err := p.fs.OpenFile(ip, os.O_RDWR|os.O_CREATE|os.O_TRUNC, vfs.FileMode)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("partlog: create %s: %w", ip, err)
	}
	p.dirSynced = false
	if n := len(p.segs); n > 0 {
		// The newest segment is sealed now: its index may go like any sealed one's.
		p.loadedLocked(p.segs[n-1])
	}
	return &segment{base: base, end: base, f: f, idx: idx, lastIndexed: -IndexEvery, index: []indexEntry{}}, nil
}

// sealLocked makes the newest segment durable, log and index, before a new one begins:
// only the newest segment is ever left to a later Sync, and a sealed segment's index is
// trusted by Open.
func (p *Partition) sealLocked() error {
	if err := p.flushLocked(); err != nil {
		return err
	}
	if len(p.segs) == 0 {
		return nil
	}
	s := p.segs[len(p.segs)-1]
	if s.synced < s.size {
		p.fsyncs.Add(1)
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("partlog: sync %s: %w", p.dir, err)
		}
		s.synced = s.size
	}
	p.fsyncs.Add(1)
	if err := s.idx.Sync(); err != nil {
		return fmt.Errorf("partlog: sync index of %s: %w", p.dir, err)
	}
	return nil
}

// Flush writes what was appended without making it durable, and returns the offset after
// the last record written. Readers do not see it before a Sync: until then the caller
// keeps the records where they are durable (the log).
func (p *Partition) Flush() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.flushLocked(); err != nil {
		return p.end, err
	}
	return p.pendEnd, nil
}

// Reserve makes room for n more bytes of records (their frames' headers included) to be
// appended without the pending buffer growing by steps.
func (p *Partition) Reserve(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = slices.Grow(p.pending, n)
}

// Lend gives the partition buf (its length ignored) to append the next records' frames
// into, if it has none pending; Return takes it back once they are written. A writer of
// many partitions in turn (the topic mover) so keeps one buffer for all of them, where
// each step of each partition made one of its own: every fresh buffer is zeroed memory,
// and the mover's were 2–4 % of a publish benchmark's CPU.
func (p *Partition) Lend(buf []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 && cap(buf) > cap(p.pending) {
		p.pending = buf[:0]
	}
}

// Return hands back the write buffer, empty, once what was appended is written (nil
// while anything is pending, which keeps it for the next Flush or Sync).
func (p *Partition) Return() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 {
		return nil
	}
	buf := p.pending[:0]
	p.pending = nil
	return buf
}

// Written is the offset after the last record appended: Flush or Sync writes up to it.
func (p *Partition) Written() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pendEnd
}

// flushLocked writes the pending frames of the newest segment (without syncing).
func (p *Partition) flushLocked() error {
	if len(p.pending) == 0 {
		return nil
	}
	s := p.segs[len(p.segs)-1]
	if _, err := s.f.WriteAt(p.pending, s.size); err != nil {
		return fmt.Errorf("partlog: write %s: %w", p.dir, err)
	}
	if len(p.pendingIdx) > 0 {
		isz, err := s.idx.Size()
		if err != nil {
			return err
		}
		isz -= isz % 8
		if _, err := s.idx.WriteAt(p.pendingIdx, isz); err != nil {
			return fmt.Errorf("partlog: write index of %s: %w", p.dir, err)
		}
	}
	s.size += int64(len(p.pending))
	p.pending, p.pendingIdx = p.pending[:0], p.pendingIdx[:0]
	if cap(p.pending) > 4<<20 {
		p.pending = nil
	}
	return nil
}

// Sync writes what was appended and makes it durable: the newest segment's log file
// (older ones were synced when the next began; the newest's index Open rebuilds), and
// the directory entries of new files. It returns the offset after the last durable
// record.
//
// Sync holds the partition's lock through the write and the fsync: the one writer
// is the caller, and readers of older segments wait at most one fsync.
func (p *Partition) Sync() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.flushLocked(); err != nil {
		return p.end, err
	}
	// The mover syncs when it has caught up, so a partition at rest keeps no write
	// buffer: at up to a step of records each (megabytes), idle partitions' buffers
	// would be most of a topic's heap. Under load the next step's Reserve makes one.
	p.pending, p.pendingIdx = nil, nil
	if n := len(p.segs); n > 0 {
		if s := p.segs[n-1]; s.synced < s.size && !s.removed {
			p.fsyncs.Add(1)
			if err := s.f.Sync(); err != nil {
				return p.end, fmt.Errorf("partlog: sync %s: %w", p.dir, err)
			}
			s.synced = s.size
		}
	}
	if !p.dirSynced {
		// The files' entries, and the entries of the directories above that Open may
		// have created (topic, then partition).
		for d, i := p.dir, 0; i < 3; d, i = filepath.Dir(d), i+1 {
			p.fsyncs.Add(1)
			if err := p.fs.SyncDir(d); err != nil {
				return p.end, fmt.Errorf("partlog: sync %s: %w", d, err)
			}
		}
		p.dirSynced = true
	}
	p.end = p.pendEnd
	return p.end, nil
}

// Fsyncs counts the fsyncs Sync has asked for (files, indexes and directories).
func (p *Partition) Fsyncs() uint64 { return p.fsyncs.Load() }

// RemoveBelow deletes every segment file whose records all lie below start. A file
// that readers hold is unlinked when the last of them lets go.
func (p *Partition) RemoveBelow(start uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	keep := p.segs[:0]
	for i, s := range p.segs {
		last := i == len(p.segs)-1
		// A segment ends where the next begins; the newest ends at the partition's end.
		if !last && p.segs[i+1].base <= start || last && s.end <= start && len(p.pending) == 0 {
			s.removed = true
			if err := p.releaseLocked(s); err != nil && first == nil {
				first = err
			}
			continue
		}
		keep = append(keep, s)
	}
	for i := len(keep); i < len(p.segs); i++ {
		p.segs[i] = nil
	}
	p.segs = keep
	if len(p.segs) == 0 {
		p.end, p.pendEnd = max(p.end, start), max(p.pendEnd, start)
	}
	return first
}

// releaseLocked closes and unlinks a removed segment nobody reads.
func (p *Partition) releaseLocked(s *segment) error {
	if !s.removed || s.refs > 0 {
		return nil
	}
	s.f.Close()
	s.idx.Close()
	err := p.fs.Remove(filepath.Join(p.dir, segName(s.base, logExt)))
	if err2 := p.fs.Remove(filepath.Join(p.dir, segName(s.base, idxExt))); err == nil {
		err = err2
	}
	p.dirSynced = false
	return err
}

// Remove deletes the partition's directory and everything in it (its topic is gone).
// Readers in flight finish on the files they hold.
func (p *Partition) Remove() error {
	if err := p.RemoveBelow(^uint64(0)); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	names, _ := p.fs.ReadDir(p.dir)
	for _, n := range names {
		_ = p.fs.Remove(filepath.Join(p.dir, n))
	}
	return p.fs.Remove(p.dir)
}

// Close closes the files (not the readers').
func (p *Partition) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.segs {
		if s.refs == 0 {
			s.f.Close()
			s.idx.Close()
		}
	}
	p.segs = nil
	return nil
}

// Record is one record read back.
type Record struct {
	Offset uint64
	Data   []byte
}

// Read returns durable records from offset on, at most max of them and about maxBytes
// (at least one if any is durable), from the one segment file that holds offset: a
// reader continues with the next call. An offset the files do not hold is
// ErrNotRetained. Each record's bytes are its own.
func (p *Partition) Read(offset uint64, max int, maxBytes int) ([]Record, error) {
	return p.read(offset, max, maxBytes, false)
}

// ReadShared is Read for a caller that lets go of the records soon (a read's answer):
// their bytes share buffers of up to slabBytes, one allocation for many records rather
// than one each, so that keeping one record keeps its whole buffer.
func (p *Partition) ReadShared(offset uint64, max int, maxBytes int) ([]Record, error) {
	return p.read(offset, max, maxBytes, true)
}

// slabBytes is the most one of ReadShared's buffers holds (a larger record gets one of
// its own size).
const slabBytes = 1 << 20

func (p *Partition) read(offset uint64, max int, maxBytes int, shared bool) ([]Record, error) {
	p.mu.Lock()
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].end > offset })
	if i == len(p.segs) || p.segs[i].base > offset || offset >= p.end {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: %d (the files hold %d to %d)", ErrNotRetained, offset, p.startLocked(), p.end)
	}
	s := p.segs[i]
	s.refs++
	end := min(p.end, s.end) // durable records of this segment end here
	limit := s.size          // and its durable bytes here (pending ones are not written yet)
	pos, next := s.locate(offset)
	if i < len(p.segs)-1 {
		p.loadedLocked(s)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		s.refs--
		_ = p.releaseLocked(s)
		p.mu.Unlock()
	}()
	if pos < 0 {
		ents, err := readIndex(s.idx)
		if err != nil {
			return nil, fmt.Errorf("partlog: read index of %s: %w", p.dir, err)
		}
		p.mu.Lock()
		s.index = ents
		pos, next = s.locate(offset)
		p.mu.Unlock()
	}
	name := func() string { return filepath.Join(p.dir, segName(s.base, logExt)) }
	bufp := chunks.Get().(*[]byte)
	defer chunks.Put(bufp)
	chunk := *bufp
	first := int64(-1) // file position of the first record returned
	out := make([]Record, 0, min(uint64(max), end-offset, 4096))
	var buf []byte  // file bytes from pos on, read but not parsed yet
	var slab []byte // with shared: where the records' bytes go
	read := 0
	for next < end && len(out) < max && (read < maxBytes || len(out) == 0) {
		if len(buf) < frameHeader {
			var err error
			ahead := readAhead(max-len(out), maxBytes-read, first, pos, len(out), next < offset)
			if buf, err = p.refill(s, chunk, buf, pos, limit, frameHeader, ahead); err != nil {
				return out, err
			}
		}
		n := int(binary.LittleEndian.Uint32(buf))
		if n < 8 || n > MaxRecord+8 {
			return out, &CorruptionError{File: name(), Offset: pos, Reason: fmt.Sprintf("impossible frame length %d", n)}
		}
		if len(buf) < 8+n {
			var err error
			ahead := readAhead(max-len(out), maxBytes-read, first, pos, len(out), next < offset)
			if buf, err = p.refill(s, chunk, buf, pos, limit, 8+n, ahead); err != nil {
				return out, err
			}
		}
		fr := buf[:8+n]
		if binary.LittleEndian.Uint32(fr[4:]) != crc32.Checksum(fr[8:], castagnoli) {
			return out, &CorruptionError{File: name(), Offset: pos, Reason: "checksum mismatch"}
		}
		if got := binary.LittleEndian.Uint64(fr[8:]); got != next {
			return out, &CorruptionError{File: name(), Offset: pos, Reason: fmt.Sprintf("offset %d where %d belongs", got, next)}
		}
		if next >= offset {
			if first < 0 {
				first = pos
			}
			// The read buffer is reused: each record gets bytes of its own, which the
			// caller may keep (and alias) for as long as it likes, or with shared bytes
			// of a buffer it shares with the records read before and after it.
			data := fr[16:]
			if !shared {
				data = append([]byte(nil), data...)
			} else {
				if cap(slab)-len(slab) < len(data) {
					size := min(slabBytes, maxBytes-read) // what this call may still read, bounded
					if size < len(data) {
						size = len(data)
					}
					slab = make([]byte, 0, size)
				}
				at := len(slab)
				slab = append(slab, data...)
				data = slab[at:len(slab):len(slab)]
			}
			out = append(out, Record{Offset: next, Data: data})
			read += n - 8
		}
		next++
		buf = buf[8+n:]
		pos += int64(8 + n)
	}
	return out, nil
}

// readChunk is the most one read of a segment file asks for: a reader going through a
// partition reads it in calls of this size, sequentially, rather than a call per record.
// The buffers are pooled (one per reader in flight), so memory is bounded by the readers
// and not by what they read.
const readChunk = 1 << 20

var chunks = sync.Pool{New: func() any {
	b := make([]byte, readChunk)
	return &b
}}

// readAhead is how much one read of the file asks for when a Read still wants up to
// records records and about maxBytes: enough for them (and, while skipping is set, the
// frames before the offset asked for, which the index leaves to be skipped), estimated
// from the frames returned so far (got of them, from file position first to pos) once
// there are some, so that the last read of a call does not fetch a chunk the next call
// reads again; at least 16 KiB and at most readChunk.
func readAhead(records, maxBytes int, first, pos int64, got int, skipping bool) int {
	want := int64(max(maxBytes, 1)) + int64(records)*frameHeader
	if got > 0 {
		want = min(want, (pos-first)/int64(got)*int64(records))
	}
	if skipping {
		want += IndexEvery
	}
	return int(min(max(want, 16<<10), readChunk))
}

// refill returns the file's bytes from pos on with at least need of them: the bytes of
// buf (those from pos on already read) moved to the front of chunk, then up to ahead
// bytes in all read after them, never past limit. A frame larger than chunk gets a
// buffer of its own size.
func (p *Partition) refill(s *segment, chunk, buf []byte, pos, limit int64, need, ahead int) ([]byte, error) {
	have := len(buf)
	want := int64(max(need, min(ahead, len(chunk))))
	if want > limit-pos {
		want = limit - pos
	}
	if want < int64(need) {
		return buf, &CorruptionError{File: filepath.Join(p.dir, segName(s.base, logExt)), Offset: pos, Reason: "frame runs past the durable end"}
	}
	dst := chunk
	if int(want) > len(chunk) {
		dst = make([]byte, want)
	}
	copy(dst, buf) // buf may lie in chunk: copy moves overlapping bytes correctly
	if _, err := s.f.ReadAt(dst[have:want], pos+int64(have)); err != nil {
		return buf, fmt.Errorf("partlog: read %s: %w", p.dir, err)
	}
	return dst[:want], nil
}

// locate returns the file position and offset of the last index entry at or before
// offset, or -1 when the segment's index is not loaded. Called with p.mu held.
func (s *segment) locate(offset uint64) (int64, uint64) {
	if s.index == nil {
		return -1, 0
	}
	rel := offset - s.base
	i := sort.Search(len(s.index), func(i int) bool { return uint64(s.index[i].rel) > rel })
	if i == 0 {
		return 0, s.base
	}
	return int64(s.index[i-1].pos), s.base + uint64(s.index[i-1].rel)
}

// maxLoaded is how many sealed segments of a partition keep their index in memory:
// readers move through a partition, so the last few suffice, and memory stays per
// partition rather than per retained byte.
const maxLoaded = 2

// loadedLocked notes that s's index is in use and drops the index of the sealed
// segments used longest ago beyond maxLoaded.
func (p *Partition) loadedLocked(s *segment) {
	if len(p.loaded) > 0 && p.loaded[len(p.loaded)-1] == s {
		return
	}
	for i, x := range p.loaded {
		if x == s {
			p.loaded = append(p.loaded[:i], p.loaded[i+1:]...)
			break
		}
	}
	p.loaded = append(p.loaded, s)
	for len(p.loaded) > maxLoaded {
		p.loaded[0].index = nil
		p.loaded = p.loaded[1:]
	}
}

func (p *Partition) startLocked() uint64 {
	if len(p.segs) > 0 {
		return p.segs[0].base
	}
	return p.end
}

// Segments lists the segment files: their first offset and the offset after their last
// record, oldest first.
func (p *Partition) Segments() [][2]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][2]uint64, 0, len(p.segs))
	for _, s := range p.segs {
		out = append(out, [2]uint64{s.base, s.end})
	}
	return out
}
