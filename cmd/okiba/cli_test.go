package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// harness runs okiba commands in-process against a real broker and HTTP server on a
// loopback port.
type harness struct {
	t   *testing.T
	srv *okibatest.Server
	env map[string]string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := okibatest.New(t, okibatest.Options{})
	return &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL}}
}

type result struct {
	out, err string
	code     int
}

type runOpts struct {
	ctx       context.Context
	stdin     string
	stdinTTY  bool
	stderrTTY bool
	env       map[string]string // replaces the harness's environment when set
}

func (h *harness) runWith(o runOpts, args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	env := h.env
	if o.env != nil {
		env = o.env
	}
	a := &app{
		Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(o.stdin),
		Getenv:   getenv(env),
		StdinTTY: o.stdinTTY, StderrTTY: o.stderrTTY,
	}
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := a.run(ctx, args)
	return result{out: out.String(), err: errb.String(), code: code}
}

func (h *harness) run(args ...string) result {
	h.t.Helper()
	return h.runWith(runOpts{}, args...)
}

// ok runs a command that must succeed and returns its stdout.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("okiba %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs a command that must exit with code and returns its result.
func (h *harness) fails(code int, args ...string) result {
	h.t.Helper()
	return h.failsWith(runOpts{}, code, args...)
}

func (h *harness) failsWith(o runOpts, code int, args ...string) result {
	h.t.Helper()
	r := h.runWith(o, args...)
	if r.code != code {
		h.t.Fatalf("okiba %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.out, r.err)
	}
	return r
}

func (h *harness) queue(name string) api.Queue {
	h.t.Helper()
	var q api.Queue
	if err := json.Unmarshal([]byte(h.ok("queue", "get", name, "--json")), &q); err != nil {
		h.t.Fatalf("queue get --json: %v", err)
	}
	return q
}

func (h *harness) send(queue string, bodies ...string) []string {
	h.t.Helper()
	var ids []string
	for _, b := range bodies {
		ids = append(ids, strings.TrimSpace(h.ok("send", queue, b)))
	}
	return ids
}

// recvJSON receives up to max messages with --json and decodes them.
func (h *harness) recvJSON(queue string, extra ...string) []recvJSON {
	h.t.Helper()
	return decodeLines[recvJSON](h.t, h.ok(append([]string{"recv", queue, "--json"}, extra...)...))
}

func decodeLines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func matches(t *testing.T, what, s, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		t.Errorf("%s does not match %s:\n%s", what, re, s)
	}
}

// getenv is the environment of an app under test: env, with GOGC set unless env says
// otherwise. With GOGC set, as an operator may set it, okiba serve leaves the garbage
// collector's pace alone: that setting is process-wide (internal/gcpace), and the tests
// that serve in-process at once would set and restore it over one another.
func getenv(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok || k != "GOGC" {
			return v
		}
		return "100"
	}
}

// ---------------------------------------------------------------------------------------

func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	a := &app{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	for _, tc := range []struct {
		args  []string
		pos   []string
		group string
	}{
		{[]string{"q", "hello", "--group", "g"}, []string{"q", "hello"}, "g"},
		{[]string{"--group=g", "q", "hello"}, []string{"q", "hello"}, "g"},
		{[]string{"q", "-group", "g", "hello"}, []string{"q", "hello"}, "g"},
		{[]string{"q", "--", "--group", "g"}, []string{"q", "--group", "g"}, ""},
		{[]string{"q", "-"}, []string{"q", "-"}, ""},
	} {
		f := a.flags("send", "", "")
		group := f.String("group", "", "")
		pos, err := f.parse(tc.args)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if strings.Join(pos, "|") != strings.Join(tc.pos, "|") || *group != tc.group {
			t.Errorf("%q: positional %q group %q, want %q and %q", tc.args, pos, *group, tc.pos, tc.group)
		}
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512KiB": 512 << 10, "64MiB": 64 << 20, "2GiB": 2 << 30, "10B": 10} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "64MB", "-1", "1.5MiB", "MiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted %d", in, b)
		}
	}
	if s := byteSize(64 << 20); s.String() != "64MiB" {
		t.Errorf("String = %s", s.String())
	}
}

func TestUsageErrorsAndHelp(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}

	r := h.fails(2)
	contains(t, "stderr", r.err, "Usage: okiba COMMAND", "serve", "dlq")
	r = h.fails(2, "frobnicate")
	contains(t, "stderr", r.err, `unknown command "frobnicate"`)
	r = h.fails(2, "send")
	contains(t, "stderr", r.err, "okiba send: missing arguments", "Run 'okiba send -h'")
	r = h.fails(2, "send", "q", "a", "b")
	contains(t, "stderr", r.err, `unexpected argument "b"`)
	r = h.fails(2, "recv", "q", "--bogus")
	contains(t, "stderr", r.err, "okiba recv: unknown flag --bogus\n")
	// A near miss names what was meant: commands, subcommands, flags (a swap of two
	// letters is one edit; a unique prefix is enough).
	contains(t, "stderr", h.fails(2, "serv").err, `unknown command "serv" (did you mean "serve"?)`)
	contains(t, "stderr", h.fails(2, "help", "qeue").err, `(did you mean "queue"?)`)
	contains(t, "stderr", h.fails(2, "queue", "lsit").err, `okiba queue: unknown subcommand "lsit" (did you mean "list"?)`)
	contains(t, "stderr", h.fails(2, "send", "q", "x", "--dealy", "1s").err, "unknown flag --dealy (did you mean --delay?)")
	contains(t, "stderr", h.fails(2, "recv", "q", "--vis", "1s").err, "unknown flag --vis (did you mean --visibility?)")
	if r := h.fails(2, "xyzzy"); strings.Contains(r.err, "did you mean") {
		t.Errorf("a suggestion for a name close to none: %s", r.err)
	}
	r = h.fails(2, "recv", "q", "--max", "0")
	contains(t, "stderr", r.err, "--max must be between 1 and 1000")
	r = h.fails(2, "recv", "q", "--wait", "2m")
	contains(t, "stderr", r.err, "--wait must be between 0s and 60s")
	r = h.fails(2, "queue")
	contains(t, "stderr", r.err, "Subcommands:", "purge")
	r = h.fails(2, "queue", "frob")
	contains(t, "stderr", r.err, `okiba queue: unknown subcommand "frob"`)
	r = h.fails(2, "queue", "update", "q")
	contains(t, "stderr", r.err, "nothing to update")
	r = h.fails(2, "queue", "create", "q", "--max-bytes", "lots")
	contains(t, "stderr", r.err, `"lots" is not a size`)
	r = h.fails(2, "extend", "q", "r1")
	contains(t, "stderr", r.err, "--visibility is required")
	r = h.fails(2, "deadletter", "q", "r1")
	contains(t, "stderr", r.err, "--reason is required")
	r = h.fails(2, "ack", "q")
	contains(t, "stderr", r.err, "missing arguments: okiba ack QUEUE RECEIPT...")
	r = h.fails(2, "queue", "list", "--server", "localhost:7070")
	contains(t, "stderr", r.err, "must look like http://host:port")
	r = h.fails(2, "serve", "--log-level", "loud")
	contains(t, "stderr", r.err, "--log-level must be debug, info, warn or error")

	// Help on every command and subcommand, three ways.
	contains(t, "help", h.ok("--help"), "Commands:")
	contains(t, "help", h.ok("help"), "Commands:")
	for _, e := range h.commandsApp().commands() {
		out := h.ok(e.name, "-h")
		if !strings.Contains(out, "Usage:") && !strings.Contains(out, "Commands:") {
			t.Errorf("okiba %s -h has no usage:\n%s", e.name, out)
		}
	}
	for _, g := range []string{"queue", "dlq", "topic", "subscription", "group", "principal"} {
		grp := h.commandsApp()
		var subs []entry
		for _, e := range grp.commands() {
			if e.name == g {
				subs = e.new(grp, g).(*group).subs
			}
		}
		for _, s := range subs {
			contains(t, g+" "+s.name+" -h", h.ok(g, s.name, "-h"), "Usage: okiba "+g+" "+s.name)
			contains(t, "help "+g+" "+s.name, h.ok("help", g, s.name), "Usage: okiba "+g+" "+s.name, "Examples:")
			contains(t, g+" help "+s.name, h.ok(g, "help", s.name), "Usage: okiba "+g+" "+s.name)
		}
	}
	contains(t, "send --help", h.ok("send", "--help"), "Usage: okiba send QUEUE [BODY]", "--dedup-id ID", "Examples:")
	h.fails(2, "help", "nope")
	matches(t, "version", h.ok("version"), `^okiba \S+.*data format \d+, go`)
	matches(t, "--version", h.ok("--version"), `^okiba `)
}

func (h *harness) commandsApp() *app { return &app{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}} }

func TestServerUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": "http://" + addr}}
	r := h.fails(1, "queue", "list")
	contains(t, "stderr", r.err, "okiba queue list: cannot reach the okiba server", "OKIBA_SERVER")
}

func TestTokenFromFlagOrEnvironment(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{Token: "s3cret-s3cret-s3cret-s3cret"})
	h := &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL}}
	r := h.fails(1, "queue", "list")
	contains(t, "stderr", r.err, "okiba queue list: unauthorized:", "--token or OKIBA_TOKEN")
	h.ok("queue", "create", "q", "--token", "s3cret-s3cret-s3cret-s3cret")
	h.env["OKIBA_TOKEN"] = "s3cret-s3cret-s3cret-s3cret"
	contains(t, "list", h.ok("queue", "list"), "q")
	h.env["OKIBA_TOKEN"] = "wrong"
	h.fails(1, "queue", "list")
	contains(t, "list", h.ok("queue", "list", "--token", "s3cret-s3cret-s3cret-s3cret"), "q") // the flag wins
	// The server flag wins over the environment too.
	h.env["OKIBA_SERVER"] = "http://127.0.0.1:1"
	contains(t, "list", h.ok("queue", "list", "--token", "s3cret-s3cret-s3cret-s3cret", "--server", srv.URL), "q")
}

// A queue that is not found names the closest one the server has.
func TestQueueNotFoundSuggestsTheName(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "orders")
	contains(t, "stderr", h.fails(1, "send", "ordres", "x").err, "queue_not_found", `did you mean "orders"?`)
	if r := h.fails(1, "send", "zzzzzzzz", "x"); strings.Contains(r.err, "did you mean") {
		t.Fatalf("a suggestion for a name close to none: %s", r.err)
	}
}
