//go:build unix

package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

// TestConsumeBinaryCtrlC presses Ctrl-C as a terminal does — SIGINT to the whole
// foreground process group — on the real binary while its command runs: the command,
// in a group of its own, finishes, its message is acked, and okiba exits 0.
func TestConsumeBinaryCtrlC(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	h := newHarness(t)
	h.ok("queue", "create", "jobs")
	h.send("jobs", "long")
	cmd := exec.Command(bin, "consume", "jobs", "--", "sh", "-c", `echo started; sleep 1; echo finished`)
	cmd.Env = append(cleanEnv(), "OKIBA_SERVER="+h.srv.URL)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the terminal's foreground group
	var out, errb testkit.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Contains(out.String(), "started") }, "the command to start")
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("okiba consume after Ctrl-C: %v\n%s", err, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("okiba consume did not stop after Ctrl-C:\n%s", errb.String())
	}
	contains(t, "stdout", out.String(), "finished")
	if q := h.queue("jobs"); q.Stats.Acked != 1 || q.Stats.Ready+q.Stats.InFlight != 0 {
		t.Errorf("after Ctrl-C: %+v\n%s", q.Stats, errb.String())
	}
}
