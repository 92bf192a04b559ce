package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// osFS implements FS with package os. It holds no state.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error {
	return os.MkdirAll(dir, perm)
}
func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // already sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// SyncDir fsyncs the directory itself, which is what makes entries created,
// renamed or removed in it survive a power loss on Linux file systems.
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return d.Close()
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return &osLock{f: f}, nil
}

// osLock releases its flock by closing the descriptor that holds it.
type osLock struct{ f *os.File }

func (l *osLock) Close() error { return l.f.Close() }

// osFile adapts *os.File. Sync and Preallocate are platform-specific (see
// os_linux.go and os_other.go).
type osFile struct{ f *os.File }

func (f *osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f *osFile) Close() error                             { return f.f.Close() }
func (f *osFile) Truncate(size int64) error                { return f.f.Truncate(size) }
func (f *osFile) Sync() error                              { return datasync(f.f) }

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f *osFile) Preallocate(size int64) error {
	cur, err := f.Size()
	if err != nil {
		return err
	}
	if cur >= size {
		return nil
	}
	return preallocate(f.f, cur, size)
}

// Chmod changes a file's or directory's permissions (Tighten).
func (osFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(name, mode) }

// Private modes of okiba's files: a data directory holds every message body, so only
// its owner may read it (the umask may take more away, never add).
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// Tighten makes dir and everything under it private (DirMode, FileMode) on a file
// system that has permissions (the real one): data directories made by okiba before
// it created them private are fixed when they are next opened. It does nothing on
// others.
func Tighten(fsys FS, dir string) error {
	ch, ok := fsys.(interface {
		Chmod(name string, mode os.FileMode) error
	})
	if !ok {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // not followed, not changed: a link points outside okiba's files
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := FileMode
		if d.IsDir() {
			want = DirMode
		}
		if info.Mode().Perm()&^want != 0 {
			return ch.Chmod(path, info.Mode().Perm()&want)
		}
		return nil
	})
}
