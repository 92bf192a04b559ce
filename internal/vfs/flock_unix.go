//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package vfs

import (
	"os"
	"syscall"
)

// flock takes flock(2) LOCK_EX|LOCK_NB on f. The lock belongs to the open
// file description, so it conflicts with every other open of the same file,
// in this process too, and it is released when f is closed, including when
// the process dies.
func flock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr == syscall.EWOULDBLOCK {
		return ErrLocked
	}
	return serr
}
