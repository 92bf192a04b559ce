//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package vfs

import (
	"errors"
	"fmt"
	"os"
)

// flock is not implemented on this platform: refusing is safer than running
// two processes on one data directory unprotected.
func flock(f *os.File) error {
	return fmt.Errorf("file locking: %w", errors.ErrUnsupported)
}
