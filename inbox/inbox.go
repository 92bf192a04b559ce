// Package inbox makes okiba consumers idempotent: effectively-once processing on top of
// at-least-once delivery.
//
// A broker that never loses a message must sometimes deliver one twice: a consumer
// commits its work and crashes before its ack, or the ack is lost on the way, and the
// message comes back when its lease ends. An Inbox records each message's key in a
// processed-messages table, in the same database transaction as the handler's own
// writes, and commits before the message is acked:
//
//	ib, _ := inbox.New(db, "points", inbox.Options{})
//	ib.Setup(ctx) // CREATE TABLE IF NOT EXISTS
//	c.Consume(ctx, "orders-paid", ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO points (order_id, points) VALUES (?, ?)", …)
//		return err
//	}), client.ConsumeOptions{})
//
// Then either both the key and the effects are committed, or neither is:
//
//   - a first delivery inserts the key, runs the handler, commits, and is acked;
//   - a redelivery (or a duplicate sent by the producer) finds its key, skips the
//     handler, and is acked and counted as a duplicate;
//   - a handler error rolls the key back with the effects, so the retry runs the handler
//     again (an error made by client.DeadLetter dead-letters the message, and a redrive
//     later processes it afresh);
//   - a crash between commit and ack leaves a committed key: the redelivery is skipped.
//
// The key of a message is its producer's event id (header "event-id", which the outbox
// sets), else its dedup id, else its message id; see Key. Several consumers can share one
// table: the consumer's name is part of every row's key.
//
// Records cannot be kept forever, and must not be dropped too early: see Horizon and the
// guide docs/effectively-once.md. Effects outside the database (an e-mail, a payment)
// cannot join the transaction: pass them an idempotency key derived from the message key
// (IdempotencyKey). Effects that are idempotent by nature (an upsert, a conditional
// update) need no inbox row at all (Natural, Apply).
package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/dialect"
)

// DefaultTable is the table of processed keys when Options.Table is empty.
const DefaultTable = "okiba_inbox"

// EventIDHeader carries a producer's own id of an event: the same event sent twice,
// even with different dedup ids, has the same event id. The outbox sets it.
const EventIDHeader = "event-id"

// Handler processes one delivery inside the inbox's transaction. Its writes through tx
// commit together with the message's key; returning an error rolls both back (and
// settles the message as client.Handler errors do: nack, RetryAfter, DeadLetter). It
// must not commit or roll back tx.
type Handler func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error

// Options configure an Inbox. The zero value means the defaults.
type Options struct {
	// Table is the table of processed keys, shared by any number of consumers. Defaults
	// to "okiba_inbox".
	Table string
	// Dialect of the database. Defaults to the one detected from db's driver.
	Dialect dialect.Dialect
	// Key returns a delivery's key. Defaults to Key.
	Key func(d *client.Delivery) string
	// Horizon is how long records are kept: Cleanup removes older ones, and a delivery
	// of a message enqueued longer ago than this is logged as a warning (its first
	// delivery's record may be gone, so a duplicate would be processed again). Defaults
	// to 0: keep records forever and warn about nothing. See Horizon (the function) for
	// the least safe value.
	Horizon time.Duration
	// Now tells the time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Inbox is one consumer's record of processed messages. It is safe for concurrent use.
type Inbox struct {
	db    *sql.DB
	d     dialect.Dialect
	name  string
	table string
	opts  Options

	qInsert, qSeen, qCleanup string

	processed, duplicates, failed, late atomic.Int64
}

// Stats count what an Inbox has seen since it was made.
type Stats struct {
	// Processed deliveries ran the handler and committed.
	Processed int64 `json:"processed"`
	// Duplicates were skipped because their key was already recorded.
	Duplicates int64 `json:"duplicates"`
	// Failed deliveries' handlers (or commits) returned an error and were rolled back.
	Failed int64 `json:"failed"`
	// Late deliveries were of messages enqueued longer ago than the horizon.
	Late int64 `json:"late"`
}

// New returns the inbox of the consumer called name (1..200 characters; it tells this
// consumer's rows from others' in a shared table). Call Setup once to create the table.
func New(db *sql.DB, name string, opts Options) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("inbox: New needs a database")
	}
	if name == "" || len(name) > 200 {
		return nil, fmt.Errorf("inbox: consumer name must be 1..200 characters, got %q", name)
	}
	d, err := dialect.Resolve(db, opts.Dialect)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := dialect.CheckIdent("inbox: Options.Table", opts.Table); err != nil {
		return nil, err
	}
	if opts.Horizon < 0 {
		return nil, fmt.Errorf("inbox: Options.Horizon must not be negative, got %v", opts.Horizon)
	}
	if opts.Key == nil {
		opts.Key = Key
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	t := opts.Table
	return &Inbox{
		db: db, d: d, name: name, table: t, opts: opts,
		qInsert: dialect.T(d, `INSERT INTO {t} (consumer, message_key, message_id, queue, processed_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, t),
		qSeen: dialect.T(d, `SELECT processed_at FROM {t} WHERE consumer = ? AND message_key = ?`, t),
		qCleanup: dialect.T(d, `DELETE FROM {t} WHERE consumer = ? AND message_key IN
			(SELECT message_key FROM {t} WHERE consumer = ? AND processed_at < ? LIMIT 1000)`, t),
	}, nil
}

// Schema returns the statements that create the inbox table in dialect d (what Setup
// runs), for migration tools.
func Schema(d dialect.Dialect, table string) []string {
	return []string{
		dialect.T(d, `CREATE TABLE IF NOT EXISTS {t} (
	consumer     TEXT   NOT NULL,
	message_key  TEXT   NOT NULL,
	message_id   TEXT   NOT NULL,
	queue        TEXT   NOT NULL,
	processed_at BIGINT NOT NULL, -- Unix milliseconds
	PRIMARY KEY (consumer, message_key)
)`, table),
		dialect.T(d, `CREATE INDEX IF NOT EXISTS {t}_processed_at ON {t} (consumer, processed_at)`, table),
	}
}

// Setup creates the inbox table and its index if they do not exist.
func (ib *Inbox) Setup(ctx context.Context) error {
	for _, q := range Schema(ib.d, ib.table) {
		if _, err := ib.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("inbox: create table %s: %w", ib.table, err)
		}
	}
	return nil
}

// Name returns the consumer's name.
func (ib *Inbox) Name() string { return ib.name }

// Stats returns the counters.
func (ib *Inbox) Stats() Stats {
	return Stats{Processed: ib.processed.Load(), Duplicates: ib.duplicates.Load(), Failed: ib.failed.Load(), Late: ib.late.Load()}
}

// Key returns the key under which an inbox records a delivery: the producer's event id
// (header "event-id") if there is one, else its dedup id, else its message id. Message
// ids identify one send; the event id and dedup id also match a second send of the same
// event, which is why they come first.
func Key(d *client.Delivery) string {
	if k := d.Headers[EventIDHeader]; k != "" {
		return k
	}
	if d.DedupID != "" {
		return d.DedupID
	}
	return d.ID
}

// Handler wraps h for client.Consume: each delivery's key is inserted and h runs in one
// transaction, which commits before the message is acked. A duplicate is acked without
// running h. Whatever h returns is passed on, so it settles the message as usual.
func (ib *Inbox) Handler(h Handler) client.Handler {
	return func(ctx context.Context, d *client.Delivery) error {
		ib.checkAge(d)
		_, err := ib.process(ctx, ib.opts.Key(d), d.ID, d.Queue, func(ctx context.Context, tx *sql.Tx) error {
			return h(ctx, tx, d)
		})
		return err
	}
}

// Once runs fn in a transaction together with recording key, for messages that do not
// come through client.Consume. It reports whether fn ran (false: key was recorded
// before, so fn was skipped). An error from fn rolls back the record too.
func (ib *Inbox) Once(ctx context.Context, key string, fn func(ctx context.Context, tx *sql.Tx) error) (bool, error) {
	return ib.process(ctx, key, "", "", fn)
}

func (ib *Inbox) process(ctx context.Context, key, id, queue string, fn func(ctx context.Context, tx *sql.Tx) error) (ran bool, err error) {
	if key == "" {
		return false, errors.New("inbox: empty message key")
	}
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		ib.failed.Add(1)
		return false, fmt.Errorf("inbox %s: begin: %w", ib.name, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, ib.qInsert, ib.name, key, id, queue, ib.opts.Now().UnixMilli())
	if err != nil {
		ib.failed.Add(1)
		return false, fmt.Errorf("inbox %s: record %s: %w", ib.name, key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		ib.failed.Add(1)
		return false, fmt.Errorf("inbox %s: record %s: %w", ib.name, key, err)
	}
	if n == 0 {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return false, fmt.Errorf("inbox %s: %w", ib.name, err)
		}
		ib.duplicates.Add(1)
		return false, nil
	}
	if err = fn(ctx, tx); err != nil {
		ib.failed.Add(1)
		return false, err
	}
	if err = tx.Commit(); err != nil {
		ib.failed.Add(1)
		return false, fmt.Errorf("inbox %s: commit: %w", ib.name, err)
	}
	ib.processed.Add(1)
	return true, nil
}

// checkAge warns about a message older than the horizon: its earlier deliveries'
// record may have been cleaned up already.
func (ib *Inbox) checkAge(d *client.Delivery) {
	h := ib.opts.Horizon
	if h <= 0 || d.EnqueuedAt.IsZero() {
		return
	}
	if age := ib.opts.Now().Sub(d.EnqueuedAt); age > h {
		ib.late.Add(1)
		ib.opts.Logger.Warn("inbox: message older than the inbox horizon; if it was processed before, its record may be gone and it will be processed again",
			"consumer", ib.name, "queue", d.Queue, "message", d.ID, "age", age.Round(time.Second), "horizon", h)
	}
}

// Seen reports whether key is recorded, and when it was processed.
func (ib *Inbox) Seen(ctx context.Context, key string) (bool, time.Time, error) {
	var ms int64
	err := ib.db.QueryRowContext(ctx, ib.qSeen, ib.name, key).Scan(&ms)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, time.Time{}, nil
	case err != nil:
		return false, time.Time{}, fmt.Errorf("inbox %s: %w", ib.name, err)
	}
	return true, time.UnixMilli(ms), nil
}

// Cleanup deletes this consumer's records processed more than horizon ago (0 means
// Options.Horizon), in batches of 1000, and returns how many it deleted. It refuses to
// run without a horizon. Choose the horizon with Horizon: a record dropped while its
// message can still come back lets a duplicate through.
func (ib *Inbox) Cleanup(ctx context.Context, horizon time.Duration) (int64, error) {
	if horizon == 0 {
		horizon = ib.opts.Horizon
	}
	if horizon <= 0 {
		return 0, errors.New("inbox: Cleanup needs a horizon (Options.Horizon or the argument)")
	}
	cut := ib.opts.Now().Add(-horizon).UnixMilli()
	var total int64
	for {
		res, err := ib.db.ExecContext(ctx, ib.qCleanup, ib.name, ib.name, cut)
		if err != nil {
			return total, fmt.Errorf("inbox %s: cleanup: %w", ib.name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox %s: cleanup: %w", ib.name, err)
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// RunCleanup calls Cleanup every interval (at least a minute is sensible) until ctx
// ends, logging failures. It returns when ctx is done.
func (ib *Inbox) RunCleanup(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Hour
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := ib.Cleanup(ctx, 0); err != nil && ctx.Err() == nil {
			ib.opts.Logger.Error("inbox: cleanup failed", "consumer", ib.name, "error", err)
		} else if n > 0 {
			ib.opts.Logger.Debug("inbox: cleaned up", "consumer", ib.name, "records", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// IdempotencyKey derives the key to pass to an external API (a payment provider's
// Idempotency-Key header, a mail gateway's message id) for one effect of one message in
// one consumer. Every redelivery of the message yields the same key, so the external
// system can recognise a repeat that the inbox cannot prevent: the call happens inside
// the transaction, and a crash after the call but before the commit repeats it.
// effect names the side effect ("email", "charge"), for a handler that has several.
func IdempotencyKey(consumer, messageKey, effect string) string {
	h := sha256.Sum256([]byte(consumer + "\x00" + messageKey + "\x00" + effect))
	return "okiba-" + hex.EncodeToString(h[:16])
}

// RecordKey is the inbox key of a topic record read through a consumer group or the
// anonymous reader: its topic, partition and offset, which name it for as long as the
// topic exists — every time a group hands it again (after a rebalance, a crash before the
// commit, a seek back) it has the same key, so the inbox skips it. A topic deleted and
// created again under its name starts its offsets again: give a consumer of the new one
// an inbox of its own name. (A message a subscription put into a queue carries the
// record's okiba-record-id header, which Key does not read: a handler that takes records
// from both paths should key them both with RecordKey, from okiba-topic,
// okiba-partition and okiba-offset.)
func RecordKey(topic string, partition int, offset uint64) string {
	return topic + "/" + strconv.Itoa(partition) + "/" + strconv.FormatUint(offset, 10)
}
