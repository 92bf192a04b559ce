package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// DefaultSegmentSize is the segment size when Options.SegmentSize is zero.
const DefaultSegmentSize = 64 << 20

// lockName is the file in the log directory that Open flocks, so that two
// Logs (in one process or two) never write the same directory.
const lockName = "wal.lock"

// maxSpare bounds the batch buffer kept for reuse, so that one burst does
// not pin a large buffer for the life of the log.
const maxSpare = 4 << 20

// Options configures a Log. The zero value of every field but Dir means its
// default.
type Options struct {
	// FS is the file system. Defaults to vfs.OS.
	FS vfs.FS
	// Dir is the directory holding the segments. Required; created if
	// missing.
	Dir string
	// SegmentSize is the size new segment files are preallocated to, and
	// so the most a segment holds. Defaults to DefaultSegmentSize (64 MiB);
	// must lie in [MinSegmentSize, MaxSegmentSize]. Existing segments keep
	// the size they were created with.
	SegmentSize int64
	// Logger receives warnings (a repaired torn tail) and the failure
	// that stops the log. Defaults to discarding everything.
	Logger *slog.Logger
	// NoPrecreate turns off creating the next segment in the background
	// ahead of need; the committer then creates it at the roll, inside a
	// commit. Background creation saves a commit the latency of two
	// fsyncs per roll; turning it off makes the sequence of file-system
	// operations a pure function of the sequence of batches, which
	// crash-point enumeration tests need.
	NoPrecreate bool
	// Observer, when set, is told about every group commit: its size and how long
	// its parts took (for metrics). The committer calls it after waking the batch's
	// waiters, outside the log's lock, so calls for consecutive commits may
	// overlap; it must be quick and safe for concurrent use. Nil costs nothing.
	Observer Observer
	// Room, when set, says whether the file system has room for a segment of the given
	// size beside what its caller keeps free. The log asks before it creates a segment
	// ahead of need, and creates none without room: the roll then creates it, in its
	// commit, so that a log opens and goes on writing into the room its segments have on
	// a nearly full disk instead of failing on a preallocation nobody needs yet. It is
	// called from the log's goroutines, with none of its locks held. Nil: always room.
	Room func(bytes int64) bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("wal: Options.Dir is required")
	}
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < MinSegmentSize || o.SegmentSize > MaxSegmentSize {
		return o, fmt.Errorf("wal: Options.SegmentSize %d is outside [%d, %d]", o.SegmentSize, MinSegmentSize, MaxSegmentSize)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Log is the write-ahead log: a directory of segment files that records are
// appended to, made durable in group commits, and read back by position.
// One commit runs at a time: in the flusher goroutine, or in a goroutine
// waiting for its own pending record when no commit runs (which saves a
// lone writer two goroutine hand-offs per record).
//
// Locking: Log.mu guards the append state and the segment table; each
// segment's rmu guards its file against Remove and Close. The two are never
// held together. A committer never holds mu while doing I/O, and Append
// never does I/O.
type Log struct {
	fs          vfs.FS
	dir         string
	segSize     int64
	maxRecord   int
	logger      *slog.Logger
	noPrecreate bool
	lock        io.Closer
	observer    Observer
	room        func(int64) bool

	mu       sync.Mutex
	wake     *sync.Cond          // on mu: wakes the flusher (work, Close, preparer failure)
	segments map[uint32]*segment // every segment that may hold records
	end      Pos                 // after the last appended frame (record, or a committed batch's trailer)
	curCap   int64               // what end's segment may fill up to: its capacity, or end itself to take no more
	durable  Pos                 // everything before it is durable
	pending  *batch              // filling; never nil
	inflight *batch              // being committed, or nil: non-nil while a cycle runs (in the flusher or in a waiter; see lead)
	spare    []byte              // a written batch's buffer, for reuse
	failed   error               // sticky; wraps ErrFailed
	closed   bool
	holds    []*Hold // the owners' claims, for a log with several (share.go)

	// The frames in end's segment since its last trailer start at sealed, and
	// open of them are records; the next trailer written there closes them.
	// Only after Open can they predate the pending batch: records of a batch
	// whose trailer never reached the disk, which the next one then closes too.
	sealed int64
	open   int

	// Owned by the goroutine running a commit cycle (inflight != nil), and by
	// Open and Close while none can run.
	w      *segment  // segment being written
	wDirty bool      // w has writes not yet synced
	prep   *prepared // next segment, being or already created
	// syncTime is the fsync time of the batch being committed (only with an Observer).
	syncTime time.Duration

	// Recovery only: dry makes it read without changing anything (Salvage's
	// inspection), and damage is what it refused to discard, if anything.
	dry    bool
	damage *tailDamage

	flusherDone chan struct{}
	preparers   sync.WaitGroup

	stats struct {
		batches, syncs, records, bytes atomic.Uint64
	}
}

// segment is one open segment file.
type segment struct {
	idx      uint32
	path     string
	capacity int64 // usable bytes: the file size when opened or created
	used     int64 // durable bytes in use, header included; guarded by Log.mu
	version  uint32

	rmu sync.RWMutex // guards f against Remove and Close while ReadAt uses it
	f   vfs.File     // nil once removed or closed
}

// batch is one group commit: the frames appended between two flusher
// cycles, laid out contiguously in buf, with where each run of them goes.
// Each run ends with the trailer that closes it in its segment: the trailer
// of the last run is added when a committer takes the batch, those of the
// others when a record rolls to the next segment.
type batch struct {
	buf     []byte
	spans   []span
	records int
	end     Pos           // after the batch's last record
	done    chan struct{} // closed when durable or failed
	err     error         // set before done is closed
	first   time.Time     // when its first record was appended (only with an Observer)
}

// span is a run of buf that lands contiguously in one segment.
type span struct {
	seg    uint32
	off    int64
	lo, hi int
}

// prepared is a segment being created ahead of need.
type prepared struct {
	idx  uint32
	done chan struct{}
	seg  *segment
	err  error
}

// Ticket identifies the commit batch holding an appended record.
type Ticket struct {
	b *batch
	l *Log
}

// Wait blocks until the ticket's batch is durable (written and fsynced),
// the log has failed (an error wrapping ErrFailed), or ctx is done. Batches
// complete in order, so waiting on the last ticket of a sequence covers the
// earlier ones. A zero Ticket is already durable.
//
// When the ticket's batch is still pending and no commit is running, Wait
// commits it in the calling goroutine (one write and one fsync) and returns
// when that is done, even if ctx ends meanwhile; a waiter whose batch is
// being committed elsewhere stops waiting when ctx is done.
func (t Ticket) Wait(ctx context.Context) error {
	if t.b == nil {
		return nil
	}
	select {
	case <-t.b.done:
		return t.b.err
	default:
	}
	if t.l != nil {
		t.l.lead(t.b) // commit it here if nobody is committing
	}
	select {
	case <-t.b.done:
		return t.b.err
	case <-ctx.Done():
		return fmt.Errorf("wal: waiting for commit: %w", ctx.Err())
	}
}

// Open opens the log in opts.Dir, creating it if needed, and recovers it:
// it checks every segment's header, calls replay for every valid record
// from start on, in order, repairs a torn tail, and returns a Log ready to
// append after the last valid record. See the package documentation for
// the recovery rules and the errors they produce.
//
// start is where replay begins: a position returned by Append or passed to
// replay (typically the one a checkpoint covers up to), or 0 for the
// beginning of the oldest segment. Segments before start's are kept for
// ReadAt but not scanned; start's own segment is scanned from its beginning
// so that start can be checked against the record boundaries. The payload
// passed to replay is valid only during the call; an error from replay
// aborts Open and is returned wrapped.
func Open(opts Options, start Pos, replay func(pos Pos, payload []byte) error) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := o.FS.MkdirAll(o.Dir, vfs.DirMode); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", o.Dir, err)
	}
	lock, err := o.FS.Lock(filepath.Join(o.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wal: lock %s (is another process or Log using it?): %w", o.Dir, err)
	}
	l := &Log{
		fs:          o.FS,
		dir:         o.Dir,
		segSize:     o.SegmentSize,
		maxRecord:   int(((o.SegmentSize - headerSize - trailerSize) &^ (frameAlign - 1)) - frameHeaderSize),
		logger:      o.Logger,
		noPrecreate: o.NoPrecreate,
		lock:        lock,
		observer:    o.Observer,
		room:        o.Room,
		segments:    map[uint32]*segment{},
		flusherDone: make(chan struct{}),
	}
	l.wake = sync.NewCond(&l.mu)
	l.pending = l.newBatchLocked()
	if err := l.recover(start, replay); err != nil {
		if l.prep != nil {
			l.prep.seg.f.Close()
		}
		l.closeFiles()
		lock.Close()
		return nil, err
	}
	if !l.noPrecreate && l.prep == nil {
		l.startPrepare(l.w.idx + 1)
	}
	go l.flushLoop()
	return l, nil
}

// MaxRecordSize is the largest payload Append accepts: one whose frame and
// its batch's trailer fill an empty segment of Options.SegmentSize.
func (l *Log) MaxRecordSize() int { return l.maxRecord }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

func (l *Log) newBatchLocked() *batch {
	b := &batch{buf: l.spare, done: make(chan struct{})}
	l.spare = nil
	return b
}

// appendableLocked returns why no record can be appended now, if so.
func (l *Log) appendableLocked() error {
	if l.failed != nil {
		return l.failed
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

// Append copies payload into the pending commit batch and returns the
// record's position and a ticket to wait for its durability. It never waits
// for I/O: the flusher writes and fsyncs the batch in the background.
//
// Records get positions, and reach the disk, in the order of the Append
// calls; callers that need their own state changes in the same order as
// their records must call Append under the lock that orders those changes.
// Nothing bounds the bytes pending: a caller that can outrun the disk should
// bound its outstanding tickets.
func (l *Log) Append(payload []byte) (Pos, Ticket, error) {
	if len(payload) == 0 {
		return 0, Ticket{}, ErrEmptyRecord
	}
	if len(payload) > l.maxRecord {
		return 0, Ticket{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrRecordTooLarge, len(payload), l.maxRecord)
	}
	var hdr [frameHeaderSize]byte
	pad := putFrameHeader(hdr[:], payload) // checksum outside the lock
	var zeros [frameAlign]byte

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendableLocked(); err != nil {
		return 0, Ticket{}, err
	}
	b := l.pending
	lo := len(b.buf)
	b.buf = append(b.buf, hdr[:]...)
	b.buf = append(b.buf, payload...)
	b.buf = append(b.buf, zeros[:pad]...)
	pos := l.placeLocked(b, lo)
	return pos, Ticket{b: b, l: l}, nil
}

// AppendFunc is Append for callers that encode the payload themselves: fn
// appends the payload to buf and returns the extended slice, like the
// strconv.Append functions, which saves the intermediate allocation. fn runs
// under the log's append lock: it must be quick, must not retain buf, and
// must not call the Log.
func (l *Log) AppendFunc(fn func(buf []byte) []byte) (pos Pos, t Ticket, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendableLocked(); err != nil {
		return 0, Ticket{}, err
	}
	b := l.pending
	lo := len(b.buf)
	start := lo + frameHeaderSize
	var hdr [frameHeaderSize]byte
	ok := false
	defer func() {
		if !ok { // fn panicked or produced no valid record: drop its bytes
			b.buf = b.buf[:lo]
		}
	}()
	out := fn(append(b.buf, hdr[:]...))
	if len(out) < start {
		return 0, Ticket{}, errors.New("wal: AppendFunc: fn returned a slice shorter than the one it was given")
	}
	n := len(out) - start
	if n == 0 {
		return 0, Ticket{}, ErrEmptyRecord
	}
	if n > l.maxRecord {
		return 0, Ticket{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrRecordTooLarge, n, l.maxRecord)
	}
	pad := putFrameHeader(out[lo:start], out[start:])
	var zeros [frameAlign]byte
	b.buf = append(out, zeros[:pad]...)
	ok = true
	return l.placeLocked(b, lo), Ticket{b: b, l: l}, nil
}

// placeLocked gives the frame at b.buf[lo:] its position, rolling to a new
// segment when it does not fit in the current one with room left for a
// trailer after it.
func (l *Log) placeLocked(b *batch, lo int) Pos {
	size := int64(len(b.buf) - lo)
	seg, off := l.end.Segment(), int64(l.end.Offset())
	if off+size+trailerSize > l.curCap {
		// The record starts the next segment. This batch's run in the old one
		// gets its trailer first, in front of the record in buf, so that the
		// old segment is complete when the committer moves on.
		if n := len(b.spans); n > 0 && b.spans[n-1].seg == seg {
			var room [trailerSize]byte
			b.buf = append(b.buf, room[:]...)
			copy(b.buf[lo+trailerSize:], b.buf[lo:lo+int(size)])
			putTrailer(b.buf[lo:], off-l.sealed, l.open)
			b.spans[n-1].hi = lo + trailerSize
			lo += trailerSize
		}
		seg, off = seg+1, headerSize
		l.curCap = l.segSize
		l.sealed, l.open = headerSize, 0
	}
	pos := MakePos(seg, uint32(off))
	if n := len(b.spans); n > 0 && b.spans[n-1].seg == seg && b.spans[n-1].hi == lo &&
		b.spans[n-1].off+int64(b.spans[n-1].hi-b.spans[n-1].lo) == off {
		b.spans[n-1].hi = len(b.buf)
	} else {
		b.spans = append(b.spans, span{seg: seg, off: off, lo: lo, hi: len(b.buf)})
	}
	l.end = MakePos(seg, uint32(off+size))
	b.end = l.end
	l.open++
	if b.records == 0 && l.observer != nil {
		b.first = time.Now()
	}
	b.records++
	return pos
}

// sealLocked ends b, the pending batch, which holds records, with the trailer
// of its last run. The trailer takes its place in the log now, so a record
// appended after this goes after it.
func (l *Log) sealLocked(b *batch) {
	off := int64(l.end.Offset())
	var t [trailerSize]byte
	putTrailer(t[:], off-l.sealed, l.open)
	b.buf = append(b.buf, t[:]...)
	b.spans[len(b.spans)-1].hi = len(b.buf) // the run that ends at l.end
	l.sealed, l.open = off+trailerSize, 0
	l.end = MakePos(l.end.Segment(), uint32(l.sealed))
	b.end = l.end
}

// Commit makes what has been appended durable soon, without waiting for it: the
// background committer takes it. Appending alone does not start a commit, because the
// appender that waits for its ticket commits its batch itself (see Ticket.Wait), and
// waking the committer for nothing cost a wake-up of another core per batch. An
// appender that will not wait calls Commit.
func (l *Log) Commit() {
	l.mu.Lock()
	if l.pending.records > 0 {
		l.wake.Signal()
	}
	l.mu.Unlock()
}

// End returns the position just after the last appended record, or after
// the trailer of the last committed batch. The next record goes there, unless
// the batch holding the last record is committed first (then it goes after
// that batch's trailer) or it does not fit in that segment and starts the next
// one. Either way End is a frame boundary that Open accepts as a start
// position.
func (l *Log) End() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// Durable returns the position up to which the log is durable: every record
// at a position before it has been written and fsynced.
func (l *Log) Durable() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// Err returns the failure that stopped the log (wrapping ErrFailed), or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// WaitDurable blocks until the record at pos is durable, the log fails, or
// ctx is done. pos must be the position of an appended record.
func (l *Log) WaitDurable(ctx context.Context, pos Pos) error {
	l.mu.Lock()
	if pos < l.durable {
		l.mu.Unlock()
		return nil
	}
	if l.failed != nil {
		l.mu.Unlock()
		return l.failed
	}
	if pos >= l.end {
		end := l.end
		l.mu.Unlock()
		return fmt.Errorf("%w: no record at %v, the log ends at %v", ErrNotFound, pos, end)
	}
	b := l.pending
	if l.inflight != nil && pos < l.inflight.end {
		b = l.inflight
	}
	l.mu.Unlock()
	return Ticket{b: b, l: l}.Wait(ctx)
}

// ReadAt returns a copy of the payload of the record at pos, which must be
// a position returned by Append or passed to replay. It waits for the record
// to be durable first, so it never returns bytes a crash could take back. A
// checksum mismatch returns a *CorruptionError; a position in a removed
// segment or beyond the end, an error wrapping ErrNotFound.
func (l *Log) ReadAt(pos Pos) ([]byte, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err := l.WaitDurable(context.Background(), pos); err != nil {
		return nil, err
	}
	l.mu.Lock()
	seg := l.segments[pos.Segment()]
	l.mu.Unlock()
	if seg == nil {
		return nil, fmt.Errorf("%w: segment %s of position %v is not in the log", ErrNotFound, segmentName(pos.Segment()), pos)
	}
	seg.rmu.RLock()
	defer seg.rmu.RUnlock()
	if seg.f == nil {
		return nil, fmt.Errorf("%w: segment %s of position %v was removed or closed", ErrNotFound, segmentName(pos.Segment()), pos)
	}
	off := int64(pos.Offset())
	if off < headerSize || off%frameAlign != 0 || off+frameHeaderSize > seg.capacity {
		return nil, fmt.Errorf("%w: %v is not a record position", ErrNotFound, pos)
	}
	var hdr [frameHeaderSize]byte
	if _, err := seg.f.ReadAt(hdr[:], off); err != nil {
		return nil, fmt.Errorf("wal: read %s at %d: %w", seg.path, off, err)
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n&trailerFlag != 0 && seg.version >= 2 {
		return nil, fmt.Errorf("%w: %v is a batch trailer, not a record", ErrNotFound, pos)
	}
	if n == 0 || frameSize(int(n)) > seg.capacity-off {
		return nil, &CorruptionError{File: seg.path, Offset: off, Reason: fmt.Sprintf("record length %d is impossible here", n)}
	}
	payload := make([]byte, n)
	if _, err := seg.f.ReadAt(payload, off+frameHeaderSize); err != nil {
		return nil, fmt.Errorf("wal: read %s at %d: %w", seg.path, off, err)
	}
	if binary.LittleEndian.Uint32(hdr[4:]) != frameCRC(n, payload) {
		return nil, &CorruptionError{File: seg.path, Offset: off, Reason: "checksum mismatch"}
	}
	return payload, nil
}

// SegmentInfo describes one segment of the log.
type SegmentInfo struct {
	Index uint32
	Name  string // file name inside the log directory
	// Size is the bytes in use, header included: durable records for the
	// segments Open scanned and those written since; the file size for
	// segments before the start position, which Open does not scan.
	Size int64
}

// Segments lists the segments that hold or may hold records, oldest first.
// A segment created ahead of need is not listed until records go into it.
func (l *Log) Segments() []SegmentInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SegmentInfo, 0, len(l.segments))
	for _, idx := range slices.Sorted(maps.Keys(l.segments)) {
		s := l.segments[idx]
		out = append(out, SegmentInfo{Index: idx, Name: segmentName(idx), Size: s.used})
	}
	return out
}

// Remove deletes a whole segment, which must lie entirely before the durable position
// (so never the segment being written). The caller must be sure nothing still needs the
// records in it: they lie before the start position of the latest durable checkpoint
// (Open replays only from there, and tolerates gaps before it), and no live state refers
// to them. ReadAt of a position in it then fails with ErrNotFound.
//
// A failure to remove the file or sync the directory is returned but does not fail the
// log: at worst the segment comes back after a crash, which is harmless.
func (l *Log) Remove(idx uint32) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	seg := l.segments[idx]
	if seg == nil {
		l.mu.Unlock()
		return fmt.Errorf("wal: remove segment %s: %w", segmentName(idx), ErrNotFound)
	}
	if idx >= l.durable.Segment() {
		l.mu.Unlock()
		return fmt.Errorf("wal: remove segment %s: the log's durable end %v is in it or before it", segmentName(idx), l.durable)
	}
	delete(l.segments, idx)
	l.mu.Unlock()

	seg.rmu.Lock()
	f := seg.f
	seg.f = nil
	seg.rmu.Unlock()
	var errs []error
	if f != nil {
		errs = append(errs, f.Close())
	}
	if err := l.fs.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	} else if err := l.fs.SyncDir(l.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wal: remove segment %s: %w", segmentName(idx), err)
	}
	return nil
}

// Stats counts the log's work since Open.
type Stats struct {
	Batches uint64 // commit cycles completed
	Syncs   uint64 // fsyncs of segment data (one per batch, plus one per roll)
	Records uint64 // records made durable
	Bytes   uint64 // frame bytes made durable
}

// Stats returns the counters; batches per sync and records per batch show
// how well group commit is working.
func (l *Log) Stats() Stats {
	return Stats{
		Batches: l.stats.batches.Load(),
		Syncs:   l.stats.syncs.Load(),
		Records: l.stats.records.Load(),
		Bytes:   l.stats.bytes.Load(),
	}
}

// Close makes everything appended so far durable (unless the log has
// failed), stops the flusher and any background segment creation, and
// closes the files and the directory lock. Tickets of records appended
// before Close complete normally. Close returns the log's failure, if any.
// Calling Close again returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.wake.Signal()
	l.mu.Unlock()

	<-l.flusherDone
	l.preparers.Wait()
	errs := []error{l.Err()}
	if p := l.prep; p != nil && p.err == nil && p.seg != nil {
		errs = append(errs, p.seg.f.Close())
	}
	errs = append(errs, l.closeFiles(), l.lock.Close())
	return errors.Join(errs...)
}

// closeFiles closes every segment file; ReadAt then reports ErrNotFound.
func (l *Log) closeFiles() error {
	l.mu.Lock()
	segs := slices.Collect(maps.Values(l.segments))
	l.mu.Unlock()
	var errs []error
	for _, s := range segs {
		s.rmu.Lock()
		if s.f != nil {
			errs = append(errs, s.f.Close())
			s.f = nil
		}
		s.rmu.Unlock()
	}
	return errors.Join(errs...)
}
