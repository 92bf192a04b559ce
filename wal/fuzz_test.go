package wal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// FuzzOpen feeds arbitrary bytes to recovery as the only segment of a log
// (after a valid header when withHeader is set, so the fuzzer spends its
// time on frames, and then once in each segment format version). Open must
// not panic; it either refuses with an error or replays records that each
// match their frame's checksum, one after the other from the first frame
// (with at most a batch trailer between two, from format 2 on). After a
// successful Open the log must take a new record and replay exactly the same
// records plus that one on the next Open.
func FuzzOpen(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add(frame([]byte("hello")), true)
	f.Add(append(frame([]byte("a")), frame([]byte("bb"))...), true)
	f.Add(append(frame([]byte("torn")), 9, 0, 0, 0, 1, 2, 3), true)
	f.Add(append(append(frame([]byte("x")), 0, 0, 0, 0, 0, 0, 0, 0), frame([]byte("after a zero word"))...), true)
	f.Add(segmentHeader(1, 1), false)
	f.Add(segmentHeader(1, 2), false)
	f.Add([]byte("OKIBALOG garbage"), false)
	f.Add(append(frame([]byte("a")), trailer(16, 1)...), true)
	f.Add(append(append(frame([]byte("a")), trailer(16, 1)...), frame([]byte("unsealed"))...), true)
	f.Add(append(frame([]byte("a")), trailer(16, 1)[:20]...), true)

	f.Fuzz(func(t *testing.T, data []byte, withHeader bool) {
		if len(data) > 1<<16 {
			return
		}
		if !withHeader {
			fuzzOpen(t, data, 0)
			return
		}
		for v := uint32(1); v <= wal.SegmentVersion; v++ {
			fuzzOpen(t, append(segmentHeader(1, v), data...), v)
		}
	})
}

// fuzzOpen runs one FuzzOpen input, file, whose header has format version (0: the
// header is part of the input).
func fuzzOpen(t *testing.T, file []byte, version uint32) {
	m := vfs.NewMemFS()
	m.MkdirAll("/wal", 0o755)
	fh, err := m.OpenFile("/wal/00000001.wal", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt(file, 0)
	fh.Sync()
	fh.Close()
	m.SyncDir("/wal")

	opts := wal.Options{FS: m, Dir: "/wal", SegmentSize: 1024, NoPrecreate: true}
	l, got, err := tryOpen(opts, 0)
	if err != nil {
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) && !errors.Is(err, wal.ErrNewerFormat) {
			t.Fatalf("Open failed with an untyped error: %v", err)
		}
		return
	}
	// Records form an unbroken chain from the first frame: recovery
	// never skips bytes it cannot read to reach later ones.
	next := wal.MakePos(1, 32)
	for _, r := range got {
		if r.pos != next && (version < 2 || r.pos != next+24 || !bytes.Equal(file[next.Offset():r.pos.Offset()][:4], trailer(0, 0)[:4])) {
			t.Fatalf("record at %v, want the next one at %v", r.pos, next)
		}
		next = r.pos + wal.Pos((8+len(r.data)+7)&^7)
		off := int(r.pos.Offset())
		if r.pos.Segment() != 1 || off+8+len(r.data) > len(file) {
			t.Fatalf("record at %v outside the file", r.pos)
		}
		n := binary.LittleEndian.Uint32(file[off:])
		crc := crc32.Update(crc32.Checksum(file[off:off+4], castagnoli), castagnoli, []byte(r.data))
		if int(n) != len(r.data) || binary.LittleEndian.Uint32(file[off+4:]) != crc ||
			!bytes.Equal(file[off+8:off+8+int(n)], []byte(r.data)) {
			t.Fatalf("record at %v does not match its frame", r.pos)
		}
	}
	pos, tk, err := l.Append([]byte("appended"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, again, err := tryOpen(opts, 0)
	if err != nil {
		t.Fatalf("reopen after append: %v", err)
	}
	defer l.Close()
	sameRecords(t, again, append(got, rec{pos, "appended"}))
}
