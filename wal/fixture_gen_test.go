//go:build walfixture

package wal_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okiba/okiba/wal"
)

// TestWriteV1Fixture writes the log kept in testdata/v1: segments in format version 1,
// which has no batch trailers, and records.txt, the position and workload index of every
// record. It is behind a build tag because it must run on a commit that still writes
// version 1 (c959ff6 or earlier); on later code it would write the current version:
//
//	git worktree add /tmp/okiba-v1 c959ff6
//	cp wal/fixture_gen_test.go /tmp/okiba-v1/wal/
//	(cd /tmp/okiba-v1 && OKIBA_FIXTURE_OUT=$PWD/wal/testdata/v1 go test -tags walfixture -run TestWriteV1Fixture ./wal)
//	git worktree remove --force /tmp/okiba-v1
//
// The workload fills three 4 KiB segments, with batches of one record and batches of
// several, one of which crosses a segment roll, and leaves the segment created ahead of
// need, empty, as a stopped log does.
func TestWriteV1Fixture(t *testing.T) {
	out := os.Getenv("OKIBA_FIXTURE_OUT")
	if out == "" {
		t.Skip("SKIP: set OKIBA_FIXTURE_OUT to the directory to write")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(out); len(names) > 0 {
		t.Fatalf("%s is not empty", out)
	}
	l, err := wal.Open(wal.Options{Dir: out, SegmentSize: 4096}, 0, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var manifest strings.Builder
	i := 0
	for batch := 0; l.End().Segment() < 3 || l.End().Offset() < 2048; batch++ {
		var last wal.Ticket
		for range 1 + batch%5 {
			pos, tk, err := l.Append(payload(i))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&manifest, "%d:%d %d\n", pos.Segment(), pos.Offset(), i)
			last = tk
			i++
		}
		if err := last.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, "wal.lock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "records.txt"), []byte(manifest.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
