//go:build unix

package torture

import "syscall"

// freeze stops the broker's process, as a paused virtual machine or a long stall would;
// thaw lets it run again.
func (s *server) freeze() { s.signal(syscall.SIGSTOP) }
func (s *server) thaw()   { s.signal(syscall.SIGCONT) }
