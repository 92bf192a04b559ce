package wal_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// TestTornTail tears the last write at every byte of its frame, keeps every
// byte that reached the file, and checks that Open keeps the acknowledged
// records, drops the torn one, appends after them, and reopens cleanly.
func TestTornTail(t *testing.T) {
	t.Parallel()
	const acked = 5
	last := payload(40) // 89 bytes: the frame ends in 7 bytes of padding
	frameLen := (8 + len(last) + 7) &^ 7
	if frameLen == 8+len(last) {
		t.Fatal("the torn record needs padding to cover tears inside it")
	}
	for k := 0; k < frameLen; k++ {
		m := vfs.NewMemFS()
		f := vfs.NewFaulty(m, nil)
		l, _ := openLog(t, memOpts(f), 0)
		var want []rec
		for i := range acked {
			want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
		}
		at := l.End()
		f.SetHook(vfs.TearWriteAt("00000001.wal", int64(at.Offset())+int64(k)))
		pos, tk, err := l.Append(last)
		if err != nil || pos != at {
			t.Fatalf("k=%d: Append = %v, %v", k, pos, err)
		}
		if err := tk.Wait(testCtx(t)); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("k=%d: Wait on the torn write = %v", k, err)
		}
		if err := l.Close(); !errors.Is(err, wal.ErrFailed) {
			t.Fatalf("k=%d: Close = %v", k, err)
		}

		crashed := m.CrashWith(keepCurrent)
		var logs logBuffer
		opts := memOpts(crashed)
		opts.Logger = logs.logger()
		l, got := openLog(t, opts, 0)
		// The padding is zero already, so a tear inside it leaves a
		// complete, valid frame: the record may then survive (it was
		// never acknowledged, so either outcome is allowed).
		if k >= 8+len(last) && len(got) == acked+1 {
			want = append(want, rec{pos, string(last)})
		}
		sameRecords(t, got, want)
		if torn := strings.Contains(logs.String(), "torn tail"); torn != (k > 0 && k < 8+len(last)) {
			t.Fatalf("k=%d: torn tail reported %v; log:\n%s", k, torn, logs.String())
		}
		next := appendWait(t, l, []byte("after"))
		if len(got) == acked && next != pos {
			t.Fatalf("k=%d: appending resumed at %v, want %v", k, next, pos)
		}
		want = append(want, rec{next, "after"})
		l.Close()

		logs = logBuffer{}
		opts.Logger = logs.logger()
		l, got = openLog(t, opts, 0)
		sameRecords(t, got, want)
		if logs.String() != "" {
			t.Fatalf("k=%d: second reopen was not clean:\n%s", k, logs.String())
		}
		l.Close()
	}
}

// TestTornTailGarbage covers tails that a prefix of a real frame cannot
// produce: arbitrary bytes after the last record are a torn tail, and are
// zeroed; a valid frame after them makes them corruption instead.
func TestTornTailGarbage(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*vfs.MemFS, []rec, wal.Pos) {
		m := vfs.NewMemFS()
		l, _ := openLog(t, memOpts(m), 0)
		var want []rec
		for i := range 5 {
			want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
		}
		end := l.End()
		l.Close()
		return m, want, end
	}
	garbage := []byte("\x13\x00\x00\x00 this is not a frame \xff\xfe")

	t.Run("repaired", func(t *testing.T) {
		t.Parallel()
		m, want, end := setup(t)
		writeAt(t, m, segPath(1), int64(end.Offset())+24, garbage)
		l, got := openLog(t, memOpts(m), 0)
		sameRecords(t, got, want)
		if l.End() != end {
			t.Fatalf("End = %v, want %v", l.End(), end)
		}
		l.Close()
		if b := readAll(t, m.Crash(), segPath(1)); !allZeroFrom(b, int64(end.Offset())) {
			t.Fatal("the garbage was not zeroed durably")
		}
	})
	t.Run("valid frame after it", func(t *testing.T) {
		t.Parallel()
		m, _, end := setup(t)
		writeAt(t, m, segPath(1), int64(end.Offset()), garbage)
		later := int64(end.Offset()) + 512
		writeAt(t, m, segPath(1), later, frame([]byte("stray")))
		_, _, err := tryOpen(memOpts(m), 0)
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) || ce.Offset != int64(end.Offset()) || filepath.Base(ce.File) != "00000001.wal" {
			t.Fatalf("Open = %v, want a CorruptionError at %d", err, end.Offset())
		}
	})
}

func allZeroFrom(b []byte, off int64) bool {
	for _, c := range b[off:] {
		if c != 0 {
			return false
		}
	}
	return true
}

func TestCorruption(t *testing.T) {
	t.Parallel()
	// build writes records into four 4 KiB segments and returns them.
	build := func(t *testing.T) (*vfs.MemFS, []rec) {
		m := vfs.NewMemFS()
		l, _ := openLog(t, memOpts(m), 0)
		var want []rec
		for i := 0; len(l.Segments()) < 4 || l.End().Offset() < 1024; i++ {
			want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
		}
		l.Close()
		return m, want
	}
	inSegment := func(want []rec, seg uint32) []rec {
		var out []rec
		for _, r := range want {
			if r.pos.Segment() == seg {
				out = append(out, r)
			}
		}
		return out
	}
	expectCorruption := func(t *testing.T, m vfs.FS, file string, off int64) {
		t.Helper()
		_, _, err := tryOpen(memOpts(m), 0)
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) {
			t.Fatalf("Open = %v, want a *CorruptionError", err)
		}
		if ce.File != file || ce.Offset != off {
			t.Fatalf("CorruptionError names %s at %d, want %s at %d", ce.File, ce.Offset, file, off)
		}
		msg := err.Error()
		if !strings.Contains(msg, file) || !strings.Contains(msg, "salvage") {
			t.Fatalf("message does not name the file and the salvage: %s", msg)
		}
	}

	t.Run("payload in last segment", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		r := inSegment(want, 4)[1]
		flipByte(t, m, segPath(4), int64(r.pos.Offset())+12)
		expectCorruption(t, m, segPath(4), int64(r.pos.Offset()))
	})
	t.Run("zero length word before records", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		r := inSegment(want, 4)[1]
		writeAt(t, m, segPath(4), int64(r.pos.Offset()), make([]byte, 4))
		expectCorruption(t, m, segPath(4), int64(r.pos.Offset()))
	})
	t.Run("last record of an earlier segment", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		recs := inSegment(want, 2)
		r := recs[len(recs)-1]
		flipByte(t, m, segPath(2), int64(r.pos.Offset())+9)
		expectCorruption(t, m, segPath(2), int64(r.pos.Offset()))
	})
	t.Run("length in an earlier segment", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		r := inSegment(want, 1)[0]
		writeAt(t, m, segPath(1), int64(r.pos.Offset())+2, []byte{0xff})
		expectCorruption(t, m, segPath(1), int64(r.pos.Offset()))
	})
	t.Run("header of an earlier segment", func(t *testing.T) {
		t.Parallel()
		m, _ := build(t)
		flipByte(t, m, segPath(2), 20)
		expectCorruption(t, m, segPath(2), 0)
	})
	t.Run("header of the last segment", func(t *testing.T) {
		t.Parallel()
		m, _ := build(t)
		flipByte(t, m, segPath(4), 3)
		expectCorruption(t, m, segPath(4), 0)
	})
	t.Run("header of a segment before the start", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		flipByte(t, m, segPath(1), 0)
		if _, _, err := tryOpen(memOpts(m), inSegment(want, 3)[0].pos); err == nil {
			t.Fatal("Open accepted a damaged header before the start position")
		}
	})
	t.Run("ReadAt verifies the checksum", func(t *testing.T) {
		t.Parallel()
		m, want := build(t)
		r := inSegment(want, 1)[2]
		l, _ := openLog(t, memOpts(m), inSegment(want, 3)[0].pos)
		flipByte(t, m, segPath(1), int64(r.pos.Offset())+10)
		_, err := l.ReadAt(r.pos)
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) || ce.Offset != int64(r.pos.Offset()) {
			t.Fatalf("ReadAt of a corrupt record = %v", err)
		}
	})
	t.Run("missing segment", func(t *testing.T) {
		t.Parallel()
		m, _ := build(t)
		if err := m.Remove(segPath(2)); err != nil {
			t.Fatal(err)
		}
		_, _, err := tryOpen(memOpts(m), 0)
		if !errors.Is(err, wal.ErrMissingSegment) || !strings.Contains(err.Error(), "00000002.wal") {
			t.Fatalf("Open with a gap = %v", err)
		}
	})
	t.Run("empty segment before a full one", func(t *testing.T) {
		t.Parallel()
		m, _ := build(t)
		writeAt(t, m, segPath(3), 32, make([]byte, 4096-32))
		expectCorruption(t, m, segPath(3), 32)
	})
}

func TestNewerFormat(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	m.MkdirAll("/wal", 0o755)
	writeAt(t, m, segPath(1), 0, append(segmentHeader(1, 3), make([]byte, 4064)...))
	_, _, err := tryOpen(memOpts(m), 0)
	if !errors.Is(err, wal.ErrNewerFormat) {
		t.Fatalf("Open = %v, want ErrNewerFormat", err)
	}
	for _, s := range []string{"00000001.wal", "version 3", "version 2"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	// The documented headers of versions 1 and 2 are accepted as they are.
	for _, v := range []uint32{1, 2} {
		writeAt(t, m, segPath(1), 0, segmentHeader(1, v))
		l, _ := openLog(t, memOpts(m), 0)
		l.Close()
	}
}

// TestPowerLoss appends batches, waits on some, and cuts the power at random
// moments, with random parts of the unsynced writes reaching the disk. After
// each crash the log must hold every acknowledged record, in order, and
// nothing after a missing record.
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := vfs.NewMemFS()
		opts := memOpts(m)
		opts.SegmentSize = 2048
		opts.NoPrecreate = seed%2 == 0
		l, _ := openLog(t, opts, 0)
		var appended []rec
		acked := 0
		for round := 0; round < 5+rng.IntN(20); round++ {
			var tk wal.Ticket
			for range 1 + rng.IntN(10) {
				i := len(appended)
				pos, t2, err := l.Append(payload(i))
				if err != nil {
					t.Fatal(err)
				}
				appended = append(appended, rec{pos, string(payload(i))})
				tk = t2
			}
			if rng.IntN(3) > 0 {
				if err := tk.Wait(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				acked = len(appended)
			}
		}
		crashed := m.CrashWith(func(_ string, synced, current []byte) []byte {
			return tornMix(rng, synced, current)
		})
		l.Close()

		opts.FS = crashed
		l, got, err := tryOpen(opts, 0)
		if err != nil {
			t.Fatalf("seed %d: Open after power loss: %v", seed, err)
		}
		if len(got) < acked || len(got) > len(appended) {
			t.Fatalf("seed %d: recovered %d records; %d acknowledged, %d appended", seed, len(got), acked, len(appended))
		}
		sameRecords(t, got, appended[:len(got)])
		appendWait(t, l, []byte("after"))
		l.Close()
	}
}

// tornMix returns what a file may hold after a power cut when its unsynced
// writes were persisting in order: the synced bytes overwritten by a prefix
// of the unsynced changes.
func tornMix(rng *rand.Rand, synced, current []byte) []byte {
	if len(synced) != len(current) {
		return synced
	}
	d := 0
	for d < len(current) && current[d] == synced[d] {
		d++
	}
	if d == len(current) {
		return current
	}
	cut := d + rng.IntN(len(current)-d+1)
	out := append([]byte(nil), current[:cut]...)
	return append(out, synced[cut:]...)
}

// TestCrashAtEveryOperation runs a workload that rolls segments and takes a
// strict power-loss snapshot before every file-system operation; each
// snapshot must open with every record acknowledged before it. This covers a
// crash between a segment's temporary file and its rename, between the
// rename and the directory sync, and everywhere else.
func TestCrashAtEveryOperation(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	opts := memOpts(f)
	opts.SegmentSize = 1024
	l, _ := openLog(t, opts, 0)

	type snapshot struct {
		fs    *vfs.MemFS
		acked int
		event vfs.Event
	}
	var (
		mu    sync.Mutex
		snaps []snapshot
		acked atomic.Int64
	)
	f.SetHook(func(e vfs.Event) error {
		s := snapshot{fs: m.Crash(), acked: int(acked.Load()), event: e}
		mu.Lock()
		snaps = append(snaps, s)
		mu.Unlock()
		return nil
	})
	var appended []rec
	for i := range 40 {
		appended = append(appended, rec{appendWait(t, l, payload(i)), string(payload(i))})
		acked.Store(int64(len(appended)))
	}
	l.Close()
	f.SetHook(nil)

	sawTmp := false
	for _, s := range snaps {
		if s.event.Op == vfs.OpRename {
			sawTmp = true
		}
		o := memOpts(s.fs)
		o.SegmentSize = 1024
		l, got, err := tryOpen(o, 0)
		if err != nil {
			t.Fatalf("crash before %v: Open: %v", s.event, err)
		}
		if len(got) < s.acked {
			t.Fatalf("crash before %v: %d records, %d acknowledged", s.event, len(got), s.acked)
		}
		sameRecords(t, got, appended[:len(got)])
		if names, _ := s.fs.ReadDir("/wal"); strings.Contains(strings.Join(names, " "), ".tmp") {
			t.Fatalf("crash before %v: leftover temporary file: %v", s.event, names)
		}
		appendWait(t, l, []byte("after"))
		l.Close()
	}
	if !sawTmp || len(snaps) < 100 {
		t.Fatalf("workload too small: %d snapshots, rename seen %v", len(snaps), sawTmp)
	}
}

func TestSyncFailure(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	var want []rec
	for i := range 3 {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	durable := l.Durable()

	// Fail the next sync of the segment, but only once the pending batch
	// behind it holds records too, so waiters of both batches are failed.
	var failed atomic.Bool
	var opsAfter atomic.Int64
	blocked := make(chan struct{})
	release := make(chan struct{})
	f.SetHook(func(e vfs.Event) error {
		if failed.Load() {
			if e.Op == vfs.OpWrite || e.Op == vfs.OpSync || e.Op == vfs.OpCreate || e.Op == vfs.OpRename {
				opsAfter.Add(1)
			}
			return nil
		}
		if e.Op == vfs.OpSync && filepath.Base(e.Name) == "00000001.wal" {
			close(blocked)
			<-release
			failed.Store(true)
			return vfs.ErrInjected
		}
		return nil
	})
	_, tk1, err := l.Append([]byte("in the failing batch"))
	if err != nil {
		t.Fatal(err)
	}
	l.Commit() // the flusher takes it; nobody waits yet
	select {
	case <-blocked:
	case <-testCtx(t).Done():
		t.Fatal("the flusher never synced the batch")
	}
	pos2, tk2, err := l.Append([]byte("in the pending batch"))
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	for _, tk := range []wal.Ticket{tk1, tk2} {
		if err := tk.Wait(testCtx(t)); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("Wait = %v, want ErrFailed wrapping the cause", err)
		}
	}
	if err := l.WaitDurable(testCtx(t), pos2); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("WaitDurable = %v", err)
	}
	if _, _, err := l.Append([]byte("later")); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append after failure = %v", err)
	}
	if err := l.Err(); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Err = %v", err)
	}
	if l.Durable() != durable {
		t.Fatalf("Durable moved from %v to %v after a failed sync", durable, l.Durable())
	}
	if b, err := l.ReadAt(want[1].pos); err != nil || string(b) != want[1].data {
		t.Fatalf("ReadAt of a durable record after failure = %q, %v", b, err)
	}
	if err := l.Close(); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Close = %v", err)
	}
	if n := opsAfter.Load(); n != 0 {
		t.Fatalf("%d writes or syncs after the failed sync", n)
	}
	_, got := openLog(t, memOpts(m.Crash()), 0)
	sameRecords(t, got, want)
}

func TestWriteFailure(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	appendWait(t, l, []byte("ok"))
	f.SetHook(vfs.FailNth(vfs.OpWrite, 1))
	_, tk, _ := l.Append([]byte("lost"))
	if err := tk.Wait(testCtx(t)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Wait = %v", err)
	}
	if _, _, err := l.Append([]byte("x")); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append = %v", err)
	}
}

func TestSegmentCreationFailure(t *testing.T) {
	t.Parallel()
	for _, op := range []vfs.Op{vfs.OpCreate, vfs.OpPreallocate, vfs.OpSync, vfs.OpRename, vfs.OpSyncDir} {
		t.Run(op.String(), func(t *testing.T) {
			t.Parallel()
			m := vfs.NewMemFS()
			f := vfs.NewFaulty(m, nil)
			opts := memOpts(f)
			opts.SegmentSize = 1024
			l, _ := openLog(t, opts, 0)
			f.SetHook(vfs.Match(func(e vfs.Event) bool {
				return e.Op == op && (strings.HasSuffix(e.Name, "00000002.wal.tmp") || (op == vfs.OpSyncDir && e.Name == "/wal"))
			}, vfs.Nth(1, vfs.ErrInjected)))
			var want []rec
			var err error
			for i := 0; err == nil; i++ {
				var pos wal.Pos
				var tk wal.Ticket
				if pos, tk, err = l.Append(payload(i)); err == nil {
					if err = tk.Wait(testCtx(t)); err == nil {
						want = append(want, rec{pos, string(payload(i))})
					}
				}
				if i > 100 {
					t.Fatal("the segment roll never failed")
				}
			}
			if !errors.Is(err, wal.ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("error = %v", err)
			}
			l.Close()
			o := memOpts(m.Crash())
			o.SegmentSize = 1024
			l, got := openLog(t, o, 0)
			sameRecords(t, got, want)
			for i := range 30 {
				appendWait(t, l, payload(i))
			}
		})
	}
}

// TestBackgroundCreationFailureRetriedAtRoll: a segment created ahead of need whose
// creation fails (a full disk, for one) fails nothing; the roll creates it again, and
// every record is there after a crash.
func TestBackgroundCreationFailureRetriedAtRoll(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	opts := memOpts(f)
	opts.NoPrecreate = false
	opts.SegmentSize = 1024
	hit := make(chan struct{})
	var once sync.Once
	f.SetHook(vfs.Match(func(e vfs.Event) bool {
		return e.Op == vfs.OpPreallocate && strings.HasSuffix(e.Name, "00000002.wal.tmp")
	}, func(vfs.Event) error {
		fired := false
		once.Do(func() { close(hit); fired = true })
		if fired {
			return fmt.Errorf("preallocate: %w", syscall.ENOSPC)
		}
		return nil
	}))
	l, _ := openLog(t, opts, 0)
	<-hit
	var want []rec
	for i := 0; len(want) == 0 || want[len(want)-1].pos.Segment() < 3; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err = %v after a failed creation ahead of need", err)
	}
	if names, _ := m.ReadDir("/wal"); slices.Contains(names, "00000002.wal.tmp") {
		t.Fatalf("the failed creation's temporary file is left: %v", names)
	}
	l.Close()
	o := memOpts(m.Crash())
	o.SegmentSize = 1024
	_, got := openLog(t, o, 0)
	sameRecords(t, got, want)
}

// TestNoRoomNoPrecreate: without room (Options.Room) the log creates no segment ahead of
// need, at Open or at a roll, and the roll creates the segment it needs.
func TestNoRoomNoPrecreate(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	opts.NoPrecreate = false
	opts.SegmentSize = 1024
	var asked atomic.Int64
	opts.Room = func(bytes int64) bool {
		if bytes != 1024 {
			t.Errorf("Room(%d), want the segment size", bytes)
		}
		asked.Add(1)
		return false
	}
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := 0; len(want) == 0 || want[len(want)-1].pos.Segment() < 3; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close() // waits for the preparers: every question asked
	names, _ := m.ReadDir("/wal")
	if slices.Contains(names, "00000004.wal") || asked.Load() < 3 {
		t.Fatalf("segments %v after Room said no %d times: want none ahead of the third", names, asked.Load())
	}
	o := memOpts(m.Crash())
	o.SegmentSize = 1024
	_, got := openLog(t, o, 0)
	sameRecords(t, got, want)
}

// TestFailStopsTheLog: a log failed by its caller refuses appends and fails the records
// not yet durable, like a failed fsync, keeps serving durable records, and reopens with
// exactly them; a cycle that fails afterwards changes nothing.
func TestFailStopsTheLog(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	pos := appendWait(t, l, []byte("durable"))
	f.SetHook(vfs.FailNth(vfs.OpSync, 1)) // the pending batch's commit, should one start, fails too
	_, tk, err := l.Append([]byte("pending"))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("reads keep failing")
	l.Fail(cause)
	l.Fail(errors.New("a second cause")) // ignored
	if err := tk.Wait(testCtx(t)); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("Wait of a pending record = %v, want ErrFailed wrapping the cause", err)
	}
	if _, _, err := l.Append([]byte("later")); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append after Fail = %v", err)
	}
	if err := l.Err(); !errors.Is(err, cause) {
		t.Fatalf("Err = %v, want the first cause", err)
	}
	if b, err := l.ReadAt(pos); err != nil || string(b) != "durable" {
		t.Fatalf("ReadAt of a durable record after Fail = %q, %v", b, err)
	}
	if err := l.Close(); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Close = %v", err)
	}
	_, got := openLog(t, memOpts(m.Crash()), 0)
	sameRecords(t, got, []rec{{pos, "durable"}})
}

// TestFailWhileACommitRuns: Fail while a cycle is syncing, whose sync then fails too,
// fails each batch once and keeps the first cause.
func TestFailWhileACommitRuns(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	appendWait(t, l, []byte("durable"))
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.SetHook(func(e vfs.Event) error {
		if e.Op == vfs.OpSync && filepath.Base(e.Name) == "00000001.wal" {
			once.Do(func() { close(blocked); <-release })
			return vfs.ErrInjected
		}
		return nil
	})
	_, tk1, err := l.Append([]byte("in the running cycle"))
	if err != nil {
		t.Fatal(err)
	}
	l.Commit()
	<-blocked
	_, tk2, err := l.Append([]byte("pending"))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("reads keep failing")
	l.Fail(cause)
	close(release)
	for _, tk := range []wal.Ticket{tk2, tk1} {
		if err := tk.Wait(testCtx(t)); !errors.Is(err, cause) {
			t.Fatalf("Wait = %v, want the first cause", err)
		}
	}
	if err := l.Close(); !errors.Is(err, cause) {
		t.Fatalf("Close = %v", err)
	}
}
