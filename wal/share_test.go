package wal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// Two owners of one log: a segment goes only once both released it, and the log then
// opens from the run of segments without a gap that ends at its end.
func TestHoldsRemoveWhatEveryOwnerReleased(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	a, b := l.Hold(), l.Hold()
	var want []rec
	for i := 0; len(l.Segments()) < 5; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	has := func(idx uint32) bool {
		for _, s := range l.Segments() {
			if s.Index == idx {
				return true
			}
		}
		return false
	}
	for _, idx := range []uint32{1, 2, 3} {
		if err := a.Remove(idx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Remove(2); err != nil { // again: harmless
		t.Fatal(err)
	}
	if !has(1) || !has(2) || !has(3) {
		t.Fatalf("segments released by one owner of two were removed: %+v", l.Segments())
	}
	if err := b.Remove(2); err != nil {
		t.Fatal(err)
	}
	if !has(1) || has(2) || !has(3) {
		t.Fatalf("after both released 2: %+v", l.Segments())
	}
	if err := b.Remove(4); err != nil { // b alone: stays
		t.Fatal(err)
	}
	if !has(4) {
		t.Fatal("segment 4, released by one owner only, was removed")
	}
	if names, _ := m.Crash().ReadDir("/wal"); strings.Contains(strings.Join(names, " "), "00000002.wal") {
		t.Fatalf("removal not durable: %v", names)
	}
	l.Close()

	var third int
	for third = range want {
		if want[third].pos.Segment() == 3 {
			break
		}
	}
	start, err := wal.ContiguousStart(m, "/wal")
	if err != nil || start != want[third].pos {
		t.Fatalf("ContiguousStart = %v, %v; want the first record of segment 3, %v", start, err, want[third].pos)
	}
	l, got := openLog(t, opts, start)
	sameRecords(t, got, want[third:])
	if b, err := l.ReadAt(want[0].pos); err != nil || string(b) != want[0].data {
		t.Fatalf("segment 1 (before the gap) after reopen: %q, %v", b, err)
	}
	if p, err := wal.ContiguousStart(m, "/nowhere"); err != nil || p != 0 {
		t.Fatalf("ContiguousStart of a directory that does not exist = %v, %v", p, err)
	}
}

// Scan gives a second owner the records Open replayed for the first, from a position
// or from the start, and stops at the durable end.
func TestScan(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := 0; len(l.Segments()) < 3; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	l, replayed := openLog(t, opts, 0)
	sameRecords(t, replayed, want)
	scan := func(from wal.Pos) []rec {
		t.Helper()
		var got []rec
		if err := l.Scan(from, func(pos wal.Pos, p []byte) error {
			got = append(got, rec{pos, string(p)})
			return nil
		}); err != nil {
			t.Fatalf("Scan(%v): %v", from, err)
		}
		return got
	}
	sameRecords(t, scan(0), want)
	mid := len(want) / 2
	sameRecords(t, scan(want[mid].pos), want[mid:])

	// A record appended and not yet durable is not scanned; once durable it is.
	pos, tk, err := l.Append([]byte("late"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, scan(want[mid].pos), append(append([]rec(nil), want[mid:]...), rec{pos, "late"}))

	// fn's error stops the scan and comes back wrapped.
	stop := errors.New("stop")
	if err := l.Scan(0, func(wal.Pos, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Scan with a failing fn = %v", err)
	}
	if err := l.Scan(wal.MakePos(9, 64), func(wal.Pos, []byte) error { return nil }); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("Scan from a segment the log lacks = %v", err)
	}
	l.Close()
	if err := l.Scan(0, func(wal.Pos, []byte) error { return nil }); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Scan of a closed log = %v", err)
	}
}
