package client

import (
	"context"
	"slices"
	"time"
)

// holdings is the consumer's book of the leases it holds: which wait and which run, in
// what order a group's messages go, and which ack, nack or dead-letter is to be sent.
// It decides and records; it does no I/O, starts no goroutine and reads no clock. The
// consumer starts the handlers next names, sends the settles it queues, and passes it
// the times it needs. It is guarded by consumer.mu.
type holdings struct {
	concurrency int // the most handlers running
	capacity    int // Concurrency + Prefetch: the most messages waiting or running

	leases   map[string]*lease // every lease held, by message id
	runnable []*lease          // waiting to start, in order of arrival
	groups   map[string]*group // groups with a message runnable or running
	waiting  int               // leases received and not started
	running  int
	draining bool
	settles  []*settleOp // queued for the settler, which takes them out
}

type leaseState uint8

const (
	leaseWaiting  leaseState = iota // received, not started (runnable, or behind its group)
	leaseRunning                    // its handler runs
	leaseSettling                   // its ack, nack or dead-letter is queued or in flight
	leaseGone                       // settled, given up, or lost while waiting
)

// lease is one held delivery.
type lease struct {
	d        Delivery
	state    leaseState
	grp      *group
	end      time.Time // when the lease ends, as far as this process knows
	extendAt time.Time // when to extend it next
	cancel   context.CancelFunc
	lost     bool // the lease ended under a running handler: never settle it
}

// group keeps a group's messages in order: current is runnable or running, behind wait.
type group struct {
	key     string
	current *lease
	behind  []*lease
}

type settleKind uint8

const (
	settleAck settleKind = iota
	settleNack
	settleDeadLetter
)

// settleOp is one queued ack, nack or dead-letter. Ops with equal kind, delay, reason
// and description travel in one request.
type settleOp struct {
	l         *lease
	kind      settleKind
	delay     time.Duration // nack: negative means the queue's backoff
	reason    string
	desc      string // dead-letter: the description; nack: the handler's error
	tries     int
	notBefore time.Time
}

func (o *settleOp) sameRequest(p *settleOp) bool {
	return o.kind == p.kind && o.delay == p.delay && o.reason == p.reason && o.desc == p.desc
}

// verdict is what a handler's outcome makes of its message: the settle to send, and
// whether it failed (which hands back the rest of its group held here).
type verdict struct {
	kind   settleKind
	delay  time.Duration // nack: negative means the queue's backoff
	reason string        // dead-letter
	desc   string        // dead-letter: the description; nack: the handler's error
	failed bool
}

func newHoldings(concurrency, prefetch int) holdings {
	return holdings{
		concurrency: concurrency,
		capacity:    concurrency + prefetch,
		leases:      make(map[string]*lease),
		groups:      make(map[string]*group),
	}
}

// room is how many more messages may be received.
func (h *holdings) room() int { return h.capacity - h.waiting - h.running }

// add takes in a received lease: it waits its turn behind its group's earlier messages,
// or, once draining has begun, is handed back at once. A lease of a message already held
// must be lost first (the message was delivered again: the old lease has ended).
func (h *holdings) add(l *lease) {
	h.leases[l.d.ID] = l
	if h.draining {
		h.queueSettle(&settleOp{l: l, kind: settleNack})
		return
	}
	h.waiting++
	if key := l.d.Group; key != "" {
		g := h.groups[key]
		if g == nil {
			g = &group{key: key, current: l}
			h.groups[key] = g
			h.runnable = append(h.runnable, l)
		} else {
			g.behind = append(g.behind, l)
		}
		l.grp = g
		return
	}
	h.runnable = append(h.runnable, l)
}

// next marks the next runnable lease running and returns it, or nil when none may start
// (nothing runnable, Concurrency handlers running, or draining). The caller starts its
// handler and sets its cancel.
func (h *holdings) next() *lease {
	if h.draining || h.running >= h.concurrency || len(h.runnable) == 0 {
		return nil
	}
	l := h.runnable[0]
	h.runnable[0] = nil
	h.runnable = h.runnable[1:]
	h.waiting--
	h.running++
	l.state = leaseRunning
	return l
}

// finish records that l's handler returned with verdict v: it queues the settle (none if
// the lease was lost under the handler) and moves l's group on to its next message, or,
// when l failed, hands the rest of the group held here back so that it is retried in
// order.
func (h *holdings) finish(l *lease, v verdict) {
	l.cancel()
	h.running--
	failed := false
	if l.lost {
		l.state = leaseGone
		h.forget(l)
	} else {
		h.queueSettle(&settleOp{l: l, kind: v.kind, delay: v.delay, reason: v.reason, desc: v.desc})
		failed = v.failed
	}
	if g := l.grp; g != nil {
		if failed {
			h.handBack(g.behind)
			g.behind = nil
		}
		if len(g.behind) > 0 {
			g.current = g.behind[0]
			g.behind[0] = nil
			g.behind = g.behind[1:]
			h.runnable = append(h.runnable, g.current)
		} else if h.groups[g.key] == g {
			delete(h.groups, g.key)
		}
	}
}

// lose drops a lease that has ended under this process (an extension answered
// receipt_stale, or the message was delivered again). A running handler's context is
// cancelled and its outcome will be ignored. The messages of its group held behind it
// are handed back, since running them now would overtake it.
func (h *holdings) lose(l *lease) {
	switch l.state {
	case leaseWaiting:
		h.waiting--
		l.state = leaseGone
		h.forget(l)
		g := l.grp
		switch {
		case g == nil:
			h.removeRunnable(l)
		case g.current == l:
			h.removeRunnable(l)
			h.handBack(g.behind)
			g.behind = nil
			if h.groups[g.key] == g {
				delete(h.groups, g.key)
			}
		default:
			i := slices.Index(g.behind, l)
			if i < 0 {
				break
			}
			rest := slices.Clone(g.behind[i+1:])
			g.behind = g.behind[:i]
			h.handBack(rest)
		}
	case leaseRunning:
		l.lost = true
		l.cancel()
		if g := l.grp; g != nil {
			h.handBack(g.behind)
			g.behind = nil
		}
	case leaseSettling, leaseGone:
		// The settle's answer says what happened.
	}
}

// beginDrain stops handlers from starting and hands back every message that has not
// started. A group's messages behind a running one are handed back too; the group's
// order holds because the running one keeps its lease until it is settled.
func (h *holdings) beginDrain() {
	h.draining = true
	h.handBack(h.runnable)
	h.runnable = nil
	for key, g := range h.groups {
		h.handBack(g.behind)
		g.behind = nil
		if g.current.state != leaseRunning {
			delete(h.groups, key)
		}
	}
}

// settled forgets a lease whose settle was answered or given up.
func (h *holdings) settled(l *lease) {
	l.state = leaseGone
	h.forget(l)
}

// queueSettle queues op for the settler.
func (h *holdings) queueSettle(op *settleOp) {
	op.l.state = leaseSettling
	h.settles = append(h.settles, op)
}

// handBack nacks messages that were never started, with no delay: they did not fail.
func (h *holdings) handBack(ls []*lease) {
	for _, l := range ls {
		h.waiting--
		h.queueSettle(&settleOp{l: l, kind: settleNack})
	}
}

func (h *holdings) removeRunnable(l *lease) {
	if i := slices.Index(h.runnable, l); i >= 0 {
		h.runnable = slices.Delete(h.runnable, i, i+1)
	}
}

// forget stops tracking l (unless a newer lease of the message replaced it).
func (h *holdings) forget(l *lease) {
	if h.leases[l.d.ID] == l {
		delete(h.leases, l.d.ID)
	}
}
