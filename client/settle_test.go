package client

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
)

// opNames names settle ops by their lease's id.
func opNames(ops []*settleOp) string {
	var out []string
	for _, op := range ops {
		out = append(out, op.l.d.ID)
	}
	return strings.Join(out, " ")
}

func op(id string, kind settleKind, notBefore time.Time) *settleOp {
	return &settleOp{l: &lease{d: Delivery{ID: id}}, kind: kind, notBefore: notBefore}
}

func TestReadySettlesWaitForTheirRetryTimeAndTheNackHold(t *testing.T) {
	t.Parallel()
	queued := func() []*settleOp {
		return []*settleOp{
			op("ack", settleAck, time.Time{}),
			op("nack", settleNack, time.Time{}),
			op("nack-retry", settleNack, t0.Add(2*time.Second)),
			op("ack-retry", settleAck, t0.Add(time.Second)),
		}
	}
	ready, waiting, next := readySettles(queued(), t0, false)
	if opNames(ready) != "ack nack" || opNames(waiting) != "nack-retry ack-retry" || next != t0.Add(time.Second) {
		t.Fatalf("at t0: ready %q, waiting %q, next %v", opNames(ready), opNames(waiting), next.Sub(t0))
	}
	ready, waiting, next = readySettles(queued(), t0.Add(2*time.Second), false)
	if opNames(ready) != "ack nack nack-retry ack-retry" || len(waiting) != 0 || !next.IsZero() {
		t.Fatalf("at 2s: ready %q, waiting %q, next %v", opNames(ready), opNames(waiting), next)
	}
	// While the stop holds nacks, they wait for it, not for a time.
	ready, waiting, next = readySettles(queued(), t0.Add(2*time.Second), true)
	if opNames(ready) != "ack ack-retry" || opNames(waiting) != "nack nack-retry" || !next.IsZero() {
		t.Fatalf("nacks held: ready %q, waiting %q, next %v", opNames(ready), opNames(waiting), next)
	}
}

func TestSettleRequestsGroupByKindInOrderAndBoundTheirSize(t *testing.T) {
	t.Parallel()
	var ready []*settleOp
	for i := range api.MaxBatch + 2 {
		ready = append(ready, op(fmt.Sprint("a", i), settleAck, time.Time{}))
		if i == 0 {
			ready = append(ready, op("n-backoff", settleNack, time.Time{}))
			ready[1].delay = -1
			ready = append(ready, op("n-now", settleNack, time.Time{}))
			ready = append(ready, &settleOp{l: &lease{d: Delivery{ID: "dl"}}, kind: settleDeadLetter, reason: "bad"})
		}
	}
	var got []string
	for _, req := range settleRequests(ready) {
		got = append(got, fmt.Sprintf("%s×%d", req[0].l.d.ID, len(req)))
	}
	want := fmt.Sprintf("a0×%d n-backoff×1 n-now×1 dl×1 a%d×2", api.MaxBatch, api.MaxBatch)
	if strings.Join(got, " ") != want {
		t.Fatalf("requests %v, want %s", got, want)
	}
}

func TestNackHoldLastsUntilTheStopLiftsItOrItsTime(t *testing.T) {
	t.Parallel()
	p := pollState{nacksHeld: true}
	if hold, until := p.nackHold(t0); !hold || !until.IsZero() {
		t.Fatalf("held by the stop: hold %v until %v", hold, until)
	}
	p = pollState{holdNacksUntil: t0.Add(50 * time.Millisecond)}
	if hold, until := p.nackHold(t0); !hold || until != p.holdNacksUntil {
		t.Fatalf("after a cut: hold %v until %v", hold, until)
	}
	if hold, _ := p.nackHold(p.holdNacksUntil); hold {
		t.Fatal("the hold outlasted its time")
	}
}
