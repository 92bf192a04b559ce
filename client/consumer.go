package client

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// consumer is the runtime behind one Consume call. Goroutines: the caller's (run), the
// fetcher, the extender, the settler, and one per running handler; run starts and joins
// them all.
//
// Locking: mu guards the fields below it. No function holds mu while it does a request,
// waits on a channel, or calls the handler. Functions named …Locked need mu held.
type consumer struct {
	c        *Client
	queue    string
	handler  Handler
	opts     ConsumeOptions
	vis      time.Duration
	log      *slog.Logger
	capacity int // Concurrency + Prefetch: the most messages waiting or running

	// hctx is the parent of every handler's context: it keeps the values of Consume's
	// context but not its cancellation (which drains). hcancel stops hard.
	hctx     context.Context
	hcancel  context.CancelFunc
	handlers sync.WaitGroup

	fatalOnce sync.Once
	fatalErr  error
	fatal     chan struct{} // closed by fail

	roomKick   chan struct{} // the fetcher may have room now
	extendKick chan struct{} // leases were added: an extension may be due earlier
	settleKick chan struct{} // settles were queued
	settleStop chan struct{} // closed when no more settles will be queued

	mu       sync.Mutex
	leases   map[string]*lease // every lease held, by message id
	runnable []*lease          // waiting to start, in order of arrival
	groups   map[string]*group // groups with a message runnable or running
	waiting  int               // leases received and not started
	running  int
	draining bool
	settles  []*settleOp // queued for the settler
	// The fetcher's receive, and holding nacks back while it stops (stopFetching).
	polling        bool      // a receive is open
	pollStarted    time.Time // when it was opened
	pollCut        bool      // the last receive was cut by the stop
	nacksHeld      bool      // no nack leaves
	holdNacksUntil time.Time // no nack leaves before this
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
	desc      string
	tries     int
	notBefore time.Time
}

func (o *settleOp) sameRequest(p *settleOp) bool {
	return o.kind == p.kind && o.delay == p.delay && o.reason == p.reason && o.desc == p.desc
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run starts the consumer's goroutines, waits for the reason to stop, drains, and joins.
func (co *consumer) run(ctx context.Context) error {
	defer co.hcancel()
	// The fetcher's context is not Consume's: run cancels it itself, after it has
	// arranged for nacks to wait for the cancelled poll (see pollCancelGrace).
	fetchCtx, stopFetch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFetch()
	extendCtx, stopExtend := context.WithCancel(context.Background())
	defer stopExtend()
	fetchDone := make(chan struct{})
	extendDone := make(chan struct{})
	settleDone := make(chan struct{})
	go func() { defer close(fetchDone); co.fetch(fetchCtx) }()
	go func() { defer close(extendDone); co.extend(extendCtx) }()
	go func() { defer close(settleDone); co.settle() }()

	hard := co.opts.HardStop
	hardNow := false
	select {
	case <-ctx.Done():
	case <-hard:
		hardNow, hard = true, nil
	case <-co.fatal:
	}

	// Drain: stop receiving, hand back what has not started, let the rest finish.
	co.mu.Lock()
	polling, pollStarted := co.polling, co.pollStarted
	co.nacksHeld = polling
	co.beginDrainLocked()
	co.mu.Unlock()
	if hardNow {
		co.hcancel()
	}
	co.stopFetching(fetchDone, stopFetch, polling, pollStarted)
	idle := make(chan struct{})
	go func() { co.handlers.Wait(); close(idle) }() // no handler starts once draining
	var drainC <-chan time.Time
	if co.opts.DrainTimeout > 0 {
		t := time.NewTimer(co.opts.DrainTimeout)
		defer t.Stop()
		drainC = t.C
	} else {
		co.hcancel()
	}
	for done := false; !done; {
		select {
		case <-idle:
			done = true
		case <-drainC:
			co.hcancel()
			drainC = nil
		case <-hard:
			co.hcancel()
			hard = nil
		}
	}
	stopExtend()
	<-extendDone
	close(co.settleStop)
	<-settleDone
	select {
	case <-co.fatal:
		return co.fatalErr
	default:
		return nil
	}
}

// stopFetching ends the fetcher. A receive cut while the server is answering it would
// leave its messages leased to nobody until their leases end, so a receive opened less
// than pollCancelGrace ago gets until then to be answered (messages that are there come
// back within milliseconds) before it is cut. Nacks wait meanwhile (nacksHeld), and for
// pollCancelGrace after a cut: the server learns of the cut only when it sees the
// connection close, and a nack that made a message visible before then could wake the
// abandoned receive.
func (co *consumer) stopFetching(fetchDone <-chan struct{}, stopFetch context.CancelFunc, polling bool, pollStarted time.Time) {
	if polling {
		t := time.NewTimer(time.Until(pollStarted.Add(pollCancelGrace)))
		select {
		case <-fetchDone:
		case <-t.C:
		}
		t.Stop()
	}
	stopFetch()
	<-fetchDone
	co.mu.Lock()
	if co.pollCut {
		co.holdNacksUntil = time.Now().Add(pollCancelGrace)
	}
	co.nacksHeld = false
	co.mu.Unlock()
	kick(co.settleKick)
}

// fail records an error that ends Consume; the first one wins.
func (co *consumer) fail(err error) {
	co.fatalOnce.Do(func() {
		co.fatalErr = err
		close(co.fatal)
	})
}
