//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own: the terminal's Ctrl-C goes to
// the foreground group, okiba's, and must not cut the running commands short — okiba
// stops them itself, after its drain.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate asks the command's process group to stop (SIGTERM): the command and what it
// started.
func terminate(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
}
