package wal_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// twoSegments returns a MemFS holding a log whose records fill segment 1
// and start segment 2.
func twoSegments(t *testing.T) (*vfs.MemFS, []rec) {
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	var want []rec
	for i := 0; len(l.Segments()) < 2; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	return m, want
}

// emptySegment is a segment as the log creates it ahead of need.
func emptySegment(idx uint32) []byte {
	return append(segmentHeader(idx, wal.SegmentVersion), make([]byte, 4096-32)...)
}

func dirNames(t *testing.T, fs vfs.FS) string {
	names, err := fs.ReadDir("/wal")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}

func TestTrailingEmptySegments(t *testing.T) {
	t.Parallel()
	m, want := twoSegments(t)
	writeAt(t, m, segPath(3), 0, emptySegment(3))
	writeAt(t, m, segPath(4), 0, emptySegment(4))
	writeAt(t, m, segPath(5), 0, append(segmentHeader(5, 1)[:20], make([]byte, 100)...)) // damaged, unused
	writeAt(t, m, segPath(6)+".tmp", 0, []byte("half-created"))
	m.SyncDir("/wal")

	var logs logBuffer
	opts := memOpts(m)
	opts.Logger = logs.logger()
	l, got := openLog(t, opts, 0)
	sameRecords(t, got, want)
	if !strings.Contains(logs.String(), "damaged header") {
		t.Errorf("dropping a damaged unused segment was not logged:\n%s", logs.String())
	}
	// Segment 3 is kept for the next roll; the rest is gone, durably.
	if names := dirNames(t, m.Crash()); names != "00000001.wal 00000002.wal 00000003.wal wal.lock" {
		t.Fatalf("directory after Open: %s", names)
	}
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("Segments lists %d, want 2: the spare is not part of the log yet", n)
	}
	for i := len(want); l.End().Segment() < 4; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	_, got = openLog(t, memOpts(m), 0)
	sameRecords(t, got, want)
}

func TestTrailingSegmentWithDataAndBadHeader(t *testing.T) {
	t.Parallel()
	m, _ := twoSegments(t)
	seg := emptySegment(3)
	seg[3] ^= 1
	seg[100] = 1
	writeAt(t, m, segPath(3), 0, seg)
	_, _, err := tryOpen(memOpts(m), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.File != segPath(3) || ce.Offset != 0 {
		t.Fatalf("Open = %v, want a header CorruptionError for segment 3", err)
	}
}

func TestPrecreatedSegmentReused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := wal.Options{Dir: dir, SegmentSize: 4096}
	l, _ := openLog(t, opts, 0)
	var want []rec
	for i := range 50 {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	last := l.End().Segment()
	l.Close()
	names, _ := vfs.OS.ReadDir(dir)
	if !slices.Contains(names, fmt.Sprintf("%08x.wal", last+1)) {
		t.Fatalf("no segment created ahead of need after segment %d: %v", last, names)
	}
	l, got := openLog(t, opts, 0)
	sameRecords(t, got, want)
	for i := 50; i < 100; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	_, got = openLog(t, opts, 0)
	sameRecords(t, got, want)
}

// TestSalvageByTruncation follows the documented salvage: truncating a
// corrupt segment at the reported offset makes the log open again, losing
// only the records of that file from the offset on.
func TestSalvageByTruncation(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	var want []rec
	for i := 0; len(l.Segments()) < 3; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	var inTwo []int
	for i, r := range want {
		if r.pos.Segment() == 2 {
			inTwo = append(inTwo, i)
		}
	}
	bad := want[inTwo[2]]
	flipByte(t, m, segPath(2), int64(bad.pos.Offset())+9)
	_, _, err := tryOpen(memOpts(m), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("Open = %v", err)
	}
	// Salvage as documented: zero from the offset to the end, keeping the size. Merely
	// truncating is refused, since a cut segment must not pass for a complete one.
	f, _ := m.OpenFile(ce.File, os.O_RDWR, 0)
	size, _ := f.Size()
	f.Truncate(ce.Offset)
	f.Sync()
	if _, _, err := tryOpen(memOpts(m), 0); !errors.As(err, &ce) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Open of a truncated segment = %v, want a corruption error saying it was truncated", err)
	}
	f.Truncate(size)
	f.Sync()
	f.Close()

	l, got := openLog(t, memOpts(m), 0)
	survivors := slices.Concat(want[:inTwo[2]], want[inTwo[len(inTwo)-1]+1:])
	sameRecords(t, got, survivors)
	appendWait(t, l, []byte("after salvage"))
	l.Close()
	openLog(t, memOpts(m), 0)
}

// TestEmptiedSegmentBeforeRecords: a whole segment zeroed (damage, or a salvage that
// zeroed its first record) while later segments hold records is refused: records are
// missing, and the log never writes a segment after an unfilled one.
func TestEmptiedSegmentBeforeRecords(t *testing.T) {
	t.Parallel()
	m, _ := twoSegments(t)
	f, _ := m.OpenFile(segPath(1), os.O_RDWR, 0)
	size, _ := f.Size()
	f.Truncate(32)
	f.Truncate(size)
	f.Sync()
	f.Close()
	_, _, err := tryOpen(memOpts(m), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.Offset != 32 || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Open = %v, want a corruption error at offset 32 saying records are missing", err)
	}
}
