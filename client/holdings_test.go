package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The holdings are pure bookkeeping: these tests drive them as the consumer's goroutines
// would, without any.

// hold adds leases for messages named id or group/id to h and returns them by name.
func hold(h *holdings, names ...string) map[string]*lease {
	out := make(map[string]*lease)
	for _, n := range names {
		d := Delivery{ID: n}
		if g, _, ok := strings.Cut(n, "/"); ok {
			d.Group = g
		}
		l := &lease{d: d}
		h.add(l)
		out[n] = l
	}
	return out
}

// start takes what next lets run, naming each, and gives each a cancel that records
// itself in cancelled.
func start(h *holdings, cancelled map[string]bool) []string {
	var out []string
	for l := h.next(); l != nil; l = h.next() {
		id := l.d.ID
		l.cancel = func() { cancelled[id] = true }
		out = append(out, id)
	}
	return out
}

// settles lists and takes the queued settles as id:ack, id:nack(delay) or id:dl(reason).
func settles(h *holdings) string {
	var out []string
	for _, op := range h.settles {
		switch op.kind {
		case settleAck:
			out = append(out, op.l.d.ID+":ack")
		case settleNack:
			out = append(out, fmt.Sprintf("%s:nack(%v)", op.l.d.ID, op.delay))
		case settleDeadLetter:
			out = append(out, fmt.Sprintf("%s:dl(%s)", op.l.d.ID, op.reason))
		}
	}
	h.settles = nil
	return strings.Join(out, " ")
}

func TestHoldingsRunAGroupInOrderAndTheRestInParallel(t *testing.T) {
	t.Parallel()
	h := newHoldings(2, 10)
	ls := hold(&h, "g/1", "g/2", "x", "y")
	if h.room() != 12-4 {
		t.Fatalf("room %d with 4 held of 12", h.room())
	}
	cancelled := map[string]bool{}
	if got := strings.Join(start(&h, cancelled), " "); got != "g/1 x" {
		t.Fatalf("started %q, want g/1 and x (g/2 waits behind g/1; two at once)", got)
	}
	h.finish(ls["g/1"], judge(nil, false))
	if !cancelled["g/1"] {
		t.Fatal("a finished handler's context was not released")
	}
	// y arrived before g/2 could run: it goes first.
	if got := strings.Join(start(&h, cancelled), " "); got != "y" {
		t.Fatalf("started %q after g/1 finished, want y", got)
	}
	h.finish(ls["x"], judge(nil, false))
	if got := strings.Join(start(&h, cancelled), " "); got != "g/2" {
		t.Fatalf("started %q, want g/2 once g/1 is done", got)
	}
	h.finish(ls["y"], judge(nil, false))
	h.finish(ls["g/2"], judge(nil, false))
	if got := settles(&h); got != "g/1:ack x:ack y:ack g/2:ack" {
		t.Fatalf("settles %q", got)
	}
	if len(h.groups) != 0 || h.running != 0 || h.waiting != 0 || h.room() != 12 {
		t.Fatalf("after all finished: groups %v, running %d, waiting %d, room %d", h.groups, h.running, h.waiting, h.room())
	}
}

func TestHoldingsAFailureHandsBackTheRestOfItsGroup(t *testing.T) {
	t.Parallel()
	h := newHoldings(4, 10)
	ls := hold(&h, "g/1", "g/2", "g/3", "h/1")
	start(&h, map[string]bool{})
	h.finish(ls["g/1"], judge(errors.New("boom"), false))
	// g/1 waits the queue's backoff; g/2 and g/3 never ran: back at once, to come again
	// behind it.
	if got := settles(&h); got != "g/1:nack(-1ns) g/2:nack(0s) g/3:nack(0s)" {
		t.Fatalf("settles %q", got)
	}
	if h.groups["g"] != nil || h.waiting != 0 {
		t.Fatalf("group g still held (%v), %d waiting", h.groups["g"], h.waiting)
	}
	h.finish(ls["h/1"], judge(RetryAfter(1500*time.Microsecond), false))
	if got := settles(&h); got != "h/1:nack(2ms)" {
		t.Fatalf("RetryAfter(1.5ms): settles %q, want a nack after 1.5ms rounded up to 2ms", got)
	}
}

func TestHoldingsJudgeEveryOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err     error
		stopped bool
		want    verdict
	}{
		{nil, false, verdict{kind: settleAck}},
		{nil, true, verdict{kind: settleAck}},
		{fmt.Errorf("parse: %w", DeadLetter("bad", "no total")), false, verdict{kind: settleDeadLetter, reason: "bad", desc: "no total"}},
		{fmt.Errorf("busy: %w", RetryAfter(1500*time.Microsecond)), true, verdict{kind: settleNack, delay: 2 * time.Millisecond, desc: "busy: retry after 1.5ms", failed: true}},
		{errors.New("context canceled"), true, verdict{kind: settleNack, failed: true}},
		{errors.New("boom"), false, verdict{kind: settleNack, delay: -1, desc: "boom", failed: true}},
		{errors.New(strings.Repeat("é", 600)), false, verdict{kind: settleNack, delay: -1, desc: strings.Repeat("é", 512), failed: true}},
	} {
		if got := judge(c.err, c.stopped); got != c.want {
			t.Errorf("judge(%v, stopped %v) = %+v, want %+v", c.err, c.stopped, got, c.want)
		}
	}
}

func TestHoldingsALostLeaseIsNeverSettled(t *testing.T) {
	t.Parallel()
	h := newHoldings(1, 10)
	ls := hold(&h, "g/1", "g/2", "x")
	cancelled := map[string]bool{}
	start(&h, cancelled) // g/1
	h.lose(ls["g/1"])
	if !cancelled["g/1"] || !ls["g/1"].lost {
		t.Fatal("losing a running lease did not cancel its handler")
	}
	// g/2 would overtake g/1, which another consumer may be running now.
	if got := settles(&h); got != "g/2:nack(0s)" {
		t.Fatalf("settles after the loss %q, want g/2 handed back", got)
	}
	h.finish(ls["g/1"], judge(nil, false)) // its ack would settle someone else's delivery
	if got := settles(&h); got != "" {
		t.Fatalf("a lost lease was settled: %q", got)
	}
	if h.leases["g/1"] != nil {
		t.Fatal("a lost lease is still held")
	}
	// A waiting lease lost in the middle of its group takes the messages behind it along.
	h2 := newHoldings(1, 10)
	ls = hold(&h2, "g/1", "g/2", "g/3", "g/4")
	start(&h2, map[string]bool{})
	h2.lose(ls["g/3"])
	if got := settles(&h2); got != "g/4:nack(0s)" || h2.waiting != 1 || h2.leases["g/3"] != nil {
		t.Fatalf("settles %q, %d waiting, g/3 held %v: want g/4 handed back and g/2 still waiting", got, h2.waiting, h2.leases["g/3"] != nil)
	}
}

func TestHoldingsDrainHandsBackWhatHasNotStarted(t *testing.T) {
	t.Parallel()
	h := newHoldings(1, 10)
	ls := hold(&h, "g/1", "g/2", "x")
	start(&h, map[string]bool{}) // g/1
	h.beginDrain()
	if got := settles(&h); got != "x:nack(0s) g/2:nack(0s)" {
		t.Fatalf("settles at the drain %q", got)
	}
	if l := h.next(); l != nil {
		t.Fatalf("%s started while draining", l.d.ID)
	}
	hold(&h, "late")
	if got := settles(&h); got != "late:nack(0s)" {
		t.Fatalf("a message received while draining: settles %q, want it handed back", got)
	}
	h.finish(ls["g/1"], judge(nil, false))
	if got := settles(&h); got != "g/1:ack" || h.running != 0 || h.waiting != 0 {
		t.Fatalf("the running one finished: settles %q, running %d, waiting %d", got, h.running, h.waiting)
	}
}
