//go:build !unix

package main

import "os/exec"

// Without process groups, the command shares okiba's console, and a Ctrl-C reaches both.
func ownProcessGroup(cmd *exec.Cmd) {}

// terminate kills the command: there is no SIGTERM to ask it first.
func terminate(cmd *exec.Cmd) { cmd.Process.Kill() }
