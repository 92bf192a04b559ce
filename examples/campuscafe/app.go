package campuscafe

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest/chaos"
	"github.com/okiba/okiba/outbox"
	"github.com/okiba/okiba/outbox/pgwake"
)

// Options configure the café. The zero value runs an embedded broker with no faults.
type Options struct {
	// Server is the okiba server to use; empty starts an embedded broker in DataDir.
	Server string
	// Token is the bearer token for Server.
	Token string
	// DataDir is the embedded broker's data directory. Required without Server.
	DataDir string
	// BrokerAddr is where the embedded broker listens. Defaults to 127.0.0.1:0 (a free
	// port).
	BrokerAddr string

	// Seed decides every fault (with the message and the delivery).
	Seed uint64
	// AckFailRate is the probability that an ack is lost after processing.
	AckFailRate float64
	// CrashRate is the probability that a consumer crashes after its commit, before
	// its ack (and, for the notifications consumer, also after the gateway call, before
	// the commit).
	CrashRate float64
	// DuplicateRate is the probability that the producer sends an event twice (with a
	// different dedup id, the same event id), beyond what the broker's dedup can catch.
	DuplicateRate float64
	// RestartEvery restarts the embedded broker this often (0: never), counted from the
	// end of the previous restart, so the broker always serves this long in between.
	RestartEvery time.Duration

	// Lease is the consumers' lease (visibility timeout). Defaults to 1s.
	Lease time.Duration
	// Relays is the number of outbox relays. Defaults to 2.
	Relays int
	// Concurrency of each consumer. Defaults to 8.
	Concurrency int

	// Logger receives the café's warnings. Defaults to discarding them.
	Logger *slog.Logger
	// ClientLogger receives the okiba consumer runtime's logs, which are many under
	// chaos (lost leases, retried settles). Defaults to discarding them.
	ClientLogger *slog.Logger
}

// App is a running café: store, broker connection, relays and consumers.
type App struct {
	Store   *Store
	Gateway *Gateway
	// Broker is the embedded broker (nil with Options.Server).
	Broker *chaos.Broker
	// AckFail, Crash and Duplicate are the chaos knobs; change them at run time.
	AckFail, Crash, Duplicate *chaos.Rate

	opts      Options
	url       string
	client    *client.Client
	log       *slog.Logger
	dice      chaos.Dice
	pub       *dupPublisher
	relays    []*outbox.Relay
	consumers []*Consumer

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Start opens the café on db (SQLite or PostgreSQL): it creates the tables, starts or
// connects to the broker, creates the queues, and starts the relays and consumers.
// Close stops it all.
func Start(ctx context.Context, db *sql.DB, opts Options) (*App, error) {
	if opts.Lease <= 0 {
		opts.Lease = time.Second
	}
	if opts.Relays <= 0 {
		opts.Relays = 2
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ClientLogger == nil {
		opts.ClientLogger = slog.New(slog.DiscardHandler)
	}
	store, err := OpenStore(ctx, db)
	if err != nil {
		return nil, err
	}
	a := &App{
		Store: store, Gateway: NewGateway(), opts: opts, log: opts.Logger, dice: chaos.Dice{Seed: opts.Seed},
		AckFail: chaos.NewRate(opts.AckFailRate), Crash: chaos.NewRate(opts.CrashRate), Duplicate: chaos.NewRate(opts.DuplicateRate),
	}
	a.url = opts.Server
	if opts.Server == "" {
		if opts.DataDir == "" {
			return nil, errors.New("campuscafe: Options.DataDir is required for the embedded broker")
		}
		// Small log segments: a reopen reads its last segment to the end (to tell a torn
		// tail from damage), which for the default 64 MiB takes a second under the race
		// detector — as long as the café's restarts are apart. The café writes little.
		a.Broker, err = chaos.StartBroker(broker.Config{Dir: opts.DataDir, SegmentSize: 4 << 20}, opts.BrokerAddr)
		if err != nil {
			return nil, fmt.Errorf("campuscafe: start the embedded broker: %w", err)
		}
		a.url = a.Broker.URL
	} else if opts.RestartEvery > 0 {
		return nil, errors.New("campuscafe: broker restarts need the embedded broker (no --server)")
	}
	if a.client, err = client.New(a.url, client.Options{Token: opts.Token}); err != nil {
		a.closeBroker()
		return nil, err
	}
	if err := a.createTopology(ctx); err != nil {
		a.closeBroker()
		return nil, err
	}
	if a.consumers, err = a.newConsumers(); err != nil {
		a.closeBroker()
		return nil, err
	}
	a.pub = &dupPublisher{c: a.client, dice: a.dice, rate: a.Duplicate}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	var wake chan struct{}
	if store.Dialect.Name() == "postgres" {
		wake = make(chan struct{}, 1)
		a.goRun(func() { pgwake.Listen(runCtx, db, store.Outbox.Channel(), wake) })
	}
	for i := 0; i < opts.Relays; i++ {
		r := store.Outbox.Relay(a.pub, outbox.RelayOptions{
			ID: fmt.Sprintf("relay-%d", i+1), PollInterval: 100 * time.Millisecond, Wake: wake,
			BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second, Logger: a.log,
		})
		a.relays = append(a.relays, r)
		a.goRun(func() { r.Run(runCtx) })
	}
	for _, c := range a.consumers {
		a.goRun(func() { c.run(runCtx) })
	}
	if a.Broker != nil && opts.RestartEvery > 0 {
		a.goRun(func() { a.restartLoop(runCtx) })
	}
	return a, nil
}

func (a *App) goRun(fn func()) {
	a.wg.Add(1)
	go func() { defer a.wg.Done(); fn() }()
}

// Queues lists the café's queues.
var Queues = []string{QueueInventory, QueueInventoryNaive, QueuePoints, QueuePointsNaive, QueueNotifications}

// Subscription is one of the topic's subscriptions: it feeds Queue with the events whose
// type is one of Types (every event when Types is empty).
type Subscription struct {
	Name  string
	Queue string
	Types []string
}

// Subscriptions feed each consumer's queue with the events it acts on — the inventory
// consumers reserve stock on OrderPlaced, the points consumers award points on
// OrderPaid, the notifications consumer writes to the customer on both — so that a
// consumer is not handed events only to skip them.
var Subscriptions = []Subscription{
	{"inventory", QueueInventory, []string{OrderPlaced}},
	{"inventory-naive", QueueInventoryNaive, []string{OrderPlaced}},
	{"points", QueuePoints, []string{OrderPaid}},
	{"points-naive", QueuePointsNaive, []string{OrderPaid}},
	{"notifications", QueueNotifications, nil},
}

// Filter is the subscription's filter policy (docs/filters.md) on the event-type
// header, or nil for every event.
func (s Subscription) Filter() json.RawMessage {
	if len(s.Types) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string][]string{EventTypeHeader: s.Types}) // cannot fail
	return b
}

// createTopology creates the queues, the topic and its subscriptions, or leaves them
// as they are where they exist.
func (a *App) createTopology(ctx context.Context) error {
	unlimited := 0
	for _, q := range Queues {
		_, err := a.client.PutQueue(ctx, q, api.QueueConfig{VisibilityTimeout: api.Ptr(a.opts.Lease), MaxDeliveries: &unlimited})
		if err != nil {
			return fmt.Errorf("campuscafe: create queue %s: %w", q, err)
		}
	}
	return a.createTopic(ctx)
}

// createTopic creates the topic, kept for ever so that a projection can be rebuilt from
// its first record, and subscribes the queues to it from its first record: a
// subscription created after the relays published something (an app that crashed
// between the two, a subscription added later) still gets every event. An existing
// subscription keeps its place.
func (a *App) createTopic(ctx context.Context) error {
	partitions := TopicPartitions
	err := whileRestarting(ctx, func() error {
		_, err := a.client.PutTopic(ctx, Topic, api.TopicConfig{Partitions: &partitions, Retention: &api.Retention{Forever: true}})
		return err
	})
	if err != nil {
		return fmt.Errorf("campuscafe: create topic %s: %w", Topic, err)
	}
	for _, s := range Subscriptions {
		err := whileRestarting(ctx, func() error {
			_, err := a.client.Subscribe(ctx, Topic, s.Name, api.SubscriptionRequest{Queue: s.Queue, Filter: s.Filter(), Start: "first"})
			return err
		})
		if err != nil {
			return fmt.Errorf("campuscafe: subscribe %s to %s: %w", s.Queue, Topic, err)
		}
	}
	return nil
}

// resetTopic deletes the topic, with its subscriptions, and creates them again empty,
// if it has records: those were published for another database (an earlier run
// against the same --server broker), and a rebuild from the topic would count them.
func (a *App) resetTopic(ctx context.Context) error {
	var t *api.Topic
	err := whileRestarting(ctx, func() (err error) {
		t, err = a.client.Topic(ctx, Topic)
		return err
	})
	if err != nil {
		return fmt.Errorf("campuscafe: topic %s: %w", Topic, err)
	}
	if t.Stats.Published == 0 {
		return nil
	}
	err = whileRestarting(ctx, func() error { return a.client.DeleteTopic(ctx, Topic, true) })
	if err != nil && !isCode(err, api.CodeTopicNotFound) {
		return fmt.Errorf("campuscafe: delete topic %s: %w", Topic, err)
	}
	return a.createTopic(ctx)
}

// whileRestarting calls fn again, for up to a minute, while it gets the embedded
// broker's answer during a restart (503 unavailable, given before the request reaches
// any broker, so nothing was done). The consumers and relays ride through restarts on
// their own; the café's own calls to the broker — setting up, the summary, a rebuild —
// must too, with RestartEvery restarting it all along.
func whileRestarting(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil || !isCode(err, api.CodeUnavailable) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// isCode reports whether err is okiba's error with that code.
func isCode(err error, code string) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// URL returns the broker's address.
func (a *App) URL() string { return a.url }

// Client returns a client of the broker.
func (a *App) Client() *client.Client { return a.client }

// Consumers returns the consumers.
func (a *App) Consumers() []*Consumer { return a.consumers }

// Kick wakes the relays (after a transaction that wrote to the outbox).
func (a *App) Kick() {
	for _, r := range a.relays {
		r.Kick()
	}
}

// RelayStats adds up the relays' counters.
func (a *App) RelayStats() outbox.RelayStats {
	var s outbox.RelayStats
	for _, r := range a.relays {
		x := r.Stats()
		s.Rounds += x.Rounds
		s.Published += x.Published
		s.Duplicates += x.Duplicates
		s.Retried += x.Retried
		s.Failed += x.Failed
		s.Reordered += x.Reordered
		s.Cleaned += x.Cleaned
	}
	return s
}

// Injected counts duplicates the producer sent on purpose (DuplicateRate).
func (a *App) Injected() int64 { return a.pub.injected.Load() }

// restartLoop restarts the broker and then lets it serve for RestartEvery before the
// next restart. It counts the interval from the end of a restart, not on a ticker: a
// reopen can take longer than the interval (seconds, on a busy machine under the race
// detector), and a ticker would then restart the broker again at once, so that it
// hardly ever served and nothing settled.
func (a *App) restartLoop(ctx context.Context) {
	t := time.NewTimer(a.opts.RestartEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.Broker.Restart(); err != nil {
				a.log.Error("campuscafe: broker restart failed", "error", err)
				return
			}
			t.Reset(a.opts.RestartEvery)
		}
	}
}

// Drained reports whether everything has settled: no outbox row waits to be published,
// no subscription is behind the topic, and every queue is empty (nothing ready, delayed
// or in flight — a message whose ack was lost is still in flight until its lease ends).
func (a *App) Drained(ctx context.Context) (bool, error) {
	n, err := a.Store.Outbox.Pending(ctx)
	if err != nil || n > 0 {
		return false, err
	}
	// The queues first: while the café is busy one of them is not empty, and the answer
	// costs a request or two. The scenario asks every 50 ms, beside consumers that
	// compete for the same broker.
	if empty, err := a.queuesEmpty(ctx); err != nil || !empty {
		return false, err
	}
	// A subscription behind the topic has events still to copy into its queue. Once none
	// is, the queues are looked at again: a copy may have landed after the first look.
	subs, err := a.client.Subscriptions(ctx, Topic)
	if err != nil {
		return false, err
	}
	for _, s := range subs {
		if s.Lag > 0 {
			return false, nil
		}
	}
	return a.queuesEmpty(ctx)
}

// queuesEmpty reports whether every queue is empty: nothing ready, delayed or in flight.
func (a *App) queuesEmpty(ctx context.Context) (bool, error) {
	for _, q := range Queues {
		x, err := a.client.Queue(ctx, q)
		if err != nil {
			return false, err
		}
		if st := x.Stats; st.Ready+st.Delayed+st.InFlight > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Close stops the consumers, relays and broker restarts, waits for them, and closes the
// embedded broker. The database stays open (it is the caller's).
func (a *App) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	a.cancel()
	a.wg.Wait()
	return a.closeBroker()
}

func (a *App) closeBroker() error {
	if a.Broker == nil {
		return nil
	}
	return a.Broker.Close()
}

// DuplicateHeader marks the copy of an event the duplicate injector publishes, for the
// dice only (faultKey): a consumer's inbox, and a rebuild, must and do recognise the
// copy by its event id alone.
const DuplicateHeader = "campuscafe-duplicate"

// dupPublisher publishes through the client and, with the duplicate rate, sends some
// messages a second time under another dedup id but with the same event id — a
// producer-side duplicate that the broker's dedup window cannot recognise, which only the
// consumers' inboxes catch. For the topic, the copy is a second record, which every
// subscription fans out like the first.
type dupPublisher struct {
	c        *client.Client
	dice     chaos.Dice
	rate     *chaos.Rate
	injected atomic.Int64
}

func (p *dupPublisher) SendBatch(ctx context.Context, queue string, msgs []client.Message) ([]client.SendResult, error) {
	res, err := p.c.SendBatch(ctx, queue, msgs)
	if err != nil || len(res) != len(msgs) {
		return res, err
	}
	var dups []client.Message
	for i, m := range msgs {
		if res[i].Err == nil && !res[i].Duplicate && p.dice.Hit(p.rate.Get(), "duplicate", m.DedupID, 0) {
			d := m
			d.DedupID = m.DedupID + "/dup"
			dups = append(dups, d)
		}
	}
	if len(dups) > 0 {
		if r2, err := p.c.SendBatch(ctx, queue, dups); err == nil {
			for _, r := range r2 {
				if r.Err == nil && !r.Duplicate {
					p.injected.Add(1)
				}
			}
		}
	}
	return res, nil
}

func (p *dupPublisher) PublishRecords(ctx context.Context, topic string, recs []client.Record) ([]client.Published, error) {
	res, err := p.c.PublishRecords(ctx, topic, recs)
	if err != nil || len(res) != len(recs) {
		return res, err
	}
	var dups []client.Record
	for i, r := range recs {
		if res[i].Err == nil && !res[i].Duplicate && p.dice.Hit(p.rate.Get(), "duplicate", r.DedupID, 0) {
			d := r
			d.DedupID = r.DedupID + "/dup"
			d.Headers = maps.Clone(r.Headers)
			d.Headers[DuplicateHeader] = "true"
			dups = append(dups, d)
		}
	}
	if len(dups) > 0 {
		if r2, err := p.c.PublishRecords(ctx, topic, dups); err == nil {
			for _, r := range r2 {
				if r.Err == nil && !r.Duplicate {
					p.injected.Add(1)
				}
			}
		}
	}
	return res, nil
}
