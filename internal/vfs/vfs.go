// Package vfs is the file-system seam under okiba's storage.
//
// Everything that okiba persists goes through [FS] and [File], so that the
// storage code can run unchanged on the real file system ([OS]), on an
// in-memory file system with strict power-loss semantics ([MemFS]), and under
// a fault injector ([Faulty]) that fails or tears chosen operations. Crash,
// fsync-failure and torn-write tests are written against these three.
//
// The interfaces are deliberately small: they hold exactly the operations a
// write-ahead log and its checkpoints need, with the durability contract of
// each spelled out, because a storage engine is only as correct as its
// assumptions about which bytes survive a power cut.
//
// This is an internal seam: it may change whenever the storage code needs it
// to.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrLocked is returned (wrapped) by [FS.Lock] when another holder, in this
// process or another, already holds the lock.
var ErrLocked = errors.New("vfs: already locked")

// FS is a file system as seen by okiba's storage.
//
// Durability contract (what [MemFS] enforces and what the real file systems
// okiba supports provide): the contents of a file are durable only up to its
// last successful [File.Sync]; a directory entry created, renamed or removed
// is durable only after a successful [FS.SyncDir] of the directory holding
// it. After a failed Sync or SyncDir nothing may be assumed, not even after a
// later successful one.
//
// Implementations are safe for concurrent use.
type FS interface {
	// OpenFile opens name with os.O_* flags. Only O_RDONLY, O_WRONLY,
	// O_RDWR, O_CREATE, O_EXCL and O_TRUNC are meaningful.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory. The removal is durable
	// after SyncDir of its directory.
	Remove(name string) error
	// Rename moves oldname to newname, atomically replacing any file
	// there. It is durable after SyncDir of the directories involved.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the entries of dir (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on name, creating the file if
	// needed, without waiting: it fails with an error wrapping ErrLocked
	// if another holder has it. Closing the returned Closer releases it.
	Lock(name string) (io.Closer, error)
	// Stat describes a file or directory.
	Stat(name string) (os.FileInfo, error)
}

// File is an open file. Positioned reads and writes only: there is no
// shared offset, so concurrent ReadAt and WriteAt on one File are safe.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's contents (and its size) durable. On Linux
	// this is fdatasync: metadata not needed to read the data back, such
	// as the modification time, is not flushed.
	Sync() error
	// Truncate changes the size of the file; growing fills with zeros.
	Truncate(size int64) error
	// Preallocate extends the file to size bytes of zeros, reserving the
	// space where the platform can (fallocate on Linux) so that later
	// writes inside that range do not fail for lack of space and do not
	// change the file's size. It is best effort where reservation is not
	// supported (then it only extends the size); a file already at least
	// size bytes long is left alone. Like any write, it is durable after
	// Sync.
	Preallocate(size int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
}

// OS is the real file system of the operating system.
var OS FS = osFS{}

// ReadFile reads a whole file.
func ReadFile(fsys FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if n, err := f.ReadAt(data, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, err
	}
	return data, nil
}

// WriteFile writes a whole file durably and atomically, by the rule for new files: a
// temporary file (path + ".tmp") is written and fsynced, renamed over path, and the
// directory fsynced. A crash leaves either the old file or the new one. The file's
// content is the pieces of data one after the other, so that a large file need not be
// one buffer.
func WriteFile(fsys FS, path string, perm os.FileMode, data ...[]byte) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	off := int64(0)
	for _, p := range data {
		if _, err := f.WriteAt(p, off); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		off += int64(len(p))
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return err
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("sync directory of %s: %w", path, err)
	}
	return nil
}
