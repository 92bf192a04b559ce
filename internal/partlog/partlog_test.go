package partlog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
)

func rec(off uint64) []byte {
	return []byte(fmt.Sprintf("record %d %s", off, bytes.Repeat([]byte{'x'}, int(off%300))))
}

func mustOpen(t *testing.T, fs vfs.FS) *Partition {
	t.Helper()
	p, err := Open(fs, "/data/topics/1/0")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return p
}

// fill appends offsets from..to-1, a new segment every segEvery, and syncs.
func fill(t *testing.T, p *Partition, from, to, segEvery uint64) {
	t.Helper()
	for o := from; o < to; o++ {
		if err := p.Append(o, o%segEvery == 0, rec(o)); err != nil {
			t.Fatalf("Append %d: %v", o, err)
		}
	}
	if end, err := p.Sync(); err != nil || end != to {
		t.Fatalf("Sync: %d %v, want %d", end, err, to)
	}
}

// readAll reads from offset to the end, in calls of at most max records.
func readAll(t *testing.T, p *Partition, from uint64, max int) []Record {
	t.Helper()
	var out []Record
	for from < p.End() {
		rs, err := p.Read(from, max, 64<<10)
		if err != nil {
			t.Fatalf("Read %d: %v", from, err)
		}
		if len(rs) == 0 {
			t.Fatalf("Read %d returned nothing before the end %d", from, p.End())
		}
		out = append(out, rs...)
		from = rs[len(rs)-1].Offset + 1
	}
	return out
}

func check(t *testing.T, rs []Record, from, to uint64) {
	t.Helper()
	if uint64(len(rs)) != to-from {
		t.Fatalf("read %d records, want %d (%d..%d)", len(rs), to-from, from, to)
	}
	for i, r := range rs {
		if r.Offset != from+uint64(i) || !bytes.Equal(r.Data, rec(r.Offset)) {
			t.Fatalf("record %d: offset %d data %.20q", i, r.Offset, r.Data)
		}
	}
}

func TestAppendReadAcrossSegmentsAndReopen(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	fill(t, p, 0, 2000, 700)
	check(t, readAll(t, p, 0, 37), 0, 2000)
	check(t, readAll(t, p, 1234, 1000), 1234, 2000) // from the middle of a segment, through the index
	if got := p.Segments(); len(got) != 3 || got[1] != [2]uint64{700, 1400} {
		t.Fatalf("segments %v", got)
	}
	p.Close()

	p = mustOpen(t, fs.Crash())
	if p.Start() != 0 || p.End() != 2000 {
		t.Fatalf("reopened: %d..%d", p.Start(), p.End())
	}
	check(t, readAll(t, p, 699, 5), 699, 2000)
	fill(t, p, 2000, 2100, 700)
	check(t, readAll(t, p, 1990, 50), 1990, 2100)
}

func TestUnsyncedRecordsAreNotReadAndDoNotSurviveACrash(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	fill(t, p, 0, 100, 1000)
	for o := uint64(100); o < 150; o++ {
		if err := p.Append(o, false, rec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if p.End() != 100 {
		t.Fatalf("End %d before Sync", p.End())
	}
	if _, err := p.Read(120, 10, 1<<20); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("read of an unsynced record: %v", err)
	}
	check(t, readAll(t, p, 90, 100), 90, 100)
	// Crash with the pending frames half written: the torn one is cut off on open.
	p.flushLocked()
	crashed := fs.CrashWith(func(name string, synced, current []byte) []byte {
		return current[:len(synced)+(len(current)-len(synced))/2]
	})
	q := mustOpen(t, crashed)
	if q.End() < 100 || q.End() >= 150 {
		t.Fatalf("after a torn write: end %d", q.End())
	}
	check(t, readAll(t, q, 0, 1000), 0, q.End())
	fill(t, q, q.End(), 200, 1000)
	check(t, readAll(t, q, 0, 1000), 0, 200)
}

func TestRemoveBelowDeletesWholeSegmentsOnly(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	fill(t, p, 0, 1000, 250)
	if err := p.RemoveBelow(500); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 500 {
		t.Fatalf("start %d after removing below 500", p.Start())
	}
	if _, err := p.Read(499, 1, 100); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("read below the start: %v", err)
	}
	names, _ := fs.ReadDir("/data/topics/1/0")
	if len(names) != 4 { // two segments, .log and .idx each
		t.Fatalf("files after removal: %v", names)
	}
	// A reader in flight keeps its file: removal waits for it.
	p.mu.Lock()
	held := p.segs[0]
	held.refs++
	p.mu.Unlock()
	if err := p.RemoveBelow(750); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.ReadDir("/data/topics/1/0"); len(names) != 4 {
		t.Fatalf("a held file was removed: %v", names)
	}
	p.mu.Lock()
	held.refs--
	p.releaseLocked(held)
	p.mu.Unlock()
	if names, _ := fs.ReadDir("/data/topics/1/0"); len(names) != 2 {
		t.Fatalf("a released file was kept: %v", names)
	}
	// Everything below the end: the partition is empty and continues at the end.
	if err := p.RemoveBelow(1000); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 1000 || p.End() != 1000 {
		t.Fatalf("emptied: %d..%d", p.Start(), p.End())
	}
	fill(t, p, 1000, 1010, 250)
	check(t, readAll(t, p, 1000, 3), 1000, 1010)
}

func TestBitRotIsReportedNotSkipped(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	fill(t, p, 0, 100, 1000)
	f, _ := fs.OpenFile("/data/topics/1/0/"+segName(0, logExt), 2, 0)
	var b [1]byte
	f.ReadAt(b[:], 500)
	b[0] ^= 0x40
	f.WriteAt(b[:], 500)
	_, err := p.Read(0, 100, 1<<20)
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("read over a flipped bit: %v", err)
	}
}

// bigRec is a record of about 3 KiB, so that a segment of a few thousand spans many of
// the reader's chunks.
func bigRec(off uint64) []byte {
	return append([]byte(fmt.Sprintf("record %d ", off)), bytes.Repeat([]byte{byte(off)}, 3000+int(off%97))...)
}

// TestReadInChunksAcrossBoundaries reads a segment of several megabytes (frames cut by
// the chunk boundaries at every place) in reads of every size, and checks that what one
// read returned is not changed by the next, which reuses the read buffer.
func TestReadInChunksAcrossBoundaries(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	const n = 1000 // about 3 MiB
	for o := uint64(0); o < n; o++ {
		if err := p.Append(o, o == 0, bigRec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	for name, read := range readers(p) {
		for _, c := range []struct{ max, maxBytes int }{{1, 1}, {7, 1 << 30}, {10_000, 100 << 10}, {10_000, 16 << 20}} {
			var all []Record
			for from := uint64(0); from < n; {
				rs, err := read(from, c.max, c.maxBytes)
				if err != nil || len(rs) == 0 {
					t.Fatalf("%s max %d maxBytes %d: %d: %d records, %v", name, c.max, c.maxBytes, from, len(rs), err)
				}
				// A record grown by its reader never spills into the next one's bytes.
				for i := range rs[:len(rs)-1] {
					_ = append(rs[i].Data, 'x')
				}
				all = append(all, rs...)
				from = rs[len(rs)-1].Offset + 1
			}
			for i, r := range all {
				if r.Offset != uint64(i) || !bytes.Equal(r.Data, bigRec(r.Offset)) {
					t.Fatalf("%s max %d maxBytes %d: record %d: offset %d, data %.20q", name, c.max, c.maxBytes, i, r.Offset, r.Data)
				}
			}
		}
	}
}

// ReadShared puts the records of one call into a few buffers, not one each: 1,000
// records of about 3 KiB, read in one call, make at most ten allocations in all.
func TestReadSharedAllocatesBuffersNotRecords(t *testing.T) { // not parallel: AllocsPerRun
	p := mustOpen(t, vfs.NewMemFS())
	const n = 1000
	for o := uint64(0); o < n; o++ {
		if err := p.Append(o, o == 0, bigRec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadShared(0, n, 16<<20); err != nil { // the index, the pooled chunk
		t.Fatal(err)
	}
	for name, read := range readers(p) {
		allocs := testing.AllocsPerRun(5, func() {
			if rs, err := read(0, n, 16<<20); err != nil || len(rs) != n {
				t.Fatalf("%s: %d records, %v", name, len(rs), err)
			}
		})
		if shared := name == "ReadShared"; shared != (allocs <= 10) {
			t.Errorf("%s of %d records made %.0f allocations", name, n, allocs)
		}
	}
}

// readers are a partition's two ways to read, by name.
func readers(p *Partition) map[string]func(uint64, int, int) ([]Record, error) {
	return map[string]func(uint64, int, int) ([]Record, error){"Read": p.Read, "ReadShared": p.ReadShared}
}

// TestReadRecordLargerThanTheChunk: a record larger than the read buffer is read whole,
// between small ones.
func TestReadRecordLargerThanTheChunk(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*readChunk/16+5)
	recs := [][]byte{rec(0), big, rec(2), big, rec(4)}
	for i, r := range recs {
		if err := p.Append(uint64(i), i == 0, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	for name, read := range readers(p) {
		for _, max := range []int{1, 10} {
			var got []Record
			for from := uint64(0); from < uint64(len(recs)); {
				rs, err := read(from, max, 1<<30)
				if err != nil {
					t.Fatalf("%s %d: %v", name, from, err)
				}
				got = append(got, rs...)
				from = rs[len(rs)-1].Offset + 1
			}
			for i, r := range got {
				if !bytes.Equal(r.Data, recs[i]) {
					t.Fatalf("%s max %d: record %d differs (%d bytes, want %d)", name, max, i, len(r.Data), len(recs[i]))
				}
			}
		}
	}
}

// TestDamageInTheMiddleOfAChunkIsRefused flips one byte of a record in the middle of what
// one read of the file takes: the records before it are returned, the damaged one and
// those after it never are, and a read from the damaged one on is refused too.
func TestDamageInTheMiddleOfAChunkIsRefused(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"body", "offset", "length"} {
		t.Run(where, func(t *testing.T) {
			fs := vfs.NewMemFS()
			p := mustOpen(t, fs)
			const n, bad = 300, 150 // 300 records of ~3 KiB: one chunk of the reader
			var at int64
			for o := uint64(0); o < n; o++ {
				if o == bad {
					at = p.segs[0].size + int64(len(p.pending))
				}
				if err := p.Append(o, o == 0, bigRec(o)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			pos := map[string]int64{"body": at + frameHeader + 1000, "offset": at + 8, "length": at + 2}[where]
			f, _ := fs.OpenFile("/data/topics/1/0/"+segName(0, logExt), 2, 0)
			var b [1]byte
			f.ReadAt(b[:], pos)
			b[0] ^= 0x40
			f.WriteAt(b[:], pos)

			rs, err := p.Read(0, 10_000, 16<<20)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Offset != at {
				t.Fatalf("read over the damaged record: %v, want a CorruptionError at byte %d", err, at)
			}
			if len(rs) != bad {
				t.Fatalf("read returned %d records before the damaged one, want %d", len(rs), bad)
			}
			for i, r := range rs {
				if r.Offset != uint64(i) || !bytes.Equal(r.Data, bigRec(r.Offset)) {
					t.Fatalf("record %d: offset %d, data %.20q", i, r.Offset, r.Data)
				}
			}
			for _, from := range []uint64{bad - 3, bad} {
				rs, err := p.Read(from, 10, 1<<20)
				if !errors.As(err, &ce) {
					t.Fatalf("read from %d: %v, want a CorruptionError", from, err)
				}
				for _, r := range rs {
					if r.Offset >= bad {
						t.Fatalf("read from %d returned record %d, at or past the damaged one", from, r.Offset)
					}
				}
			}
		})
	}
}

// TestSequentialReaderReadsEachByteOnceInLargeReads: a reader going through a segment
// in calls of 1000 records (a group's pulls) reads the log file in calls of up to
// readChunk, each byte about once: a call does not fetch what the next one reads again,
// and no call reads a record at a time.
func TestSequentialReaderReadsEachByteOnceInLargeReads(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reads, bytesRead int64
	fs := vfs.NewFaulty(vfs.NewMemFS(), func(e vfs.Event) error {
		if e.Op == vfs.OpRead && strings.HasSuffix(e.Name, logExt) {
			mu.Lock()
			reads++
			bytesRead += e.Length
			mu.Unlock()
		}
		return nil
	})
	p := mustOpen(t, fs)
	const n = 4000 // about 12 MiB
	for o := uint64(0); o < n; o++ {
		if err := p.Append(o, o == 0, bigRec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	reads, bytesRead = 0, 0 // Open and Sync's own reads, if any
	mu.Unlock()
	size := p.segs[0].size
	for from := uint64(0); from < n; {
		rs, err := p.Read(from, 1000, 16<<20)
		if err != nil || len(rs) == 0 {
			t.Fatalf("Read %d: %d records, %v", from, len(rs), err)
		}
		from = rs[len(rs)-1].Offset + 1
	}
	mu.Lock()
	defer mu.Unlock()
	if bytesRead < size || bytesRead > size+size/50 {
		t.Fatalf("read %d bytes of a %d-byte file (want it once, within 2 %%)", bytesRead, size)
	}
	if per := bytesRead / reads; per < 256<<10 {
		t.Fatalf("%d reads of %d bytes on average, want large ones", reads, per)
	}
}

// TestFlushedRecordsWaitForSyncAndOpenKeepsWhatItReads: Flush writes records without
// making them durable or readable; a segment is synced whole when the next begins; the
// newest segment's index is never synced and Open rebuilds it; and what Open reads back
// after a crash of the process (the writes in the page cache) it makes durable, so that
// a crash of the machine after it cannot take back records the caller took as moved.
func TestFlushedRecordsWaitForSyncAndOpenKeepsWhatItReads(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	p := mustOpen(t, fs)
	fill(t, p, 0, 100, 1000)
	for o := uint64(100); o < 150; o++ {
		if err := p.Append(o, false, rec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if w, err := p.Flush(); err != nil || w != 150 || p.Written() != 150 || p.End() != 100 {
		t.Fatalf("Flush: %d %v; written %d, end %d", w, err, p.Written(), p.End())
	}
	if _, err := p.Read(120, 10, 1<<20); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("read of a flushed, unsynced record: %v", err)
	}
	if q := mustOpen(t, fs.Crash()); q.End() != 100 {
		t.Fatalf("a machine's crash kept %d records; only 100 were synced", q.End())
	}

	// The process dies; a new one opens the files (the page cache has the writes) and
	// then the machine dies: the 150 it found stay.
	q := mustOpen(t, fs)
	if q.End() != 150 {
		t.Fatalf("reopened after the process's crash: end %d, want the 150 written", q.End())
	}
	r := mustOpen(t, fs.Crash())
	if r.End() != 150 {
		t.Fatalf("the machine's crash after Open: end %d, want 150", r.End())
	}
	check(t, readAll(t, r, 0, 1000), 0, 150)

	// A new segment seals the one before it, the records flushed into it included: a
	// crash before any Sync keeps the sealed segment whole.
	for o := uint64(150); o < 1200; o++ {
		if err := q.Append(o, o == 1000, rec(o)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.Crash()
	if got := mustOpen(t, crashed).End(); got != 1000 {
		t.Fatalf("crash after the seal, before a Sync: end %d, want the sealed segment's 1000", got)
	}
	// Synced, then crashed: the newest index, never synced, is rebuilt and used.
	if end, err := q.Sync(); err != nil || end != 1200 {
		t.Fatalf("Sync: %d %v", end, err)
	}
	s := mustOpen(t, fs.Crash())
	if s.End() != 1200 {
		t.Fatalf("after a sync and a crash: end %d", s.End())
	}
	check(t, readAll(t, s, 1150, 7), 1150, 1200)
	check(t, readAll(t, s, 0, 1000), 0, 1200)
}

// TestALentBufferComesBackOnlyOnceWritten: two partitions written in turn through one
// lent buffer (as the mover writes them) read back whole, each step's frames written
// from the same array; a buffer whose frames are not yet written stays with its
// partition, and the next Flush writes them.
func TestALentBufferComesBackOnlyOnceWritten(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	a := mustOpen(t, fs)
	b, err := Open(fs, "/data/topics/1/1")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64<<10)
	first := &buf[:1][0]
	for step := uint64(0); step < 4; step++ {
		for _, p := range []*Partition{a, b} {
			p.Lend(buf)
			for o := step * 50; o < step*50+50; o++ {
				if err := p.Append(o, o == 0, rec(o)); err != nil {
					t.Fatal(err)
				}
			}
			if p.Return() != nil {
				t.Fatal("Return gave the buffer back with its frames not yet written")
			}
			if _, err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			if buf = p.Return(); cap(buf) != 64<<10 || len(buf) != 0 || &buf[:1][0] != first {
				t.Fatalf("Return after the write: len %d cap %d, another array: %v", len(buf), cap(buf), &buf[:1][0] != first)
			}
		}
	}
	for _, p := range []*Partition{a, b} {
		if end, err := p.Sync(); err != nil || end != 200 {
			t.Fatalf("Sync: %d %v", end, err)
		}
		check(t, readAll(t, p, 0, 1000), 0, 200)
	}
}
