// Package harness runs okiba and the brokers people would pick instead side by side, on
// one machine, in one session, at the same durability, and records what it measured.
//
// The seam is System: one broker in one configuration reached through one client path
// (okiba over its native HTTP API, okiba over the SQS API, Redis streams with
// appendfsync always, …). A scenario asks a System for a fresh Queue per cell, and the
// Queue for Producers and Consumers; the harness drives them, times them, and samples
// the broker's processes from /proc. Adding a transport — say a binary batch protocol
// in okiba's Go client — is one more System: implement the four small interfaces below
// in a file of package systems and add it to systems.All.
package harness

import (
	"context"
	"errors"
	"time"
)

// Durability says when a system confirms a publish.
type Durability string

const (
	// Durable systems confirm a publish only after it was fsynced (the headline table).
	Durable Durability = "durable"
	// Relaxed systems confirm before fsync (page cache, timer); reported apart.
	Relaxed Durability = "relaxed"
	// Limit is the in-process physical limit, not a broker.
	Limit Durability = "limit"
)

// Caps lists what a system supports beyond publish; scenarios skip a system that lacks
// what they need, and the report says so.
type Caps struct {
	Consume    bool // receive and ack (scenarios 3–7)
	Visibility bool // a lease that expires and redelivers (scenario 6)
	Restart    bool // kill -9 and start again on the same data (scenario 7)
	Groups     bool // per-key FIFO with competing consumers (scenario 8)
	Log        bool // a retained log read by consumer groups (scenarios t1–t4; see LogSystem)
}

// Info describes a system for the report.
type Info struct {
	// Name is short and stable, used on the command line and in the JSON
	// ("okiba-http", "redis-always").
	Name string `json:"name"`
	// Label is what the report's tables show.
	Label      string     `json:"label"`
	Durability Durability `json:"durability"`
	// Peer is the product, so that systems sharing a server can be grouped ("okiba",
	// "redis", "rabbitmq", …).
	Peer string `json:"peer"`
	// Version is filled in by Start (server and client versions).
	Version string `json:"version"`
	// Settings are the durability-relevant settings, in words.
	Settings string `json:"settings"`
	// InProcess is true when the "broker" runs inside the harness (SQLite, the log
	// ceiling): its CPU figures then include the load generator.
	InProcess bool `json:"in_process,omitempty"`
	Caps      Caps `json:"caps"`
}

// System is one broker configuration under test.
type System interface {
	Info() Info
	// Start makes the system ready, starting the servers it needs through env (which
	// shares a server between systems that use the same one and stops them all at the
	// end). It may fill in Info().Version.
	Start(ctx context.Context, env *Env) error
	// Pids are the root processes of the broker (their descendants are counted too), or
	// nil for an in-process system.
	Pids() []int
	// NewQueue creates a fresh, empty queue for one cell.
	NewQueue(ctx context.Context, spec QueueSpec) (Queue, error)
	// Close releases the system's clients (servers are stopped by Env).
	Close() error
}

// Restarter is implemented by systems with Caps.Restart.
type Restarter interface {
	// Kill stops the broker without warning (kill -9 for a server).
	Kill(ctx context.Context) error
	// Restart starts it again on the same data and returns once it accepts connections.
	Restart(ctx context.Context) error
}

// FsyncCounter is implemented by systems that can count their own fsyncs exactly.
type FsyncCounter interface {
	Fsyncs(ctx context.Context) (uint64, error)
}

// QueueSpec is what a scenario asks of a fresh queue.
type QueueSpec struct {
	Name       string        // unique in the session
	Visibility time.Duration // lease length; 0 means 30s
	Groups     bool          // per-key FIFO (scenario 8)
}

// Lease is the lease length the spec asks for: Visibility, or 30s when that is 0.
func (s QueueSpec) Lease() time.Duration {
	if s.Visibility == 0 {
		return 30 * time.Second
	}
	return s.Visibility
}

// Queue is one queue (stream, table) of a system.
type Queue interface {
	// NewProducer returns a producer that keeps up to window publishes unconfirmed.
	NewProducer(ctx context.Context, window int) (Producer, error)
	// NewConsumer returns a consumer; systems without Caps.Consume return ErrUnsupported.
	NewConsumer(ctx context.Context, opts ConsumerOptions) (Consumer, error)
	// Delete removes the queue and its messages.
	Delete(ctx context.Context) error
}

// Msg is a message to publish. Body starts with the harness's 16-byte stamp.
type Msg struct {
	Body  []byte
	Group string // set only in scenario 8
}

// Producer publishes for one logical producer.
type Producer interface {
	// Publish hands m to the system and returns without waiting for the confirm; done
	// is called exactly once, from any goroutine, when the system confirmed m durable
	// (nil) or failed. The harness never has more than the producer's window
	// outstanding. m.Body must not be kept after done.
	Publish(m Msg, done func(error))
	// Close waits for outstanding publishes and releases the producer.
	Close() error
}

// ConsumerOptions shape a consumer.
type ConsumerOptions struct {
	Prefetch int // most messages leased to this consumer at once
	// PullAhead asks a log's member to keep its next pull in flight while the records
	// of the last are handled, as a Kafka consumer fetches ahead and okiba's
	// ConsumeGroup pulls again at half its records. Only t4 (okiba alone) sets it, so
	// that the group drains of t2 stay one pull at a time, like the peers' adapters.
	PullAhead bool
}

// Delivery is a received message; Handle is the system's own token for the ack.
type Delivery struct {
	Body   []byte
	Group  string
	Handle any
}

// Consumer receives and acks.
type Consumer interface {
	// Receive returns up to max leased messages, waiting a short while (≤ 1s) for the
	// first; an empty result is not an error.
	Receive(ctx context.Context, max int) ([]Delivery, error)
	// Ack settles ds in as few round trips as the system allows ("batched acks");
	// the per-message variant calls it with one delivery at a time.
	Ack(ctx context.Context, ds []Delivery) error
	Close() error
}

// ErrUnsupported is returned for an operation a system lacks (see Caps).
var ErrUnsupported = errors.New("not supported by this system")
