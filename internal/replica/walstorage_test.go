package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// walModel drives a WALStorage and a Memory (the reference) with the same random
// sequence of raft-like writes: appends, suffix overwrites, hard states, local
// snapshots with compaction and snapshots installed from a leader. Commit never goes
// back and snapshots are of committed indexes, as raft's are.
type walModel struct {
	t      *testing.T
	rng    *rand.Rand
	fs     *vfs.MemFS
	opts   replica.WALOptions
	w      *replica.WALStorage
	ref    *replica.Memory
	term   uint64
	commit uint64
	saves  int
	// shared puts the storage in a log with another owner's records (a cluster node's
	// broker log): log, and the other owner's hold, which releases every segment at once.
	shared  bool
	log     *wal.Log
	other   *wal.Hold
	foreign int    // the other owner's records appended
	carried int    // installs through a new log
	hinted  int    // opens from the storage's start file rather than the oldest segment
	dir     string // the shared log's directory
}

func newWALModel(t *testing.T, seed uint64, opts replica.WALOptions, shared ...bool) *walModel {
	t.Helper()
	m := &walModel{t: t, rng: rand.New(rand.NewPCG(seed, 0x3a1)), fs: vfs.NewMemFS(), opts: opts, term: 1,
		shared: len(shared) > 0 && shared[0], dir: "/data/wal"}
	m.opts.FS, m.opts.Dir = m.fs, "/data"
	m.ref = replica.NewMemory()
	m.ref.Keep = opts.Keep
	m.open()
	t.Cleanup(func() { m.closeLog() })
	return m
}

func (m *walModel) open() {
	m.t.Helper()
	if !m.shared {
		w, err := replica.OpenWAL(m.opts)
		if err != nil {
			m.t.Fatalf("open: %v", err)
		}
		m.w = w
		return
	}
	w := m.w
	if w == nil {
		var err error
		if w, err = replica.NewWAL(m.opts); err != nil {
			m.t.Fatal(err)
		}
	}
	at, err := wal.ContiguousStart(m.fs, m.dir)
	if err != nil {
		m.t.Fatal(err)
	}
	if from := replica.ReadStart(m.fs, m.dir); from > at {
		at = from // the other owner needs nothing before: open where the storage's records begin
		m.hinted++
	}
	var rp replica.WALReplay
	l, err := wal.Open(wal.Options{FS: m.fs, Dir: m.dir, SegmentSize: m.opts.SegmentSize}, at, func(pos wal.Pos, p []byte) error {
		if broker.IsSharedRecord(p) { // as the broker tells them apart
			return rp.Record(pos, p)
		}
		if string(p) != "foreign" {
			return fmt.Errorf("record %v is neither the storage's nor the other owner's: %q", pos, p)
		}
		return nil
	})
	if err != nil {
		m.t.Fatalf("open the shared log: %v", err)
	}
	m.other = l.Hold()
	if err := w.Attach(l, l.Hold(), &rp); err != nil {
		m.t.Fatalf("attach: %v", err)
	}
	m.log, m.w = l, w
}

// closeLog closes the storage, and the shared log after it.
func (m *walModel) closeLog() error {
	err := m.w.Close()
	if m.shared {
		err = errors.Join(err, m.log.Close())
		m.w = nil
	}
	return err
}

// restart closes the storage cleanly and opens it again.
func (m *walModel) restart() {
	m.t.Helper()
	if err := m.closeLog(); err != nil {
		m.t.Fatal(err)
	}
	m.open()
}

// powerLoss reopens the storage on what a power loss leaves of its file system.
func (m *walModel) powerLoss() {
	m.t.Helper()
	m.fs = m.fs.Crash()
	m.closeLog() // writes to the old file system, which is gone
	m.opts.FS = m.fs
	m.open()
}

// foreignRecords appends the other owner's records to the shared log, which it needs
// for no longer than that: it releases every segment before the durable end.
func (m *walModel) foreignRecords() {
	m.t.Helper()
	var t wal.Ticket
	for range 1 + m.rng.IntN(8) {
		var err error
		if _, t, err = m.log.Append([]byte("foreign")); err != nil {
			m.t.Fatal(err)
		}
		m.foreign++
	}
	if err := t.Wait(context.Background()); err != nil {
		m.t.Fatal(err)
	}
	d := m.log.Durable().Segment()
	for _, seg := range m.log.Segments() {
		if seg.Index < d {
			if err := m.other.Remove(seg.Index); err != nil {
				m.t.Fatal(err)
			}
		}
	}
}

// carry installs the leader's snapshot sn as a node's broker install does: the storage
// carries it and the hard state into a new log, the new log replaces the old one, and
// the storage is attached to it; the Save of sn that follows finds it there.
func (m *walModel) carry(sn *pb.Snapshot, h *pb.HardState) {
	m.t.Helper()
	next := fmt.Sprintf("/data/wal%d", m.carried+1) // the swap, as a new name (MemFS renames no directories)
	l, err := wal.Open(wal.Options{FS: m.fs, Dir: next, SegmentSize: m.opts.SegmentSize}, 0, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.w.Carry(l, sn, h); err != nil {
		m.t.Fatalf("carry: %v", err)
	}
	if err := errors.Join(l.Close(), m.log.Close()); err != nil {
		m.t.Fatal(err)
	}
	m.carried++
	m.dir = next
	m.open()
}

func (m *walModel) both(what string, f func(replica.Storage) error) {
	m.t.Helper()
	errW, errR := f(m.w), f(m.ref)
	if (errW == nil) != (errR == nil) || (errR != nil && !errors.Is(errW, errR)) {
		m.t.Fatalf("%s: WALStorage says %v, Memory %v", what, errW, errR)
	}
	if errR == nil {
		m.saves++
	}
}

func (m *walModel) entries(from uint64, n int) []*pb.Entry {
	var out []*pb.Entry
	for k := range n {
		data := make([]byte, m.rng.IntN(200))
		if m.rng.IntN(10) == 0 {
			data = make([]byte, 2000+m.rng.IntN(3000))
		}
		for j := range data {
			data[j] = byte(m.rng.Uint32())
		}
		out = append(out, &pb.Entry{Index: new(from + uint64(k)), Term: new(m.term), Type: pb.EntryNormal.Enum(), Data: data})
	}
	return out
}

// step does one random write to both.
func (m *walModel) step() {
	m.t.Helper()
	first, _ := m.ref.FirstIndex()
	last, _ := m.ref.LastIndex()
	snap, _ := m.ref.Snapshot()
	si := snap.GetMetadata().GetIndex()
	hs := func() *pb.HardState {
		return &pb.HardState{Term: new(m.term), Vote: new(uint64(m.rng.IntN(4))), Commit: new(m.commit)}
	}
	switch r := m.rng.IntN(100); {
	case r < 50: // append, now and then with a hard state committing some of it
		ents := m.entries(last+1, 1+m.rng.IntN(5))
		var h *pb.HardState
		if m.rng.IntN(2) == 0 {
			m.commit = max(m.commit, last+uint64(m.rng.IntN(len(ents)+1)))
			h = hs()
		}
		m.both("append", func(s replica.Storage) error { return s.Save(h, ents, nil) })
	case r < 65: // a new term overwrites an uncommitted suffix
		lo := max(first, m.commit+1)
		if lo > last {
			return
		}
		m.term++
		from := lo + m.rng.Uint64N(last-lo+1)
		ents, h := m.entries(from, m.rng.IntN(4)+1), hs()
		m.both(fmt.Sprintf("overwrite from %d", from), func(s replica.Storage) error { return s.Save(h, ents, nil) })
	case r < 75: // hard state alone
		m.commit = max(m.commit, min(last, m.commit+uint64(m.rng.IntN(3))))
		h := hs()
		m.both("hard state", func(s replica.Storage) error { return s.Save(h, nil, nil) })
	case r < 90: // a local snapshot of committed state
		if m.commit <= si {
			return
		}
		i := si + 1 + m.rng.Uint64N(m.commit-si)
		data := fmt.Appendf(nil, "machines at %d", i)
		cs := &pb.ConfState{Voters: []uint64{1, 2, uint64(3 + m.rng.IntN(2))}}
		m.both(fmt.Sprintf("snapshot at %d", i), func(s replica.Storage) error { return s.SaveSnapshot(i, cs, data) })
	default: // a snapshot from the leader, beyond what this log holds, with entries after it
		m.term++
		i := max(last, si) + 1 + m.rng.Uint64N(20)
		m.commit = i
		sn := &pb.Snapshot{Data: fmt.Appendf(nil, "leader's machines at %d", i), Metadata: &pb.SnapshotMetadata{
			Index: new(i), Term: new(m.term), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
		ents, h := m.entries(i+1, m.rng.IntN(3)), hs()
		if m.shared && m.rng.IntN(2) == 0 {
			m.carry(sn, h)
		}
		m.both(fmt.Sprintf("install %d", i), func(s replica.Storage) error { return s.Save(h, ents, sn) })
	}
	if m.shared && m.rng.IntN(3) == 0 {
		m.foreignRecords()
	}
}

// check compares everything raft can read.
func (m *walModel) check() {
	m.t.Helper()
	w, ref := m.w, m.ref
	f1, _ := ref.FirstIndex()
	f2, err := w.FirstIndex()
	l1, _ := ref.LastIndex()
	l2, err2 := w.LastIndex()
	if err != nil || err2 != nil || f1 != f2 || l1 != l2 {
		m.t.Fatalf("first/last index: WALStorage %d..%d (%v, %v), Memory %d..%d", f2, l2, err, err2, f1, l1)
	}
	for i := f1 - min(f1, 2); i <= l1+1; i++ {
		t1, e1 := ref.Term(i)
		t2, e2 := w.Term(i)
		if t1 != t2 || !errors.Is(e2, e1) {
			m.t.Fatalf("Term(%d): WALStorage %d, %v; Memory %d, %v", i, t2, e2, t1, e1)
		}
	}
	for range 6 {
		lo := f1 - min(f1, 1) + m.rng.Uint64N(l1-f1+3)
		lo = min(lo, l1+1)
		hi := lo + m.rng.Uint64N(l1+2-lo)
		maxSize := []uint64{0, 100, 1000, 10000, 1 << 40}[m.rng.IntN(5)]
		e1, err1 := ref.Entries(lo, hi, maxSize)
		e2, err2 := w.Entries(lo, hi, maxSize)
		if !errors.Is(err2, err1) || (err1 == nil && err2 != nil) || len(e1) != len(e2) {
			m.t.Fatalf("Entries(%d, %d, %d): WALStorage %d entries, %v; Memory %d, %v", lo, hi, maxSize, len(e2), err2, len(e1), err1)
		}
		for k := range e1 {
			if !proto.Equal(e1[k], e2[k]) {
				m.t.Fatalf("Entries(%d, %d, %d)[%d]: WALStorage %v, Memory %v", lo, hi, maxSize, k, e2[k], e1[k])
			}
		}
	}
	h1, c1, _ := ref.InitialState()
	h2, c2, err := w.InitialState()
	if err != nil || !proto.Equal(pb.EnsureConfState(c1), c2) || !raft.IsEmptyHardState(h1) && !proto.Equal(h1, h2) {
		m.t.Fatalf("InitialState: WALStorage %v %v (%v), Memory %v %v", h2, c2, err, h1, c1)
	}
	s1, _ := ref.Snapshot()
	s2, err := w.Snapshot()
	if err != nil || s1.GetMetadata().GetIndex() != s2.GetMetadata().GetIndex() || s1.GetMetadata().GetTerm() != s2.GetMetadata().GetTerm() ||
		!proto.Equal(pb.EnsureConfState(s1.GetMetadata().GetConfState()), pb.EnsureConfState(s2.GetMetadata().GetConfState())) || !bytes.Equal(s1.GetData(), s2.GetData()) {
		m.t.Fatalf("Snapshot: WALStorage %v (%v), Memory %v", s2.GetMetadata(), err, s1.GetMetadata())
	}
}

// TestWALStorageMatchesMemory checks the raft.Storage contract on random sequences
// against Memory, with clean restarts and power losses between Saves: every Save that
// returned is kept.
//
// With shared, the storage lives in a log with another owner's records, as on a
// cluster's node: the log opens from the segments both need, the storage is attached to
// it, segments go once both released them, and a snapshot from the leader is now and
// then installed through a new log that the storage carried it into (Carry).
func TestWALStorageMatchesMemory(t *testing.T) {
	for seed := range uint64(12) {
		shared := seed >= 6
		t.Run(fmt.Sprintf("%d/shared=%v", seed, shared), func(t *testing.T) {
			t.Parallel()
			opts := replica.WALOptions{Keep: seed % 4, SegmentSize: 16 << 10, CacheBytes: []int{-1, 3000, 0}[seed%3]}
			m := newWALModel(t, seed, opts, shared)
			restarts, losses := 0, 0
			for range 300 {
				m.step()
				m.check()
				switch m.rng.IntN(40) {
				case 0:
					m.restart()
					restarts++
					m.check()
				case 1:
					m.powerLoss()
					losses++
					m.check()
				}
			}
			t.Logf("%d saves, %d restarts, %d power losses, %d segments, %d installs carried, %d foreign records, %d opens from the start file",
				m.saves, restarts, losses, len(m.w.Log().Segments()), m.carried, m.foreign, m.hinted)
		})
	}
}

// TestWALStorageOneSyncPerSave: a lone Save costs one fsync, and concurrent Saves share
// them. The file system's fsync takes a while, as a disk's does, or there would be
// nothing to share.
func TestWALStorageOneSyncPerSave(t *testing.T) {
	slow := vfs.NewFaulty(vfs.NewMemFS(), vfs.Match(vfs.IsOp(vfs.OpSync), func(vfs.Event) error {
		time.Sleep(200 * time.Microsecond)
		return nil
	}))
	w, err := replica.OpenWAL(replica.WALOptions{FS: slow, Dir: "/d"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 100
	before := w.Log().Stats().Syncs
	for i := range uint64(n) {
		ents := []*pb.Entry{{Index: new(i + 1), Term: new(uint64(1)), Data: []byte("x")}}
		if err := w.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(i)}, ents, nil); err != nil {
			t.Fatal(err)
		}
	}
	// One more is allowed: the wal's background committer, woken by the segment created
	// ahead of need, may take a Save's first records before its last are appended.
	if got := w.Log().Stats().Syncs - before; got < n || got > n+1 {
		t.Fatalf("%d sequential Saves took %d fsyncs, want one each", n, got)
	}

	const g, per = 8, 50
	before = w.Log().Stats().Syncs
	var wg sync.WaitGroup
	for k := range g {
		wg.Go(func() {
			for range per {
				if err := w.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(k)), Commit: new(uint64(n))}, nil, nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := w.Log().Stats().Syncs - before; got >= g*per/2 {
		t.Fatalf("%d concurrent Saves took %d fsyncs: no group commit", g*per, got)
	} else {
		t.Logf("%d concurrent Saves took %d fsyncs", g*per, got)
	}
}

// TestWALStorageDiskBounded: with snapshots now and then, old segments and snapshot
// files go, and what is left stays bounded however long the log runs.
func TestWALStorageDiskBounded(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := replica.WALOptions{FS: fs, Dir: "/d", SegmentSize: 8 << 10, Keep: 5}
	w, err := replica.OpenWAL(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close() }()
	data := bytes.Repeat([]byte("e"), 300)
	most := 0
	for i := uint64(1); i <= 3000; i++ {
		if err := w.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(i)}, []*pb.Entry{{Index: new(i), Term: new(uint64(1)), Data: data}}, nil); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if err := w.SaveSnapshot(i, &pb.ConfState{Voters: []uint64{1}}, fmt.Appendf(nil, "at %d", i)); err != nil {
				t.Fatal(err)
			}
			most = max(most, len(w.Log().Segments()))
			if names, _ := fs.ReadDir("/d/snap"); len(names) != 1 {
				t.Fatalf("after snapshot %d the snapshot directory holds %v", i, names)
			}
		}
		if i%1000 == 0 { // and across restarts
			w.Close()
			if w, err = replica.OpenWAL(opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 100 entries of ~310 bytes between snapshots: about 4 segments of 8 KiB.
	if most > 8 {
		t.Fatalf("up to %d segments after snapshots: old ones are not removed", most)
	}
	if first, _ := w.FirstIndex(); first != 2996 {
		t.Fatalf("first index %d, want 2996 (Keep 5 before the snapshot at 3000)", first)
	}
	ents, err := w.Entries(2996, 3001, 1<<30)
	if err != nil || len(ents) != 5 {
		t.Fatalf("Entries after the last snapshot: %d, %v", len(ents), err)
	}
}

// TestWALStoragePowerLossInSave: a power loss while Saves are in flight keeps at least
// every Save that returned, and whatever it keeps is a state raft can start from.
func TestWALStoragePowerLossInSave(t *testing.T) {
	fs := vfs.NewMemFS()
	w, err := replica.OpenWAL(replica.WALOptions{FS: fs, Dir: "/d", SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked uint64 // the last index whose Save returned
	var crashed *vfs.MemFS
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i <= 400; i++ {
			if err := w.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(i - 1)}, []*pb.Entry{{Index: new(i), Term: new(uint64(1)), Data: []byte("abc")}}, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked = i
			mu.Unlock()
		}
	}()
	for {
		mu.Lock()
		a := acked
		mu.Unlock()
		if a >= 200 {
			crashed = fs.Crash() // what was acked before this is in it
			break
		}
	}
	<-done
	w.Close()
	mu.Lock()
	floor := uint64(200)
	mu.Unlock()
	w2, err := replica.OpenWAL(replica.WALOptions{FS: crashed, Dir: "/d", SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	last, _ := w2.LastIndex()
	if last < floor {
		t.Fatalf("after the power loss the log ends at %d, but Save of %d had returned", last, floor)
	}
	ents, err := w2.Entries(1, last+1, 1<<40)
	if err != nil || uint64(len(ents)) != last {
		t.Fatalf("Entries: %d, %v", len(ents), err)
	}
	if !slices.IsSortedFunc(ents, func(a, b *pb.Entry) int { return int(a.GetIndex()) - int(b.GetIndex()) }) {
		t.Fatal("entries out of order")
	}
	hs, _, _ := w2.InitialState()
	if hs.GetCommit() > last {
		t.Fatalf("hard state commits %d beyond the last index %d", hs.GetCommit(), last)
	}
}

// KeepBytes bounds what a compaction keeps by size as well as by count, and Size says
// how many bytes of entries a compaction would drop.
func TestWALStorageKeepBytes(t *testing.T) {
	t.Parallel()
	w, err := replica.OpenWAL(replica.WALOptions{FS: vfs.NewMemFS(), Dir: "/data", Keep: 100, KeepBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var ents []*pb.Entry
	for i := uint64(1); i <= 50; i++ {
		ents = append(ents, &pb.Entry{Index: new(i), Term: new(uint64(1)), Data: bytes.Repeat([]byte{'x'}, 90)})
	}
	if err := w.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(50))}, ents, nil); err != nil {
		t.Fatal(err)
	}
	size := uint64(proto.Size(ents[0]))
	if got := w.Size(0, 50); got != 50*size {
		t.Fatalf("Size(0, 50) = %d, want %d", got, 50*size)
	}
	if got := w.Size(10, 20); got != 10*size {
		t.Fatalf("Size(10, 20) = %d, want %d", got, 10*size)
	}
	if err := w.SaveSnapshot(50, &pb.ConfState{Voters: []uint64{1}}, []byte("machines")); err != nil {
		t.Fatal(err)
	}
	first, _ := w.FirstIndex()
	if kept := 51 - first; kept != 1000/size {
		t.Fatalf("kept %d entries of %d bytes (first index %d), want the %d that fit in 1000 bytes, not Keep's 100", kept, size, first, 1000/size)
	}
}
