package wal_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// rec is a replayed or appended record.
type rec struct {
	pos  wal.Pos
	data string
}

// payload returns record i of a test workload: sizes vary from 10 to over
// 200 bytes so that frames have every padding length.
func payload(i int) []byte {
	return []byte(fmt.Sprintf("rec-%05d-", i) + strings.Repeat(string(rune('a'+i%26)), i*7%201))
}

// testCtx bounds every wait in a test, so a lost wake-up fails instead of
// hanging the suite.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tryOpen(opts wal.Options, start wal.Pos) (*wal.Log, []rec, error) {
	var got []rec
	l, err := wal.Open(opts, start, func(pos wal.Pos, p []byte) error {
		got = append(got, rec{pos, string(p)})
		return nil
	})
	return l, got, err
}

func openLog(t testing.TB, opts wal.Options, start wal.Pos) (*wal.Log, []rec) {
	t.Helper()
	l, got, err := tryOpen(opts, start)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, got
}

func appendWait(t testing.TB, l *wal.Log, data []byte) wal.Pos {
	t.Helper()
	pos, tk, err := l.Append(data)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if err := tk.Wait(testCtx(t)); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return pos
}

// sameRecords fails unless got equals want, positions included.
func sameRecords(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d = {%v %.20q}, want {%v %.20q}", i, got[i].pos, got[i].data, want[i].pos, want[i].data)
		}
	}
}

func memOpts(fs vfs.FS) wal.Options {
	return wal.Options{FS: fs, Dir: "/wal", SegmentSize: 4096, NoPrecreate: true}
}

func segPath(idx uint32) string { return fmt.Sprintf("/wal/%08x.wal", idx) }

func readAll(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		t.Fatal(err)
	}
	return b
}

// writeAt overwrites bytes of a file durably, as a disk error or an
// operator would.
func writeAt(t testing.TB, fs vfs.FS, path string, off int64, b []byte) {
	t.Helper()
	if err := fs.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t testing.TB, fs vfs.FS, path string, off int64) {
	t.Helper()
	b := readAll(t, fs, path)
	writeAt(t, fs, path, off, []byte{b[off] ^ 0x40})
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentHeader builds a segment header from the documented layout, so the
// tests check the format independently of the package's encoder.
func segmentHeader(idx uint32, version uint32) []byte {
	h := make([]byte, 32)
	copy(h, "OKIBALOG")
	binary.LittleEndian.PutUint32(h[8:], version)
	binary.LittleEndian.PutUint64(h[16:], uint64(idx))
	binary.LittleEndian.PutUint32(h[28:], crc32.Checksum(h[:28], castagnoli))
	return h
}

// frame builds a frame from the documented layout.
func frame(p []byte) []byte {
	n := (8 + len(p) + 7) &^ 7
	f := make([]byte, n)
	binary.LittleEndian.PutUint32(f, uint32(len(p)))
	copy(f[8:], p)
	crc := crc32.Update(crc32.Checksum(f[:4], castagnoli), castagnoli, p)
	binary.LittleEndian.PutUint32(f[4:], crc)
	return f
}

// logBuffer collects a Log's log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// appendBatch appends gate and then batch, and waits for both: gate's commit is held
// in its fsync until batch is appended, so that batch makes exactly one commit batch
// (otherwise a committer may take its first records before the last are appended).
// f must be the file system under l; its hook is left unset.
func appendBatch(t testing.TB, f *vfs.Faulty, l *wal.Log, gate []byte, batch ...[]byte) []rec {
	t.Helper()
	ctx := testCtx(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.SetHook(vfs.Match(vfs.IsOp(vfs.OpSync), func(vfs.Event) error {
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return nil
	}))
	defer f.SetHook(nil)
	pos, gt, err := l.Append(gate)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	l.Commit()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the gate record's commit never reached its fsync")
	}
	out := []rec{{pos, string(gate)}}
	var last wal.Ticket
	for _, p := range batch {
		pos, tk, err := l.Append(p)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		out = append(out, rec{pos, string(p)})
		last = tk
	}
	f.SetHook(nil)
	close(release)
	for _, tk := range []wal.Ticket{gt, last} {
		if err := tk.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	return out
}

// keepCurrent is a MemFS.CrashWith policy under which every unsynced byte
// reached the disk: the torn write itself is all that is lost.
func keepCurrent(_ string, _, current []byte) []byte { return current }

// trailer builds a batch trailer from the documented layout: it closes
// frames records taking n bytes before it.
func trailer(n, frames int) []byte {
	t := make([]byte, 24)
	binary.LittleEndian.PutUint32(t, 1<<31|16)
	binary.LittleEndian.PutUint32(t[8:], uint32(n))
	binary.LittleEndian.PutUint32(t[12:], uint32(frames))
	copy(t[16:], "BATCHEND")
	binary.LittleEndian.PutUint32(t[4:], crc32.Checksum(append(t[:4:4], t[8:]...), castagnoli))
	return t
}

// diskFrame is a frame found by walking a segment by the documented layout.
type diskFrame struct {
	off, size int64
	trailer   bool
}

// walkFrames lists the frames of a format-2 segment file from its header up
// to the first zero length word, trusting their lengths.
func walkFrames(seg []byte) []diskFrame {
	var out []diskFrame
	for off := int64(32); off+8 <= int64(len(seg)); {
		n := binary.LittleEndian.Uint32(seg[off:])
		if n == 0 {
			break
		}
		f := diskFrame{off: off, size: int64((8 + n + 7) &^ 7)}
		if n&(1<<31) != 0 {
			f = diskFrame{off: off, size: 24, trailer: true}
		}
		out = append(out, f)
		off += f.size
	}
	return out
}
