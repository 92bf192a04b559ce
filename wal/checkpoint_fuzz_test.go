package wal_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// FuzzLoadCheckpoint feeds arbitrary bytes as a checkpoint file: LoadCheckpoint never
// panics, and whatever it accepts is exactly a payload that SaveCheckpoint would write.
func FuzzLoadCheckpoint(f *testing.F) {
	m := vfs.NewMemFS()
	if err := wal.SaveCheckpoint(m, "/c", wal.MakePos(1, 32), []byte("state")); err != nil {
		f.Fatal(err)
	}
	good, err := vfs.ReadFile(m, "/c/checkpoint-0000000100000020.ckpt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewMemFS()
		fs.MkdirAll("/c", 0o755)
		file, _ := fs.OpenFile("/c/checkpoint-0000000100000020.ckpt", os.O_CREATE|os.O_RDWR, 0o644)
		file.WriteAt(data, 0)
		file.Close()
		pos, payload, ok, err := wal.LoadCheckpoint(fs, "/c")
		if err != nil || !ok {
			return
		}
		// Accepted: it must be what SaveCheckpoint writes for that payload.
		out := vfs.NewMemFS()
		if err := wal.SaveCheckpoint(out, "/c", pos, payload); err != nil {
			t.Fatal(err)
		}
		again, _ := vfs.ReadFile(out, "/c/checkpoint-0000000100000020.ckpt")
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted a checkpoint that differs from the canonical one for its payload")
		}
	})
}
