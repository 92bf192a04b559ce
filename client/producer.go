package client

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
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

// config is the batching engine's configuration for o.
func (o ProducerOptions) config() batchConfig {
	return newBatchConfig(o.MaxBatch, o.MaxBytes, o.Linger, o.MaxInFlight, api.MaxBatch)
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
	c     *Client
	queue string
	b     *batcher[Message, SendResult] // gathers, lingers, sends, splits, drains
}

// NewProducer starts a producer for queue. Close it to stop its goroutine.
func NewProducer(c *Client, queue string, opts ProducerOptions) *Producer {
	p := newProducer(c, queue, opts)
	p.b.start()
	return p
}

// newProducer makes a producer without starting its goroutine.
func newProducer(c *Client, queue string, opts ProducerOptions) *Producer {
	p := &Producer{c: c, queue: queue}
	p.b = newBatcher(c.clock, opts.config(), batchFuncs[Message, SendResult]{
		size: c.encodedSize,
		send: func(ctx context.Context, msgs []Message) ([]SendResult, error) {
			return c.sendBatch(ctx, queue, msgs) // decorated by Publish
		},
		failed:     func(err error) SendResult { return SendResult{Err: err} },
		splittable: splittable,
		closed:     ErrProducerClosed,
	})
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
	if p.b.isClosing() {
		done(SendResult{Err: ErrProducerClosed})
		return
	}
	sctx, span := p.c.sendSpanIfTracing(ctx, p.queue)
	if span != nil {
		cb := done
		done = func(r SendResult) { endSpan(span, r.Err); cb(r) }
	}
	m.Headers = p.c.decorate(sctx, m.Headers)
	p.b.add(ctx, m, done)
}

// Flush sends the messages handed to Send before it was called without waiting for the
// linger, and returns once all of them have their outcome (or ctx ends).
func (p *Producer) Flush(ctx context.Context) error { return p.b.flush(ctx) }

// Close stops accepting messages, sends those already handed to Send (without waiting
// for the linger), waits for every outstanding request, and stops the producer's
// goroutine. If ctx ends first, Close cancels the outstanding requests, fails the
// messages not yet sent with ErrProducerClosed, waits for the goroutine to stop and
// returns ctx's error. Send after Close returns ErrProducerClosed. Close may be called
// more than once.
func (p *Producer) Close(ctx context.Context) error { return p.b.close(ctx) }

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
// encoding/json), without the quotes. It takes bytes too, so that a record's body is
// measured without copying it into a string.
func jsonLen[S ~string | ~[]byte](s S) int {
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
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))])) // at most 4 bytes: no copy to the heap
		if r == '\u2028' || r == '\u2029' || (r == utf8.RuneError && size == 1) {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}
