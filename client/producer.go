package client

import (
	"context"
	"errors"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// ErrProducerClosed is returned by Send after Close, and by a Send whose message was
// still waiting to be sent when Close gave up (its context ended).
var ErrProducerClosed = errors.New("client: producer is closed")

// NoLinger, as ProducerOptions.Linger or ConsumeOptions.AckLinger, sends whatever has
// gathered at once instead of waiting for more.
const NoLinger = time.Duration(-1)

// ProducerOptions configure a Producer. The zero value means the defaults.
type ProducerOptions struct {
	// MaxBatch is the most messages in one send request. Defaults to 256; at most 1000
	// (the server's limit).
	MaxBatch int
	// MaxBytes bounds the encoded size of one send request; a single larger message is
	// sent on its own. Defaults to 4 MiB; at most 15 MiB (the server refuses requests over
	// 16 MiB).
	MaxBytes int
	// Linger is how long a batch that is not yet full waits for more messages after its
	// first one arrived. The default (zero) adapts to the load: a batch leaves at once
	// while none of this producer's requests is outstanding, and otherwise gathers until
	// they have all come back, it is full, or 1ms has passed — so batches grow with the
	// rate and the round trip, and a message sent to an idle producer does not wait. A
	// positive Linger waits that long even when nothing is outstanding. NoLinger (any
	// negative value) sends whatever has gathered as soon as a request may leave. Batches
	// also grow, whatever the linger, while MaxInFlight requests are outstanding. The
	// linger runs on the client's clock (Options.Clock).
	Linger time.Duration
	// MaxInFlight is the most send requests outstanding at once. Many requests in flight
	// let the broker commit many messages with one fsync (group commit). Defaults to 8.
	MaxInFlight int
}

const (
	defaultProducerBatch    = 256
	defaultProducerBytes    = 4 << 20
	maxProducerBytes        = api.MaxRequestBody - 1<<20
	defaultProducerInFlight = 8
)

// defaultProducerLinger caps the default, adaptive linger.
const defaultProducerLinger = time.Millisecond

func (o ProducerOptions) withDefaults() ProducerOptions {
	if o.MaxBatch <= 0 {
		o.MaxBatch = defaultProducerBatch
	}
	o.MaxBatch = min(o.MaxBatch, api.MaxBatch)
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultProducerBytes
	}
	o.MaxBytes = min(o.MaxBytes, maxProducerBytes)
	if o.Linger == 0 {
		o.Linger = defaultProducerLinger
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = defaultProducerInFlight
	}
	return o
}

// Producer sends messages to one queue, gathering concurrent Sends into batch requests.
// It is safe for use by many goroutines; batching only helps when many Sends are
// outstanding at once (many goroutines, or Sends started without waiting). Create it with
// NewProducer and stop it with Close.
//
// Each Send returns its own message's outcome: its id (and whether it was a duplicate
// of a recent dedup id), or its own error such as queue_full, even when the other
// messages of its batch were accepted. A request that the server rejects as a whole
// because of one malformed message is split and retried, so that only the malformed
// message fails. Transport errors are not retried (a retried send without a dedup id
// could enqueue the message twice): every Send of that request gets the error.
type Producer struct {
	c      *Client
	queue  string
	opts   ProducerOptions
	linger lingerPolicy
	clock  clock.Clock

	// Requests to the owner goroutine (run). reqs is buffered, so that a Publish costs no
	// hand-off to the owner (which takes what has gathered in one go); closed, under
	// pubMu, keeps a Publish from queueing once Close has begun, so that the owner's last
	// drain sees every accepted message.
	reqs    chan *pendingSend
	pubMu   sync.RWMutex
	closed  bool
	flushes chan chan struct{}
	batches chan uint64 // ids of finished batch requests, from the request goroutines

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	done      chan struct{} // closed when the owner has stopped and joined its requests

	// ctx is the context of the batch requests; Close cancels it when its own context
	// ends before the producer drained.
	ctx    context.Context
	cancel context.CancelFunc

	// parked, when set (by tests, before run starts), is called by the owner each time
	// it has taken in what was queued and waits, with how many Sends it has taken in all.
	parked func(accepted int64)
}

// pendingSend is one message handed to Send or Publish, waiting for its result.
type pendingSend struct {
	ctx     context.Context
	msg     Message
	size    int
	deliver func(SendResult) // called exactly once with the result
}

// batch is a send request being gathered or waiting for room.
type batch struct {
	id     uint64
	items  []*pendingSend
	bytes  int
	sealed bool      // full: it leaves as soon as there is room, without lingering
	opened time.Time // when its first message came (when the linger may matter)
}

// NewProducer starts a producer for queue. Close it to stop its goroutine.
func NewProducer(c *Client, queue string, opts ProducerOptions) *Producer {
	p := newProducer(c, queue, opts)
	go p.run()
	return p
}

// newProducer makes a producer without starting its goroutine.
func newProducer(c *Client, queue string, opts ProducerOptions) *Producer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c: c, queue: queue, opts: opts.withDefaults(), clock: c.clock,
		flushes: make(chan chan struct{}),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx, cancel: cancel,
	}
	p.linger = lingerPolicy{wait: p.opts.Linger, adaptive: opts.Linger == 0}
	p.reqs = make(chan *pendingSend, max(p.opts.MaxBatch, 64))
	p.batches = make(chan uint64, p.opts.MaxInFlight)
	return p
}

// Send hands m to the producer and waits for its outcome. It returns the message's
// result and, when the message was not accepted by the server, its error (an
// *api.Error for errors the server reported, as SendResult.Err).
//
// If ctx ends before the message left in a request, the message is not sent and Send
// returns ctx's error. If ctx ends after it left, Send returns ctx's error and the
// message may or may not have been enqueued: use a DedupID to make a retry safe.
func (p *Producer) Send(ctx context.Context, m Message) (SendResult, error) {
	res := make(chan SendResult, 1) // buffered: a result after ctx ended does not block
	p.Publish(ctx, m, func(r SendResult) { res <- r })
	select {
	case r := <-res:
		return r, r.Err
	case <-ctx.Done():
		return SendResult{}, ctx.Err()
	}
}

// Publish hands m to the producer without waiting for its outcome: done is called once
// with the result (from one of the producer's goroutines; it must not block). It is the
// pipelined form of Send — many messages in flight without a goroutine each — for
// callers that track outcomes themselves. Publish blocks only while the producer is
// busy taking earlier messages. After Close, or when ctx ends before m is taken, done
// gets the error at once.
func (p *Producer) Publish(ctx context.Context, m Message, done func(SendResult)) {
	select {
	case <-p.closing:
		done(SendResult{Err: ErrProducerClosed})
		return
	default:
	}
	sctx, span := p.c.sendSpanIfTracing(ctx, p.queue)
	if span != nil {
		cb := done
		done = func(r SendResult) { endSpan(span, r.Err); cb(r) }
	}
	m.Headers = p.c.decorate(sctx, m.Headers)
	ps := &pendingSend{ctx: ctx, msg: m, size: p.c.encodedSize(m), deliver: done}
	p.pubMu.RLock()
	defer p.pubMu.RUnlock()
	if p.closed {
		done(SendResult{Err: ErrProducerClosed})
		return
	}
	select {
	case p.reqs <- ps:
	case <-ctx.Done():
		done(SendResult{Err: ctx.Err()})
	}
}

// Flush sends the messages handed to Send before it was called without waiting for the
// linger, and returns once all of them have their outcome (or ctx ends).
func (p *Producer) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.flushes <- done:
	case <-p.done:
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

// Close stops accepting messages, sends those already handed to Send (without waiting
// for the linger), waits for every outstanding request, and stops the producer's
// goroutine. If ctx ends first, Close cancels the outstanding requests, fails the
// messages not yet sent with ErrProducerClosed, waits for the goroutine to stop and
// returns ctx's error. Send after Close returns ErrProducerClosed. Close may be called
// more than once.
func (p *Producer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.pubMu.Lock() // waits for Publishes queueing now; later ones see closed
		p.closed = true
		p.pubMu.Unlock()
		close(p.closing)
	})
	select {
	case <-p.done:
		p.cancel()
		return nil
	case <-ctx.Done():
		p.cancel()
		<-p.done
		return ctx.Err()
	}
}

// run is the producer's owner goroutine: it alone touches the batches (sender). It
// gathers Sends into batches, starts a request goroutine per batch when the linger
// policy and MaxInFlight let it leave, and joins them all before it returns.
func (p *Producer) run() {
	defer close(p.done)
	s := sender{p: p, inFlight: make(map[uint64]bool)}
	wake := alarm{clock: p.clock}
	defer wake.stop()
	reqs, closingC := p.reqs, p.closing
	for {
		if p.ctx.Err() != nil { // Close gave up: fail what has not left
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
			ctxDone = p.ctx.Done()
		}
		wakeC := wake.set(next)
		if p.parked != nil {
			p.parked(s.accepted)
		}
		select {
		case ps := <-reqs:
			s.accept(ps)
			s.drain() // what else has gathered, in one pass of the loop rather than one each
		case <-wakeC:
			wake.rang()
		case id := <-p.batches:
			delete(s.inFlight, id)
		case done := <-p.flushes:
			s.drain()
			s.flush(done)
		case <-closingC:
			s.closing, reqs, closingC = true, nil, nil
			s.drain() // Close let no Publish queue after this
		case <-ctxDone:
		}
	}
}

// sender is the state of the producer's owner goroutine, which alone touches it.
type sender struct {
	p        *Producer
	queue    []*batch // waiting to leave, oldest first; only the last may be unsealed
	nextID   uint64   // id of the next batch to create
	inFlight map[uint64]bool
	waiters  []flushWaiter
	closing  bool
	accepted int64 // Sends taken in all
}

// accept adds a Send to the open batch (starting one if needed).
func (s *sender) accept(ps *pendingSend) {
	p := s.p
	s.accepted++
	var open *batch
	if n := len(s.queue); n > 0 && !s.queue[n-1].sealed {
		open = s.queue[n-1]
	}
	if open != nil && len(open.items) > 0 && open.bytes+ps.size > p.opts.MaxBytes {
		open.sealed = true
		open = nil
	}
	if open == nil {
		open = &batch{id: s.nextID}
		if p.linger.wait > 0 {
			open.opened = p.clock.Now()
		}
		s.nextID++
		s.queue = append(s.queue, open)
	}
	open.items = append(open.items, ps)
	open.bytes += ps.size
	if len(open.items) >= p.opts.MaxBatch || open.bytes >= p.opts.MaxBytes {
		open.sealed = true
	}
}

// drain accepts whatever is queued, so that a flush or the close sees every Send that
// was accepted before it.
func (s *sender) drain() {
	for {
		select {
		case ps := <-s.p.reqs:
			s.accept(ps)
		default:
			return
		}
	}
}

// dispatch starts the batches that may leave, oldest first, while fewer than
// MaxInFlight requests are outstanding. It returns when the open batch's linger ends if
// the linger holds it back, else the zero time.
func (s *sender) dispatch() time.Time {
	p := s.p
	for len(s.queue) > 0 && len(s.inFlight) < p.opts.MaxInFlight {
		b := s.queue[0]
		if !b.sealed && !s.closing && p.linger.lingers(len(s.inFlight)) && !s.flushWants(b.id) {
			if leave, until := p.linger.decide(p.clock.Now(), b.opened, len(s.inFlight)); !leave {
				return until
			}
		}
		s.queue = s.queue[1:]
		if p.start(b) {
			s.inFlight[b.id] = true
		}
	}
	return time.Time{}
}

// flush registers a Flush: done is closed once every batch accepted so far has its
// outcome.
func (s *sender) flush(done chan struct{}) {
	if s.nextID == 0 {
		close(done)
		return
	}
	s.waiters = append(s.waiters, flushWaiter{target: s.nextID - 1, done: done})
}

func (s *sender) flushWants(id uint64) bool {
	for _, w := range s.waiters {
		if w.target >= id {
			return true
		}
	}
	return false
}

// releaseFlushes releases the flushes whose batches all have their outcome.
func (s *sender) releaseFlushes() {
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

// failUnsent fails the Sends that have not left, when Close gave up.
func (s *sender) failUnsent() {
	for _, b := range s.queue {
		for _, ps := range b.items {
			ps.deliver(SendResult{Err: ErrProducerClosed})
		}
	}
	s.queue = nil
}

type flushWaiter struct {
	target uint64 // released once every batch up to this id has its outcome
	done   chan struct{}
}

// start sends b in a request goroutine, leaving out Sends whose context has ended (they
// have returned already and must not be enqueued behind their caller's back). It reports
// whether a request was started; the goroutine reports its end on p.batches.
func (p *Producer) start(b *batch) bool {
	items := b.items[:0]
	for _, ps := range b.items {
		if ps.ctx.Err() == nil {
			items = append(items, ps)
		}
	}
	if len(items) == 0 {
		return false
	}
	go func() {
		p.send(items)
		p.batches <- b.id
	}()
	return true
}

// send sends items in one request and hands each its result. A request refused as a
// whole for a reason one message can cause (a malformed message, a request too large)
// changed nothing on the server, so it is split in halves and retried until the culprit
// fails alone.
func (p *Producer) send(items []*pendingSend) {
	msgs := make([]Message, len(items))
	for i, ps := range items {
		msgs[i] = ps.msg
	}
	res, err := p.c.sendBatch(p.ctx, p.queue, msgs) // decorated by Send
	if err != nil {
		if len(items) > 1 && splittable(err) {
			half := len(items) / 2
			p.send(items[:half])
			p.send(items[half:])
			return
		}
		for _, ps := range items {
			ps.deliver(SendResult{Err: err})
		}
		return
	}
	for i, ps := range items {
		ps.deliver(res[i])
	}
}

// splittable reports whether a request-level error may be caused by a single message.
func splittable(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case api.CodeInvalidRequest, api.CodeInvalidBody, api.CodeInvalidMessage, api.CodeInvalidDelay,
		api.CodeBatchTooLarge, api.CodeRequestTooLarge, api.CodeMessageTooLarge:
		return true
	}
	return false
}

// encodedSize estimates the size of m in a send request, in the encoding c uses.
func (c *Client) encodedSize(m Message) int {
	if !c.json {
		n := len(m.Body) + len(m.Group) + len(m.DedupID) + 16
		for k, v := range m.Headers {
			n += len(k) + len(v) + 4
		}
		return n
	}
	w := wireSend(m)
	return wireSize(&w)
}

// wireSize estimates the JSON size of m in a send request: exact for the body (with
// encoding/json's escaping), close for the rest.
func wireSize(m *api.SendMessage) int {
	n := 48 + jsonLen(m.Group) + jsonLen(m.DedupID)
	if m.Body != nil {
		n += jsonLen(*m.Body)
	}
	if m.BodyBase64 != nil {
		n += len(*m.BodyBase64)
	}
	if m.Delay != nil {
		n += 24
	}
	for k, v := range m.Headers {
		n += jsonLen(k) + jsonLen(v) + 6
	}
	return n
}

// jsonLen is the length of s as a JSON string body with HTML escaping (the default of
// encoding/json), without the quotes.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' || (r == utf8.RuneError && size == 1) {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}
