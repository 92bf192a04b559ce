package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
)

// Handler processes one delivery. What it returns settles the message:
//
//   - nil: ack (the message is done);
//   - an error made by DeadLetter (possibly wrapped): dead-letter it with that reason;
//   - an error wrapping RetryAfter(d): nack it, visible again after d;
//   - any other error, or a panic (recovered and logged): nack it, visible again after
//     the queue's retry backoff.
//
// ctx is cancelled when the handler must stop early: its lease was lost (an extension
// answered receipt_stale, so another consumer may have the message now; the outcome is
// then ignored), or the consumer is stopping hard (ConsumeOptions.HardStop, or the
// DrainTimeout passed). It carries the values of Consume's context. The Delivery is the
// handler's own copy.
type Handler func(ctx context.Context, d *Delivery) error

// ConsumeOptions configure Consume. The zero value means the defaults.
type ConsumeOptions struct {
	// Concurrency is how many handlers run at once. Defaults to 1.
	Concurrency int
	// Prefetch is how many received messages may wait, leased, beyond those running, so
	// that a handler that finishes finds its next message at hand. Defaults to
	// Concurrency; a negative value holds none beyond the running ones.
	Prefetch int
	// Visibility is the lease length asked for on every receive and extension; leases
	// are extended at about half of it. Defaults to the queue's visibility_timeout, read
	// once when Consume starts (a queue whose visibility_timeout is 0 gets no extension).
	Visibility time.Duration
	// PollWait is how long one receive waits for messages (long poll). Defaults to 20s;
	// at most 60s.
	PollWait time.Duration
	// AckLinger is how long an ack, nack or dead-letter waits to be batched with others
	// into one request. Defaults to 5ms; NoLinger (any negative value) sends at once.
	AckLinger time.Duration
	// DrainTimeout bounds a graceful stop: after Consume's context is cancelled, running
	// handlers get this long to finish before their contexts are cancelled. Defaults to
	// 30s; a negative value cancels them at once.
	DrainTimeout time.Duration
	// HardStop, when closed, stops the consumer at once: receiving stops and every
	// running handler's context is cancelled. Consume still waits for the handlers to
	// return and settles what they returned. It may be closed before or after Consume's
	// context is cancelled (for example on a second interrupt). Nil means never.
	HardStop <-chan struct{}
	// Logger receives recovered panics, failed settles, lost leases and retried errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

const (
	defaultPollWait     = 20 * time.Second
	defaultAckLinger    = 5 * time.Millisecond
	defaultDrainTimeout = 30 * time.Second
	// consumerRequestTimeout bounds each extend and settle request (and a receive beyond
	// its wait), so that a server that stops answering cannot hold Consume forever.
	consumerRequestTimeout = 15 * time.Second
	// pollCancelGrace protects messages from a receive that Consume cuts when it stops
	// (see stopFetching). Best effort: it makes losing a lease to a cut receive unlikely;
	// only the server could rule it out.
	pollCancelGrace = 50 * time.Millisecond
)

func (o ConsumeOptions) withDefaults() (ConsumeOptions, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	switch {
	case o.Prefetch == 0:
		o.Prefetch = o.Concurrency
	case o.Prefetch < 0:
		o.Prefetch = 0
	}
	if o.Visibility < 0 || o.Visibility > 12*time.Hour {
		return o, fmt.Errorf("client: ConsumeOptions.Visibility must be between 0 (the queue's) and 12h, got %v", o.Visibility)
	}
	if r := o.Visibility % time.Millisecond; r != 0 { // the server counts whole milliseconds
		o.Visibility += time.Millisecond - r
	}
	if o.PollWait <= 0 {
		o.PollWait = defaultPollWait
	}
	o.PollWait = min(o.PollWait, api.MaxWait).Truncate(time.Millisecond)
	if o.AckLinger == 0 {
		o.AckLinger = defaultAckLinger
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = defaultDrainTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// RetryAfterError asks the consumer runtime to nack a message with Delay instead of the
// queue's backoff. Make one with RetryAfter.
type RetryAfterError struct {
	Delay time.Duration
}

func (e *RetryAfterError) Error() string { return fmt.Sprintf("retry after %v", e.Delay) }

// RetryAfter returns an error that makes Consume nack the message so that it is
// delivered again after d (rounded up to a millisecond, at most 7 days). Wrap it to keep
// the cause: fmt.Errorf("payment service busy: %w", client.RetryAfter(time.Minute)).
func RetryAfter(d time.Duration) error { return &RetryAfterError{Delay: d} }

// DeadLetterError asks the consumer runtime to dead-letter a message. Make one with
// DeadLetter.
type DeadLetterError struct {
	Reason      string
	Description string
}

func (e *DeadLetterError) Error() string {
	if e.Description == "" {
		return "dead-letter: " + e.Reason
	}
	return "dead-letter: " + e.Reason + ": " + e.Description
}

// DeadLetter returns an error that makes Consume move the message to the queue's
// dead-letter queue with reason (1..128 printable ASCII characters; empty means
// "consumer") and description (up to 1024 bytes), for a message that no retry can fix.
// Match it with errors.As and *DeadLetterError.
func DeadLetter(reason, description string) error {
	return &DeadLetterError{Reason: reason, Description: description}
}

// Consume receives messages from queue and runs handler on each until ctx is cancelled,
// HardStop is closed, or an error that retrying cannot fix occurs.
//
// It keeps up to Concurrency handlers running and Prefetch more messages at hand,
// long-polling for as many as there is room for. While a message is held — waiting,
// running, or being settled — its lease is extended before it would end (at half the
// lease, in batches). Settles are batched with a short linger (AckLinger). Messages that
// share a Group run one at a time, in the order received; when one fails, it and the
// rest of its group held here are nacked without running, so the group is retried in
// order (docs/semantics.md "Ordering: groups"). Messages without a group run in parallel.
//
// Stopping. Cancelling ctx drains gracefully: receiving stops, messages that have not
// started are nacked with no delay (visible again at once), running handlers finish
// (their contexts are cancelled after DrainTimeout) and their outcomes are settled.
// Closing HardStop cancels the running handlers' contexts at once. Either way Consume
// returns only after every handler has returned and every settle has been answered or
// given up (a message whose settle fails is delivered again when its lease ends), so no
// goroutine outlives it. It then returns nil: a requested stop is not an error.
//
// Errors. Network errors and server errors (5xx, storage_failed, unavailable) are
// retried with backoff and logged. Errors that retrying cannot fix — queue_not_found,
// unauthorized, an invalid option — end Consume (after the same graceful drain) with
// that error, an *api.Error.
//
// Handlers must not keep running after they return, and should return soon after their
// context is cancelled: Consume waits for them.
func (c *Client) Consume(ctx context.Context, queue string, handler Handler, opts ConsumeOptions) error {
	if handler == nil {
		return errors.New("client: Consume needs a handler")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	vis := opts.Visibility
	if vis == 0 {
		q, err := c.queueForConsume(ctx, queue, opts.Logger)
		if err != nil {
			return err
		}
		if q == nil { // ctx ended while retrying
			return nil
		}
		if q.Config.VisibilityTimeout != nil {
			vis = q.Config.VisibilityTimeout.D()
		}
	}
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	co := &consumer{
		c: c, queue: queue, handler: handler, opts: opts, vis: vis, log: opts.Logger,
		capacity: opts.Concurrency + opts.Prefetch,
		hctx:     hctx, hcancel: hcancel,
		fatal:      make(chan struct{}),
		roomKick:   make(chan struct{}, 1),
		extendKick: make(chan struct{}, 1),
		settleKick: make(chan struct{}, 1),
		settleStop: make(chan struct{}),
		leases:     make(map[string]*lease),
		groups:     make(map[string]*group),
	}
	return co.run(ctx)
}

// queueForConsume reads the queue's configuration, retrying transient errors. It returns
// nil, nil when ctx ends first.
func (c *Client) queueForConsume(ctx context.Context, queue string, log *slog.Logger) (*api.Queue, error) {
	for failures := 1; ; failures++ {
		q, err := c.Queue(ctx, queue)
		if err == nil {
			return q, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if !transient(err) {
			return nil, fmt.Errorf("client: consume %s: %w", queue, err)
		}
		log.Warn("okiba: cannot read queue; retrying", "queue", queue, "error", err)
		if !sleepCtx(ctx, retryDelay(failures)) {
			return nil, nil
		}
	}
}

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

// ---------------------------------------------------------------------------------------
// Receiving

// fetch long-polls for as many messages as there is room for, until ctx ends or an
// unrecoverable error.
func (co *consumer) fetch(ctx context.Context) {
	wait, vis := co.opts.PollWait, co.vis
	failures := 0
	for ctx.Err() == nil {
		co.mu.Lock()
		room := co.capacity - co.waiting - co.running
		if co.draining {
			co.mu.Unlock()
			return
		}
		co.polling, co.pollStarted = room > 0, time.Now()
		co.mu.Unlock()
		if room <= 0 {
			select {
			case <-co.roomKick:
			case <-ctx.Done():
			}
			continue
		}
		// Bounded, so that a server that stops answering (a half-open connection) is
		// noticed and retried instead of stalling the consumer.
		rctx, cancel := context.WithTimeout(ctx, wait+consumerRequestTimeout)
		ds, err := co.c.Receive(rctx, co.queue, ReceiveOptions{Max: min(room, api.MaxBatch), Wait: &wait, Visibility: &vis})
		cancel()
		at := time.Now()
		co.mu.Lock()
		co.polling = false
		co.pollCut = err != nil && ctx.Err() != nil
		if len(ds) > 0 {
			co.addLocked(ds, at)
		}
		co.mu.Unlock()
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !transient(err) {
			co.fail(fmt.Errorf("client: consume %s: %w", co.queue, err))
			return
		}
		failures++
		co.log.Warn("okiba: receive failed; retrying", "queue", co.queue, "error", err, "failures", failures)
		if !sleepCtx(ctx, retryDelay(failures)) {
			return
		}
	}
}

// addLocked takes in received deliveries (at is when the answer arrived) and starts
// handlers for them if there is room.
func (co *consumer) addLocked(ds []Delivery, at time.Time) {
	for i := range ds {
		l := &lease{d: ds[i], end: at.Add(co.vis), extendAt: at.Add(co.vis / 2)}
		if old := co.leases[l.d.ID]; old != nil {
			// Delivered again: the old lease has ended, whatever this process thought.
			co.log.Warn("okiba: message delivered again while held; its earlier lease was lost", "queue", co.queue, "message", l.d.ID, correlation(&l.d))
			co.loseLocked(old)
		}
		co.leases[l.d.ID] = l
		if co.draining {
			co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
			continue
		}
		co.waiting++
		if key := l.d.Group; key != "" {
			g := co.groups[key]
			if g == nil {
				g = &group{key: key, current: l}
				co.groups[key] = g
				co.runnable = append(co.runnable, l)
			} else {
				g.behind = append(g.behind, l)
			}
			l.grp = g
		} else {
			co.runnable = append(co.runnable, l)
		}
	}
	co.startLocked()
	kick(co.extendKick)
}

// startLocked starts handlers for runnable messages while there is room.
func (co *consumer) startLocked() {
	for !co.draining && co.running < co.opts.Concurrency && len(co.runnable) > 0 {
		l := co.runnable[0]
		co.runnable[0] = nil
		co.runnable = co.runnable[1:]
		co.waiting--
		co.running++
		l.state = leaseRunning
		ctx, cancel := context.WithCancel(co.hctx)
		l.cancel = cancel
		d := l.d // the handler's own copy
		co.handlers.Add(1)
		go co.handle(ctx, l, &d)
	}
}

// ---------------------------------------------------------------------------------------
// Handling

func (co *consumer) handle(ctx context.Context, l *lease, d *Delivery) {
	defer co.handlers.Done()
	err := errHandlerExited // kept if the handler calls runtime.Goexit (t.FailNow in a test)
	ctx, span := co.c.processSpan(ctx, co.queue, d)
	defer func() {
		endSpan(span, err)
		co.mu.Lock()
		co.finishLocked(l, err)
		co.mu.Unlock()
		kick(co.roomKick)
	}()
	err = co.call(ctx, d)
}

var errHandlerExited = errors.New("client: handler exited its goroutine without returning")

// call runs the handler, turning a panic into an error.
func (co *consumer) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			co.log.Error("okiba: handler panicked; the message will be retried", "queue", co.queue, "message", d.ID,
				correlation(d), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("client: handler panicked: %v", r)
		}
	}()
	return co.handler(ctx, d)
}

// finishLocked settles a message by what its handler returned and moves its group on.
func (co *consumer) finishLocked(l *lease, err error) {
	l.cancel()
	co.running--
	failed := false
	var dl *DeadLetterError
	var ra *RetryAfterError
	switch {
	case l.lost:
		l.state = leaseGone
		co.forgetLocked(l)
	case err == nil:
		co.queueSettleLocked(&settleOp{l: l, kind: settleAck})
	case errors.As(err, &dl):
		co.queueSettleLocked(&settleOp{l: l, kind: settleDeadLetter, reason: dl.Reason, desc: dl.Description})
	case errors.As(err, &ra):
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack, delay: nackDelay(ra.Delay)})
	case co.hctx.Err() != nil:
		// Stopped hard: not the message's fault, so no backoff.
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
	default:
		failed = true
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack, delay: -1})
	}
	if g := l.grp; g != nil {
		if failed {
			co.nackWaitingLocked(g.behind)
			g.behind = nil
		}
		if len(g.behind) > 0 {
			g.current = g.behind[0]
			g.behind[0] = nil
			g.behind = g.behind[1:]
			co.runnable = append(co.runnable, g.current)
		} else if co.groups[g.key] == g {
			delete(co.groups, g.key)
		}
	}
	co.startLocked()
}

// nackDelay turns a requested retry delay into one the server accepts: whole
// milliseconds, 0..7 days.
func nackDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return min(d, 7*24*time.Hour)
}

// nackWaitingLocked hands back messages that were never started (delay 0: they did not
// fail).
func (co *consumer) nackWaitingLocked(ls []*lease) {
	for _, l := range ls {
		co.waiting--
		co.queueSettleLocked(&settleOp{l: l, kind: settleNack})
	}
}

// loseLocked drops a lease that has ended under this process (an extension answered
// receipt_stale, or the message was delivered again). A running handler's context is
// cancelled and its outcome will be ignored. The messages of its group held behind it
// are handed back, since running them now would overtake it.
func (co *consumer) loseLocked(l *lease) {
	switch l.state {
	case leaseWaiting:
		co.waiting--
		l.state = leaseGone
		co.forgetLocked(l)
		g := l.grp
		switch {
		case g == nil:
			co.removeRunnableLocked(l)
		case g.current == l:
			co.removeRunnableLocked(l)
			co.nackWaitingLocked(g.behind)
			g.behind = nil
			if co.groups[g.key] == g {
				delete(co.groups, g.key)
			}
		default:
			i := slices.Index(g.behind, l)
			if i < 0 {
				break
			}
			rest := slices.Clone(g.behind[i+1:])
			g.behind = g.behind[:i]
			co.nackWaitingLocked(rest)
		}
		kick(co.roomKick)
	case leaseRunning:
		l.lost = true
		l.cancel()
		if g := l.grp; g != nil {
			co.nackWaitingLocked(g.behind)
			g.behind = nil
			kick(co.roomKick)
		}
	case leaseSettling, leaseGone:
		// The settle's answer says what happened.
	}
}

func (co *consumer) removeRunnableLocked(l *lease) {
	if i := slices.Index(co.runnable, l); i >= 0 {
		co.runnable = slices.Delete(co.runnable, i, i+1)
	}
}

// forgetLocked stops tracking l (unless a newer lease of the message replaced it).
func (co *consumer) forgetLocked(l *lease) {
	if co.leases[l.d.ID] == l {
		delete(co.leases, l.d.ID)
	}
}

// beginDrainLocked stops starting handlers and hands back every message that has not
// started. A group's messages behind a running one are handed back too; the group's
// order holds because the running one keeps its lease until it is settled.
func (co *consumer) beginDrainLocked() {
	co.draining = true
	co.nackWaitingLocked(co.runnable)
	co.runnable = nil
	for key, g := range co.groups {
		co.nackWaitingLocked(g.behind)
		g.behind = nil
		if g.current.state != leaseRunning {
			delete(co.groups, key)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Lease extension

// extend extends held leases at about half their length, batching those due close
// together, until ctx ends.
func (co *consumer) extend(ctx context.Context) {
	if co.vis <= 0 {
		return // a zero lease ends at once: there is nothing to extend
	}
	slack := co.vis / 8 // extend leases due this soon together with the due ones
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		co.mu.Lock()
		var due []*lease
		var next time.Time
		for _, l := range co.leases {
			switch {
			case l.state == leaseSettling:
				// Its settle retries while the lease lasts; extending it too would let a
				// settle that keeps failing retry forever.
			case !l.extendAt.After(now.Add(slack)):
				due = append(due, l)
			case next.IsZero() || l.extendAt.Before(next):
				next = l.extendAt
			}
		}
		co.mu.Unlock()
		if len(due) > 0 {
			for len(due) > 0 && ctx.Err() == nil {
				n := min(len(due), api.MaxBatch)
				co.extendBatch(ctx, due[:n])
				due = due[n:]
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Add(-slack).Sub(now)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-co.extendKick:
		}
	}
}

func (co *consumer) extendBatch(ctx context.Context, ls []*lease) {
	receipts := make([]string, len(ls))
	for i, l := range ls {
		receipts[i] = l.d.Receipt
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
	errs, err := co.c.Extend(rctx, co.queue, co.vis, receipts...)
	cancel()
	if ctx.Err() != nil {
		return
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if err != nil {
		if !transient(err) {
			co.fail(fmt.Errorf("client: consume %s: extend leases: %w", co.queue, err))
		}
		co.log.Warn("okiba: extending leases failed; retrying", "queue", co.queue, "leases", len(ls), "error", err)
		retry := sent.Add(min(time.Second, max(co.vis/10, time.Millisecond)))
		for _, l := range ls {
			l.extendAt = retry
		}
		return
	}
	for i, l := range ls {
		if co.leases[l.d.ID] != l {
			continue // settled or replaced meanwhile
		}
		if errs[i] == nil {
			l.end = sent.Add(co.vis)
			l.extendAt = sent.Add(co.vis / 2)
			continue
		}
		if l.state == leaseSettling {
			// Most likely settled while the extension was in flight; the settle's answer
			// tells. Stop extending it.
			l.extendAt = l.end.Add(time.Hour)
			continue
		}
		co.log.Warn("okiba: lease lost; another consumer may have the message", "queue", co.queue, "message", l.d.ID, correlation(&l.d), "error", errs[i])
		co.loseLocked(l)
	}
}

// ---------------------------------------------------------------------------------------
// Settling

func (co *consumer) queueSettleLocked(op *settleOp) {
	op.l.state = leaseSettling
	co.settles = append(co.settles, op)
	kick(co.settleKick)
}

// settle sends queued settles in batches, after AckLinger, until settleStop is closed
// and nothing is left. A settle that fails for a transient reason is retried with
// backoff while its lease lasts; after that the message comes back by itself.
func (co *consumer) settle() {
	stop := co.settleStop
	var timer *time.Timer
	// wait waits for the next retry to be due, or for new settles.
	wait := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-co.settleKick:
		}
		timer.Stop()
	}
	for {
		co.mu.Lock()
		n := len(co.settles)
		co.mu.Unlock()
		stopping := false
		select {
		case <-stop:
			stopping = true
		default:
		}
		if n == 0 {
			if stopping {
				return
			}
			select {
			case <-co.settleKick:
			case <-stop:
			}
			continue
		}
		if co.opts.AckLinger > 0 && !stopping {
			t := time.NewTimer(co.opts.AckLinger)
			select {
			case <-t.C:
			case <-stop:
			}
			t.Stop()
		}
		now := time.Now()
		var ready []*settleOp
		var next time.Time
		co.mu.Lock()
		kept := co.settles[:0]
		for _, op := range co.settles {
			notBefore := op.notBefore
			if op.kind == settleNack {
				if co.nacksHeld {
					notBefore = now.Add(time.Hour) // until stopFetching kicks
				} else if co.holdNacksUntil.After(notBefore) {
					notBefore = co.holdNacksUntil
				}
			}
			if notBefore.After(now) {
				kept = append(kept, op)
				if next.IsZero() || notBefore.Before(next) {
					next = notBefore
				}
				continue
			}
			ready = append(ready, op)
		}
		clear(co.settles[len(kept):])
		co.settles = kept
		co.mu.Unlock()
		if len(ready) == 0 {
			wait(next.Sub(now))
			continue
		}
		for len(ready) > 0 {
			// One request per kind of settle, in order of first appearance.
			first := ready[0]
			var same, rest []*settleOp
			for _, op := range ready {
				if op.sameRequest(first) && len(same) < api.MaxBatch {
					same = append(same, op)
				} else {
					rest = append(rest, op)
				}
			}
			co.settleBatch(same)
			ready = rest
		}
	}
}

func (co *consumer) settleBatch(ops []*settleOp) {
	receipts := make([]string, len(ops))
	for i, op := range ops {
		receipts[i] = op.l.d.Receipt
	}
	op0 := ops[0]
	ctx, cancel := context.WithTimeout(context.Background(), consumerRequestTimeout)
	var errs []error
	var err error
	what := "ack"
	switch op0.kind {
	case settleAck:
		errs, err = co.c.Ack(ctx, co.queue, receipts...)
	case settleNack:
		what = "nack"
		var delay *time.Duration
		if op0.delay >= 0 {
			delay = &op0.delay
		}
		errs, err = co.c.Nack(ctx, co.queue, delay, receipts...)
	case settleDeadLetter:
		what = "dead-letter"
		errs, err = co.c.DeadLetter(ctx, co.queue, op0.reason, op0.desc, receipts...)
	}
	cancel()
	co.mu.Lock()
	defer co.mu.Unlock()
	if err != nil {
		switch {
		case transient(err):
			now := time.Now()
			given := 0
			for _, op := range ops {
				op.tries++
				if !now.Before(op.l.end) {
					given++
					co.doneLocked(op.l)
					continue
				}
				op.notBefore = now.Add(retryDelay(op.tries))
				co.settles = append(co.settles, op)
			}
			co.log.Warn("okiba: settle failed; retrying while the leases last", "queue", co.queue, "op", what,
				"messages", len(ops), "given_up", given, "error", err)
			kick(co.settleKick)
		case op0.kind == settleDeadLetter && !unrecoverable(err):
			// For example no_dead_letter_queue or an invalid reason: retry the message
			// instead, so that it is not lost.
			co.log.Error("okiba: dead-letter refused; nacking instead", "queue", co.queue, "reason", op0.reason,
				"messages", len(ops), "error", err)
			for _, op := range ops {
				co.settles = append(co.settles, &settleOp{l: op.l, kind: settleNack, delay: -1})
			}
			kick(co.settleKick)
		default:
			co.log.Error("okiba: settle failed", "queue", co.queue, "op", what, "messages", len(ops), "error", err)
			for _, op := range ops {
				co.doneLocked(op.l)
			}
			if unrecoverable(err) {
				co.fail(fmt.Errorf("client: consume %s: %s: %w", co.queue, what, err))
			}
		}
		return
	}
	for i, op := range ops {
		if e := errs[i]; e != nil {
			if IsCode(e, api.CodeReceiptStale) {
				co.log.Warn("okiba: lease ended before its "+what+"; the message will be delivered again", "queue", co.queue, "message", op.l.d.ID, correlation(&op.l.d))
			} else {
				co.log.Error("okiba: settle failed", "queue", co.queue, "op", what, "message", op.l.d.ID, correlation(&op.l.d), "error", e)
			}
		}
		co.doneLocked(op.l)
	}
}

func (co *consumer) doneLocked(l *lease) {
	l.state = leaseGone
	co.forgetLocked(l)
}

// ---------------------------------------------------------------------------------------
// Errors and retries

// transient reports whether err may go away by itself: transport errors, 5xx
// (storage_failed, unavailable, internal), 429 and 408.
func transient(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Status >= 500 || e.Status == 429 || e.Status == 408 || e.Code == api.CodeStorageFailed || e.Code == api.CodeUnavailable
}

// unrecoverable reports whether err means the consumer cannot go on.
func unrecoverable(err error) bool {
	return IsCode(err, api.CodeQueueNotFound) || IsCode(err, api.CodeUnauthorized)
}

// retryDelay is the wait before retry n (1, 2, …): exponential from 100ms to 5s, with
// jitter over its upper half.
func retryDelay(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d; it reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
