package main

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

var idRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestSend(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "q")

	// From the argument, flags after the positional arguments.
	id1 := strings.TrimSpace(h.ok("send", "q", "hello", "--group", "g1", "--header", "k=v", "--header", "a=b=c"))
	if !idRE.MatchString(id1) {
		t.Fatalf("send printed %q, want a message id", id1)
	}
	// From stdin, byte for byte but one trailing newline; flags before the arguments.
	r := h.runWith(runOpts{stdin: "line one\nline two\n\n"}, "send", "--dedup-id", "d1", "q")
	id2 := strings.TrimSpace(r.out)
	if r.code != 0 || !idRE.MatchString(id2) {
		t.Fatalf("send from stdin: %+v", r)
	}
	// A repeated dedup id answers the original id, marked.
	r = h.runWith(runOpts{stdin: "something else"}, "send", "q", "-", "--dedup-id", "d1")
	if r.code != 0 || strings.TrimSpace(r.out) != id2+" (duplicate)" {
		t.Fatalf("duplicate send printed %q (exit %d), want %q", r.out, r.code, id2+" (duplicate)")
	}
	binary := "\x00\xff\xfebin"
	h.runWith(runOpts{stdin: binary}, "send", "q")
	h.ok("send", "q", "later", "--delay", "1h")
	h.runWith(runOpts{stdin: "kept\r\n"}, "send", "q", "--keep-newline")
	// A negative delay is refused here, as the server would, not taken for "at once".
	for _, d := range []string{"-5s", "169h", "1500us"} {
		contains(t, "--delay "+d, h.fails(2, "send", "q", "x", "--delay", d).err, "--delay must be a whole number of milliseconds between 0s and 168h")
	}
	contains(t, "nack --delay -5s", h.fails(2, "nack", "q", "some-receipt", "--delay", "-5s").err, "--delay must be")

	r = h.fails(1, "send", "missing", "x")
	contains(t, "stderr", r.err, "okiba send: queue_not_found:")
	h.fails(2, "send", "q", "x", "--header", "=v")
	r = h.fails(2, "send", "q", "x", "--header", "novalue")
	contains(t, "stderr", r.err, `"novalue" is not KEY=VALUE`)

	q := h.queue("q")
	if q.Stats.Ready != 4 || q.Stats.Delayed != 1 {
		t.Fatalf("after sends: ready %d delayed %d, want 4 and 1", q.Stats.Ready, q.Stats.Delayed)
	}
	ms := h.recvJSON("q", "--max", "10")
	if len(ms) != 4 {
		t.Fatalf("received %d messages, want 4 (the delayed one stays)", len(ms))
	}
	if ms[3].Body != "kept\r\n" {
		t.Errorf("--keep-newline: body %q", ms[3].Body)
	}
	m := ms[0]
	if m.ID != id1 || m.Body != "hello" || m.Group != "g1" || m.Headers["k"] != "v" || m.Headers["a"] != "b=c" || m.Deliveries != 1 || m.Receipt == "" || m.Queue != "q" {
		t.Errorf("first message: %+v", m)
	}
	if ms[1].ID != id2 || ms[1].Body != "line one\nline two\n" || ms[1].DedupID != "d1" || ms[1].BodyBase64 != "" {
		t.Errorf("stdin message: %+v", ms[1])
	}
	if got, _ := base64.StdEncoding.DecodeString(ms[2].BodyBase64); string(got) != binary {
		t.Errorf("binary message: body_base64 %q decodes to %q, want %q", ms[2].BodyBase64, got, binary)
	}
	if ms[2].Headers == nil || ms[2].Group != "" {
		t.Errorf("headers must be {} and group empty when unset: %+v", ms[2])
	}
}

func TestRecvReadableAndAck(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "q")
	h.ok("send", "q", "first\x1b[31m line", "--header", "trace=1")
	h.send("q", "second")

	out := h.ok("recv", "q", "--max", "5", "--ack", "--visibility", "1m")
	contains(t, "recv", out, "(delivery 1)", "receipt:", "header:    trace=1", "first\\x1b[31m line", "second", "acked 2 of 2")
	if q := h.queue("q"); q.Stats.Ready != 0 || q.Stats.InFlight != 0 || q.Stats.Acked != 2 {
		t.Errorf("after recv --ack: %+v", q.Stats)
	}

	r := h.run("recv", "q", "--wait", "50ms")
	if r.code != 0 || r.out != "" || !strings.Contains(r.err, "no messages") {
		t.Errorf("recv on an empty queue: %+v", r)
	}
	if out := h.ok("recv", "q", "--json"); out != "" {
		t.Errorf("recv --json on an empty queue printed %q", out)
	}
	h.send("q", "third")
	ms := decodeLines[recvJSON](t, h.ok("recv", "q", "--json", "--ack"))
	if len(ms) != 1 || ms[0].Body != "third" {
		t.Fatalf("recv --json --ack: %+v", ms)
	}
	if q := h.queue("q"); q.Stats.InFlight != 0 || q.Stats.Acked != 3 {
		t.Errorf("after recv --json --ack: %+v", q.Stats)
	}
	r = h.fails(1, "recv", "missing")
	contains(t, "stderr", r.err, "okiba recv: queue_not_found:")
}

func TestSettleCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "q")
	h.send("q", "m1", "m2", "m3", "m4")
	ms := h.recvJSON("q", "--max", "4", "--visibility", "5m")
	if len(ms) != 4 {
		t.Fatalf("received %d, want 4", len(ms))
	}
	r1, r2, r3, r4 := ms[0].Receipt, ms[1].Receipt, ms[2].Receipt, ms[3].Receipt

	contains(t, "ack", h.ok("ack", "q", r1), "acked ")
	// A receipt of a settled message: non-zero exit, the server's code and message on stderr.
	r := h.fails(1, "ack", "q", r1)
	contains(t, "stderr", r.err, "okiba ack: ", "already_settled: already settled")
	// Mixed: one result each, exit 1.
	r = h.fails(1, "ack", "q", r2, r1)
	contains(t, "stdout", r.out, "acked "+short(r2), "acked 1 of 2")
	contains(t, "stderr", r.err, short(r1)+": already_settled")
	r = h.fails(1, "ack", "q", "not-a-receipt")
	contains(t, "stderr", r.err, "invalid_receipt")

	// extend keeps the receipt valid; the lease moves.
	contains(t, "extend", h.ok("extend", "q", r3, "--visibility", "10m"), "extended ")
	r = h.fails(1, "extend", "q", r1, "--visibility", "1m")
	contains(t, "stderr", r.err, "already_settled")

	// nack with a delay of 0: visible again at once, with a second delivery.
	contains(t, "nack", h.ok("nack", "q", r3, "--delay", "0s"), "nacked ")
	h.fails(1, "nack", "q", r3)
	again := h.recvJSON("q", "--wait", "5s")
	if len(again) != 1 || again[0].Body != "m3" || again[0].Deliveries != 2 {
		t.Fatalf("after nack: %+v", again)
	}

	// deadletter with a reason and description; receipts may come from stdin.
	r = h.runWith(runOpts{stdin: r4 + "\n\n" + again[0].Receipt + "\n"}, "deadletter", "q", "-", "--reason", "poison", "--description", "bad json")
	if r.code != 0 {
		t.Fatalf("deadletter from stdin: %+v", r)
	}
	contains(t, "deadletter", r.out, "dead-lettered 2 of 2")
	r = h.fails(1, "deadletter", "q", r4, "--reason", "poison")
	contains(t, "stderr", r.err, "already_settled")
	dl := decodeLines[dlqLine](t, h.ok("dlq", "list", "q", "--json"))
	if len(dl) != 2 || dl[0].DeadLetter.Reason != "poison" || dl[0].DeadLetter.Description != "bad json" || dl[0].DeadLetter.Source != "q" {
		t.Fatalf("dead letters: %+v", dl)
	}

	// --json gives one object per receipt.
	out := h.run("ack", "q", r1, "--json")
	items := decodeLines[struct {
		Receipt string
		OK      bool
		Error   *struct{ Code string }
	}](t, out.out)
	if out.code != 1 || len(items) != 1 || items[0].OK || items[0].Error == nil || items[0].Error.Code != "already_settled" {
		t.Errorf("ack --json of a settled message's receipt: %+v (%+v)", items, out)
	}
	r = h.fails(1, "ack", "missing", r1)
	contains(t, "stderr", r.err, "okiba ack: ")
}

// dlqLine is a line of dlq list --json.
type dlqLine struct {
	ID         string
	Body       string
	Deliveries uint32
	DeadLetter *struct {
		Source, Reason, Description string
		Deliveries                  uint32
	} `json:"dead_letter"`
}
