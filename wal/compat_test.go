package wal_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okiba/okiba/vfs"
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
	m, want := v1Fixture(t)
	l, got := openLog(t, memOpts(m), 0)
	sameRecords(t, got, want)
	for _, r := range want {
		if b, err := l.ReadAt(r.pos); err != nil || string(b) != r.data {
			t.Fatalf("ReadAt(%v) = %.20q, %v", r.pos, b, err)
		}
	}
}
