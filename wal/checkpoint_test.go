package wal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

func TestCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, _, ok, err := wal.LoadCheckpoint(vfs.OS, dir); ok || err != nil {
		t.Fatalf("empty dir: ok=%v err=%v", ok, err)
	}
	if _, _, ok, err := wal.LoadCheckpoint(vfs.OS, filepath.Join(dir, "missing")); ok || err != nil {
		t.Fatalf("missing dir: ok=%v err=%v", ok, err)
	}
	p1, p2 := wal.MakePos(1, 4096), wal.MakePos(3, 32)
	if err := wal.SaveCheckpoint(vfs.OS, dir, p1, []byte("state one")); err != nil {
		t.Fatal(err)
	}
	pos, payload, ok, err := wal.LoadCheckpoint(vfs.OS, dir)
	if err != nil || !ok || pos != p1 || string(payload) != "state one" {
		t.Fatalf("Load = %v %q %v %v", pos, payload, ok, err)
	}
	if err := wal.SaveCheckpoint(vfs.OS, dir, p2, nil); err != nil {
		t.Fatal(err)
	}
	pos, payload, ok, err = wal.LoadCheckpoint(vfs.OS, dir)
	if err != nil || !ok || pos != p2 || len(payload) != 0 {
		t.Fatalf("Load = %v %q %v %v", pos, payload, ok, err)
	}
	names, _ := vfs.OS.ReadDir(dir)
	if want := []string{fmt.Sprintf("checkpoint-%016x.ckpt", uint64(p2))}; !slices.Equal(names, want) {
		t.Fatalf("directory = %v, want %v", names, want)
	}
	// A payload in pieces is stored as their concatenation, byte for byte what one
	// buffer would give (the documented layout, checkpointFile).
	p3 := wal.MakePos(4, 64)
	if err := wal.SaveCheckpoint(vfs.OS, dir, p3, []byte("state "), nil, []byte("in "), []byte("pieces")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("checkpoint-%016x.ckpt", uint64(p3))))
	if err != nil || !bytes.Equal(raw, checkpointFile(wal.CheckpointVersion, p3, []byte("state in pieces"))) {
		t.Fatalf("pieces stored as %q (%v)", raw, err)
	}
}

// checkpointFile builds a checkpoint from the documented layout.
func checkpointFile(version uint32, pos wal.Pos, payload []byte) []byte {
	b := make([]byte, 40+len(payload))
	copy(b, "OKIBACKP")
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint64(b[16:], uint64(pos))
	binary.LittleEndian.PutUint64(b[24:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	copy(b[40:], payload)
	return b
}

func TestCheckpointCorrupt(t *testing.T) {
	t.Parallel()
	pos := wal.MakePos(2, 96)
	name := fmt.Sprintf("/ck/checkpoint-%016x.ckpt", uint64(pos))
	good := checkpointFile(1, pos, []byte("payload"))
	for _, tc := range []struct {
		what string
		file []byte
	}{
		{"payload byte", func() []byte { b := slices.Clone(good); b[42] ^= 1; return b }()},
		{"header byte", func() []byte { b := slices.Clone(good); b[20] ^= 1; return b }()},
		{"truncated", good[:45]},
		{"short", good[:10]},
		{"wrong position", checkpointFile(1, pos+8, []byte("payload"))},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			m := vfs.NewMemFS()
			if err := wal.SaveCheckpoint(m, "/ck", wal.MakePos(1, 32), []byte("older")); err != nil {
				t.Fatal(err)
			}
			writeAt(t, m, name, 0, tc.file)
			_, _, ok, err := wal.LoadCheckpoint(m, "/ck")
			var ce *wal.CorruptionError
			if ok || !errors.As(err, &ce) || ce.File != name || !strings.Contains(err.Error(), name) {
				t.Fatalf("Load = ok %v, %v; want a CorruptionError naming %s", ok, err, name)
			}
		})
	}
	t.Run("newer version", func(t *testing.T) {
		t.Parallel()
		m := vfs.NewMemFS()
		writeAt(t, m, name, 0, checkpointFile(7, pos, []byte("payload")))
		_, _, _, err := wal.LoadCheckpoint(m, "/ck")
		if !errors.Is(err, wal.ErrNewerFormat) || !strings.Contains(err.Error(), name) {
			t.Fatalf("Load = %v, want ErrNewerFormat naming the file", err)
		}
	})
	t.Run("documented layout is accepted", func(t *testing.T) {
		t.Parallel()
		m := vfs.NewMemFS()
		writeAt(t, m, name, 0, good)
		if p, b, ok, err := wal.LoadCheckpoint(m, "/ck"); err != nil || !ok || p != pos || string(b) != "payload" {
			t.Fatalf("Load = %v %q %v %v", p, b, ok, err)
		}
	})
}

// TestCheckpointCrashDuringSave cuts the power before every operation of a
// save: the result must always be the old checkpoint or the new one.
func TestCheckpointCrashDuringSave(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	old, next := wal.MakePos(1, 64), wal.MakePos(1, 128)
	if err := wal.SaveCheckpoint(f, "/ck", old, []byte("old")); err != nil {
		t.Fatal(err)
	}
	var snaps []*vfs.MemFS
	f.SetHook(func(vfs.Event) error { snaps = append(snaps, m.CrashWith(keepCurrent), m.Crash()); return nil })
	if err := wal.SaveCheckpoint(f, "/ck", next, []byte("new")); err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, m.Crash())
	sawNew := false
	for i, s := range snaps {
		pos, payload, ok, err := wal.LoadCheckpoint(s, "/ck")
		switch {
		case err != nil || !ok:
			t.Fatalf("snapshot %d: ok %v, %v", i, ok, err)
		case pos == old && string(payload) == "old":
		case pos == next && string(payload) == "new":
			sawNew = true
		default:
			t.Fatalf("snapshot %d: %v %q", i, pos, payload)
		}
	}
	if !sawNew {
		t.Fatal("the new checkpoint never became durable")
	}
}

func TestCheckpointSaveFailureKeepsPrevious(t *testing.T) {
	t.Parallel()
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync, vfs.OpRename, vfs.OpSyncDir} {
		m := vfs.NewMemFS()
		f := vfs.NewFaulty(m, nil)
		if err := wal.SaveCheckpoint(f, "/ck", 64, []byte("old")); err != nil {
			t.Fatal(err)
		}
		f.SetHook(vfs.FailNth(op, 1))
		if err := wal.SaveCheckpoint(f, "/ck", 128, []byte("new")); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("%v: Save = %v", op, err)
		}
		pos, payload, ok, err := wal.LoadCheckpoint(m.Crash(), "/ck")
		if err != nil || !ok || pos != 64 || string(payload) != "old" {
			t.Fatalf("%v: after failed save: %v %q %v %v", op, pos, payload, ok, err)
		}
	}
}
