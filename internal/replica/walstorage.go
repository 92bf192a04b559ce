package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// The raft records of a WALStorage's log. Their first byte lies in 0xD0..0xDF, a range
// no other okiba record uses (queue kinds < 64, topic 64..127, payload-store frames
// 0x80..0xBF, access 0xC0..0xCF), so a dump of a node's log tells them apart; the kinds
// not listed here are reserved for the replica.
//
//	0xD0 entry       the raft entry, protobuf-encoded (so its length minus one is the
//	                 size raft's maxSize counts). An entry at index i supersedes every
//	                 entry at i or later written before it.
//	0xD1 hard state  the raft HardState, protobuf-encoded; the last one counts.
//	0xD2 installed   a snapshot received from the leader became the storage's: every
//	                 entry before it is dropped.
//	0xD3 compacted   a snapshot of this replica's machines became the storage's, and the
//	                 entries up to the compaction index are dropped, the later ones kept.
//
// Both snapshot markers are 32 bytes after the kind — the snapshot's index and term,
// then the compaction index (the log's dummy entry) and its term, each a little-endian
// u64 — followed by the snapshot's ConfState, protobuf-encoded. The snapshot's data is
// in its own file (see snapName), written and synced before the marker is appended:
// a snapshot is the storage's once its marker is durable, and a file without one is
// the residue of a crash.
const (
	recEntry     byte = 0xD0
	recHardState byte = 0xD1
	recInstalled byte = 0xD2
	recCompacted byte = 0xD3
	markerFixed       = 1 + 4*8
)

// DefaultCacheBytes is WALOptions.CacheBytes when it is zero.
const DefaultCacheBytes = 4 << 20

// WALOptions configures a WALStorage.
type WALOptions struct {
	// FS is the file system. Defaults to vfs.OS.
	FS vfs.FS
	// Dir is the data directory: the log in Dir/wal, snapshots in Dir/snap. Required.
	Dir string
	// SegmentSize is the log's segment size. Defaults to wal.DefaultSegmentSize.
	SegmentSize int64
	// Keep is how many entries before a snapshot's index SaveSnapshot keeps, as
	// Memory.Keep. Defaults to 0.
	Keep uint64
	// KeepBytes, if not 0, keeps fewer of them: no more than fit in KeepBytes (by raft's
	// size of each), so that a few large entries do not hold the log's segments.
	KeepBytes uint64
	// CacheBytes bounds the entries (by raft's size) kept decoded in memory, the
	// newest first; older ones are read back from the log. Defaults to
	// DefaultCacheBytes; negative keeps none.
	CacheBytes int
	// Logger receives the log's warnings. Defaults to discarding them.
	Logger *slog.Logger
}

// WALStorage is a Storage on okiba's write-ahead log: entries, hard states and snapshot
// markers are records of one wal.Log (see recEntry), each Save one Ticket wait, so
// concurrent Saves share a group commit as the broker's appends do.
//
// In memory it keeps, for every entry in the log, its term, its position in the log
// and its size (32 bytes an entry), and the decoded entry itself for the newest
// CacheBytes of them: raft reads the recent entries again and again (to send and to
// apply them), the older ones rarely (a follower catching up), and those are read back
// from the log by position. The snapshot's data is not kept: Snapshot reads its file.
//
// The state after a crash or a power loss is what the last Save that returned made
// durable, and possibly more of one that had not returned. Safe for concurrent use;
// Entries may wait for entries another Save has not yet made durable.
type WALStorage struct {
	fs         vfs.FS
	snapDir    string
	keep       uint64
	keepBytes  uint64
	cacheBytes int
	ownLog     bool // OpenWAL's: the storage's own log, closed with it

	mu        sync.Mutex
	log       *wal.Log
	remover   Remover
	startPath string // in a shared log's directory: where the storage's records begin (StartFile)
	closed    bool
	failed    error // sticky: a Save whose records may not be durable leaves the storage unusable

	hs        *pb.HardState // nil until one is saved
	snap      *pb.SnapshotMetadata
	snapPos   wal.Pos // the latest snapshot's marker
	durSnap   uint64  // the index of the latest snapshot whose marker is durable
	offset    uint64  // the dummy entry: the index before the first entry
	offTerm   uint64
	ents      []slot // the entries offset+1, offset+2, ...
	cacheFrom int    // ents[cacheFrom:] hold their entry
	cached    int    // the bytes they count
}

// slot is one entry of the log, in memory.
type slot struct {
	term uint64
	pos  wal.Pos
	size uint32    // proto.Size of the entry
	ent  *pb.Entry // nil once out of the cache
}

// Remover removes a segment of the log that the storage no longer needs: the log
// itself when the storage is its only owner, the storage's wal.Hold when it shares the
// log (a cluster node's broker writes its own records into it).
type Remover interface {
	Remove(idx uint32) error
}

// errNotAttached: the storage has no log yet (NewWAL, before Attach).
var errNotAttached = errors.New("replica: the storage has no log yet")

// OpenWAL opens (creating if needed) the storage in opts.Dir, on a log of its own in
// Dir/wal: it replays the log, repairing a torn tail as wal.Open does, and rebuilds the
// entries' index, the hard state and the snapshot.
func OpenWAL(opts WALOptions) (*WALStorage, error) {
	s, err := NewWAL(opts)
	if err != nil {
		return nil, err
	}
	var r WALReplay
	l, err := wal.Open(wal.Options{FS: s.fs, Dir: filepath.Join(opts.Dir, "wal"),
		SegmentSize: opts.SegmentSize, Logger: opts.Logger}, 0, r.Record)
	if err != nil {
		return nil, fmt.Errorf("replica: open storage: %w", err)
	}
	s.ownLog = true
	if err := s.Attach(l, l, &r); err != nil {
		l.Close()
		return nil, fmt.Errorf("replica: open storage in %s: %w", opts.Dir, err)
	}
	return s, nil
}

// NewWAL returns a storage with its snapshots in opts.Dir/snap and no log yet: its
// owner opens a log it shares with other records (a cluster node's broker log), hands
// the storage's records to a WALReplay as the log replays, and attaches it. Until then
// every call fails.
func NewWAL(opts WALOptions) (*WALStorage, error) {
	if opts.Dir == "" {
		return nil, errors.New("replica: WALOptions.Dir is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	switch {
	case opts.CacheBytes == 0:
		opts.CacheBytes = DefaultCacheBytes
	case opts.CacheBytes < 0:
		opts.CacheBytes = 0
	}
	s := &WALStorage{fs: opts.FS, snapDir: filepath.Join(opts.Dir, "snap"), keep: opts.Keep, keepBytes: opts.KeepBytes,
		cacheBytes: opts.CacheBytes, snap: &pb.SnapshotMetadata{ConfState: &pb.ConfState{}}, failed: errNotAttached}
	if err := s.fs.MkdirAll(s.snapDir, vfs.DirMode); err != nil {
		return nil, fmt.Errorf("replica: open storage: %w", err)
	}
	return s, nil
}

// WALReplay gathers a WALStorage's state from the raft records (0xD0..0xDF; a shared
// log's other owner tells them apart, broker.IsSharedRecord) of a log as it replays, in
// log order, for Attach.
type WALReplay struct{ r replayer }

// Record takes one raft record of the log at pos.
func (w *WALReplay) Record(pos wal.Pos, p []byte) error { return w.r.record(pos, p) }

// Attach makes l the storage's log, with the state rp gathered from its replay, and rm
// what removes the segments the storage no longer needs. Whatever state the storage had
// is replaced: a node whose log was closed and opened again (a rebuild) or replaced (an
// installed state, see Carry) attaches the new one, while raft keeps the storage.
func (s *WALStorage) Attach(l *wal.Log, rm Remover, rp *WALReplay) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("replica: storage closed")
	}
	s.log, s.remover, s.failed = l, rm, nil
	if !s.ownLog {
		s.startPath = filepath.Join(l.Dir(), StartFile)
	}
	s.hs, s.snap, s.snapPos, s.durSnap = nil, &pb.SnapshotMetadata{ConfState: &pb.ConfState{}}, 0, 0
	s.offset, s.offTerm, s.ents, s.cacheFrom, s.cached = 0, 0, nil, 0, 0
	if err := s.rebuild(&rp.r); err != nil {
		s.failed = fmt.Errorf("replica: storage failed: %w", err)
		return err
	}
	return nil
}

// Carry writes into l, the log of a state about to replace the one the storage's log
// belongs to (a node installing another's state for snap), what the storage must find
// there once it is attached to it: snap's file and marker, and the hard state hs (or
// the storage's, when hs is empty) with its commit raised to snap's index. A crash after
// the swap then leaves the storage as the Save of snap would, its term and vote kept.
func (s *WALStorage) Carry(l *wal.Log, snap *pb.Snapshot, hs *pb.HardState) error {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	if raft.IsEmptyHardState(hs) {
		hs = s.hs
	}
	s.mu.Unlock()
	m := snap.GetMetadata()
	pos, t, err := s.writeSnapshot(l, recInstalled, snap, m.GetIndex(), m.GetTerm())
	if err != nil {
		return err
	}
	if err := writeStart(s.fs, filepath.Join(l.Dir(), StartFile), pos); err != nil {
		return err
	}
	if hs != nil {
		hs = proto.Clone(hs).(*pb.HardState)
		hs.Commit = new(max(hs.GetCommit(), m.GetIndex()))
		if _, t, err = l.AppendFunc(func(b []byte) []byte {
			b, _ = proto.MarshalOptions{}.MarshalAppend(append(b, recHardState), hs)
			return b
		}); err != nil {
			return fmt.Errorf("replica: carry the hard state: %w", err)
		}
	}
	return t.Wait(context.Background())
}

// replayer gathers the state while the log replays. Its entries start at base, which
// only at the end must meet the snapshot: the oldest segments kept may begin with
// entries that a later marker drops.
type replayer struct {
	hs      *pb.HardState
	snap    *pb.SnapshotMetadata
	snapPos wal.Pos
	offset  uint64
	offTerm uint64
	base    uint64
	ents    []slot
}

func (r *replayer) record(pos wal.Pos, p []byte) error {
	switch p[0] {
	case recEntry:
		e := &pb.Entry{}
		if err := proto.Unmarshal(p[1:], e); err != nil {
			return fmt.Errorf("entry record at %v: %w", pos, err)
		}
		i := e.GetIndex()
		if i <= r.offset {
			return nil
		}
		if len(r.ents) > 0 && i >= r.base && i <= r.base+uint64(len(r.ents)) {
			r.ents = r.ents[:i-r.base]
		} else {
			r.base, r.ents = i, r.ents[:0]
		}
		r.ents = append(r.ents, slot{term: e.GetTerm(), pos: pos, size: uint32(len(p) - 1), ent: e})
	case recHardState:
		hs := &pb.HardState{}
		if err := proto.Unmarshal(p[1:], hs); err != nil {
			return fmt.Errorf("hard state record at %v: %w", pos, err)
		}
		r.hs = hs
	case recInstalled, recCompacted:
		m, ci, ct, err := decodeMarker(p)
		if err != nil {
			return fmt.Errorf("snapshot record at %v: %w", pos, err)
		}
		r.snap, r.snapPos, r.offset, r.offTerm = m, pos, ci, ct
		if p[0] == recInstalled || len(r.ents) == 0 || ci >= r.base+uint64(len(r.ents))-1 {
			r.ents = r.ents[:0]
		} else if ci >= r.base {
			r.ents = r.ents[ci+1-r.base:]
			r.base = ci + 1
		}
	default:
		return fmt.Errorf("record at %v has kind %#x, not a raft record's (0xD0..0xDF)", pos, p[0])
	}
	return nil
}

// rebuild takes the replayed state, checks that it is whole and loads the snapshot.
func (s *WALStorage) rebuild(r *replayer) error {
	s.hs = r.hs
	if s.hs != nil && r.snap != nil && s.hs.GetCommit() < r.snap.GetIndex() {
		// The snapshot's marker became durable, the hard state of its Save did not.
		// Raft refuses a commit index before the snapshot's, and the snapshot is of
		// committed entries, so its index is committed.
		s.hs.Commit = new(r.snap.GetIndex())
	}
	s.offset, s.offTerm = r.offset, r.offTerm
	if len(r.ents) > 0 {
		if r.base > r.offset+1 {
			return fmt.Errorf("the log's entries start at %d, but the snapshot covers only up to %d", r.base, r.offset)
		}
		s.ents = r.ents[r.offset+1-r.base:]
	}
	s.cacheFrom = 0
	for _, e := range s.ents {
		s.cached += int(e.size)
	}
	s.trimCacheLocked()
	if r.snap != nil {
		s.snap, s.snapPos, s.durSnap = r.snap, r.snapPos, r.snap.GetIndex()
		if _, err := s.readSnapshot(); err != nil {
			return err
		}
	}
	return s.removeStaleSnapshots(true)
}

// Close closes the log, if it is the storage's own (OpenWAL). The storage is unusable
// afterwards.
func (s *WALStorage) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.failed == nil || s.failed == errNotAttached {
		s.failed = errors.New("replica: storage closed")
	}
	l := s.log
	s.mu.Unlock()
	if !s.ownLog || l == nil {
		return nil
	}
	return l.Close()
}

// Log is the storage's write-ahead log, for its statistics.
func (s *WALStorage) Log() *wal.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log
}

// InitialState implements raft.Storage.
func (s *WALStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, nil, s.failed
	}
	var hs *pb.HardState
	if s.hs != nil {
		hs = proto.Clone(s.hs).(*pb.HardState)
	}
	return hs, pb.EnsureConfState(proto.Clone(s.snap.GetConfState()).(*pb.ConfState)), nil
}

// Entries implements raft.Storage.
func (s *WALStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, s.failed
	}
	if lo <= s.offset {
		return nil, raft.ErrCompacted
	}
	last := s.lastLocked()
	if hi > last+1 || lo > hi {
		return nil, fmt.Errorf("replica: entries [%d, %d) out of bounds: the last index is %d", lo, hi, last)
	}
	if len(s.ents) == 0 {
		return nil, raft.ErrUnavailable
	}
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; i++ {
		sl := &s.ents[i-s.offset-1]
		size += uint64(sl.size)
		if len(out) > 0 && size > maxSize {
			break
		}
		e := sl.ent
		if e == nil {
			var err error
			if e, err = s.readEntry(i, sl); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// readEntry reads entry i back from the log.
func (s *WALStorage) readEntry(i uint64, sl *slot) (*pb.Entry, error) {
	p, err := s.log.ReadAt(sl.pos)
	if err != nil {
		return nil, fmt.Errorf("replica: read entry %d: %w", i, err)
	}
	e := &pb.Entry{}
	if p[0] != recEntry {
		return nil, fmt.Errorf("replica: read entry %d at %v: record kind %#x", i, sl.pos, p[0])
	}
	if err := proto.Unmarshal(p[1:], e); err != nil {
		return nil, fmt.Errorf("replica: read entry %d at %v: %w", i, sl.pos, err)
	}
	if e.GetIndex() != i || e.GetTerm() != sl.term {
		return nil, fmt.Errorf("replica: read entry %d at %v: found entry %d of term %d", i, sl.pos, e.GetIndex(), e.GetTerm())
	}
	return e, nil
}

// Term implements raft.Storage.
func (s *WALStorage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return 0, s.failed
	}
	return s.termLocked(i)
}

func (s *WALStorage) termLocked(i uint64) (uint64, error) {
	switch {
	case i < s.offset:
		return 0, raft.ErrCompacted
	case i == s.offset:
		return s.offTerm, nil
	case i > s.lastLocked():
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-s.offset-1].term, nil
}

// LastIndex implements raft.Storage.
func (s *WALStorage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(), s.failed
}

func (s *WALStorage) lastLocked() uint64 { return s.offset + uint64(len(s.ents)) }

// FirstIndex implements raft.Storage.
func (s *WALStorage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offset + 1, s.failed
}

// Size returns raft's size of the entries after lo up to hi that the storage holds: what
// compacting up to hi would drop.
func (s *WALStorage) Size(lo, hi uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for j := max(lo, s.offset) + 1; j <= min(hi, s.lastLocked()); j++ {
		n += uint64(s.ents[j-s.offset-1].size)
	}
	return n
}

// Snapshot implements raft.Storage: it reads the snapshot's file.
func (s *WALStorage) Snapshot() (*pb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, s.failed
	}
	if s.snap.GetIndex() == 0 {
		return &pb.Snapshot{Metadata: proto.Clone(s.snap).(*pb.SnapshotMetadata)}, nil
	}
	return s.readSnapshot()
}

// Save implements Storage: the records go into the log in order, and Save waits once,
// for the last of them.
func (s *WALStorage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	var t wal.Ticket
	var err error
	installed := !raft.IsEmptySnap(snap)
	if installed {
		m := snap.GetMetadata()
		switch {
		case s.snap.GetIndex() == m.GetIndex() && s.snap.GetTerm() == m.GetTerm() && s.offset == m.GetIndex() && len(s.ents) == 0:
			// Carried into the log this storage was attached to since: it holds it.
			installed = false
		case s.snap.GetIndex() != 0 && s.snap.GetIndex() >= m.GetIndex():
			s.mu.Unlock()
			return raft.ErrSnapOutOfDate
		default:
			if t, err = s.newSnapshotLocked(recInstalled, snap, m.GetIndex(), m.GetTerm()); err != nil {
				s.mu.Unlock()
				return err
			}
		}
	}
	if len(ents) > 0 && ents[0].GetIndex() <= s.offset { // compacted already, as Memory
		k := min(s.offset+1-ents[0].GetIndex(), uint64(len(ents)))
		ents = ents[k:]
	}
	if len(ents) > 0 {
		if first, last := ents[0].GetIndex(), s.lastLocked(); first > last+1 {
			return s.failLocked(fmt.Errorf("replica: save: entry %d would leave a gap after the last index %d", first, last))
		}
		for _, e := range ents {
			if t, err = s.appendEntryLocked(e); err != nil {
				return s.failLocked(err)
			}
		}
	}
	if !raft.IsEmptyHardState(hs) {
		s.hs = proto.Clone(hs).(*pb.HardState)
	}
	if !raft.IsEmptyHardState(hs) || (installed && s.hs != nil) {
		// After a marker, the hard state is written again, so that the segments before
		// the marker can go.
		if t, err = s.appendProtoLocked(recHardState, s.hs); err != nil {
			return s.failLocked(err)
		}
	}
	s.mu.Unlock()
	if err := t.Wait(context.Background()); err != nil {
		s.mu.Lock()
		return s.failLocked(err)
	}
	if installed {
		return s.collect(snap.GetMetadata().GetIndex())
	}
	return nil
}

// SaveSnapshot implements Storage. The snapshot's file is written, then its marker and
// the hard state go into the log; once they are durable, the older snapshot files and
// the segments wholly before both the marker and the first entry kept are removed.
func (s *WALStorage) SaveSnapshot(i uint64, cs *pb.ConfState, data []byte) error {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	if i <= s.snap.GetIndex() {
		s.mu.Unlock()
		return raft.ErrSnapOutOfDate
	}
	term, err := s.termLocked(i)
	if err != nil || i <= s.offset {
		s.mu.Unlock()
		return fmt.Errorf("replica: save snapshot at %d: not in the log (last index %d)", i, s.lastLocked())
	}
	if cs == nil {
		cs = s.snap.GetConfState()
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(i), Term: new(term), ConfState: cs}}
	t, err := s.newSnapshotLocked(recCompacted, snap, s.offset, s.offTerm)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if s.hs != nil {
		if t, err = s.appendProtoLocked(recHardState, s.hs); err != nil {
			return s.failLocked(err)
		}
	}
	s.mu.Unlock()
	if err := t.Wait(context.Background()); err != nil {
		s.mu.Lock()
		return s.failLocked(err)
	}
	return s.collect(i)
}

// newSnapshotLocked writes snap's file and appends its marker, and makes it the
// storage's: for recInstalled the log is reset to it; for recCompacted the entries up
// to i-Keep are dropped (none if that is not after the current offset; ci and ct are
// then the current offset and its term).
func (s *WALStorage) newSnapshotLocked(kind byte, snap *pb.Snapshot, ci, ct uint64) (wal.Ticket, error) {
	m := snap.GetMetadata()
	i := m.GetIndex()
	if kind == recCompacted {
		lo := s.offset // the entries lo+1..i are kept
		if i > s.keep {
			lo = max(lo, i-s.keep)
		}
		if s.keepBytes > 0 {
			// Only the newest of them that fit in keepBytes.
			kept := uint64(0)
			for j := i; j > lo; j-- {
				if kept += uint64(s.ents[j-s.offset-1].size); kept > s.keepBytes {
					lo = j
					break
				}
			}
		}
		if lo > s.offset {
			ci = lo
			ct, _ = s.termLocked(ci)
		}
	}
	pos, t, err := s.writeSnapshot(s.log, kind, snap, ci, ct)
	if errors.Is(err, errAppend) && s.failed == nil {
		// Sticky, as failLocked, but the caller unlocks.
		s.failed = fmt.Errorf("replica: storage failed: %w", err)
	}
	if err != nil {
		return wal.Ticket{}, err
	}
	s.snap = &pb.SnapshotMetadata{Index: new(i), Term: new(m.GetTerm()),
		ConfState: proto.Clone(pb.EnsureConfState(m.GetConfState())).(*pb.ConfState)}
	s.snapPos = pos
	if kind == recInstalled || ci >= s.lastLocked() {
		s.ents, s.cacheFrom, s.cached = nil, 0, 0
	} else {
		drop := int(ci - s.offset)
		for k := s.cacheFrom; k < drop; k++ {
			s.cached -= int(s.ents[k].size)
		}
		s.ents = append([]slot(nil), s.ents[drop:]...)
		s.cacheFrom = max(0, s.cacheFrom-drop)
	}
	s.offset, s.offTerm = ci, ct
	return t, nil
}

// errAppend: the log took no record (it failed, or closed).
var errAppend = errors.New("append to the log")

// writeSnapshot writes snap's file, synced, then appends its marker of kind to l (the
// compaction index ci of term ct); an error from the append wraps errAppend.
func (s *WALStorage) writeSnapshot(l *wal.Log, kind byte, snap *pb.Snapshot, ci, ct uint64) (wal.Pos, wal.Ticket, error) {
	m := snap.GetMetadata()
	i := m.GetIndex()
	body, err := proto.Marshal(snap)
	if err != nil {
		return 0, wal.Ticket{}, fmt.Errorf("replica: save snapshot %d: %w", i, err)
	}
	var hdr [8]byte
	copy(hdr[:], snapMagic)
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(body, castagnoli))
	if err := vfs.WriteFile(s.fs, filepath.Join(s.snapDir, snapName(i, m.GetTerm())), vfs.FileMode, hdr[:], body); err != nil {
		return 0, wal.Ticket{}, fmt.Errorf("replica: save snapshot %d: %w", i, err)
	}
	cs, err := proto.Marshal(pb.EnsureConfState(m.GetConfState()))
	if err != nil {
		return 0, wal.Ticket{}, fmt.Errorf("replica: save snapshot %d: %w", i, err)
	}
	pos, t, err := l.AppendFunc(func(b []byte) []byte {
		b = append(b, kind)
		b = binary.LittleEndian.AppendUint64(b, i)
		b = binary.LittleEndian.AppendUint64(b, m.GetTerm())
		b = binary.LittleEndian.AppendUint64(b, ci)
		b = binary.LittleEndian.AppendUint64(b, ct)
		return append(b, cs...)
	})
	if err != nil {
		return 0, wal.Ticket{}, fmt.Errorf("replica: save snapshot %d: %w: %w", i, errAppend, err)
	}
	return pos, t, nil
}

func decodeMarker(p []byte) (m *pb.SnapshotMetadata, ci, ct uint64, err error) {
	if len(p) < markerFixed {
		return nil, 0, 0, fmt.Errorf("%d bytes, shorter than %d", len(p), markerFixed)
	}
	cs := &pb.ConfState{}
	if err := proto.Unmarshal(p[markerFixed:], cs); err != nil {
		return nil, 0, 0, err
	}
	m = &pb.SnapshotMetadata{Index: new(binary.LittleEndian.Uint64(p[1:])),
		Term: new(binary.LittleEndian.Uint64(p[9:])), ConfState: cs}
	return m, binary.LittleEndian.Uint64(p[17:]), binary.LittleEndian.Uint64(p[25:]), nil
}

// appendEntryLocked appends e's record, and puts it in the index in place of every
// entry from its index on.
func (s *WALStorage) appendEntryLocked(e *pb.Entry) (wal.Ticket, error) {
	pos, t, err := s.log.AppendFunc(func(b []byte) []byte {
		b, _ = proto.MarshalOptions{}.MarshalAppend(append(b, recEntry), e)
		return b
	})
	if err != nil {
		return t, err
	}
	k := int(e.GetIndex() - s.offset - 1)
	for j := max(k, s.cacheFrom); j < len(s.ents); j++ {
		s.cached -= int(s.ents[j].size)
	}
	s.ents = append(s.ents[:k], slot{term: e.GetTerm(), pos: pos, size: uint32(proto.Size(e)), ent: e})
	s.cacheFrom = min(s.cacheFrom, k) // ents[:cacheFrom] uncached, ents[cacheFrom:] cached
	s.cached += int(s.ents[k].size)
	s.trimCacheLocked()
	return t, nil
}

// trimCacheLocked drops the oldest cached entries until the cache is within its bound;
// the newest entry stays whatever its size.
func (s *WALStorage) trimCacheLocked() {
	for s.cached > s.cacheBytes && s.cacheFrom < len(s.ents)-1 {
		s.cached -= int(s.ents[s.cacheFrom].size)
		s.ents[s.cacheFrom].ent = nil
		s.cacheFrom++
	}
}

func (s *WALStorage) appendProtoLocked(kind byte, m proto.Message) (wal.Ticket, error) {
	_, t, err := s.log.AppendFunc(func(b []byte) []byte {
		b, _ = proto.MarshalOptions{}.MarshalAppend(append(b, kind), m)
		return b
	})
	return t, err
}

// failLocked makes err the storage's for good and unlocks: records of it may or may not
// be durable, so the index no longer says what a restart would find.
func (s *WALStorage) failLocked(err error) error {
	if s.failed == nil {
		s.failed = fmt.Errorf("replica: storage failed: %w", err)
	}
	err = s.failed
	s.mu.Unlock()
	return err
}

// collect runs once the marker of the snapshot at index i is durable: the older
// snapshot files go, and so do the segments wholly before both the latest marker and
// the first entry kept (the hard state is written after every marker).
func (s *WALStorage) collect(i uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	s.durSnap = max(s.durSnap, i)
	if err := s.removeStaleSnapshots(false); err != nil {
		return err
	}
	if s.snap.GetIndex() != s.durSnap {
		return nil // a newer marker is on its way; its collect will do
	}
	keep := s.snapPos
	if len(s.ents) > 0 {
		keep = min(keep, s.ents[0].pos)
	}
	if s.startPath != "" && keep != 0 {
		// Before any segment goes: the log's next open may start here (ReadStart).
		if err := writeStart(s.fs, s.startPath, keep); err != nil {
			return err
		}
	}
	for _, seg := range s.log.Segments() {
		if seg.Index >= keep.Segment() {
			break
		}
		if err := s.remover.Remove(seg.Index); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
	}
	return nil
}

// StartFile is the file, in the directory of a log the storage shares, that holds the
// position of the storage's first record the log still needs — a lower bound, written
// before the segments before it may go — so that the log's next open replays from there,
// not from the oldest segment kept for the other owner (a backlog's bodies).
const StartFile = "raft.start"

// writeStart writes pos to the start file at path: 8 bytes little-endian, then their
// CRC-32C.
func writeStart(fsys vfs.FS, path string, pos wal.Pos) error {
	b := binary.LittleEndian.AppendUint64(nil, uint64(pos))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := vfs.WriteFile(fsys, path, vfs.FileMode, b); err != nil {
		return fmt.Errorf("replica: write %s: %w", path, err)
	}
	return nil
}

// ReadStart returns the position a shared log in dir may open from for this storage's
// records (StartFile), or 0 when it does not say (no file yet, or a damaged one): open
// from the oldest segment then.
func ReadStart(fsys vfs.FS, dir string) wal.Pos {
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, StartFile))
	if err != nil || len(b) != 12 || binary.LittleEndian.Uint32(b[8:]) != crc32.Checksum(b[:8], castagnoli) {
		return 0
	}
	return wal.Pos(binary.LittleEndian.Uint64(b))
}

// removeStaleSnapshots removes the snapshot files older than the latest durable
// snapshot; at Open (all), every file but the snapshot's, since a newer file whose
// marker never became durable is a crash's residue.
func (s *WALStorage) removeStaleSnapshots(all bool) error {
	names, err := s.fs.ReadDir(s.snapDir)
	if err != nil {
		return fmt.Errorf("replica: list snapshots: %w", err)
	}
	cur := snapName(s.snap.GetIndex(), s.snap.GetTerm())
	removed := false
	for _, name := range names {
		i, ok := parseSnapName(name)
		if name == cur || (!all && ok && i >= s.durSnap) || (!ok && !strings.HasSuffix(name, ".tmp")) {
			continue
		}
		if err := s.fs.Remove(filepath.Join(s.snapDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replica: remove snapshot %s: %w", name, err)
		}
		removed = true
	}
	if removed {
		return s.fs.SyncDir(s.snapDir)
	}
	return nil
}

// A snapshot file, Dir/snap/<index>-<term>.snap (each 16 lowercase hex digits), holds
// the raft snapshot protobuf-encoded after an 8-byte header: "OKSN", then the CRC-32C
// (Castagnoli) of the encoding, little-endian.
const snapMagic = "OKSN"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func snapName(i, term uint64) string { return fmt.Sprintf("%016x-%016x.snap", i, term) }

func parseSnapName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".snap")
	if !ok || len(base) != 33 || base[16] != '-' {
		return 0, false
	}
	i, err := strconv.ParseUint(base[:16], 16, 64)
	return i, err == nil
}

// readSnapshot reads and checks the current snapshot's file.
func (s *WALStorage) readSnapshot() (*pb.Snapshot, error) {
	path := filepath.Join(s.snapDir, snapName(s.snap.GetIndex(), s.snap.GetTerm()))
	b, err := vfs.ReadFile(s.fs, path)
	if err != nil {
		return nil, fmt.Errorf("replica: read snapshot %d: %w", s.snap.GetIndex(), err)
	}
	if len(b) < 8 || string(b[:4]) != snapMagic || binary.LittleEndian.Uint32(b[4:]) != crc32.Checksum(b[8:], castagnoli) {
		return nil, fmt.Errorf("replica: snapshot file %s is damaged (bad header or checksum)", path)
	}
	snap := &pb.Snapshot{}
	if err := proto.Unmarshal(b[8:], snap); err != nil {
		return nil, fmt.Errorf("replica: snapshot file %s: %w", path, err)
	}
	if snap.GetMetadata().GetIndex() != s.snap.GetIndex() || snap.GetMetadata().GetTerm() != s.snap.GetTerm() {
		return nil, fmt.Errorf("replica: snapshot file %s holds snapshot %d of term %d", path,
			snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
	}
	// The marker's ConfState is the storage's, as written with the marker.
	snap.Metadata.ConfState = proto.Clone(s.snap.GetConfState()).(*pb.ConfState)
	return snap, nil
}
