package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestContainer builds the image with make image and runs it as these machines can
// (podman with runc and explicit limits; the default runtime may not set rlimits here):
// without a token it refuses to listen on all interfaces and says how to give one; with
// one it serves on a published port, passes its own HEALTHCHECK, stops gracefully on
// podman stop, and a new container on the same volume finds the message sent to the first.
func TestContainer(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	podman, err := exec.LookPath("podman")
	if err != nil {
		testkit.Missing(t, "the container image's test", "no podman in PATH", "apt-get install podman runc (make deps)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testkit.Missing(t, "the container image's test", "no runc in PATH", "apt-get install podman runc (make deps)")
	}
	name := fmt.Sprintf("okiba-test-%d", os.Getpid())
	image := "localhost/" + name + ":" + testVersion
	pod := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(podman, append([]string{"--runtime", "runc"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String() + errb.String(), fmt.Errorf("podman %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	// Its own DIST: make image links the binary again, and the other tests run the first.
	mk := exec.Command("make", "--no-print-directory", "-s", "-C", "../..", "image",
		"DIST="+t.TempDir(), "VERSION="+testVersion, "IMAGE="+image)
	mk.Env = cleanEnv()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { pod("rmi", "--force", image) })
	if _, err := pod("volume", "create", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod("volume", "rm", "--force", name) })
	limits := []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"}

	// No token: refused, with what to do.
	out, err := pod(append(append([]string{"run", "--rm"}, limits...), image)...)
	if err == nil || !strings.Contains(out, "refusing to listen on 0.0.0.0:7070 without authentication") || !strings.Contains(out, "OKIBA_AUTH_TOKEN") {
		t.Fatalf("an image run without a token: %v\n%s", err, out)
	}

	const token = "container-token-container-token"
	port := freePort(t)
	server := "http://127.0.0.1:" + port
	start := func(ctr string) {
		t.Helper()
		args := append([]string{"run", "--detach", "--name", ctr, "--publish", "127.0.0.1:" + port + ":7070",
			"--env", "OKIBA_AUTH_TOKEN=" + token, "--volume", name + ":/var/lib/okiba"}, limits...)
		if _, err := pod(append(args, image)...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pod("rm", "--force", "--time", "0", ctr) })
		testkit.Eventually(t, 20*time.Second, func() bool {
			return exec.Command(bin, "health", "--server", server).Run() == nil
		}, "the container's okiba to answer /healthz")
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), "OKIBA_SERVER="+server, "OKIBA_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("okiba %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	first := name + "-1"
	start(first)
	if out, err := pod("healthcheck", "run", first); err != nil {
		t.Fatalf("the image's HEALTHCHECK: %v\n%s", err, out)
	}
	if out, err := pod("exec", first, "/usr/local/bin/okiba", "version"); err != nil || !strings.Contains(out, "okiba "+testVersion) {
		t.Fatalf("okiba version in the container: %v\n%s", err, out)
	}
	cli("queue", "create", "kept")
	cli("send", "kept", "sent to the first container")
	if _, err := pod("stop", "--time", "40", first); err != nil {
		t.Fatal(err)
	}
	if code, err := pod("inspect", "--format", "{{.State.ExitCode}}", first); err != nil || code != "0" {
		t.Errorf("okiba exited with %q after podman stop (%v)", code, err)
	}
	logs, _ := exec.Command(podman, "logs", first).CombinedOutput() // the container's stderr on podman's
	contains(t, "the container's log", string(logs), `"msg":"okiba serving"`, `"version":"`+testVersion+`"`, `"msg":"okiba stopped"`)

	second := name + "-2"
	start(second)
	contains(t, "recv from the second container", cli("recv", "kept", "--ack"), "sent to the first container")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
