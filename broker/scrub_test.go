package broker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// rot flips a byte of the first occurrence of what in the log segments under dir/wal
// and returns the segment and the offset of the byte.
func rot(t *testing.T, fsys vfs.FS, dir, what string) (string, int64) {
	t.Helper()
	names, err := fsys.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.HasSuffix(name, ".wal") {
			continue
		}
		path := filepath.Join(dir, "wal", name)
		data, err := vfs.ReadFile(fsys, path)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, []byte(what)); i >= 0 {
			f, err := fsys.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{data[i+3] ^ 0x20}, int64(i+3)); err != nil {
				t.Fatal(err)
			}
			return path, int64(i + 3)
		}
	}
	t.Fatalf("%q is in no segment", what)
	return "", 0
}

func scrubBroker(t *testing.T, fsys vfs.FS) (*Broker, Config) {
	cfg := Config{Dir: "/data", FS: fsys, SegmentSize: 16 << 10, smallSegments: true, CacheBytes: -1, NoPrecreate: true,
		MinFreeBytes: -1, ScrubEvery: -1, ScrubRate: -1, CompactRatio: 1e-9}
	return start(t, cfg), cfg
}

// TestScrubFindsRot: a scrub reads back the live bodies before the checkpoint and the
// log after it, names each damaged frame's file, offset and message, marks the broker
// degraded, and changes nothing; a clean one reports nothing.
func TestScrubFindsRot(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMemFS()
	b, _ := scrubBroker(t, fsys)
	defer b.Close()
	mustQueue(t, b, "q", nil)
	var old []string
	for i := range 40 {
		old = append(old, fmt.Sprintf("old-%02d-%s", i, strings.Repeat("o", 900)))
	}
	ids := send(t, b, "q", old...)
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	recent := send(t, b, "q", "recent-"+strings.Repeat("r", 500))
	if rep, err := b.Scrub(ctx); err != nil || !rep.OK() || rep.Bodies == 0 || rep.Segments == 0 || rep.Checkpoints != 1 {
		t.Fatalf("scrub of a sound broker: %+v, %v", rep, err)
	}
	seg1, off1 := rot(t, fsys, "/data", "old-03-")
	seg2, off2 := rot(t, fsys, "/data", "recent-")
	rep, err := b.Scrub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Damaged) != 2 {
		t.Fatalf("scrub found %d damaged frames, want 2: %+v", len(rep.Damaged), rep.Damaged)
	}
	want := map[string]uint64{seg1: ids[3], seg2: recent[0]}
	offs := map[string]int64{seg1: off1, seg2: off2}
	for _, d := range rep.Damaged {
		if !slices.Equal(d.Messages, []uint64{want[d.File]}) || d.Offset > offs[d.File] || offs[d.File]-d.Offset > 64 || d.Reason != "checksum mismatch" {
			t.Fatalf("damaged frame %+v: want %s near offset %d, message %s", d, d.File, offs[d.File], queue.FormatID(want[d.File]))
		}
	}
	if h := b.Health(); !strings.Contains(h.Degraded, "scrub") || !strings.Contains(h.Degraded, "2 damaged frames") {
		t.Fatalf("Health after a scrub found damage: %+v", h)
	}
	if last, ok := b.LastScrub(); !ok || len(last.Damaged) != 2 {
		t.Fatalf("LastScrub: %+v %v", last, ok)
	}
	if st := stats(t, b, "q"); st.Ready != 41 {
		t.Fatalf("the scrub changed the queue: %+v", st)
	}
}

// TestScrubIsRateLimited: a scrub keeps to its rate.
func TestScrubIsRateLimited(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: fsys, SegmentSize: 64 << 10, smallSegments: true, MinFreeBytes: -1, ScrubEvery: -1, ScrubRate: 400 << 10}
	b := start(t, cfg)
	defer b.Close()
	mustQueue(t, b, "q", nil)
	for range 10 {
		send(t, b, "q", strings.Repeat("x", 10<<10))
	}
	began := time.Now()
	rep, err := b.Scrub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if least := time.Duration(float64(rep.Bytes) / float64(cfg.ScrubRate) * 0.9 * float64(time.Second)); took < least {
		t.Fatalf("scrub read %d bytes in %v; at %d bytes a second it takes at least %v", rep.Bytes, took, cfg.ScrubRate, least)
	}
}

// TestVerifyOffline: okiba verify's core names the damaged frames of a stopped broker's
// directory with the messages the checkpoint places there, and refuses a directory a
// broker holds.
func TestVerifyOffline(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMemFS()
	b, cfg := scrubBroker(t, fsys)
	mustQueue(t, b, "q", nil)
	var msgs []string
	for i := range 30 {
		msgs = append(msgs, fmt.Sprintf("m-%02d-%s", i, strings.Repeat("v", 900)))
	}
	ids := send(t, b, "q", msgs...)
	if _, err := Verify(fsys, cfg.Dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Verify of a directory a broker holds: %v, want ErrLocked", err)
	}
	b.Close()
	if rep, err := Verify(fsys, cfg.Dir); err != nil || !rep.OK() || !rep.Indexed || len(rep.Log.Segments) < 2 {
		t.Fatalf("Verify of a sound directory: %+v, %v", rep, err)
	}
	seg, off := rot(t, fsys, cfg.Dir, "m-07-")
	rep, err := Verify(fsys, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Damaged) != 1 {
		t.Fatalf("Verify after rot: %+v", rep.Damaged)
	}
	d := rep.Damaged[0]
	if d.File != seg || d.Offset > off || off-d.Offset > 64 || !slices.Equal(d.Messages, []uint64{ids[7]}) || d.Torn {
		t.Fatalf("damaged frame %+v: want %s near %d, message %s", d, seg, off, queue.FormatID(ids[7]))
	}
}
