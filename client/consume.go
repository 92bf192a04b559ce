package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
//
// Every outcome other than nil is logged, rate-limited (see ConsumeOptions.Logger), so
// that a failing handler is seen even when the message is retried until it succeeds.
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
	// Logger receives what the runtime has to say: every handler outcome other than
	// nil — with the message's id, queue and delivery count and the error; at Error for
	// a failure or a panic, Warn for a dead-letter, Info for a RetryAfter and for a
	// handler cut short by a stop — and failed settles, lost leases and retried errors.
	// Handler outcomes are rate-limited: of every 10s, by the client's clock
	// (Options.Clock), the first 10 are logged one by one and one line counts the rest,
	// so that a handler failing on every message of a busy queue does not flood the log.
	// Defaults to slog.Default(): a handler's error then shows where the program's other
	// logs do, as it would if the handler logged it itself; a discarding default would
	// hide it. Pass a logger with a higher level to see less.
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
// Errors. A handler's error settles its message (see Handler) and is logged. Network
// errors and server errors (5xx, storage_failed, unavailable) are retried with backoff
// and logged. Errors that retrying cannot fix — queue_not_found,
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
		q, err := c.queueForConsume(ctx, queue, opts.Logger, retryBackoff())
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
	return newConsumer(ctx, c, queue, handler, opts, vis).run(ctx)
}

// queueForConsume reads the queue's configuration, retrying transient errors. It returns
// nil, nil when ctx ends first.
func (c *Client) queueForConsume(ctx context.Context, queue string, log *slog.Logger, retry backoff) (*api.Queue, error) {
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
		if !sleep(ctx, c.clock, retry.delay(failures)) {
			return nil, nil
		}
	}
}
