package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/okiba/okiba/clock"
)

// consumer is the runtime behind one Consume call.
//
// Goroutines: the caller's (run, which starts and joins all the others), the fetcher
// (fetch.go), the extender (extend.go), the settler (settle.go), the handler log's
// (handlerlog.go), and one per running handler (handle.go).
//
// The decisions are not in the goroutines: holdings (holdings.go) keeps the book of the
// leases held and says what runs next and what is handed back; judge says what a
// handler's outcome makes of its message; extendSchedule when leases are extended;
// readySettles which settles may leave; backoff how long to wait after a failure;
// logLimit which handler errors are logged one by one. They take the time as an
// argument. The goroutines wait on the clock (Options.Clock) and on channels, call
// them, and do the requests.
//
// Two waits measure the network rather than decide by the clock, and use the system
// clock whatever Options.Clock is: each request's timeout (consumerRequestTimeout), and
// the grace an open receive gets when the consumer stops (pollCancelGrace).
//
// Locking: mu guards held and poll. No function holds mu while it does a request, waits
// on a channel, or calls the handler. Functions named …Locked need mu held.
type consumer struct {
	c       *Client
	queue   string
	handler Handler
	opts    ConsumeOptions
	log     *slog.Logger
	clock   clock.Clock
	sched   extendSchedule
	retry   backoff
	hlog    *handlerLog

	life  lifecycle
	kicks kicks

	mu   sync.Mutex
	held holdings
	poll pollState
}

// lifecycle is how the consumer's parts learn that it stops, and how it waits for them.
type lifecycle struct {
	// hctx is the parent of every handler's context: it keeps the values of Consume's
	// context but not its cancellation (which drains). hcancel stops hard.
	hctx     context.Context
	hcancel  context.CancelFunc
	handlers sync.WaitGroup

	fatalOnce sync.Once
	fatalErr  error
	fatal     chan struct{} // closed by fail

	settleStop chan struct{} // closed when no more settles will be queued
}

// kicks wake a goroutine when there may be work for it. Each channel holds one kick, so
// a kick sent while one is pending merges with it and never blocks.
type kicks struct {
	room   chan struct{} // the fetcher may have room now
	extend chan struct{} // leases were added: an extension may be due earlier
	settle chan struct{} // settles were queued
}

// pollState is the fetcher's receive as the stop sees it, and how nacks are held back
// while the stop cuts it (stopFetching). Its times are on the system clock: they measure
// how long the network takes.
type pollState struct {
	open           bool      // a receive is open
	started        time.Time // when it was opened
	cut            bool      // the last receive was cut by the stop
	nacksHeld      bool      // no nack leaves
	holdNacksUntil time.Time // no nack leaves before this
}

// nackHold says whether nacks must wait at now (system clock), and until when when a
// time ends the hold (the zero time: until stopFetching lifts it).
func (p *pollState) nackHold(now time.Time) (hold bool, until time.Time) {
	switch {
	case p.nacksHeld:
		return true, time.Time{}
	case now.Before(p.holdNacksUntil):
		return true, p.holdNacksUntil
	}
	return false, time.Time{}
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func newConsumer(ctx context.Context, c *Client, queue string, handler Handler, opts ConsumeOptions, vis time.Duration) *consumer {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	return &consumer{
		c: c, queue: queue, handler: handler, opts: opts, log: opts.Logger,
		clock: c.clock, sched: extendSchedule{vis: vis}, retry: retryBackoff(),
		hlog: newHandlerLog(opts.Logger, c.clock, slog.String("queue", queue)),
		life: lifecycle{
			hctx: hctx, hcancel: hcancel,
			fatal:      make(chan struct{}),
			settleStop: make(chan struct{}),
		},
		kicks: kicks{
			room:   make(chan struct{}, 1),
			extend: make(chan struct{}, 1),
			settle: make(chan struct{}, 1),
		},
		held: newHoldings(opts.Concurrency, opts.Prefetch),
	}
}

// run starts the consumer's goroutines, waits for the reason to stop, drains, and joins.
func (co *consumer) run(ctx context.Context) error {
	defer co.life.hcancel()
	// The fetcher's context is not Consume's: run cancels it itself, after it has
	// arranged for nacks to wait for the cancelled poll (see pollCancelGrace).
	fetchCtx, stopFetch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFetch()
	extendCtx, stopExtend := context.WithCancel(context.Background())
	defer stopExtend()
	logCtx, stopLog := context.WithCancel(context.Background())
	defer stopLog()
	fetchDone := make(chan struct{})
	extendDone := make(chan struct{})
	settleDone := make(chan struct{})
	logDone := make(chan struct{})
	go func() { defer close(fetchDone); co.fetch(fetchCtx) }()
	go func() { defer close(extendDone); co.extend(extendCtx) }()
	go func() { defer close(settleDone); co.settle() }()
	go func() { defer close(logDone); co.hlog.run(logCtx) }()

	hard := co.opts.HardStop
	hardNow := false
	select {
	case <-ctx.Done():
	case <-hard:
		hardNow, hard = true, nil
	case <-co.life.fatal:
	}

	// Drain: stop receiving, hand back what has not started, let the rest finish.
	co.mu.Lock()
	poll := co.poll
	co.poll.nacksHeld = poll.open
	co.held.beginDrain()
	co.changedLocked()
	co.mu.Unlock()
	if hardNow {
		co.life.hcancel()
	}
	co.stopFetching(fetchDone, stopFetch, poll.open, poll.started)
	idle := make(chan struct{})
	go func() { co.life.handlers.Wait(); close(idle) }() // no handler starts once draining
	var drainC <-chan time.Time
	if co.opts.DrainTimeout > 0 {
		t := co.clock.NewTimer(co.opts.DrainTimeout)
		defer t.Stop()
		drainC = t.C()
	} else {
		co.life.hcancel()
	}
	for done := false; !done; {
		select {
		case <-idle:
			done = true
		case <-drainC:
			co.life.hcancel()
			drainC = nil
		case <-hard:
			co.life.hcancel()
			hard = nil
		}
	}
	stopLog() // no handler is left to log
	<-logDone
	co.hlog.flush()
	stopExtend()
	<-extendDone
	close(co.life.settleStop)
	<-settleDone
	select {
	case <-co.life.fatal:
		return co.life.fatalErr
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
		t := clock.Real.NewTimer(pollStarted.Add(pollCancelGrace).Sub(clock.Real.Now()))
		select {
		case <-fetchDone:
		case <-t.C():
		}
		t.Stop()
	}
	stopFetch()
	<-fetchDone
	co.mu.Lock()
	if co.poll.cut {
		co.poll.holdNacksUntil = clock.Real.Now().Add(pollCancelGrace)
	}
	co.poll.nacksHeld = false
	co.mu.Unlock()
	kick(co.kicks.settle)
}

// fail records an error that ends Consume; the first one wins.
func (co *consumer) fail(err error) {
	co.life.fatalOnce.Do(func() {
		co.life.fatalErr = err
		close(co.life.fatal)
	})
}

// startLocked starts a handler for each message the holdings let run now.
func (co *consumer) startLocked() {
	for l := co.held.next(); l != nil; l = co.held.next() {
		ctx, cancel := context.WithCancel(co.life.hctx)
		l.cancel = cancel
		d := l.d // the handler's own copy
		co.life.handlers.Add(1)
		go co.handle(ctx, l, &d)
	}
}

// loseLocked drops a lease that ended under this process (see holdings.lose).
func (co *consumer) loseLocked(l *lease) {
	co.held.lose(l)
	co.changedLocked()
}

// changedLocked wakes the goroutines that act on what the holdings decided: the settler
// when settles are queued, the fetcher since there may be room now. A kick that finds
// nothing to do costs its goroutine one look.
func (co *consumer) changedLocked() {
	if len(co.held.settles) > 0 {
		kick(co.kicks.settle)
	}
	kick(co.kicks.room)
}
