package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/testkit"
)

// TestSystemdUnit checks deploy/okiba.service with systemd's own parser against the
// release binary: any complaint fails (systemd-analyze verify only warns, exit 0, about
// values it ignores), the hardening keeps the exposure score at 2.0 or better, and okiba
// accepts the command line and environment the unit gives it.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testkit.Missing(t, "the systemd unit's check", "no systemd-analyze in PATH", "apt-get install systemd (make deps)")
	}
	unit, err := os.ReadFile("../../deploy/okiba.service")
	if err != nil {
		t.Fatal(err)
	}
	const installed = "/usr/local/bin/okiba"
	if !bytes.Contains(unit, []byte("ExecStart="+installed+" ")) {
		t.Fatalf("the unit's ExecStart does not run %s", installed)
	}
	path := filepath.Join(t.TempDir(), "okiba.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte(installed), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(analyze, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if _, stderr, err := run("verify", path); err != nil || stderr != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, stderr)
	}
	if out, stderr, err := run("security", "--offline=yes", "--threshold=20", path); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v)\n%s%s", err, lastLines(out, 3), stderr)
	}

	// What systemd would start: ExecStart with Environment=, here asked for its
	// configuration instead of serving.
	var args []string
	env := cleanEnv()
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			args = strings.Fields(v)[1:]
		}
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			env = append(env, v)
		}
	}
	cmd := exec.Command(bin, append(args, "--print-config")...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("okiba %v --print-config: %v", args, err)
	}
	var cfg struct {
		Data      string `json:"data"`
		Addr      string `json:"addr"`
		LogFormat string `json:"log_format"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil || cfg.Data != "/var/lib/okiba" || cfg.LogFormat != "json" || cfg.Addr != "127.0.0.1:7070" {
		t.Errorf("the unit's okiba would run with %+v (%v), want data in its StateDirectory, JSON logs, loopback:\n%s", cfg, err, out)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}
