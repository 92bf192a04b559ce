// Package campuscafe is the CampusCafe walkthrough of okiba's effectively-once toolkit:
// a small café ordering system that lives in the at-least-once world and stays correct.
//
// The orders API writes each order to its database and, in the same transaction, an
// OrderPlaced (and later OrderPaid) event to the transactional outbox; relays publish
// each event once, to the topic campuscafe-orders, keyed by order; the topic's
// subscriptions fan the events out into one queue per consumer, filtered on the event
// type, and the consumers maintain
//
//   - an inventory projection of quantity reserved per item (with an inbox),
//   - a points ledger with exactly one award per paid order (with an inbox),
//   - notifications sent through an external gateway, keyed by an idempotency key
//     derived from the message (with an inbox),
//
// and, beside the first two, naive consumers without an inbox that keep the same
// projections in their own tables, so that the difference is visible in numbers. The
// topic keeps every event for ever, so the inventory projection can also be rebuilt by
// replaying it from offset 0 (RebuildInventory), and checked against the orders.
//
// Chaos knobs inject the faults of the at-least-once world, each decided by a hash of a
// seed, the message and the delivery (package okibatest/chaos): lost acks, consumer
// crashes after the commit and before the ack, duplicates sent by the producer, and
// broker restarts. Run it with `okiba demo campuscafe`; README.md walks through it.
package campuscafe

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/dialect"
	"github.com/okiba/okiba/inbox"
	"github.com/okiba/okiba/outbox"
)

// Topic is where every order event is published, once: keyed by order id, so that one
// order's events are in one partition, in order; kept for ever, so that a projection can
// be rebuilt from it.
const Topic = "campuscafe-orders"

// TopicPartitions is the topic's partition count (fixed at its creation).
const TopicPartitions = 4

// EventTypeHeader carries an event's type on its record, for the subscriptions'
// filters.
const EventTypeHeader = "event-type"

// Queues, one per consumer, each fed by a subscription of Topic (Subscriptions).
const (
	QueueInventory      = "cafe-inventory"
	QueueInventoryNaive = "cafe-inventory-naive"
	QueuePoints         = "cafe-points"
	QueuePointsNaive    = "cafe-points-naive"
	QueueNotifications  = "cafe-notifications"
)

// OutboxName is the outbox's name: dedup ids are "campuscafe/<row id>".
const OutboxName = "campuscafe"

// inboxTable holds the consumers' inboxes.
const inboxTable = inbox.DefaultTable

// Event types.
const (
	OrderPlaced = "OrderPlaced"
	OrderPaid   = "OrderPaid"
)

// Event is the body of every message, as JSON.
type Event struct {
	Type        string    `json:"type"`
	OrderID     string    `json:"order_id"`
	Customer    string    `json:"customer"`
	Item        string    `json:"item"`
	Qty         int       `json:"qty"`
	AmountCents int64     `json:"amount_cents"`
	At          time.Time `json:"at"`
}

// Order is a row of the orders table, the source of truth.
type Order struct {
	ID          string     `json:"id"`
	Customer    string     `json:"customer"`
	Item        string     `json:"item"`
	Qty         int        `json:"qty"`
	AmountCents int64      `json:"amount_cents"`
	Status      string     `json:"status"` // placed, paid
	CreatedAt   time.Time  `json:"created_at"`
	PaidAt      *time.Time `json:"paid_at,omitempty"`
}

// Menu is what the café sells, with prices in cents.
var Menu = map[string]int64{"latte": 420, "espresso": 300, "matcha": 480, "scone": 350, "bagel": 390, "onigiri": 250}

// MenuItems is Menu's items in a fixed order.
var MenuItems = []string{"bagel", "espresso", "latte", "matcha", "onigiri", "scone"}

// PointsFor is the points a paid order earns: one per full 100 cents.
func PointsFor(amountCents int64) int64 { return amountCents / 100 }

// ErrNotFound is returned for an unknown order.
var ErrNotFound = errors.New("no such order")

// schema creates the café's tables (the outbox and inbox tables are the toolkit's).
func schema(d dialect.Dialect) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS orders (
			id           TEXT PRIMARY KEY,
			customer     TEXT    NOT NULL,
			item         TEXT    NOT NULL,
			qty          INTEGER NOT NULL,
			amount_cents BIGINT  NOT NULL,
			status       TEXT    NOT NULL,
			created_at   BIGINT  NOT NULL,
			paid_at      BIGINT
		)`,
		`CREATE TABLE IF NOT EXISTS inventory (item TEXT PRIMARY KEY, reserved INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS inventory_naive (item TEXT PRIMARY KEY, reserved INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + RebuildTable + ` (item TEXT PRIMARY KEY, reserved INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS points_ledger (
			id       ` + d.AutoIncrement() + `,
			order_id TEXT   NOT NULL,
			customer TEXT   NOT NULL,
			points   BIGINT NOT NULL,
			event_id TEXT   NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS points_ledger_naive (
			id       ` + d.AutoIncrement() + `,
			order_id TEXT   NOT NULL,
			customer TEXT   NOT NULL,
			points   BIGINT NOT NULL,
			event_id TEXT   NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS notifications (
			idempotency_key TEXT   NOT NULL,
			order_id        TEXT   NOT NULL,
			kind            TEXT   NOT NULL,
			sent_at         BIGINT NOT NULL
		)`,
	}
}

// Store is the café's database: the orders (source of truth), the outbox, the inboxes
// and the projections.
type Store struct {
	DB      *sql.DB
	Dialect dialect.Dialect
	Outbox  *outbox.Outbox
	now     func() time.Time
}

// OpenStore sets up the café's tables, the outbox and the inbox table in db.
func OpenStore(ctx context.Context, db *sql.DB) (*Store, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(db, OutboxName, outbox.Options{Dialect: d})
	if err != nil {
		return nil, err
	}
	s := &Store{DB: db, Dialect: d, Outbox: ob, now: time.Now}
	for _, q := range schema(d) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("campuscafe: create tables: %w", err)
		}
	}
	if err := ob.Setup(ctx); err != nil {
		return nil, err
	}
	for _, q := range inbox.Schema(d, inbox.DefaultTable) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("campuscafe: create inbox table: %w", err)
		}
	}
	return s, nil
}

func (s *Store) q(query string) string { return s.Dialect.Rebind(query) }

// publish writes ev into the outbox, inside tx, as one row for the topic: the
// subscriptions, not the producer, decide which consumers get it. The order id is the
// row's group, and so the record's key.
func (s *Store) publish(ctx context.Context, tx *sql.Tx, ev Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("campuscafe: encode %s: %w", ev.Type, err)
	}
	_, err = s.Outbox.AddToTopic(ctx, tx, Topic, outbox.Message{
		Body: body, Group: ev.OrderID,
		Headers: map[string]string{"content-type": "application/json", EventTypeHeader: ev.Type},
	})
	return err
}

// PlaceOrder records an order and its OrderPlaced event in one transaction.
func (s *Store) PlaceOrder(ctx context.Context, id, customer, item string, qty int) (Order, error) {
	price, ok := Menu[item]
	if !ok {
		return Order{}, fmt.Errorf("unknown item %q (the menu: %v)", item, MenuItems)
	}
	if qty < 1 || qty > 20 {
		return Order{}, fmt.Errorf("qty must be 1..20, got %d", qty)
	}
	if customer == "" {
		return Order{}, errors.New("customer is required")
	}
	now := s.now().Truncate(time.Millisecond)
	o := Order{ID: id, Customer: customer, Item: item, Qty: qty, AmountCents: price * int64(qty), Status: "placed", CreatedAt: now}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return Order{}, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO orders (id, customer, item, qty, amount_cents, status, created_at)
		VALUES (?, ?, ?, ?, ?, 'placed', ?)`), o.ID, o.Customer, o.Item, o.Qty, o.AmountCents, now.UnixMilli()); err != nil {
		return Order{}, fmt.Errorf("insert order: %w", err)
	}
	ev := Event{Type: OrderPlaced, OrderID: o.ID, Customer: o.Customer, Item: o.Item, Qty: o.Qty, AmountCents: o.AmountCents, At: now}
	if err := s.publish(ctx, tx, ev); err != nil {
		return Order{}, err
	}
	return o, tx.Commit()
}

// PayOrder marks an order paid and records its OrderPaid event, in one transaction.
// Paying twice is harmless: the update is conditional (status must be placed), so the
// second payment changes nothing and emits nothing (paid reports false).
func (s *Store) PayOrder(ctx context.Context, id string) (o Order, paid bool, err error) {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return Order{}, false, err
	}
	defer tx.Rollback()
	now := s.now().Truncate(time.Millisecond)
	changed, err := inbox.Apply(ctx, tx, s.q(`UPDATE orders SET status = 'paid', paid_at = ? WHERE id = ? AND status = 'placed'`), now.UnixMilli(), id)
	if err != nil {
		return Order{}, false, err
	}
	o, err = s.order(ctx, tx, id)
	if err != nil {
		return Order{}, false, err
	}
	if changed {
		ev := Event{Type: OrderPaid, OrderID: o.ID, Customer: o.Customer, Item: o.Item, Qty: o.Qty, AmountCents: o.AmountCents, At: now}
		if err := s.publish(ctx, tx, ev); err != nil {
			return Order{}, false, err
		}
	}
	return o, changed, tx.Commit()
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

const orderCols = `id, customer, item, qty, amount_cents, status, created_at, paid_at`

func (s *Store) order(ctx context.Context, q queryer, id string) (Order, error) {
	os, err := s.orders(ctx, q, `SELECT `+orderCols+` FROM orders WHERE id = ?`, id)
	if err != nil {
		return Order{}, err
	}
	if len(os) == 0 {
		return Order{}, ErrNotFound
	}
	return os[0], nil
}

// Orders lists the latest orders, newest first.
func (s *Store) Orders(ctx context.Context, limit int) ([]Order, error) {
	return s.orders(ctx, s.DB, `SELECT `+orderCols+` FROM orders ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
}

func (s *Store) orders(ctx context.Context, q queryer, query string, args ...any) ([]Order, error) {
	rows, err := q.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		var created int64
		var paid sql.NullInt64
		if err := rows.Scan(&o.ID, &o.Customer, &o.Item, &o.Qty, &o.AmountCents, &o.Status, &created, &paid); err != nil {
			return nil, err
		}
		o.CreatedAt = time.UnixMilli(created).UTC()
		if paid.Valid {
			t := time.UnixMilli(paid.Int64).UTC()
			o.PaidAt = &t
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// Inventory returns reserved quantity per item from the idempotent projection (naive
// false) or the naive one.
func (s *Store) Inventory(ctx context.Context, naive bool) (map[string]int64, error) {
	table := "inventory"
	if naive {
		table = "inventory_naive"
	}
	return s.sums(ctx, `SELECT item, reserved FROM `+table)
}

// Points returns points per customer from the idempotent ledger or the naive one.
func (s *Store) Points(ctx context.Context, naive bool) (map[string]int64, error) {
	table := "points_ledger"
	if naive {
		table = "points_ledger_naive"
	}
	return s.sums(ctx, `SELECT customer, SUM(points) FROM `+table+` GROUP BY customer`)
}

func (s *Store) sums(ctx context.Context, query string) (map[string]int64, error) {
	rows, err := s.DB.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}
