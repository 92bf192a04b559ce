package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// Topics: the broker runs the topic machine (package topic) beside the queue machine,
// on the same log, under the same lock and with the same answer-after-fsync rule. The
// payload store keeps where each record lies: the log until the mover (moveLoop) has
// copied it into its partition's segment files.

// PutTopic creates a topic or changes its configuration. edit, if given, changes the
// configuration in place: okiba's defaults for a new topic, the current one otherwise.
// It reports whether the topic was created. The name's grammar is the queues'
// (internal/names).
func (b *Broker) PutTopic(ctx context.Context, name string, edit func(cfg *topic.Config, exists bool) error) (topic.TopicInfo, bool, error) {
	var info topic.TopicInfo
	var created bool
	err := b.do(ctx, func(now int64) error {
		if err := names.ValidateTopic(name); err != nil {
			return err
		}
		cur, err := b.t.Topic(name)
		exists := err == nil
		cfg := topic.DefaultConfig()
		if exists {
			cfg = cur.Config
		}
		if edit != nil {
			if err := edit(&cfg, exists); err != nil {
				return err
			}
		}
		created, err = b.t.PutTopic(now, b.tsink, name, cfg)
		if err != nil {
			return err
		}
		info, err = b.t.Topic(name)
		if err == nil && created {
			b.logger.Info("topic created", "topic", name, "partitions", cfg.Partitions)
		}
		return err
	})
	return info, created, err
}

// DeleteTopic deletes a topic and its records; with subscriptions or consumer groups only
// with force (topic.Machine.DeleteTopic).
func (b *Broker) DeleteTopic(ctx context.Context, name string, force bool) error {
	return b.do(ctx, func(now int64) error {
		id, _ := b.t.TopicID(name)
		if err := b.t.DeleteTopic(now, b.tsink, name, force); err != nil {
			return err
		}
		if ch := b.readers[id]; ch != nil {
			close(ch) // readers see topic_not_found
			delete(b.readers, id)
		}
		kick(b.kickMove) // the mover removes its files
		b.logger.Info("topic deleted", "topic", name)
		return nil
	})
}

// Topic describes one topic.
func (b *Broker) Topic(name string) (topic.TopicInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.t.Topic(name)
}

// Topics describes every topic whose name begins with prefix, by name.
func (b *Broker) Topics(prefix string) []topic.TopicInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.t.Topics(prefix)
}

// Publish appends records to a topic and returns once they are durable, one result per
// record (see topic.Machine.Publish). Publishes are refused while the disk is below its
// high-water mark, like sends.
func (b *Broker) Publish(ctx context.Context, name string, in []topic.PublishInput) ([]topic.PublishResult, error) {
	need := publishNeed(in)
	var out []topic.PublishResult
	err := b.do(ctx, func(now int64) error {
		if err := b.roomLocked(need); err != nil {
			return err
		}
		var err error
		out, err = b.t.Publish(now, b.tsink, name, in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadOptions says what a read of a partition wants.
type ReadOptions struct {
	Partition int
	// Offset is the first offset to read: a retained one, or the partition's end.
	Offset uint64
	// Max bounds the records returned (default 100, at most 10,000); MaxBytes their
	// bytes (default and most 16 MiB; at least one record is returned if any is there).
	Max      int
	MaxBytes int
	// Wait is how long to wait for a record when there is none at Offset yet (a long
	// poll, at most 60 s).
	Wait time.Duration
}

// Limits of a read.
const (
	DefaultReadMax = 100
	MaxReadMax     = 10_000
	MaxReadBytes   = 16 << 20
)

// TopicRecord is one record read from a partition.
type TopicRecord struct {
	Partition int
	Offset    uint64
	Time      int64 // publish time, Unix ms
	HasKey    bool
	Key       []byte
	Headers   []topic.Header
	Body      []byte
}

// Read is what a read of a partition returns: its records, and the partition's bounds
// when it was read (End is the high watermark, the offset after the last durable record).
type Read struct {
	Records    []TopicRecord
	Start, End uint64
}

// ErrRecordsGone is wrapped by errors of a read whose records retention deleted while it
// read; the read is safe to repeat from the partition's new start.
var ErrRecordsGone = payload.ErrRecordGone

// ReadTopic reads a partition from an offset, waiting up to opts.Wait for a record if
// there is none there yet. It returns only durable records: a record is readable once
// its publish's answer could have been given.
func (b *Broker) ReadTopic(ctx context.Context, name string, opts ReadOptions) (Read, error) {
	if opts.Max == 0 {
		opts.Max = DefaultReadMax
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = MaxReadBytes
	}
	if err := CheckRead(opts); err != nil {
		return Read{}, err
	}
	deadline := b.clock.Now().Add(opts.Wait)
	for {
		b.mu.Lock()
		if err := b.usableLocked(); err != nil {
			b.mu.Unlock()
			return Read{}, err
		}
		rg, err := b.t.ReadRange(name, opts.Partition, opts.Offset)
		if err != nil {
			b.mu.Unlock()
			return Read{}, err
		}
		pi, _ := b.t.Topic(name)
		start := pi.Partitions[opts.Partition].Start
		if rg.From == rg.End && opts.Wait > 0 && b.clock.Now().Before(deadline) {
			wake := b.readers[rg.TopicID]
			if wake == nil {
				wake = make(chan struct{})
				b.readers[rg.TopicID] = wake
			}
			b.mu.Unlock()
			if err := b.sleep(ctx, wake, deadline); err != nil && ctx.Err() != nil {
				return Read{}, ctx.Err()
			}
			// Woken by a publish, or the wait is over: the loop reads what there is, which
			// after the deadline may be nothing (an empty read, as at the end without a wait).
			continue
		}
		t := b.lastTicket
		b.mu.Unlock()
		// Everything below rg.End was appended before t: once t is durable, so are they.
		if err := t.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return Read{}, err
			}
			return Read{}, fmt.Errorf("%w (%v)", ErrStorageFailed, err)
		}
		// The records go into the read's answer (ReadTopic's callers keep no bytes of it).
		recs, err := b.store.ReadTopicShared(rg.TopicID, rg.Partition, rg.From, rg.End, opts.Max, opts.MaxBytes)
		out := Read{Start: start, End: rg.End, Records: make([]TopicRecord, len(recs))}
		for i, r := range recs {
			out.Records[i] = TopicRecord{Partition: r.Partition, Offset: r.Offset, Time: r.Now, HasKey: r.HasKey,
				Key: r.Key, Headers: r.Headers, Body: r.Body}
		}
		if err != nil {
			if errors.Is(err, payload.ErrRecordGone) {
				return out, &topic.OffsetError{Topic: name, Partition: opts.Partition, Offset: opts.Offset, Start: start, End: rg.End}
			}
			return out, err
		}
		return out, nil
	}
}

// CheckRead checks a read's parameters, as ReadTopic does before it looks at the topic.
func CheckRead(o ReadOptions) error {
	if o.Partition < 0 || o.Partition >= topic.MaxPartitions {
		return &topic.PartitionError{Partition: o.Partition, Partitions: topic.MaxPartitions}
	}
	if o.Max < 0 || o.Max > MaxReadMax {
		return &queue.ParamError{Field: "max", Reason: fmt.Sprintf("must be between 1 and %d, got %d", MaxReadMax, o.Max)}
	}
	if o.MaxBytes < 0 || o.MaxBytes > MaxReadBytes {
		return &queue.ParamError{Field: "max_bytes", Reason: fmt.Sprintf("must be between 1 and %d, got %d", MaxReadBytes, o.MaxBytes)}
	}
	if o.Wait < 0 || o.Wait > 60*time.Second {
		return &queue.ParamError{Field: "wait", Reason: fmt.Sprintf("must be between 0 and 60s, got %v", o.Wait)}
	}
	return nil
}

// moveLoop moves topic records from the log into their partitions' files whenever
// publishes have left some in the tails, and does the file deletions retention asks
// for. A failure is logged and retried: the records stay readable from the log, which
// keeps its segments until they are moved.
//
// While publishes keep coming, the files' fsync waits for them (Store.WriteTopics, which
// still syncs once enough is unsynced): one fsync then covers several steps' records.
// Once the mover has caught up and publishes have stopped (publishesStopped), it syncs
// what it wrote (Store.MoveTopics), so that an idle broker holds nothing unsynced and
// its log segments go. Once nothing has come for moverRestAfter after that, the store
// lets go of the buffers it keeps for the next records (Store.Rest): a pause between
// bursts of publishes keeps them.
func (b *Broker) moveLoop(ctx context.Context) {
	backoff := time.Duration(0)
	var rest clock.Timer // armed once caught up and synced; nil when at rest or busy
	defer func() {
		if rest != nil {
			rest.Stop()
		}
	}()
	for {
		if backoff == 0 {
			var restC <-chan time.Time
			if rest != nil {
				restC = rest.C()
			}
			select {
			case <-ctx.Done():
				return
			case <-restC:
				rest = nil
				b.store.Rest()
				continue
			case <-b.kickMove:
			}
			if rest != nil {
				rest.Stop()
				rest = nil
			}
		} else {
			t := b.clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		for {
			_, more, err := b.store.WriteTopics(ctx)
			if err == nil && !more {
				if !b.publishesStopped(ctx) {
					break // the next step writes what the kick brings, and syncs later
				}
				_, more, err = b.store.MoveTopics(ctx)
				if err == nil && !more && rest == nil {
					rest = b.clock.NewTimer(moverRestAfter)
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				b.logger.Error("moving topic records into partition files failed; retrying", "error", err)
				backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
				break
			}
			backoff = 0
			if !more {
				break
			}
		}
	}
}

// moverRestAfter is how long the mover waits, caught up and synced, before the store
// lets go of its buffers for the next records (Store.Rest).
const moverRestAfter = time.Second

// publishesStopped reports whether the mover, caught up, should sync now: no publish was
// applied since its last step, nor while the log made durable what it held (at most two
// commits). The wait is what tells a pause from a stop: under load, publishes are applied
// in bursts as the answers of each commit return to their producers, and a step written
// between two bursts found no kick waiting about as often as not (the mover then synced
// about as often as it had synced every step). A producer answered by a commit publishes
// again before the next commit ends, so a kick waits by then if the load goes on.
func (b *Broker) publishesStopped(ctx context.Context) bool {
	var last wal.Ticket
	for range 2 {
		if len(b.kickMove) > 0 {
			return false
		}
		b.mu.Lock()
		t := b.lastTicket.w
		b.mu.Unlock()
		if t == last {
			return true // nothing appended since the last wait: the log is idle
		}
		last = t
		// The log's own commit only: in a cluster the quorum's is not the mover's concern.
		if err := t.Wait(ctx); err != nil {
			return true // a failed log fails the sync too, which reports it
		}
	}
	return len(b.kickMove) == 0
}
