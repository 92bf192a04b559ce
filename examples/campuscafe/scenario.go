package campuscafe

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/outbox"
	"github.com/okiba/okiba/reconcile"
)

// ScenarioOptions shape a bounded run.
type ScenarioOptions struct {
	// Orders to place. Required.
	Orders int
	// PayRate is the share of orders that are paid (decided per order by the dice).
	// Defaults to 0.8.
	PayRate float64
	// Timeout bounds the wait for everything to settle. Defaults to 2 minutes.
	Timeout time.Duration
	// Progress, if set, receives a line now and then while the run waits.
	Progress io.Writer
}

// Summary is the outcome of a scenario: what happened, and the invariants checked.
type Summary struct {
	Orders, Paid int
	Events       int64
	Took         time.Duration
	Options      Options
	Relay        outbox.RelayStats
	Relays       int
	Injected     int64
	Restarts     int64
	// Records is how many records the topic holds (duplicates injected included), and
	// Subscriptions what each subscription did with them.
	Records       uint64
	Subscriptions []api.Subscription
	Consumers     []ConsumerStats
	// Drift of each projection, reconciled against the orders table.
	Drift []reconcile.Drift
	// Points: paid orders with exactly one award, and awards to unpaid orders, for the
	// idempotent ledger and the naive one.
	PaidOrders, ExactlyOne, UnpaidAwards, NaiveExactlyOne int64
	// Notifications: events to notify, recorded exactly once, records, and the gateway.
	NotifyEvents, NotifyOnce, NotifyRecords int64
	Gateway                                 GatewayStats
	// Failures lists the invariants that do not hold; empty means all hold.
	Failures []string
}

// OK reports whether every invariant holds.
func (s *Summary) OK() bool { return len(s.Failures) == 0 }

// RunScenario places opts.Orders orders (paying most of them), one transaction after
// another so that row ids — and with them every fault decision — repeat for a seed,
// waits until every event has been published and consumed, and checks the invariants:
// no drift in the idempotent consumers' projections, exactly one points award per paid
// order, exactly one notification per event. It needs a database without orders, and
// purges the café's queues first.
func (a *App) RunScenario(ctx context.Context, opts ScenarioOptions) (*Summary, error) {
	if opts.Orders <= 0 {
		return nil, fmt.Errorf("campuscafe: the scenario needs a number of orders")
	}
	if opts.PayRate == 0 {
		opts.PayRate = 0.8
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	var existing int
	if err := a.Store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&existing); err != nil {
		return nil, err
	}
	if existing > 0 {
		return nil, fmt.Errorf("campuscafe: the scenario needs a fresh database, and this one has %d orders", existing)
	}
	// Messages left in the café's queues, and records in its topic, by an earlier run (on
	// a --server broker) belong to another database: they would be applied to this one's
	// projections.
	if err := a.resetTopic(ctx); err != nil {
		return nil, err
	}
	for _, q := range Queues {
		if err := whileRestarting(ctx, func() error { _, err := a.client.Purge(ctx, q); return err }); err != nil {
			return nil, fmt.Errorf("campuscafe: purge %s: %w", q, err)
		}
	}
	start := time.Now()
	s := &Summary{Orders: opts.Orders, Options: a.opts, Relays: len(a.relays)}
	for i := 0; i < opts.Orders; i++ {
		id := fmt.Sprintf("o-%05d", i+1)
		item := MenuItems[int(a.dice.Roll("item", id, 0)*float64(len(MenuItems)))]
		qty := 1 + int(a.dice.Roll("qty", id, 0)*3)
		if _, err := a.Store.PlaceOrder(ctx, id, fmt.Sprintf("student-%02d", i%40+1), item, qty); err != nil {
			return nil, fmt.Errorf("place order %s: %w", id, err)
		}
		if a.dice.Roll("pay", id, 0) < opts.PayRate {
			if _, _, err := a.Store.PayOrder(ctx, id); err != nil {
				return nil, fmt.Errorf("pay order %s: %w", id, err)
			}
			s.Paid++
		}
		a.Kick()
	}

	deadline := time.Now().Add(opts.Timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		done, err := a.Drained(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			s.Failures = append(s.Failures, fmt.Sprintf("not settled within %v: %s", opts.Timeout, a.unsettled(ctx)))
			break
		}
		if opts.Progress != nil && time.Since(lastProgress) >= 5*time.Second {
			lastProgress = time.Now()
			pending, _ := a.Store.Outbox.Pending(ctx)
			var deliveries int64
			for _, c := range a.consumers {
				deliveries += c.Stats().Deliveries
			}
			fmt.Fprintf(opts.Progress, "… %s: %d rows to publish, %d deliveries so far\n", time.Since(start).Round(time.Second), pending, deliveries)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	s.Took = time.Since(start)
	return s, a.summarise(ctx, s)
}

// summarise fills in the counters and checks the invariants.
func (a *App) summarise(ctx context.Context, s *Summary) error {
	s.Relay = a.RelayStats()
	if err := a.Store.DB.QueryRowContext(ctx, a.Store.q(`SELECT COUNT(*) FROM `+a.Store.Outbox.Table()+` WHERE outbox = ?`), OutboxName).Scan(&s.Events); err != nil {
		return err
	}
	s.Injected = a.Injected()
	if a.Broker != nil {
		s.Restarts = a.Broker.Restarts()
	}
	var t *api.Topic
	err := whileRestarting(ctx, func() (err error) {
		t, err = a.client.Topic(ctx, Topic)
		return err
	})
	if err != nil {
		return fmt.Errorf("campuscafe: topic %s: %w", Topic, err)
	}
	s.Records = t.Stats.Published
	err = whileRestarting(ctx, func() (err error) {
		s.Subscriptions, err = a.client.Subscriptions(ctx, Topic)
		return err
	})
	if err != nil {
		return fmt.Errorf("campuscafe: subscriptions of %s: %w", Topic, err)
	}
	for _, c := range a.consumers {
		st := c.Stats()
		if c.ib != nil {
			// What is committed, rather than what the consumer saw: a crash can cut a
			// commit's answer off after the database has made it durable.
			if err := a.Store.DB.QueryRowContext(ctx, a.Store.q(`SELECT COUNT(*) FROM `+inboxTable+` WHERE consumer = ?`), c.Name).Scan(&st.Applied); err != nil {
				return err
			}
		}
		s.Consumers = append(s.Consumers, st)
	}
	for _, p := range a.Store.Projections() {
		d, err := reconcile.Check(ctx, a.Store.DB, p)
		if err != nil {
			return err
		}
		s.Drift = append(s.Drift, d)
		if !strings.Contains(d.Projection, "naive") && !d.None() {
			s.Failures = append(s.Failures, fmt.Sprintf("%s drifted: %s", d.Projection, d))
		}
	}
	if s.PaidOrders, s.ExactlyOne, s.UnpaidAwards, err = a.Store.Awards(ctx, false); err != nil {
		return err
	}
	if s.ExactlyOne != s.PaidOrders || s.UnpaidAwards != 0 {
		s.Failures = append(s.Failures, fmt.Sprintf("points: %d of %d paid orders have exactly one award, %d awards for unpaid orders",
			s.ExactlyOne, s.PaidOrders, s.UnpaidAwards))
	}
	if _, s.NaiveExactlyOne, _, err = a.Store.Awards(ctx, true); err != nil {
		return err
	}
	if s.NotifyEvents, s.NotifyOnce, s.NotifyRecords, err = a.Store.Notifications(ctx); err != nil {
		return err
	}
	s.Gateway = a.Gateway.Stats()
	if s.NotifyOnce != s.NotifyEvents || s.NotifyRecords != s.NotifyEvents || s.Gateway.Sent != s.NotifyEvents {
		s.Failures = append(s.Failures, fmt.Sprintf("notifications: %d events, %d recorded once (%d records), %d sent by the gateway",
			s.NotifyEvents, s.NotifyOnce, s.NotifyRecords, s.Gateway.Sent))
	}
	return nil
}

// NaiveDrift adds up the rows the naive consumers' projections got wrong.
func (s *Summary) NaiveDrift() int {
	n := 0
	for _, d := range s.Drift {
		if strings.Contains(d.Projection, "naive") {
			n += d.Total()
		}
	}
	return n
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	o := s.Options
	restarts := "off"
	if o.RestartEvery > 0 {
		restarts = fmt.Sprintf("every %v (%d done)", o.RestartEvery, s.Restarts)
	}
	fmt.Fprintf(w, "CampusCafe scenario — seed %d, lease %v, %d relays\n", o.Seed, o.Lease, s.Relays)
	fmt.Fprintf(w, "chaos: ack-fail-rate %.2f, crash-rate %.2f, duplicate-rate %.2f, broker restarts %s\n\n",
		o.AckFailRate, o.CrashRate, o.DuplicateRate, restarts)
	fmt.Fprintf(w, "orders     %d placed, %d paid → %d events written to the outbox with their orders\n", s.Orders, s.Paid, s.Events)
	fmt.Fprintf(w, "relays     %d relays published each event once to topic %s, keyed by order; %d re-sends absorbed by the topic's dedup, %d publish attempts retried\n",
		s.Relays, Topic, s.Relay.Duplicates, s.Relay.Retried)
	fmt.Fprintf(w, "producer   %d duplicate events injected (new dedup id, same event id)\n", s.Injected)
	fmt.Fprintf(w, "topic      %d records; its subscriptions fanned them out:\n", s.Records)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, sub := range s.Subscriptions {
		filter := "every event"
		if len(sub.Filter) > 0 {
			filter = string(sub.Filter)
		}
		fmt.Fprintf(tw, "  %s\t→ %s\t%s\t%d delivered, %d filtered out\n", sub.Name, sub.Queue, filter, sub.Delivered, sub.Filtered)
	}
	tw.Flush()
	fmt.Fprintf(w, "took       %v\n\n", s.Took.Round(100*time.Millisecond))

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\tinbox\tdeliveries\tapplied\tduplicates skipped\tacks lost\tcrashes\t")
	for _, c := range s.Consumers {
		ib, skipped := "yes", fmt.Sprint(c.Skipped)
		if c.Naive {
			ib, skipped = "no", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t\n", c.Name, ib, c.Deliveries, c.Applied, skipped, c.AcksLost, c.Crashes)
	}
	tw.Flush()

	fmt.Fprintln(w, "\ndrift against the orders table (reconciliation)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, d := range s.Drift {
		verdict := "ok"
		switch {
		case strings.Contains(d.Projection, "naive") && !d.None():
			verdict = "DRIFT (no inbox: duplicates applied twice)"
		case strings.Contains(d.Projection, "naive"):
			verdict = "no drift this time"
		case !d.None():
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", d.Projection, d, verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "  naive consumers' drift: %d rows; idempotent consumers' drift: %d rows\n\n", s.NaiveDrift(), s.idempotentDrift())

	verdict := "ok"
	if s.ExactlyOne != s.PaidOrders || s.UnpaidAwards != 0 {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "points per paid order: exactly one for %d of %d paid orders, %d awards to unpaid orders  %s\n",
		s.ExactlyOne, s.PaidOrders, s.UnpaidAwards, verdict)
	fmt.Fprintf(w, "  (naive ledger: exactly one for %d of %d)\n", s.NaiveExactlyOne, s.PaidOrders)
	verdict = "ok"
	if s.NotifyOnce != s.NotifyEvents || s.NotifyRecords != s.NotifyEvents || s.Gateway.Sent != s.NotifyEvents {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "notifications: %d events, %d sent once by the gateway, %d repeats refused by idempotency key  %s\n\n",
		s.NotifyEvents, s.Gateway.Sent, s.Gateway.Repeats, verdict)
	if s.OK() {
		fmt.Fprintln(w, "result: every invariant holds")
		return
	}
	fmt.Fprintln(w, "result: INVARIANTS FAILED")
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

func (s *Summary) idempotentDrift() int {
	n := 0
	for _, d := range s.Drift {
		if !strings.Contains(d.Projection, "naive") {
			n += d.Total()
		}
	}
	return n
}

// unsettled describes what is still pending, for a timeout's message.
func (a *App) unsettled(ctx context.Context) string {
	var parts []string
	if n, err := a.Store.Outbox.Pending(ctx); err != nil || n > 0 {
		parts = append(parts, fmt.Sprintf("%d outbox rows unsent (%v)", n, err))
	}
	subs, err := a.client.Subscriptions(ctx, Topic)
	if err != nil {
		parts = append(parts, fmt.Sprintf("subscriptions of %s: %v", Topic, err))
	}
	for _, s := range subs {
		if s.Lag > 0 {
			parts = append(parts, fmt.Sprintf("subscription %s: %d records behind (paused %v)", s.Name, s.Lag, s.Paused))
		}
	}
	for _, q := range Queues {
		x, err := a.client.Queue(ctx, q)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", q, err))
			continue
		}
		if st := x.Stats; st.Ready+st.Delayed+st.InFlight > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d ready, %d delayed, %d in flight", q, st.Ready, st.Delayed, st.InFlight))
		}
	}
	return strings.Join(parts, "; ")
}
