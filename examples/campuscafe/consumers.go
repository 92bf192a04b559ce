package campuscafe

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/inbox"
	"github.com/okiba/okiba/okibatest/chaos"
	"github.com/okiba/okiba/outbox"
)

// Consumer is one of the café's consumers, run under chaos: a crash ends its current
// incarnation (everything it would still send is lost, as with a dead process) and a new
// incarnation starts at once, as a supervisor would restart it.
type Consumer struct {
	Name  string
	Queue string
	// Naive consumers have no inbox: every delivery applies its effect.
	Naive bool

	app   *App
	ib    *inbox.Inbox
	apply func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, inc *incarnation) error

	deliveries, applied, acksLost, crashes, bad atomic.Int64
}

// ConsumerStats are a consumer's counters.
type ConsumerStats struct {
	Name  string `json:"name"`
	Queue string `json:"queue"`
	Naive bool   `json:"naive"`
	// Deliveries is how many deliveries reached the handler.
	Deliveries int64 `json:"deliveries"`
	// Applied is how many times the effect was committed.
	Applied int64 `json:"applied"`
	// Skipped counts duplicates the inbox recognised and skipped (0 for naive ones).
	Skipped  int64 `json:"duplicates_skipped"`
	AcksLost int64 `json:"acks_lost"`
	Crashes  int64 `json:"crashes"`
	// BadEvents were dead-lettered because they could not be decoded.
	BadEvents int64 `json:"bad_events"`
}

// Stats returns the counters.
func (c *Consumer) Stats() ConsumerStats {
	s := ConsumerStats{Name: c.Name, Queue: c.Queue, Naive: c.Naive, Deliveries: c.deliveries.Load(),
		Applied: c.applied.Load(), AcksLost: c.acksLost.Load(), Crashes: c.crashes.Load(), BadEvents: c.bad.Load()}
	if c.ib != nil {
		st := c.ib.Stats()
		s.Applied, s.Skipped = st.Processed, st.Duplicates
	}
	return s
}

// incarnation is one life of a consumer: its own client transport, which a crash kills.
type incarnation struct {
	c     *Consumer
	tr    *chaos.Transport
	hard  chan struct{}
	stop  context.CancelFunc
	crash sync.Once
}

// die kills the incarnation: nothing it sends from now on reaches the broker, and its
// consumer runtime stops at once.
func (inc *incarnation) die() {
	inc.crash.Do(func() {
		inc.tr.Crash()
		inc.c.crashes.Add(1)
		close(inc.hard)
		inc.stop()
	})
}

var errCrashed = errors.New("campuscafe: consumer crashed (simulated)")

// run keeps the consumer running, one incarnation after another, until ctx ends.
func (c *Consumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		ictx, stop := context.WithCancel(ctx)
		// The incarnation's connections are its own, and closed when it ends, as a dead
		// process's would be: left open, every crash would leave a pool of them behind,
		// and a connection dialled but never used holds the broker's Close (an HTTP
		// server's Shutdown waits 5 s for such a connection's first request).
		conns := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
		inc := &incarnation{c: c, tr: chaos.NewTransport(conns), hard: make(chan struct{}), stop: stop}
		cl, err := client.New(c.app.url, client.Options{Token: c.app.opts.Token, HTTPClient: &http.Client{Transport: inc.tr}})
		if err != nil {
			stop()
			c.app.log.Error("campuscafe: consumer client", "consumer", c.Name, "error", err)
			return
		}
		err = cl.Consume(ictx, c.Queue, c.handler(inc), client.ConsumeOptions{
			Concurrency: c.app.opts.Concurrency, Visibility: c.app.opts.Lease, PollWait: 2 * time.Second,
			HardStop: inc.hard, DrainTimeout: 5 * time.Second, Logger: c.app.opts.ClientLogger,
		})
		stop()
		conns.CloseIdleConnections()
		if err != nil && ctx.Err() == nil {
			c.app.log.Warn("campuscafe: consumer stopped; restarting", "consumer", c.Name, "error", err)
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// handler processes one delivery with the consumer's effect — inside its inbox
// transaction, or, for a naive consumer, in a transaction of its own — and then injects
// the faults the dice decide: a crash after the commit (before the ack), or a lost ack.
func (c *Consumer) handler(inc *incarnation) client.Handler {
	var process client.Handler
	if c.Naive {
		process = func(ctx context.Context, d *client.Delivery) error {
			ev, err := decode(d)
			if err != nil {
				return err
			}
			tx, err := c.app.Store.DB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := c.apply(ctx, tx, ev, d, inc); err != nil {
				tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			c.applied.Add(1)
			return nil
		}
	} else {
		process = c.ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			ev, err := decode(d)
			if err != nil {
				return err
			}
			return c.apply(ctx, tx, ev, d, inc)
		})
	}
	return func(ctx context.Context, d *client.Delivery) error {
		if inc.tr.Crashed() {
			return errCrashed // a dead process does nothing
		}
		c.deliveries.Add(1)
		err := process(ctx, d)
		var dl *client.DeadLetterError
		if errors.As(err, &dl) {
			c.bad.Add(1)
		}
		if err != nil {
			return err
		}
		key, attempt := c.Name+"/"+faultKey(d), uint64(d.Deliveries)
		if c.app.dice.Hit(c.app.Crash.Get(), "crash-after-commit", key, attempt) {
			inc.die()
			return nil
		}
		if c.app.dice.Hit(c.app.AckFail.Get(), "ack-lost", key, attempt) {
			inc.tr.LoseAck(d.Receipt)
			c.acksLost.Add(1)
		}
		return nil
	}
}

// faultKey identifies a message for the dice: its event id, which the outbox assigns
// from the row id, marked for the duplicate injector's copy, so that a seed replays the
// same faults for the same rows — whatever partition and offset the relays' interleaving
// gave their records; else its dedup id, else its message id.
func faultKey(d *client.Delivery) string {
	if id := d.Headers[outbox.EventIDHeader]; id != "" {
		if d.Headers[DuplicateHeader] != "" {
			return id + "/dup"
		}
		return id
	}
	if d.DedupID != "" {
		return d.DedupID
	}
	return d.ID
}

func decode(d *client.Delivery) (Event, error) {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil || ev.OrderID == "" {
		return ev, client.DeadLetter("bad_event", fmt.Sprintf("not a CampusCafe event: %v", err))
	}
	return ev, nil
}

// newConsumers builds the café's consumers.
func (a *App) newConsumers() ([]*Consumer, error) {
	s := a.Store
	reserve := func(table string) func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, _ *incarnation) error {
		q := s.q(`INSERT INTO ` + table + ` (item, reserved) VALUES (?, ?)
			ON CONFLICT (item) DO UPDATE SET reserved = ` + table + `.reserved + excluded.reserved`)
		return func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, _ *incarnation) error {
			if ev.Type != OrderPlaced {
				return nil
			}
			_, err := tx.ExecContext(ctx, q, ev.Item, ev.Qty)
			return err
		}
	}
	award := func(table string) func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, _ *incarnation) error {
		q := s.q(`INSERT INTO ` + table + ` (order_id, customer, points, event_id) VALUES (?, ?, ?, ?)`)
		return func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, _ *incarnation) error {
			if ev.Type != OrderPaid {
				return nil
			}
			_, err := tx.ExecContext(ctx, q, ev.OrderID, ev.Customer, PointsFor(ev.AmountCents), inbox.Key(d))
			return err
		}
	}
	notifyQ := s.q(`INSERT INTO notifications (idempotency_key, order_id, kind, sent_at) VALUES (?, ?, ?, ?)`)
	notify := func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, inc *incarnation) error {
		kind, text := "placed", fmt.Sprintf("Thanks %s! Your %d × %s is being prepared.", ev.Customer, ev.Qty, ev.Item)
		if ev.Type == OrderPaid {
			kind, text = "paid", fmt.Sprintf("Paid: %d.%02d for order %s. You earned %d points.", ev.AmountCents/100, ev.AmountCents%100, ev.OrderID, PointsFor(ev.AmountCents))
		}
		// The gateway cannot join our transaction: it gets an idempotency key derived
		// from the message key, the same on every redelivery.
		key := inbox.IdempotencyKey("notifications", inbox.Key(d), "notify")
		if err := a.Gateway.Send(ctx, key, ev.Customer, text); err != nil {
			return client.RetryAfter(100 * time.Millisecond)
		}
		// The one crash an inbox cannot cover: after the external call, before the
		// commit. The redelivery calls the gateway again, with the same key.
		if a.dice.Hit(a.Crash.Get(), "crash-before-commit", "notifications/"+faultKey(d), uint64(d.Deliveries)) {
			inc.die()
			return errCrashed
		}
		_, err := tx.ExecContext(ctx, notifyQ, key, ev.OrderID, kind, time.Now().UnixMilli())
		return err
	}
	defs := []struct {
		name, queue string
		naive       bool
		apply       func(ctx context.Context, tx *sql.Tx, ev Event, d *client.Delivery, inc *incarnation) error
	}{
		{"inventory", QueueInventory, false, reserve("inventory")},
		{"points", QueuePoints, false, award("points_ledger")},
		{"notifications", QueueNotifications, false, notify},
		{"inventory-naive", QueueInventoryNaive, true, reserve("inventory_naive")},
		{"points-naive", QueuePointsNaive, true, award("points_ledger_naive")},
	}
	var out []*Consumer
	for _, d := range defs {
		c := &Consumer{Name: d.name, Queue: d.queue, Naive: d.naive, app: a, apply: d.apply}
		if !d.naive {
			ib, err := inbox.New(s.DB, d.name, inbox.Options{Dialect: s.Dialect, Logger: a.log})
			if err != nil {
				return nil, err
			}
			c.ib = ib
		}
		out = append(out, c)
	}
	return out, nil
}
