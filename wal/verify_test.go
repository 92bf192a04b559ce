package wal_test

import (
	"context"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// TestVerifyReportsEveryBadFrame: unlike Open, which stops at the first, Verify goes on
// past each bad frame and names them all with file and offset; a bad frame at the end
// of the last segment that a write cut short is a torn tail, not damage.
func TestVerifyReportsEveryBadFrame(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	var pos []wal.Pos
	for i := 0; len(pos) == 0 || pos[len(pos)-1].Segment() < 3; i++ {
		pos = append(pos, appendWait(t, l, payload(i)))
	}
	l.Close()
	if rep, err := wal.Verify(memOpts(m)); err != nil || len(rep.Damaged()) != 0 || len(rep.Segments) != 3 {
		t.Fatalf("Verify of a sound log: %+v, %v", rep, err)
	}
	// Two records of segment 1 and one of segment 2 rot.
	var bad []wal.Pos
	for _, p := range pos {
		if (p.Segment() == 1 && (len(bad) == 0 || len(bad) == 1 && p.Offset() > bad[0].Offset()+200)) || (p.Segment() == 2 && len(bad) == 2) {
			bad = append(bad, p)
		}
	}
	for _, p := range bad {
		flipByte(t, m, segPath(p.Segment()), int64(p.Offset())+10)
	}
	rep, err := wal.Verify(memOpts(m))
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Damaged()
	if len(got) != len(bad) {
		t.Fatalf("Verify found %d damaged frames, want %d: %v", len(got), len(bad), got)
	}
	for i, f := range got {
		if f.File != segPath(bad[i].Segment()) || f.Offset != int64(bad[i].Offset()) || f.Reason != "checksum mismatch" || f.Next <= f.Offset {
			t.Fatalf("damaged frame %d: %+v, want %s at %d", i, f, segPath(bad[i].Segment()), bad[i].Offset())
		}
	}
	// A torn last write: the last frame of the last segment cut short.
	last := pos[len(pos)-1]
	writeAt(t, m, segPath(last.Segment()), int64(last.Offset())+12, make([]byte, 4096-int(last.Offset())-12)) // the frame and its trailer
	rep, _ = wal.Verify(memOpts(m))
	if n := len(rep.Damaged()); n != len(bad) {
		t.Fatalf("a torn tail counted as damage: %v", rep.Damaged())
	}
	s := rep.Segments[len(rep.Segments)-1]
	if len(s.Bad) != 1 || !s.Bad[0].Torn || s.Bad[0].Offset != int64(last.Offset()) {
		t.Fatalf("the torn tail: %+v", s.Bad)
	}
}

// TestVerifySinceReadsTheLiveLog: a live log's durable frames from a position on, paced.
func TestVerifySinceReadsTheLiveLog(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	defer l.Close()
	var pos []wal.Pos
	for i := 0; len(pos) == 0 || pos[len(pos)-1].Segment() < 2; i++ {
		pos = append(pos, appendWait(t, l, payload(i)))
	}
	var paced int64
	segs, err := l.VerifySince(context.Background(), pos[0], func(_ context.Context, n int64) error { paced += n; return nil })
	if err != nil || len(segs) != 2 || paced == 0 {
		t.Fatalf("VerifySince: %+v, %v (paced %d)", segs, err, paced)
	}
	records := 0
	for _, s := range segs {
		if len(s.Bad) != 0 {
			t.Fatalf("bad frames in a sound live log: %+v", s.Bad)
		}
		records += s.Records
	}
	if records != len(pos) {
		t.Fatalf("%d records checked, %d appended", records, len(pos))
	}
	flipByte(t, m, segPath(1), int64(pos[1].Offset())+9)
	segs, _ = l.VerifySince(context.Background(), pos[0], nil)
	if len(segs[0].Bad) != 1 || segs[0].Bad[0].Offset != int64(pos[1].Offset()) {
		t.Fatalf("VerifySince after rot: %+v", segs[0].Bad)
	}
}
