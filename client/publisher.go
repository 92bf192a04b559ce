package client

import (
	"context"
	"encoding/base64"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
)

// ErrTopicPublisherClosed is returned by Publish after Close, and by a Publish whose
// record was still waiting to be sent when Close gave up (its context ended).
var ErrTopicPublisherClosed = errors.New("client: topic publisher is closed")

// TopicPublisherOptions configure a TopicPublisher. The zero value means the defaults,
// which are the Producer's: the two share one batching engine and its rules.
type TopicPublisherOptions struct {
	// MaxBatch is the most records in one publish request. Defaults to 256; at most
	// 1000 (the server's limit).
	MaxBatch int
	// MaxBytes bounds the encoded size of one publish request; a single larger record is
	// sent on its own. Defaults to 4 MiB; at most 15 MiB (the server refuses requests
	// over 16 MiB).
	MaxBytes int
	// Linger is how long a batch that is not yet full waits for more records after its
	// first one arrived, as ProducerOptions.Linger: by default (zero) it adapts to the
	// load — no wait while none of this publisher's requests is outstanding, else until
	// they have come back, the batch is full, or 1ms has passed; a positive Linger always
	// waits that long; NoLinger sends whatever has gathered as soon as a request may
	// leave. The linger runs on the client's clock (Options.Clock).
	Linger time.Duration
	// MaxInFlight is the most publish requests outstanding at once. Many requests in
	// flight let the broker make many records durable with one fsync; with more than one,
	// records handed over without waiting for each other's results may be appended in
	// another order than they were handed over (see TopicPublisher). Defaults to 8.
	MaxInFlight int
}

// config is the batching engine's configuration for o.
func (o TopicPublisherOptions) config() batchConfig {
	return newBatchConfig(o.MaxBatch, o.MaxBytes, o.Linger, o.MaxInFlight, api.MaxPublishBatch)
}

// TopicPublisher publishes records to one topic, gathering concurrent Publishes into
// batch requests (PublishRecords) — the topic counterpart of Producer, with the same
// batching engine: it is safe for use by many goroutines, batching helps when many
// Publishes are outstanding at once, and a batch lingers, fills and leaves as
// TopicPublisherOptions say. Create it with NewTopicPublisher and stop it with Close.
//
// Each Publish returns its own record's outcome: its partition and offset (and whether it
// was a duplicate of a recent dedup id), or its own error such as record_too_large or
// topic_full, even when the other records of its batch were appended. A request the
// server refuses as a whole because of one malformed record (a bad partition number, say)
// appended nothing, so it is split and sent again until only that record fails.
//
// Transport errors are not retried: a request whose answer was lost may have been
// appended, and sending it again would append its records twice. Every Publish of that
// request gets the error, and what to do is the caller's choice. A record with a DedupID
// is safe to publish again: within the topic's dedup_window, a record whose dedup id was
// already appended is not appended twice, and its Publish returns the first one's
// partition and offset with Published.Duplicate set.
//
// Order: records of one key go to one partition, in the order their requests reach the
// server, and within a request in the order they were handed over. A record handed over
// once the previous one's result came back (one goroutine publishing in turn) is behind
// it. Records handed over without waiting for each other (PublishAsync, or several
// goroutines) may travel in different requests, and up to MaxInFlight requests are out at
// once, so they may be appended in another order; MaxInFlight 1 keeps the order in which
// they were handed over, at the cost of one request at a time.
type TopicPublisher struct {
	c     *Client
	topic string
	b     *batcher[Record, Published]
}

// NewTopicPublisher starts a publisher for topic. Close it to stop its goroutine.
func NewTopicPublisher(c *Client, topic string, opts TopicPublisherOptions) *TopicPublisher {
	p := newTopicPublisher(c, topic, opts)
	p.b.start()
	return p
}

// newTopicPublisher makes a publisher without starting its goroutine.
func newTopicPublisher(c *Client, topic string, opts TopicPublisherOptions) *TopicPublisher {
	p := &TopicPublisher{c: c, topic: topic}
	p.b = newBatcher(c.clock, opts.config(), batchFuncs[Record, Published]{
		size: c.recordSize,
		send: func(ctx context.Context, recs []Record) ([]Published, error) {
			return c.PublishRecords(ctx, topic, recs)
		},
		failed:     func(err error) Published { return Published{Err: err} },
		splittable: publishSplittable,
		closed:     ErrTopicPublisherClosed,
	})
	return p
}

// Publish hands r to the publisher and waits for its outcome. It returns the record's
// result and, when the record was not appended, its error (an *api.Error for errors the
// server reported, as Published.Err). r's Body, Key and Headers must not change until
// Publish returns.
//
// If ctx ends before the record left in a request, it is not sent and Publish returns
// ctx's error. If ctx ends after it left, Publish returns ctx's error and the record may
// or may not have been appended: give it a DedupID to make publishing it again safe.
func (p *TopicPublisher) Publish(ctx context.Context, r Record) (Published, error) {
	res := make(chan Published, 1) // buffered: a result after ctx ended does not block
	p.PublishAsync(ctx, r, func(x Published) { res <- x })
	select {
	case x := <-res:
		return x, x.Err
	case <-ctx.Done():
		return Published{}, ctx.Err()
	}
}

// PublishAsync hands r to the publisher without waiting for its outcome: done is called
// once with the result (from one of the publisher's goroutines; it must not block), its
// Err set when the record was not appended. It is the pipelined form of Publish, as
// Producer.Publish is of Producer.Send — many records in flight without a goroutine each;
// mind the order (see TopicPublisher). It blocks only while the publisher is busy taking
// earlier records. After Close, or when ctx ends before r is taken, done gets the error
// at once. r's Body, Key and Headers must not change until done is called.
func (p *TopicPublisher) PublishAsync(ctx context.Context, r Record, done func(Published)) {
	p.b.add(ctx, r, done)
}

// Flush sends the records handed to Publish before it was called without waiting for the
// linger, and returns once all of them have their outcome (or ctx ends).
func (p *TopicPublisher) Flush(ctx context.Context) error { return p.b.flush(ctx) }

// Close stops accepting records, sends those already handed to Publish (without waiting
// for the linger), waits for every outstanding request, and stops the publisher's
// goroutine. If ctx ends first, Close cancels the outstanding requests, fails the
// records not yet sent with ErrTopicPublisherClosed, waits for the goroutine to stop and
// returns ctx's error. Publish after Close returns ErrTopicPublisherClosed. Close may be
// called more than once.
func (p *TopicPublisher) Close(ctx context.Context) error { return p.b.close(ctx) }

// publishSplittable reports whether a publish refused as a whole may have been refused
// for a single record: the server checks every record before it appends any, and refuses
// the request for the first malformed one (its partition number past any topic's, a key
// given twice, a body that does not decode) or when there are too many or too large.
func publishSplittable(err error) bool {
	return splittable(err) || IsCode(err, api.CodePartitionOutOfRange)
}

// recordSize estimates the size of r in a publish request, in the encoding c uses (as
// Producer's encodedSize does for a send): in the binary one, the default, its bytes and
// a few of framing, without reading them — measuring each body as JSON would escape it
// was a sixth of the CPU of a binary publish benchmark, client and server together.
func (c *Client) recordSize(r Record) int {
	if !c.json {
		n := len(r.Body) + len(r.Key) + len(r.DedupID) + 16
		for k, v := range r.Headers {
			n += len(k) + len(v) + 4
		}
		return n
	}
	return recordSize(r)
}

// recordSize estimates the JSON size of r in a publish request: exact for the body and
// key, which api.EncodeBody sends as text when they are UTF-8 and in base64 otherwise,
// close for the rest.
func recordSize(r Record) int {
	n := 48 + encodedBodyLen(r.Body) + jsonLen(r.DedupID)
	if r.HasKey {
		n += 12 + encodedBodyLen(r.Key)
	}
	if r.Partition != nil {
		n += 24
	}
	for k, v := range r.Headers {
		n += jsonLen(k) + jsonLen(v) + 6
	}
	return n
}

// encodedBodyLen is the length of b as api.EncodeBody puts it in JSON, without quotes.
func encodedBodyLen(b []byte) int {
	if utf8.Valid(b) {
		return jsonLen(b)
	}
	return base64.StdEncoding.EncodedLen(len(b))
}
