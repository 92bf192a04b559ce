//go:build !linux

package vfs

import "os"

// datasync falls back to os.File.Sync, which is fsync(2) on most systems and
// fcntl(F_FULLFSYNC) on macOS.
func datasync(f *os.File) error { return f.Sync() }

// preallocate only extends the file: there is no portable space reservation.
func preallocate(f *os.File, cur, size int64) error { return f.Truncate(size) }
