package wal_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// v1Fixture loads testdata/v1 (see fixture_gen_test.go for how it was made) into a
// MemFS at /wal, and returns the records it holds, as records.txt lists them.
func v1Fixture(t *testing.T) (*vfs.MemFS, []rec) {
	t.Helper()
	names, err := os.ReadDir("testdata/v1")
	if err != nil {
		t.Fatal(err)
	}
	m := vfs.NewMemFS()
	for _, e := range names {
		if !strings.HasSuffix(e.Name(), ".wal") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata/v1", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, m, "/wal/"+e.Name(), 0, b)
	}
	if err := m.SyncDir("/wal"); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile("testdata/v1/records.txt")
	if err != nil {
		t.Fatal(err)
	}
	var want []rec
	for _, line := range strings.Split(strings.TrimSpace(string(manifest)), "\n") {
		var seg, off uint32
		var i int
		if _, err := fmt.Sscanf(line, "%d:%d %d", &seg, &off, &i); err != nil {
			t.Fatalf("records.txt: %q: %v", line, err)
		}
		want = append(want, rec{wal.MakePos(seg, off), string(payload(i))})
	}
	return m, want
}

// TestOpensVersion1Log opens a log written by the code before batch trailers and
// replays every record of it where it was written.
func TestOpensVersion1Log(t *testing.T) {
	t.Parallel()
	m, want := v1Fixture(t)
	l, got := openLog(t, memOpts(m), 0)
	sameRecords(t, got, want)
	for _, r := range want {
		if b, err := l.ReadAt(r.pos); err != nil || string(b) != r.data {
			t.Fatalf("ReadAt(%v) = %.20q, %v", r.pos, b, err)
		}
	}
}

// TestVersion1LogKeepsItsRules: a format-1 segment has no batch trailers, so a bad
// last record there is still taken for a torn tail, as the code that wrote it did.
func TestVersion1LogKeepsItsRules(t *testing.T) {
	t.Parallel()
	m, want := v1Fixture(t)
	last := want[len(want)-1]
	flipByte(t, m, segPath(last.pos.Segment()), int64(last.pos.Offset())+12)
	var logs logBuffer
	opts := memOpts(m)
	opts.Logger = logs.logger()
	_, got := openLog(t, opts, 0)
	sameRecords(t, got, want[:len(want)-1])
	if !strings.Contains(logs.String(), "torn tail") || strings.Contains(dirNames(t, m), "quarantine") {
		t.Fatalf("format 1 recovery changed: log:\n%s\ndirectory: %s", logs.String(), dirNames(t, m))
	}
}

// TestAppendAfterVersion1Log: records appended to a log of format-1 segments go to a
// new segment in the current format (the format-1 spare is not reused), and the whole
// log replays.
func TestAppendAfterVersion1Log(t *testing.T) {
	t.Parallel()
	m, want := v1Fixture(t)
	seg3 := readAll(t, m, segPath(3))
	l, _ := openLog(t, memOpts(m), 0)
	for i, n := len(want), len(want)+40; i < n; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	l.Close()
	if p := want[len(want)-40].pos; p != wal.MakePos(4, 32) {
		t.Fatalf("the first record after a format-1 segment went to %v, want 4:32", p)
	}
	if !bytes.Equal(readAll(t, m, segPath(3)), seg3) {
		t.Fatal("appending changed a format-1 segment")
	}
	for idx := uint32(4); idx <= want[len(want)-1].pos.Segment(); idx++ {
		if v := binary.LittleEndian.Uint32(readAll(t, m, segPath(idx))[8:]); v != wal.SegmentVersion {
			t.Fatalf("segment %d has format version %d", idx, v)
		}
	}
	_, got := openLog(t, memOpts(m), 0)
	sameRecords(t, got, want)
}

// TestEmptyVersion1SegmentReplaced: a format-1 log with no record yet is not kept
// empty before a segment of the current format (which would look like lost records):
// its only segment is replaced by an empty one in the current format.
func TestEmptyVersion1SegmentReplaced(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	writeAt(t, m, segPath(1), 0, append(segmentHeader(1, 1), make([]byte, 4096-32)...))
	m.SyncDir("/wal")
	l, _ := openLog(t, memOpts(m), 0)
	want := []rec{{appendWait(t, l, []byte("first")), "first"}}
	l.Close()
	if want[0].pos != wal.MakePos(1, 32) {
		t.Fatalf("first record at %v, want 1:32", want[0].pos)
	}
	if v := binary.LittleEndian.Uint32(readAll(t, m.Crash(), segPath(1))[8:]); v != wal.SegmentVersion {
		t.Fatalf("segment 1 has format version %d after Open", v)
	}
	_, got := openLog(t, memOpts(m), 0)
	sameRecords(t, got, want)
}
