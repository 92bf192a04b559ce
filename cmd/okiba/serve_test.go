package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

func TestServeRefusesNonLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	h := &harness{t: t, env: map[string]string{"OKIBA_DATA": dir}}
	for _, args := range [][]string{
		{"serve", "--addr", "0.0.0.0:0"},
		{"serve", "--addr", ":0"},
		{"serve", "--addr", "192.0.2.1:7070"},
	} {
		r := h.fails(2, args...)
		contains(t, "stderr", r.err, "okiba serve: refusing to listen on", "without authentication", "--auth-token-file", "--insecure")
	}
	h.env["OKIBA_ADDR"] = "0.0.0.0:0" // the environment is checked the same way
	h.fails(2, "serve")
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused serve created the data directory: %v", err)
	}
	h.fails(2, "serve", "--addr", "127.0.0.1:0", "--auth-token", "a", "--auth-token-file", "b")
	h.fails(2, "serve", "--addr", "nonsense")

}

func TestServeRefusesMalformedBrowserFlags(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	h := &harness{t: t, env: map[string]string{"OKIBA_DATA": dir}}
	for _, c := range []struct {
		args     []string
		mentions []string
	}{
		{[]string{"--cors-origins", "https://app.example.com/app"}, []string{"--cors-origins", `"https://app.example.com/app"`, "scheme://host[:port]"}},
		{[]string{"--cors-origins", "https://app.example.com/"}, []string{"--cors-origins", "path"}},
		{[]string{"--cors-origins", "app.example.com"}, []string{"--cors-origins", "scheme"}},
		{[]string{"--cors-origins", "*"}, []string{"--cors-origins", "listed origins only"}},
		{[]string{"--cors-origins", "https://a.example,,https://b.example"}, []string{"--cors-origins", "element 2", "empty"}},
		{[]string{"--cors-origins", "https://a.example,"}, []string{"--cors-origins", "empty"}},
		{[]string{"--allowed-hosts", "broker.lan:7070"}, []string{"--allowed-hosts", `"broker.lan:7070"`, "without a scheme, port or path"}},
		{[]string{"--allowed-hosts", "http://broker.lan"}, []string{"--allowed-hosts", "not a host name"}},
		{[]string{"--allowed-hosts", "broker.lan, ,other.lan"}, []string{"--allowed-hosts", "empty"}},
	} {
		r := h.fails(2, append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)
		contains(t, "stderr", r.err, c.mentions...)
	}
	// The environment is checked the same way.
	h.env["OKIBA_CORS_ORIGINS"] = "ftp://app.example.com"
	contains(t, "stderr", h.fails(2, "serve", "--addr", "127.0.0.1:0").err, "--cors-origins", "http or https")
	delete(h.env, "OKIBA_CORS_ORIGINS")
	h.env["OKIBA_ALLOWED_HOSTS"] = "a..b"
	contains(t, "stderr", h.fails(2, "serve", "--addr", "127.0.0.1:0").err, "--allowed-hosts", `"a..b"`)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused serve created the data directory: %v", err)
	}

}

// TestServeBrowserFlags: --cors-origins and --allowed-hosts (or their environment
// variables) reach the server, and the default refusals hold.
func TestServeBrowserFlags(t *testing.T) {
	t.Parallel()
	const app = "https://app.example.com"
	for _, viaEnv := range []bool{false, true} {
		env := map[string]string{"OKIBA_DATA": t.TempDir()}
		args := []string{"--addr", "127.0.0.1:0"}
		if viaEnv {
			env["OKIBA_CORS_ORIGINS"], env["OKIBA_ALLOWED_HOSTS"] = app+", http://localhost:5173", "broker.lan,*.corp.example"
		} else {
			args = append(args, "--cors-origins", app+",http://localhost:5173", "--allowed-hosts", "broker.lan, *.corp.example")
		}
		url, log, _ := serveInProcess(t, env, args...)
		port := url[strings.LastIndex(url, ":")+1:]
		get := func(host string, hdr ...string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", url+"/v1/queues", nil)
			if host != "" {
				req.Host = host
			}
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		for host, want := range map[string]int{
			"": 200, "broker.lan:" + port: 200, "x.corp.example:" + port: 200, "localhost:" + port: 200,
			"evil.test:" + port: 403, "corp.example:" + port: 403,
		} {
			if got := get(host).StatusCode; got != want {
				t.Errorf("env %v: Host %q: %d, want %d\n%s", viaEnv, host, got, want, log.String())
			}
		}
		if r := get("", "Origin", app, "Sec-Fetch-Site", "cross-site"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != app {
			t.Errorf("env %v: listed origin: %d %v", viaEnv, r.StatusCode, r.Header)
		}
		if r := get("", "Origin", "http://localhost:5173"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" {
			t.Errorf("env %v: second listed origin: %d %v", viaEnv, r.StatusCode, r.Header)
		}
		if r := get("", "Origin", "http://evil.example"); r.StatusCode != 403 {
			t.Errorf("env %v: foreign origin: %d", viaEnv, r.StatusCode)
		}
	}
}

var urlRE = regexp.MustCompile(`msg="okiba serving" url=(\S+)`)

// serveInProcess runs okiba serve in-process until the returned stop is called, and
// returns the URL it listens on (with its host replaced by 127.0.0.1) and its log.
func serveInProcess(t *testing.T, env map[string]string, args ...string) (url string, log *testkit.SyncBuffer, stop func() int) {
	t.Helper()
	log = &testkit.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	a := &app{Stdout: io.Discard, Stderr: log, Stdin: strings.NewReader(""), Getenv: getenv(env)}
	done := make(chan int, 1)
	go func() { done <- a.run(ctx, append([]string{"serve"}, args...)) }()
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("serve did not stop; log:\n%s", log.String())
		}
		return -1
	}
	t.Cleanup(func() { stop() })
	testkit.Eventually(t, 15*time.Second, func() bool {
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d:\n%s", code, log.String())
		default:
		}
		m := urlRE.FindStringSubmatch(log.String())
		if m == nil {
			return false
		}
		url = "http://127.0.0.1:" + m[1][strings.LastIndex(m[1], ":")+1:]
		return true
	}, "serve to listen")
	return url, log, stop
}

func TestServeInProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Non-loopback with --insecure: allowed, and the log says so. Address and data
	// directory come from the environment.
	url, log, stop := serveInProcess(t, map[string]string{"OKIBA_ADDR": "0.0.0.0:0", "OKIBA_DATA": dir}, "--insecure")
	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url}}
	h.ok("queue", "create", "q")
	h.send("q", "kept")
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, log.String())
	}
	contains(t, "log", log.String(), "level=WARN msg=\"authentication off on a non-loopback address (--insecure)", "--allowed-hosts",
		"records_replayed=", "recovery_time=", "shutting down", "okiba stopped")

	// Restart on the same directory with a token from a file: the queue is still there and
	// /v1 needs the token.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-s3cret-s3cret-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, log, stop = serveInProcess(t, map[string]string{"OKIBA_DATA": dir}, "--addr", "0.0.0.0:0", "--auth-token-file", tokenFile)
	h.env["OKIBA_SERVER"] = url
	r := h.fails(1, "queue", "list")
	contains(t, "stderr", r.err, "unauthorized")
	h.env["OKIBA_TOKEN"] = "s3cret-s3cret-s3cret-s3cret"
	if q := h.queue("q"); q.Stats.Ready != 1 {
		t.Errorf("after restart: %+v", q.Stats)
	}
	// The console and /metrics are served too, behind the token: a browser is sent to
	// sign in, Prometheus brings the token.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Header.Set("Accept", "text/html")
	if resp, err := noRedirect.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Errorf("console without a session: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("GET", url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `okiba_queue_messages{queue="q",state="ready"} 1`) {
			t.Errorf("GET /metrics: %s\n%.300s", resp.Status, body)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, log.String())
	}
	contains(t, "log", log.String(), "authentication on", "queues=2 messages=1", "msg=console url=http://", "metrics for Prometheus")

	// A serve whose context is already done starts and stops at once; --log-level error
	// keeps the info lines out.
	var logBuf testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := &app{Stdout: io.Discard, Stderr: &logBuf, Getenv: getenv(nil)}
	if code := a.run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--log-level", "error"}); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, logBuf.String())
	}
	if s := logBuf.String(); s != "" {
		t.Errorf("--log-level error still logs:\n%s", s)
	}
}

// TestServeBinary builds the real binary, runs okiba serve as a child process on a free
// port, talks to it with the binary, and stops it with SIGTERM.
func TestServeBinary(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	baseEnv := cleanEnv()

	srv := startBinary(t, bin, baseEnv, "serve", "--addr", "127.0.0.1:0", "--data", data)
	env := append(baseEnv, "OKIBA_SERVER="+srv.url)
	testkit.Eventually(t, 15*time.Second, func() bool {
		resp, err := http.Get(srv.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "/healthz to answer 200")

	runBin := func(stdin string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	if out, errs, code := runBin("", "health", "--json"); code != 0 || !strings.Contains(out, `"version": "`+testVersion+`"`) {
		t.Fatalf("health --json: %d %s %s", code, out, errs)
	}
	if out, errs, code := runBin("", "queue", "create", "q"); code != 0 || !strings.Contains(out, "created queue q") {
		t.Fatalf("queue create: %d %s %s", code, out, errs)
	}
	if out, errs, code := runBin("from stdin", "send", "q"); code != 0 || !idRE.MatchString(strings.TrimSpace(out)) {
		t.Fatalf("send: %d %s %s", code, out, errs)
	}
	out, errs, code := runBin("", "recv", "q", "--json", "--ack")
	if code != 0 || !strings.Contains(out, `"body":"from stdin"`) {
		t.Fatalf("recv: %d %s %s", code, out, errs)
	}
	if _, errs, code := runBin("", "ack", "q", "bogus"); code != 1 || !strings.Contains(errs, "invalid_receipt") {
		t.Fatalf("ack of a bogus receipt: %d %s", code, errs)
	}
	if _, errs, code := runBin("", "send"); code != 2 || !strings.Contains(errs, "missing arguments") {
		t.Fatalf("usage error: %d %s", code, errs)
	}

	// A second broker on the same data directory is refused while the first runs.
	second := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", data)
	second.Env = baseEnv
	secondOut, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(secondOut), "data directory is in use by another okiba process") {
		t.Fatalf("second serve on the same data: %v\n%s", err, secondOut)
	}

	// A long poll in progress does not hold the shutdown.
	poll := exec.Command(bin, "recv", "q", "--wait", "60s")
	poll.Env = env
	if err := poll.Start(); err != nil {
		t.Fatal(err)
	}
	pollDone := make(chan error, 1)
	go func() { pollDone <- poll.Wait() }()

	code, log := srv.stop(t)
	if code != 0 {
		t.Fatalf("serve exited with %d after SIGTERM:\n%s", code, log)
	}
	contains(t, "serve log", log, `msg="okiba serving"`, "version="+testVersion, "go="+runtime.Version(), "queues=0", "shutting down", `msg="okiba stopped"`)
	select {
	case <-pollDone:
	case <-time.After(20 * time.Second):
		poll.Process.Kill()
		t.Fatal("the long poll outlived the server's shutdown")
	}

	// The next start recovers the queue from the final checkpoint.
	srv = startBinary(t, bin, baseEnv, "serve", "--addr", "127.0.0.1:0", "--data", data)
	env = append(baseEnv, "OKIBA_SERVER="+srv.url)
	if out, errs, code := runBin("", "queue", "list"); code != 0 || !strings.Contains(out, "q-dlq") {
		t.Fatalf("queue list after restart: %d %s %s", code, out, errs)
	}
	if code, log := srv.stop(t); code != 0 || !strings.Contains(log, "queues=2") {
		t.Fatalf("second run: exit %d\n%s", code, log)
	}
}

// cleanEnv is the test's environment without OKIBA_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OKIBA_") {
			env = append(env, kv)
		}
	}
	return env
}

type childServer struct {
	cmd  *exec.Cmd
	url  string
	log  *testkit.SyncBuffer
	done chan struct{}
}

// startBinary starts okiba serve and waits for its start-up line.
func startBinary(t *testing.T, bin string, env []string, args ...string) *childServer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &childServer{cmd: cmd, log: &testkit.SyncBuffer{}, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.log.Write([]byte(sc.Text() + "\n"))
			if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	select {
	case s.url = <-urls:
	case <-s.done:
		t.Fatalf("serve exited before listening:\n%s", s.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", s.log.String())
	}
	return s
}

// stop sends SIGTERM and returns the exit code and the log.
func (s *childServer) stop(t *testing.T) (int, string) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		<-s.done // the log is complete before Wait closes the pipe
		waited <- s.cmd.Wait()
	}()
	select {
	case err := <-waited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), s.log.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, s.log.String()
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("serve did not exit after SIGTERM:\n%s", s.log.String())
	}
	return -1, ""
}

// TestServeConfigPrecedence: a setting comes from the file, unless the environment gives
// it, unless a flag does; a file with a key okiba does not know is refused.
func TestServeConfigPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "okiba.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"addr": "127.0.0.1:0", "data": "` + filepath.Join(dir, "from-file") + `", "log_level": "debug",
		"storage": {"cache_bytes": "1MiB"}, "sqs": {"region": "eu-west-1"}}`)
	for _, c := range []struct {
		env  map[string]string
		args []string
		data string
	}{
		{map[string]string{"OKIBA_CONFIG": file}, nil, "from-file"},
		{map[string]string{"OKIBA_CONFIG": file, "OKIBA_DATA": filepath.Join(dir, "from-env")}, nil, "from-env"},
		{map[string]string{"OKIBA_DATA": filepath.Join(dir, "from-env")}, []string{"--config", file, "--data", filepath.Join(dir, "from-flag")}, "from-flag"},
	} {
		_, log, stop := serveInProcess(t, c.env, c.args...)
		stop()
		contains(t, "log", log.String(), "data="+filepath.Join(dir, c.data), "level=DEBUG", "region=eu-west-1")
	}
	h := &harness{t: t, env: map[string]string{}}
	write(`{"addr": "127.0.0.1:0", "data_dir": "/tmp/x"}`)
	contains(t, "stderr", h.fails(1, "serve", "--config", file).err, "unknown field", "data_dir")
	write(`{"addr": "127.0.0.1:0", "storage": {"segment_size": "1KiB"}}`)
	contains(t, "stderr", h.fails(2, "serve", "--config", file).err, "--segment-size", "2MiB")
}

// --print-config shows what the file, the environment and the flags add up to, with the
// secrets redacted and the files holding them named.
func TestServePrintConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "okiba.json")
	os.WriteFile(file, []byte(`{"principals": [{"name": "w", "secret": "worker-secret-worker-secret", "grants": ["send queue:*"]},
		{"name": "v", "secret_file": "/etc/okiba/v", "grants": ["browse *"]}], "sqs": {"credentials": {"AKID": "sqs-secret-sqs-secret-sqs"}}}`), 0o600)
	h := &harness{t: t, env: map[string]string{"OKIBA_AUTH_TOKEN": "env-token-env-token-env-token"}}
	out := h.ok("serve", "--config", file, "--print-config", "--audit-log", "/var/log/okiba.audit")
	contains(t, "print-config", out, `"auth_token": "<redacted>"`, `"secret": "<redacted>"`, `"secret_file": "/etc/okiba/v"`,
		`"AKID": "<redacted>"`, `"audit_log": "/var/log/okiba.audit"`, `"addr": "127.0.0.1:7070"`)
	for _, secret := range []string{"env-token", "worker-secret", "sqs-secret"} {
		if strings.Contains(out, secret) {
			t.Errorf("--print-config shows a secret (%s):\n%s", secret, out)
		}
	}
}

// --log-format json writes one JSON object a line, for journald and container log
// collectors; an unknown format is a usage error before anything starts.
func TestServeLogFormat(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	var logBuf testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // serve starts and stops at once
	a := &app{Stdout: io.Discard, Stderr: &logBuf, Getenv: getenv(map[string]string{"OKIBA_LOG_FORMAT": "json"})}
	if code := a.run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", dir}); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, logBuf.String())
	}
	var serving bool
	for _, line := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON (%v): %s", err, line)
		}
		if rec["msg"] == "okiba serving" {
			serving = rec["version"] == "devel" && rec["go"] == runtime.Version() && rec["level"] == "INFO"
		}
	}
	if !serving {
		t.Errorf("no start-up line with the version:\n%s", logBuf.String())
	}

	h := &harness{t: t, env: map[string]string{"OKIBA_DATA": filepath.Join(t.TempDir(), "refused")}}
	contains(t, "--log-format xml", h.fails(2, "serve", "--addr", "127.0.0.1:0", "--log-format", "xml").err, "--log-format must be text or json")
	contains(t, "print-config", h.ok("serve", "--print-config"), `"log_format": "text"`)
}
