package vfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
)

// implementations returns every FS the conformance suite runs on, each with
// a fresh root directory to work in.
func implementations(t *testing.T) map[string]func(t *testing.T) (vfs.FS, string) {
	return map[string]func(t *testing.T) (vfs.FS, string){
		"OS":     func(t *testing.T) (vfs.FS, string) { return vfs.OS, t.TempDir() },
		"MemFS":  func(t *testing.T) (vfs.FS, string) { return vfs.NewMemFS(), "/root" },
		"Faulty": func(t *testing.T) (vfs.FS, string) { return vfs.NewFaulty(vfs.NewMemFS(), nil), "/root" },
		"FaultyOS": func(t *testing.T) (vfs.FS, string) {
			return vfs.NewFaulty(vfs.OS, nil), t.TempDir()
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for name, mk := range implementations(t) {
		// Each case makes a file system, or a directory of the OS's, of its own.
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("ReadWrite", func(t *testing.T) { t.Parallel(); testReadWrite(t, mk) })
			t.Run("TruncatePreallocate", func(t *testing.T) { t.Parallel(); testTruncatePreallocate(t, mk) })
			t.Run("DirOps", func(t *testing.T) { t.Parallel(); testDirOps(t, mk) })
			t.Run("Lock", func(t *testing.T) { t.Parallel(); testLock(t, mk) })
			t.Run("OpenFlags", func(t *testing.T) { t.Parallel(); testOpenFlags(t, mk) })
		})
	}
}

func mustMkdir(t *testing.T, fsys vfs.FS, dir string) {
	t.Helper()
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func testReadWrite(t *testing.T, mk func(*testing.T) (vfs.FS, string)) {
	fsys, root := mk(t)
	mustMkdir(t, fsys, root)
	name := filepath.Join(root, "a")
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("world"), 6); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello "), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 11)
	if n, err := f.ReadAt(got, 0); err != nil || n != 11 || string(got) != "hello world" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, got)
	}
	// A read past the end returns what there is and io.EOF.
	if n, err := f.ReadAt(make([]byte, 10), 6); n != 5 || err != io.EOF {
		t.Fatalf("short ReadAt = %d, %v; want 5, EOF", n, err)
	}
	if size, err := f.Size(); err != nil || size != 11 {
		t.Fatalf("Size = %d, %v", size, err)
	}
	fi, err := fsys.Stat(name)
	if err != nil || fi.Size() != 11 || fi.IsDir() {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
	// A gap left by a write beyond the end reads as zeros.
	if _, err := f.WriteAt([]byte{1}, 20); err != nil {
		t.Fatal(err)
	}
	gap := make([]byte, 9)
	if _, err := f.ReadAt(gap, 11); err != nil || !bytes.Equal(gap, make([]byte, 9)) {
		t.Fatalf("gap = %v, %v", gap, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(got, 0); err == nil {
		t.Fatal("ReadAt after Close succeeded")
	}
}

func testTruncatePreallocate(t *testing.T, mk func(*testing.T) (vfs.FS, string)) {
	fsys, root := mk(t)
	mustMkdir(t, fsys, root)
	f, err := fsys.OpenFile(filepath.Join(root, "p"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("abcdef"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Preallocate(4096); err != nil {
		t.Fatal(err)
	}
	if size, _ := f.Size(); size != 4096 {
		t.Fatalf("size after Preallocate = %d", size)
	}
	buf := make([]byte, 8)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "abcdef\x00\x00" {
		t.Fatalf("after Preallocate: %q, %v", buf, err)
	}
	if err := f.Preallocate(100); err != nil { // smaller: no-op
		t.Fatal(err)
	}
	if size, _ := f.Size(); size != 4096 {
		t.Fatalf("size after smaller Preallocate = %d", size)
	}
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(6); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, 6)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "abc\x00\x00\x00" {
		t.Fatalf("after shrink and regrow: %q, %v", buf, err)
	}
}

func testDirOps(t *testing.T, mk func(*testing.T) (vfs.FS, string)) {
	fsys, root := mk(t)
	dir := filepath.Join(root, "x", "y")
	mustMkdir(t, fsys, dir)
	mustMkdir(t, fsys, dir) // idempotent
	for _, n := range []string{"c", "a", "b"} {
		f, err := fsys.OpenFile(filepath.Join(dir, n), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	mustMkdir(t, fsys, filepath.Join(dir, "sub"))
	names, err := fsys.ReadDir(dir)
	if err != nil || !slices.Equal(names, []string{"a", "b", "c", "sub"}) {
		t.Fatalf("ReadDir = %v, %v", names, err)
	}
	if err := fsys.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(filepath.Join(dir, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second Remove = %v, want ErrNotExist", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	names, _ = fsys.ReadDir(dir)
	if !slices.Equal(names, []string{"c", "sub"}) {
		t.Fatalf("ReadDir after rename/remove = %v", names)
	}
	if _, err := fsys.Stat(filepath.Join(dir, "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat of renamed-away file = %v", err)
	}
	if fi, err := fsys.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Stat(dir) = %v, %v", fi, err)
	}
	if _, err := fsys.OpenFile(filepath.Join(root, "nope", "f"), os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("create in a missing directory = %v", err)
	}
	if err := fsys.Remove(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
}

func testLock(t *testing.T, mk func(*testing.T) (vfs.FS, string)) {
	fsys, root := mk(t)
	mustMkdir(t, fsys, root)
	name := filepath.Join(root, "LOCK")
	l1, err := fsys.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Lock(name); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Lock = %v, want ErrLocked", err)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := fsys.Lock(name)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l2.Close()
}

func testOpenFlags(t *testing.T, mk func(*testing.T) (vfs.FS, string)) {
	fsys, root := mk(t)
	mustMkdir(t, fsys, root)
	name := filepath.Join(root, "f")
	if _, err := fsys.OpenFile(name, os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open missing = %v", err)
	}
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := fsys.Stat(name); err != nil || fi.Size() != 4 {
		t.Fatalf("Stat before O_TRUNC = %v, %v; want 4 bytes", fi, err) // else O_TRUNC below proves nothing
	}
	if _, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on existing = %v", err)
	}
	r, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write through a read-only handle succeeded")
	}
	r.Close()
	f, err = fsys.OpenFile(name, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := f.Size(); size != 0 {
		t.Fatalf("size after O_TRUNC = %d", size)
	}
	f.Close()
}
