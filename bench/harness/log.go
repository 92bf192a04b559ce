package harness

import "context"

// The topic seam: beside Queue (a message is leased to one consumer and deleted when
// acked), Log is a retained, partitioned log that consumer groups read with committed
// offsets — okiba's topics and groups, Redis streams read without XDEL, JetStream
// streams with limits retention, RabbitMQ streams. Scenarios t1–t4 use it. A system
// offers it by implementing LogSystem and setting Caps.Log.

// LogSpec is what a scenario asks of a fresh log.
type LogSpec struct {
	Name       string // unique in the session
	Partitions int    // 1 or more; a system without partitions uses one stream (and says so)
}

// LogSystem is implemented by systems with Caps.Log.
type LogSystem interface {
	// NewLog creates a fresh, empty log for one cell.
	NewLog(ctx context.Context, spec LogSpec) (Log, error)
	// LogSettings says how the log is driven, for the report.
	LogSettings() string
}

// Log is one topic (stream) of a system.
type Log interface {
	// NewProducer returns a producer that keeps up to window publishes unconfirmed.
	NewProducer(ctx context.Context, window int) (Producer, error)
	// NewGroup creates a consumer group that starts at the first retained record.
	NewGroup(ctx context.Context, group string) error
	// NewMember joins group as its member number i and returns it as a Consumer:
	// Receive reads the next records of what the member holds, Ack commits past them
	// (the offset after the highest of ds per partition). Deliveries are records: a
	// record handed again after a rebalance is a delivery again.
	NewMember(ctx context.Context, group string, i int, opts ConsumerOptions) (Consumer, error)
	// Delete removes the log, its groups and its records.
	Delete(ctx context.Context) error
}

// Fanout is implemented by logs with subscriptions into queues (scenario t3).
type Fanout interface {
	// Subscribe adds n subscriptions, each into a fresh queue and taking every record,
	// and returns the queues (deleted with the log).
	Subscribe(ctx context.Context, n int) ([]Queue, error)
}

// SegmentFiler is implemented by logs that can name the files their records live in
// (scenario t4 reads them with dd).
type SegmentFiler interface {
	SegmentFiles(ctx context.Context) ([]string, error)
}

// logQueue presents a Log as a publish-only Queue, for the fill and the steady load.
type logQueue struct{ l Log }

func (q logQueue) NewProducer(ctx context.Context, window int) (Producer, error) {
	return q.l.NewProducer(ctx, window)
}

func (q logQueue) NewConsumer(ctx context.Context, opts ConsumerOptions) (Consumer, error) {
	return nil, ErrUnsupported
}

func (q logQueue) Delete(ctx context.Context) error { return q.l.Delete(ctx) }
