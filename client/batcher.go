package client

import (
	"context"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// batcher is the batching engine of Producer (messages to a queue) and TopicPublisher
// (records to a topic): it gathers the items that many goroutines hand it into batch
// requests, lets a batch linger by its lingerPolicy, keeps at most maxInFlight requests
// outstanding, splits a request refused as a whole for one bad item, serves flushes and
// drains on close. What an item is, how big it is in a request, how a batch is sent and
// what a failed item's result looks like are the caller's (batchFuncs): the engine never
// looks inside an item, so that both front ends share one implementation of the rules
// above rather than two that drift apart.
//
// An item's result is delivered exactly once, from one of the batcher's goroutines or the
// caller's own (for an item refused before it was taken). Its owner goroutine (run) alone
// touches the batches; callers reach it through channels.
type batcher[I, R any] struct {
	cfg   batchConfig
	clock clock.Clock
	fn    batchFuncs[I, R]

	// Requests to the owner goroutine (run). reqs is buffered, so that an add costs no
	// hand-off to the owner (which takes what has gathered in one go); closed, under
	// addMu, keeps an add from queueing once close has begun, so that the owner's last
	// drain sees every accepted item.
	reqs    chan *pending[I, R]
	addMu   sync.RWMutex
	closed  bool
	flushes chan chan struct{}
	batches chan uint64 // ids of finished batch requests, from the request goroutines

	closing   chan struct{} // closed by close
	closeOnce sync.Once
	done      chan struct{} // closed when the owner has stopped and joined its requests

	// ctx is the context of the batch requests; close cancels it when its own context
	// ends before the batcher drained.
	ctx    context.Context
	cancel context.CancelFunc

	// parked, when set (by tests, before run starts), is called by the owner each time
	// it has taken in what was queued and waits, with how many items it has taken in all.
	parked func(accepted int64)
}

// batchFuncs are what a batcher needs to know of its items.
type batchFuncs[I, R any] struct {
	// size estimates the encoded size of an item in a request (for maxBytes). It runs on
	// the caller's goroutine, in add.
	size func(I) int
	// send sends items in one request with ctx and returns one result per item, in
	// order, or the error of the whole request.
	send func(ctx context.Context, items []I) ([]R, error)
	// failed is the result of an item that failed with err.
	failed func(err error) R
	// splittable reports whether a whole-request error may be caused by a single item
	// (and changed nothing on the server), so that splitting the batch isolates it.
	splittable func(err error) bool
	// closed is the error of an item handed to a closed batcher, or still waiting to be
	// sent when close gave up.
	closed error
}

// batchConfig is a batcher's limits and linger, with the defaults applied.
type batchConfig struct {
	maxBatch    int // items in one request
	maxBytes    int // encoded size of one request; a larger single item goes alone
	maxInFlight int // requests outstanding at once
	linger      lingerPolicy
}

const (
	defaultBatchItems    = 256
	defaultBatchBytes    = 4 << 20
	maxBatchBytes        = api.MaxRequestBody - 1<<20
	defaultBatchInFlight = 8
)

// defaultBatchLinger caps the default, adaptive linger.
const defaultBatchLinger = time.Millisecond

// newBatchConfig applies the defaults shared by ProducerOptions and
// TopicPublisherOptions (documented there) to their fields; itemLimit is the server's
// most items in one request.
func newBatchConfig(maxBatch, maxBytes int, linger time.Duration, maxInFlight, itemLimit int) batchConfig {
	if maxBatch <= 0 {
		maxBatch = defaultBatchItems
	}
	if maxBytes <= 0 {
		maxBytes = defaultBatchBytes
	}
	if maxInFlight <= 0 {
		maxInFlight = defaultBatchInFlight
	}
	lp := lingerPolicy{wait: linger, adaptive: linger == 0}
	if linger == 0 {
		lp.wait = defaultBatchLinger
	}
	return batchConfig{
		maxBatch:    min(maxBatch, itemLimit),
		maxBytes:    min(maxBytes, maxBatchBytes),
		maxInFlight: maxInFlight,
		linger:      lp,
	}
}

// pending is one item handed to add, waiting for its result.
type pending[I, R any] struct {
	ctx     context.Context
	item    I
	size    int
	deliver func(R) // called exactly once with the result
}

// batch is a request being gathered or waiting for room.
type batch[I, R any] struct {
	id     uint64
	items  []*pending[I, R]
	bytes  int
	sealed bool      // full: it leaves as soon as there is room, without lingering
	opened time.Time // when its first item came (when the linger may matter)
}

// newBatcher makes a batcher without starting its goroutine (start does).
func newBatcher[I, R any](clk clock.Clock, cfg batchConfig, fn batchFuncs[I, R]) *batcher[I, R] {
	ctx, cancel := context.WithCancel(context.Background())
	return &batcher[I, R]{
		cfg: cfg, clock: clk, fn: fn,
		reqs:    make(chan *pending[I, R], max(cfg.maxBatch, 64)),
		flushes: make(chan chan struct{}),
		batches: make(chan uint64, cfg.maxInFlight),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx, cancel: cancel,
	}
}

// start starts the owner goroutine.
func (b *batcher[I, R]) start() { go b.run() }

// isClosing reports whether close has begun, so that a front end can refuse an item
// before it spends anything on it (a span, its headers).
func (b *batcher[I, R]) isClosing() bool {
	select {
	case <-b.closing:
		return true
	default:
		return false
	}
}

// add hands item to the batcher; done gets its result. add blocks only while the owner
// is busy taking earlier items. After close, or when ctx ends before item is taken,
// done gets the error at once.
func (b *batcher[I, R]) add(ctx context.Context, item I, done func(R)) {
	pe := &pending[I, R]{ctx: ctx, item: item, size: b.fn.size(item), deliver: done}
	b.addMu.RLock()
	defer b.addMu.RUnlock()
	if b.closed {
		done(b.fn.failed(b.fn.closed))
		return
	}
	select {
	case b.reqs <- pe:
	case <-ctx.Done():
		done(b.fn.failed(ctx.Err()))
	}
}

// flush sends the items added before it was called without waiting for the linger, and
// returns once all of them have their result (or ctx ends).
func (b *batcher[I, R]) flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case b.flushes <- done:
	case <-b.done:
		return nil // stopped: nothing is waiting
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops accepting items, sends those already added, waits for every outstanding
// request and stops the owner. If ctx ends first, it cancels the outstanding requests,
// fails the items not yet sent with fn.closed, waits for the owner to stop and returns
// ctx's error. It may be called more than once.
func (b *batcher[I, R]) close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.addMu.Lock() // waits for adds queueing now; later ones see closed
		b.closed = true
		b.addMu.Unlock()
		close(b.closing)
	})
	select {
	case <-b.done:
		b.cancel()
		return nil
	case <-ctx.Done():
		b.cancel()
		<-b.done
		return ctx.Err()
	}
}

// run is the owner goroutine: it alone touches the batches (owner). It gathers items
// into batches, starts a request goroutine per batch when the linger policy and
// maxInFlight let it leave, and joins them all before it returns.
func (b *batcher[I, R]) run() {
	defer close(b.done)
	s := owner[I, R]{b: b, inFlight: make(map[uint64]bool)}
	wake := alarm{clock: b.clock}
	defer wake.stop()
	reqs, closingC := b.reqs, b.closing
	for {
		if b.ctx.Err() != nil { // close gave up: fail what has not left
			s.failUnsent()
		}
		next := s.dispatch()
		s.releaseFlushes()
		if s.closing && len(s.queue) == 0 && len(s.inFlight) == 0 {
			for _, w := range s.waiters {
				close(w.done)
			}
			return
		}
		var ctxDone <-chan struct{}
		if s.closing && len(s.queue) > 0 {
			ctxDone = b.ctx.Done()
		}
		wakeC := wake.set(next)
		if b.parked != nil {
			b.parked(s.accepted)
		}
		select {
		case pe := <-reqs:
			s.accept(pe)
			s.drain() // what else has gathered, in one pass of the loop rather than one each
		case <-wakeC:
			wake.rang()
		case id := <-b.batches:
			delete(s.inFlight, id)
		case done := <-b.flushes:
			s.drain()
			s.flush(done)
		case <-closingC:
			s.closing, reqs, closingC = true, nil, nil
			s.drain() // close let no add queue after this
		case <-ctxDone:
		}
	}
}

// owner is the state of the batcher's owner goroutine, which alone touches it.
type owner[I, R any] struct {
	b        *batcher[I, R]
	queue    []*batch[I, R] // waiting to leave, oldest first; only the last may be unsealed
	nextID   uint64         // id of the next batch to create
	inFlight map[uint64]bool
	waiters  []flushWaiter
	closing  bool
	accepted int64 // items taken in all
}

type flushWaiter struct {
	target uint64 // released once every batch up to this id has its outcome
	done   chan struct{}
}

// accept adds an item to the open batch (starting one if needed).
func (s *owner[I, R]) accept(pe *pending[I, R]) {
	b := s.b
	s.accepted++
	var open *batch[I, R]
	if n := len(s.queue); n > 0 && !s.queue[n-1].sealed {
		open = s.queue[n-1]
	}
	if open != nil && len(open.items) > 0 && open.bytes+pe.size > b.cfg.maxBytes {
		open.sealed = true
		open = nil
	}
	if open == nil {
		open = &batch[I, R]{id: s.nextID}
		if b.cfg.linger.wait > 0 {
			open.opened = b.clock.Now()
		}
		s.nextID++
		s.queue = append(s.queue, open)
	}
	open.items = append(open.items, pe)
	open.bytes += pe.size
	if len(open.items) >= b.cfg.maxBatch || open.bytes >= b.cfg.maxBytes {
		open.sealed = true
	}
}

// drain accepts whatever is queued, so that a flush or the close sees every item that
// was accepted before it.
func (s *owner[I, R]) drain() {
	for {
		select {
		case pe := <-s.b.reqs:
			s.accept(pe)
		default:
			return
		}
	}
}

// dispatch starts the batches that may leave, oldest first, while fewer than
// maxInFlight requests are outstanding. It returns when the open batch's linger ends if
// the linger holds it back, else the zero time.
func (s *owner[I, R]) dispatch() time.Time {
	b := s.b
	for len(s.queue) > 0 && len(s.inFlight) < b.cfg.maxInFlight {
		bt := s.queue[0]
		if !bt.sealed && !s.closing && b.cfg.linger.lingers(len(s.inFlight)) && !s.flushWants(bt.id) {
			if leave, until := b.cfg.linger.decide(b.clock.Now(), bt.opened, len(s.inFlight)); !leave {
				return until
			}
		}
		s.queue = s.queue[1:]
		if b.startBatch(bt) {
			s.inFlight[bt.id] = true
		}
	}
	return time.Time{}
}

// flush registers a flush: done is closed once every batch accepted so far has its
// outcome.
func (s *owner[I, R]) flush(done chan struct{}) {
	if s.nextID == 0 {
		close(done)
		return
	}
	s.waiters = append(s.waiters, flushWaiter{target: s.nextID - 1, done: done})
}

func (s *owner[I, R]) flushWants(id uint64) bool {
	for _, w := range s.waiters {
		if w.target >= id {
			return true
		}
	}
	return false
}

// releaseFlushes releases the flushes whose batches all have their outcome.
func (s *owner[I, R]) releaseFlushes() {
	oldest := s.nextID // the oldest batch without its outcome
	if len(s.queue) > 0 {
		oldest = s.queue[0].id
	}
	for id := range s.inFlight {
		oldest = min(oldest, id)
	}
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.target < oldest {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	s.waiters = kept
}

// failUnsent fails the items that have not left, when close gave up.
func (s *owner[I, R]) failUnsent() {
	for _, bt := range s.queue {
		for _, pe := range bt.items {
			pe.deliver(s.b.fn.failed(s.b.fn.closed))
		}
	}
	s.queue = nil
}

// startBatch sends bt in a request goroutine, leaving out items whose context has ended
// (their callers have returned already and they must not be sent behind their back). It
// reports whether a request was started; the goroutine reports its end on b.batches.
func (b *batcher[I, R]) startBatch(bt *batch[I, R]) bool {
	items := bt.items[:0]
	for _, pe := range bt.items {
		if pe.ctx.Err() == nil {
			items = append(items, pe)
		}
	}
	if len(items) == 0 {
		return false
	}
	go func() {
		b.send(items)
		b.batches <- bt.id
	}()
	return true
}

// send sends items in one request and hands each its result. A request refused as a
// whole for a reason one item can cause (fn.splittable: a malformed item, a request too
// large) changed nothing on the server, so it is split in halves and retried until the
// culprit fails alone. Any other error of the whole request is every item's result: it
// is not retried, since a request that may have reached the server could be applied
// twice.
func (b *batcher[I, R]) send(items []*pending[I, R]) {
	xs := make([]I, len(items))
	for i, pe := range items {
		xs[i] = pe.item
	}
	res, err := b.fn.send(b.ctx, xs)
	if err != nil {
		if len(items) > 1 && b.fn.splittable(err) {
			half := len(items) / 2
			b.send(items[:half])
			b.send(items[half:])
			return
		}
		for _, pe := range items {
			pe.deliver(b.fn.failed(err))
		}
		return
	}
	for i, pe := range items {
		pe.deliver(res[i])
	}
}
