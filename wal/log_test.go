package wal_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

func TestPos(t *testing.T) {
	t.Parallel()
	p := wal.MakePos(3, 4096)
	if p.Segment() != 3 || p.Offset() != 4096 || p.String() != "3:4096" {
		t.Fatalf("Pos = %d %d %q", p.Segment(), p.Offset(), p)
	}
	if wal.MakePos(2, 1<<31) >= wal.MakePos(3, 32) {
		t.Fatal("positions do not order across segments")
	}
}

func TestRoundTripAcrossRolls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := wal.Options{Dir: dir, SegmentSize: 4096}
	l, got := openLog(t, opts, 0)
	if len(got) != 0 {
		t.Fatalf("new log replayed %d records", len(got))
	}
	var want []rec
	var last wal.Ticket
	for i := range 300 {
		pos, tk, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(want); n > 0 && pos <= want[n-1].pos {
			t.Fatalf("position %v after %v", pos, want[n-1].pos)
		}
		want = append(want, rec{pos, string(payload(i))})
		last = tk
	}
	if err := last.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if d, e := l.Durable(), l.End(); d != e {
		t.Fatalf("Durable %v != End %v after waiting on the last ticket", d, e)
	}
	segs := l.Segments()
	if len(segs) < 5 {
		t.Fatalf("only %d segments for ~40 KiB of records in 4 KiB segments", len(segs))
	}
	for i, s := range segs {
		if s.Index != uint32(i+1) || s.Size <= 32 || s.Size > 4096 {
			t.Fatalf("segment %d = %+v", i, s)
		}
	}
	for _, r := range want {
		b, err := l.ReadAt(r.pos)
		if err != nil || string(b) != r.data {
			t.Fatalf("ReadAt(%v) = %.20q, %v", r.pos, b, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen from the beginning, then continue appending.
	l, got = openLog(t, opts, 0)
	sameRecords(t, got, want)
	for i := 300; i < 400; i++ {
		pos := appendWait(t, l, payload(i))
		if pos <= want[len(want)-1].pos {
			t.Fatalf("position %v after reopen is not after %v", pos, want[len(want)-1].pos)
		}
		want = append(want, rec{pos, string(payload(i))})
	}
	l.Close()

	// Reopen from a position in the middle: only the records from there.
	mid := want[250].pos
	l, got = openLog(t, opts, mid)
	sameRecords(t, got, want[250:])
	if b, err := l.ReadAt(want[3].pos); err != nil || string(b) != want[3].data {
		t.Fatalf("ReadAt before the start position = %.20q, %v", b, err)
	}
}

func TestAppendFunc(t *testing.T) {
	t.Parallel()
	l, _ := openLog(t, memOpts(vfs.NewMemFS()), 0)
	pos, tk, err := l.AppendFunc(func(buf []byte) []byte { return append(buf, "encoded"...) })
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if b, _ := l.ReadAt(pos); string(b) != "encoded" {
		t.Fatalf("ReadAt = %q", b)
	}
	// An empty or oversized encoding is rejected and leaves no trace.
	if _, _, err := l.AppendFunc(func(buf []byte) []byte { return buf }); !errors.Is(err, wal.ErrEmptyRecord) {
		t.Fatalf("empty AppendFunc = %v", err)
	}
	big := make([]byte, l.MaxRecordSize()+1)
	if _, _, err := l.AppendFunc(func(buf []byte) []byte { return append(buf, big...) }); !errors.Is(err, wal.ErrRecordTooLarge) {
		t.Fatalf("oversized AppendFunc = %v", err)
	}
	func() {
		defer func() { recover() }()
		l.AppendFunc(func(buf []byte) []byte { panic("encoder bug") })
	}()
	pos2 := appendWait(t, l, []byte("after"))
	if b, err := l.ReadAt(pos2); err != nil || string(b) != "after" {
		t.Fatalf("record after rejected AppendFuncs = %q, %v", b, err)
	}
	if pos2.Offset() != pos.Offset()+16+24 { // the record's frame, and its batch's trailer
		t.Fatalf("rejected AppendFuncs left bytes behind: %v then %v", pos, pos2)
	}
}

func TestAppendLimits(t *testing.T) {
	t.Parallel()
	l, _ := openLog(t, memOpts(vfs.NewMemFS()), 0)
	if _, _, err := l.Append(nil); !errors.Is(err, wal.ErrEmptyRecord) {
		t.Fatalf("Append(nil) = %v", err)
	}
	max := l.MaxRecordSize()
	if max != 4096-32-24-8 { // a segment holds its header, the frame and a batch trailer
		t.Fatalf("MaxRecordSize = %d", max)
	}
	if _, _, err := l.Append(make([]byte, max+1)); !errors.Is(err, wal.ErrRecordTooLarge) {
		t.Fatalf("oversized Append = %v", err)
	}
	// A record of exactly the maximum fills a fresh segment, with its trailer.
	appendWait(t, l, []byte("x"))
	pos := appendWait(t, l, bytes.Repeat([]byte{7}, max))
	if pos != wal.MakePos(2, 32) {
		t.Fatalf("max-size record at %v, want 2:32", pos)
	}
	next := appendWait(t, l, []byte("y"))
	if next != wal.MakePos(3, 32) {
		t.Fatalf("record after a full segment at %v, want 3:32", next)
	}
	if b, err := l.ReadAt(pos); err != nil || len(b) != max {
		t.Fatalf("ReadAt max record: %d bytes, %v", len(b), err)
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	for _, opts := range []wal.Options{
		{FS: vfs.NewMemFS()},
		{FS: vfs.NewMemFS(), Dir: "/wal", SegmentSize: 100},
		{FS: vfs.NewMemFS(), Dir: "/wal", SegmentSize: 1 << 40},
	} {
		if _, _, err := tryOpen(opts, 0); err == nil {
			t.Errorf("Open(%+v) succeeded", opts)
		}
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	t.Parallel()
	opts := wal.Options{Dir: t.TempDir()}
	openLog(t, opts, 0)
	if _, _, err := tryOpen(opts, 0); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	opts.NoPrecreate = false
	l, _ := openLog(t, opts, 0)
	var want []rec
	var tickets []wal.Ticket
	for i := range 100 {
		pos, tk, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rec{pos, string(payload(i))})
		tickets = append(tickets, tk)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tickets {
		if err := tk.Wait(testCtx(t)); err != nil {
			t.Fatalf("ticket after Close: %v", err)
		}
	}
	if _, _, err := l.Append([]byte("late")); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, err := l.ReadAt(want[0].pos); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("ReadAt after Close = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	// Everything is durable: it survives a power loss.
	_, got := openLog(t, wal.Options{FS: m.Crash(), Dir: "/wal", SegmentSize: 4096}, 0)
	sameRecords(t, got, want)
}

func TestRemove(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := 0; len(l.Segments()) < 4; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	if err := l.Remove(4); err == nil {
		t.Fatal("Remove of the current segment succeeded")
	}
	if err := l.Remove(1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadAt(want[0].pos); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("ReadAt in a removed segment = %v", err)
	}
	if err := l.Remove(1); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("second Remove(1) = %v", err)
	}
	if segs := l.Segments(); segs[0].Index != 2 {
		t.Fatalf("Segments after Remove = %+v", segs)
	}
	if names, _ := m.Crash().ReadDir("/wal"); strings.Contains(strings.Join(names, " "), "00000001.wal") {
		t.Fatalf("removal not durable: %v", names)
	}
	l.Close()

	// Reopen from the first record of segment 2.
	var first int
	for first = range want {
		if want[first].pos.Segment() == 2 {
			break
		}
	}
	l, got := openLog(t, opts, want[first].pos)
	sameRecords(t, got, want[first:])
	if _, _, err := tryOpen(opts, 0); err == nil {
		t.Fatal("a second Open succeeded while the log is open")
	}
	l.Close()
	// From 0, the oldest remaining segment is the beginning.
	l, got = openLog(t, opts, 0)
	sameRecords(t, got, want[first:])

	l.Close()
}

// Segments before the start may go in any order: a gap before the start position is
// expected (a checkpoint covers it), a gap from the start on is refused.
func TestRemoveMiddleSegment(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := 0; len(l.Segments()) < 4; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	if err := l.Remove(2); err != nil {
		t.Fatalf("Remove(2) with segment 1 still there: %v", err)
	}
	if _, err := l.ReadAt(want[0].pos); err != nil {
		t.Fatalf("segment 1 unreadable after removing segment 2: %v", err)
	}
	l.Close()
	var third int
	for third = range want {
		if want[third].pos.Segment() == 3 {
			break
		}
	}
	l, got := openLog(t, opts, want[third].pos)
	sameRecords(t, got, want[third:])
	if b, err := l.ReadAt(want[0].pos); err != nil || string(b) != want[0].data {
		t.Fatalf("segment 1 (before the gap) after reopen: %q, %v", b, err)
	}
	l.Close()
	if _, _, err := tryOpen(opts, 0); !errors.Is(err, wal.ErrMissingSegment) {
		t.Fatalf("Open from the beginning across a gap = %v, want ErrMissingSegment", err)
	}
}

func TestStartPositionChecked(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := range 60 {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	end := l.End()
	l.Close()
	for _, tc := range []struct {
		start wal.Pos
		err   error
	}{
		{want[10].pos + 8, wal.ErrBadStart},
		{end + 64, wal.ErrBadStart},
		{wal.MakePos(end.Segment()+1, 32), wal.ErrMissingSegment},
		{wal.MakePos(1, 0), wal.ErrBadStart},
	} {
		if _, _, err := tryOpen(opts, tc.start); !errors.Is(err, tc.err) {
			t.Errorf("Open from %v = %v, want %v", tc.start, err, tc.err)
		}
	}
	// The end itself is a valid start: nothing to replay.
	l, got := openLog(t, opts, end)
	if len(got) != 0 || l.End() != end {
		t.Fatalf("Open at end replayed %d, End %v", len(got), l.End())
	}
}

func TestReplayErrorAbortsOpen(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	appendWait(t, l, []byte("a"))
	l.Close()
	boom := errors.New("boom")
	_, err := wal.Open(memOpts(m), 0, func(wal.Pos, []byte) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Open = %v, want the replay error", err)
	}
	// The failed Open released its lock.
	openLog(t, memOpts(m), 0)
}

func TestConcurrentReadersAndWriters(t *testing.T) {
	t.Parallel()
	opts := memOpts(vfs.NewMemFS())
	opts.NoPrecreate = false
	l, _ := openLog(t, opts, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				p := payload(g*1000 + i)
				pos, _, err := l.Append(p)
				if err != nil {
					t.Error(err)
					return
				}
				// ReadAt waits for durability by itself.
				b, err := l.ReadAt(pos)
				if err != nil || !bytes.Equal(b, p) {
					t.Errorf("ReadAt(%v) = %.20q, %v", pos, b, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			l.Segments()
			l.Stats()
		}
	})
	wg.Wait()
}
