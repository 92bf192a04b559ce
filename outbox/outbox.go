// Package outbox is the transactional outbox for okiba: a service writes the messages it
// wants to publish into a table of its own database, in the same transaction as the
// business change that causes them, and a Relay publishes them to okiba afterwards.
// Either the change and its messages are committed together, or neither is: no message
// for a change that was rolled back, no change whose message is lost.
//
//	ob, _ := outbox.New(db, "orders", outbox.Options{})
//	ob.Setup(ctx)
//
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, "INSERT INTO orders …")
//	ob.Add(ctx, tx, "order-events", outbox.Message{Body: event, Group: orderID})
//	tx.Commit()
//
//	relay := ob.Relay(okibaClient, outbox.RelayOptions{})
//	go relay.Run(ctx)
//
// The relay publishes each row with the dedup id "<outbox name>/<instance>/<row id>" (and,
// unless the message has one, the same value as its "event-id" header, which inbox.Key
// uses). The instance is a random id Setup stores beside the table (in <table>_instance),
// once per outbox name: a database that is reset, or restored from an old dump, starts
// its row ids again but gets a new instance, so its rows' dedup ids never meet the old
// ones in the broker's dedup window (which would take them for duplicates and drop them).
// Rows written before an outbox had an instance keep their dedup id "<outbox name>/<row
// id>", so that a row published before the upgrade and again after it is still absorbed.
// A relay that crashes after publishing but before marking its rows sent publishes them
// again when it (or another relay) next runs, and the broker answers that second send
// with the first message's id (duplicate: true) — as long as it comes within the queue's
// dedup window (5 minutes by default). Beyond the window the message is enqueued twice,
// and the consumer's inbox skips the second copy by its event id. Row ids are never
// reused within a table's life (AUTOINCREMENT on SQLite, an identity column on
// PostgreSQL), and the instance tells the lives apart, so a dedup id never names two
// different messages. Each publish of a row is counted first (in <table>_attempts, in a
// transaction of its own, so that the count survives a relay's crash); a duplicate
// answer to a row's first publish means its dedup id named another message, and the
// relay logs it at WARN with both ids.
//
// Topics: AddToTopic writes a row for a topic instead of a queue. The relay publishes
// it as a record (through a Publisher that is also a TopicPublisher, as *client.Client
// is) with the same dedup id — the topic's dedup window absorbs a relay's repeat as a
// queue's does — and the row's Group as its key, so a group's records share a partition
// and keep row order there. One row then reaches every subscriber through the topic's
// subscriptions, where a queue destination needs a row per queue.
//
// Order: rows that share a Group are published in row order. Several relays may run at
// once, in one process or many: a relay claims a whole group — its oldest unsent row, the
// head — and publishes the group's rows in order, so order per group holds under
// concurrency. On PostgreSQL the claim is a row lock on the head (SELECT … FOR UPDATE
// SKIP LOCKED) held while the relay publishes and marks; on SQLite, which has no row
// locks, it is a lease written into the head row (Relay options Lease). Rows without a
// group are claimed one by one and published in any order.
//
// Rows in one transaction are not ordered with rows of a concurrent transaction in the
// same group unless the application serialises the two (as it does when both update
// the same business row first, which locks it): give events of one entity its id as the
// group.
package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/dialect"
)

// DefaultTable is the outbox table when Options.Table is empty.
const DefaultTable = "okiba_outbox"

// EventIDHeader is the header carrying the event id (inbox.EventIDHeader).
const EventIDHeader = "event-id"

// Message is a message to publish.
type Message struct {
	Body []byte
	// Group orders the message after earlier ones of the same group (okiba's FIFO
	// groups; for a topic, the record's key, which keeps a group in one partition);
	// empty means unordered.
	Group string
	// Headers are sent with the message. Unless it has an "event-id" header, the relay
	// sets one to the message's dedup id.
	Headers map[string]string
	// Delay makes the message visible only this long after it is published; 0 means the
	// queue's delay. A topic record has none (AddToTopic refuses one).
	Delay time.Duration
}

// Options configure an Outbox. The zero value means the defaults.
type Options struct {
	// Table is the outbox table; several outboxes may share it. Defaults to "okiba_outbox".
	Table string
	// Dialect of the database. Defaults to the one detected from db's driver.
	Dialect dialect.Dialect
	// Now tells the time. Defaults to time.Now.
	Now func() time.Time
}

// Outbox writes messages into an outbox table. It is safe for concurrent use.
type Outbox struct {
	db    *sql.DB
	d     dialect.Dialect
	name  string
	table string
	now   func() time.Time

	qAdd, qNotify, qPending string

	// The instance (Instance), loaded once: rows from firstID on carry it in their dedup
	// ids, older ones the legacy "<name>/<id>".
	instMu  sync.Mutex
	inst    string
	firstID int64
}

// Tx is what Add needs: a *sql.Tx (a *sql.DB or *sql.Conn work too, but then the
// message is not tied to any business change).
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// New returns the outbox called name: 1..64 printable ASCII characters without '/',
// unique among the services that publish to the same queues (it is the first part of
// every dedup id). Call Setup once to create the table.
func New(db *sql.DB, name string, opts Options) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("outbox: New needs a database")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	d, err := dialect.Resolve(db, opts.Dialect)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := dialect.CheckIdent("outbox: Options.Table", opts.Table); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := opts.Table
	o := &Outbox{
		db: db, d: d, name: name, table: t, now: opts.Now,
		qAdd: dialect.T(d, `INSERT INTO {t} (outbox, queue, group_key, body, headers, delay_ms, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, t),
		qPending: dialect.T(d, `SELECT COUNT(*) FROM {t} WHERE outbox = ? AND sent_at IS NULL AND failed_at IS NULL`, t),
	}
	o.qNotify = d.Notify(o.Channel())
	return o, nil
}

func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("outbox: name must be 1..64 characters, got %q", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c > 0x7e || c == '/' {
			return fmt.Errorf("outbox: name %q must be printable ASCII without spaces or '/'", name)
		}
	}
	return nil
}

// Schema returns the statements that create the outbox table in dialect d (what Setup
// runs), for migration tools.
func Schema(d dialect.Dialect, table string) []string {
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id              %[2]s,
	outbox          TEXT    NOT NULL,
	queue           TEXT    NOT NULL,            -- a queue, or "topic:<name>"
	group_key       TEXT    NOT NULL DEFAULT '',
	body            %[3]s   NOT NULL,
	headers         TEXT    NOT NULL DEFAULT '', -- a JSON object, or empty
	delay_ms        BIGINT  NOT NULL DEFAULT -1, -- -1: the queue's delay
	created_at      BIGINT  NOT NULL,            -- Unix milliseconds, like every time here
	attempts        INTEGER NOT NULL DEFAULT 0,  -- failed publish attempts
	next_attempt_at BIGINT  NOT NULL DEFAULT 0,
	last_error      TEXT,
	lease_owner     TEXT,                        -- SQLite's claim on a group's head
	lease_until     BIGINT,
	sent_at         BIGINT,
	message_id      TEXT,                        -- okiba's id once sent: a message id, or a record's "partition/offset"
	failed_at       BIGINT                       -- set when okiba refused the message for good
)`, table, d.AutoIncrement(), d.Blob()),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_pending ON %[1]s (outbox, group_key, id) WHERE sent_at IS NULL AND failed_at IS NULL`, table),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_sent ON %[1]s (outbox, sent_at) WHERE sent_at IS NOT NULL`, table),
		// Each outbox's instance: dedup ids of rows from first_id on carry it.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s_instance (
	outbox   TEXT   NOT NULL PRIMARY KEY,
	instance TEXT   NOT NULL,
	first_id BIGINT NOT NULL
)`, table),
		// Each unsent row's publish attempts, counted before each publish in a transaction
		// of its own (beside the row, whose lock the relay may hold meanwhile).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s_attempts (
	id BIGINT  NOT NULL PRIMARY KEY,
	n  INTEGER NOT NULL
)`, table),
	}
}

// Instance returns the outbox's instance id, the part of its rows' dedup ids that tells
// one life of the table from another, creating it on first use (as Setup does). It is
// random, made once per outbox name and table; an existing table's rows, written before
// it, keep their dedup ids (DedupID).
func (o *Outbox) Instance(ctx context.Context) (string, error) {
	o.instMu.Lock()
	defer o.instMu.Unlock()
	if o.inst != "" {
		return o.inst, nil
	}
	for _, q := range Schema(o.d, o.table)[3:] {
		if _, err := o.db.ExecContext(ctx, q); err != nil {
			return "", fmt.Errorf("outbox: create table: %w", err)
		}
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	inst := fmt.Sprintf("%x", id)
	// first_id: an existing table's rows keep their dedup ids; a new table's first row
	// is 1. Two Setups racing insert once; both then read the one that won.
	ins := dialect.T(o.d, `INSERT INTO {t}_instance (outbox, instance, first_id)
		SELECT ?, ?, COALESCE(MAX(id), 0) + 1 FROM {t} WHERE outbox = ?
		ON CONFLICT (outbox) DO NOTHING`, o.table)
	if _, err := o.db.ExecContext(ctx, ins, o.name, inst, o.name); err != nil {
		return "", fmt.Errorf("outbox: record the instance: %w", err)
	}
	sel := dialect.T(o.d, `SELECT instance, first_id FROM {t}_instance WHERE outbox = ?`, o.table)
	if err := o.db.QueryRowContext(ctx, sel, o.name).Scan(&o.inst, &o.firstID); err != nil {
		o.inst = ""
		return "", fmt.Errorf("outbox: read the instance: %w", err)
	}
	return o.inst, nil
}

// Setup creates the outbox table, its indexes and the tables beside it if they do not
// exist, and the outbox's instance (Instance) if it has none: an existing table is
// migrated in place.
func (o *Outbox) Setup(ctx context.Context) error {
	for _, q := range Schema(o.d, o.table) {
		if _, err := o.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("outbox: create table %s: %w", o.table, err)
		}
	}
	_, err := o.Instance(ctx)
	return err
}

// Name returns the outbox's name.
func (o *Outbox) Name() string { return o.name }

// Table returns the outbox's table.
func (o *Outbox) Table() string { return o.table }

// Channel is the PostgreSQL notification channel on which Add announces new rows
// (package outbox/pgwake listens on it).
func (o *Outbox) Channel() string { return o.table }

// DedupID returns the dedup id the relay publishes the row with id under:
// "<name>/<instance>/<id>", or "<name>/<id>" for a row written before the outbox had an
// instance. It loads the instance (Instance) if Setup or a relay has not, and returns ""
// if that fails.
func (o *Outbox) DedupID(id int64) string {
	inst, err := o.Instance(context.Background())
	if err != nil {
		return ""
	}
	o.instMu.Lock()
	first := o.firstID
	o.instMu.Unlock()
	if id < first {
		return fmt.Sprintf("%s/%d", o.name, id)
	}
	return fmt.Sprintf("%s/%s/%d", o.name, inst, id)
}

// topicPrefix marks a topic destination in the table's queue column: "topic:<name>".
// okiba's names (queues' and topics' alike) have no ':', so no queue name reads as one,
// and the table needs no column of its own for the kind — an existing outbox table
// takes topic rows as it is.
const topicPrefix = "topic:"

// topicOf returns the topic a destination names, if it names one.
func topicOf(dest string) (string, bool) {
	return strings.CutPrefix(dest, topicPrefix)
}

// Add writes m, for queue, into the outbox inside tx, the caller's business transaction,
// and returns its row id. It is published only if tx commits. On PostgreSQL it also
// notifies the outbox's channel, which a listening relay wakes up on when tx commits.
func (o *Outbox) Add(ctx context.Context, tx Tx, queue string, m Message) (int64, error) {
	if queue == "" {
		return 0, errors.New("outbox: Add needs a queue")
	}
	if _, ok := topicOf(queue); ok {
		return 0, fmt.Errorf("outbox: %q names a topic, not a queue: use AddToTopic", queue)
	}
	return o.add(ctx, tx, queue, m)
}

// AddToTopic writes m, for a topic, into the outbox inside tx, as Add does for a queue.
// The relay publishes it as one record (its Publisher must be a TopicPublisher, as
// *client.Client is) with the same dedup id and event id as a queue row, and with
// m.Group as the record's key: the topic places all of a group's records in one
// partition, where the relay's group order makes them appear in row order. Subscribers
// then get it through the topic's subscriptions, so one row reaches every consumer. A
// record has no delay: m.Delay must be 0 (give the subscribed queue a delay instead).
// The relay keeps the row in the queue column as "topic:<name>".
func (o *Outbox) AddToTopic(ctx context.Context, tx Tx, topic string, m Message) (int64, error) {
	if topic == "" {
		return 0, errors.New("outbox: AddToTopic needs a topic")
	}
	if m.Delay != 0 {
		return 0, fmt.Errorf("outbox: a topic record has no delay (got %v); delay the subscribed queue instead", m.Delay)
	}
	return o.add(ctx, tx, topicPrefix+topic, m)
}

func (o *Outbox) add(ctx context.Context, tx Tx, dest string, m Message) (int64, error) {
	if m.Delay < 0 {
		return 0, fmt.Errorf("outbox: negative delay %v", m.Delay)
	}
	headers := ""
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return 0, fmt.Errorf("outbox: headers: %w", err)
		}
		headers = string(b)
	}
	delay := int64(-1)
	if m.Delay > 0 {
		delay = (m.Delay + time.Millisecond - 1).Milliseconds()
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	var id int64
	if err := tx.QueryRowContext(ctx, o.qAdd, o.name, dest, m.Group, body, headers, delay, o.now().UnixMilli()).Scan(&id); err != nil {
		return 0, fmt.Errorf("outbox: add: %w", err)
	}
	if o.qNotify != "" {
		if _, err := tx.ExecContext(ctx, o.qNotify); err != nil {
			return 0, fmt.Errorf("outbox: notify: %w", err)
		}
	}
	return id, nil
}

// legacy reports whether row id predates the outbox's instance: an old relay may have
// published it without counting, so a duplicate on its first counted publish is a repeat.
func (o *Outbox) legacy(id int64) bool {
	o.instMu.Lock()
	defer o.instMu.Unlock()
	return id < o.firstID
}

// Pending counts the rows not yet sent (and not failed for good).
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRowContext(ctx, o.qPending, o.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count pending: %w", err)
	}
	return n, nil
}
