package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/okibatest/chaos"
	"github.com/okiba/okiba/outbox"
	"github.com/okiba/okiba/outbox/pgwake"
)

// The conformance suite: every test runs on SQLite and on PostgreSQL.

func newOutbox(t *testing.T, db *dbtest.DB, name string) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(db.DB, name, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ob
}

// add commits one transaction with the given messages for queue.
func add(t *testing.T, db *dbtest.DB, ob *outbox.Outbox, queue string, msgs ...outbox.Message) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, m := range msgs {
		id, err := ob.Add(ctx, tx, queue, m)
		if err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// peekAll returns every message of a queue in arrival order.
func peekAll(t *testing.T, c *client.Client, queue string) []api.Message {
	t.Helper()
	var out []api.Message
	opts := client.PeekOptions{Limit: 1000}
	for {
		p, err := c.Peek(context.Background(), queue, opts)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Messages...)
		if p.Next == "" {
			return out
		}
		opts.After = p.Next
	}
}

func pending(t *testing.T, ob *outbox.Outbox) int64 {
	t.Helper()
	n, err := ob.Pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func runRelay(t *testing.T, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func TestAddPublishesOnlyCommitted(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		ob := newOutbox(t, db, "orders")

		// A rolled-back business transaction leaves no message.
		tx, _ := db.BeginTx(ctx, nil)
		if _, err := ob.Add(ctx, tx, "events", outbox.Message{Body: []byte("rolled back")}); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		ids := add(t, db, ob, "events",
			outbox.Message{Body: []byte("placed"), Group: "o1", Headers: map[string]string{"content-type": "application/json"}},
			outbox.Message{Body: []byte("paid"), Group: "o1", Headers: map[string]string{"event-id": "evt-paid-o1"}})
		if pending(t, ob) != 2 {
			t.Fatalf("pending %d, want 2", pending(t, ob))
		}
		r := ob.Relay(srv.Client, outbox.RelayOptions{})
		if n, err := r.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("RunOnce: %d groups, %v; want 1 group", n, err)
		}
		if pending(t, ob) != 0 {
			t.Fatalf("pending %d after a round", pending(t, ob))
		}
		msgs := peekAll(t, srv.Client, "events")
		if len(msgs) != 2 {
			t.Fatalf("%d messages, want 2", len(msgs))
		}
		m0, m1 := msgs[0], msgs[1]
		if *m0.Body != "placed" || m0.Group != "o1" || m0.DedupID != ob.DedupID(ids[0]) || !strings.HasPrefix(m0.DedupID, "orders/") ||
			m0.Headers["event-id"] != m0.DedupID || m0.Headers["content-type"] != "application/json" {
			t.Errorf("first message %+v", m0)
		}
		if *m1.Body != "paid" || m1.Headers["event-id"] != "evt-paid-o1" || m1.DedupID != ob.DedupID(ids[1]) {
			t.Errorf("second message %+v", m1)
		}
		if st := r.Stats(); st.Published != 2 || st.Duplicates != 0 {
			t.Errorf("stats %+v", st)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 0 {
			t.Fatalf("idle round: %d, %v", n, err)
		}
	})
}

// Several relays at once keep every group's order and publish each row once.
func TestConcurrentRelaysKeepGroupOrder(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		srv.CreateQueue(t, "audit")
		ob := newOutbox(t, db, "svc")
		const groups, perGroup, loose = 25, 16, 40
		// Rows of all groups interleaved, in many small transactions, while relays run.
		var relays []*outbox.Relay
		for i := 0; i < 4; i++ {
			r := ob.Relay(srv.Client, outbox.RelayOptions{Groups: 3 + i, PerGroup: 2 + i, PollInterval: 5 * time.Millisecond})
			relays = append(relays, r)
			runRelay(t, r)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		next := make([]int, groups)
		total := 0
		for total < groups*perGroup {
			var msgs []outbox.Message
			for k := 0; k < 1+rng.IntN(4) && total < groups*perGroup; k++ {
				g := rng.IntN(groups)
				if next[g] == perGroup {
					continue
				}
				msgs = append(msgs, outbox.Message{Group: "g" + strconv.Itoa(g), Body: []byte(strconv.Itoa(next[g]))})
				next[g]++
				total++
			}
			if len(msgs) > 0 {
				add(t, db, ob, "events", msgs...)
			}
		}
		for i := 0; i < loose; i++ {
			add(t, db, ob, "audit", outbox.Message{Body: []byte("a" + strconv.Itoa(i))})
		}
		testkit.Eventually(t, 30*time.Second, func() bool { return pending(t, ob) == 0 },
			"every row published; %s", testkit.Lazy(func() string { return fmt.Sprintf("%d rows pending", pending(t, ob)) }))
		msgs := peekAll(t, srv.Client, "events")
		if len(msgs) != groups*perGroup {
			t.Fatalf("%d messages in the queue, want %d (each row once)", len(msgs), groups*perGroup)
		}
		seen := map[string]int{}
		for _, m := range msgs {
			want := strconv.Itoa(seen[m.Group])
			if *m.Body != want {
				t.Fatalf("group %s: got %s where %s was next: order lost", m.Group, *m.Body, want)
			}
			seen[m.Group]++
		}
		if n := len(peekAll(t, srv.Client, "audit")); n != loose {
			t.Fatalf("%d ungrouped messages, want %d", n, loose)
		}
		var published int64
		for _, r := range relays {
			published += r.Stats().Published
		}
		if published != groups*perGroup+loose {
			t.Fatalf("relays marked %d rows, want %d", published, groups*perGroup+loose)
		}
	})
}

// crashingPublisher publishes, then "crashes" the relay before it marks the rows sent.
type crashingPublisher struct {
	c     *client.Client
	crash context.CancelFunc
}

func (p *crashingPublisher) SendBatch(ctx context.Context, q string, msgs []client.Message) ([]client.SendResult, error) {
	res, err := p.c.SendBatch(ctx, q, msgs)
	p.crash()
	return res, err
}

// A relay that dies between publishing and marking publishes nothing twice: the next
// relay's sends are absorbed by the broker's dedup window.
func TestRelayCrashBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		ob := newOutbox(t, db, "svc")
		const n = 30
		var msgs []outbox.Message
		for i := 0; i < n; i++ {
			msgs = append(msgs, outbox.Message{Group: "g" + strconv.Itoa(i%3), Body: []byte(strconv.Itoa(i))})
		}
		add(t, db, ob, "events", msgs...)

		ctx, crash := context.WithCancel(context.Background())
		dying := ob.Relay(&crashingPublisher{c: srv.Client, crash: crash}, outbox.RelayOptions{Lease: 300 * time.Millisecond})
		if _, err := dying.RunOnce(ctx); err == nil {
			t.Fatal("the crashed round should fail")
		}
		if len(peekAll(t, srv.Client, "events")) != n || pending(t, ob) != n {
			t.Fatalf("after the crash: %d messages, %d rows pending; want %d and %d", len(peekAll(t, srv.Client, "events")), pending(t, ob), n, n)
		}
		// The next relay (once the dead one's lease ends, on SQLite) publishes again.
		next := ob.Relay(srv.Client, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		runRelay(t, next)
		testkit.Eventually(t, 10*time.Second, func() bool { return pending(t, ob) == 0 }, "every row published")
		got := peekAll(t, srv.Client, "events")
		if len(got) != n {
			t.Fatalf("%d messages, want %d: the broker's dedup should absorb the republished rows", len(got), n)
		}
		if st := next.Stats(); st.Duplicates != n || st.FirstDuplicates != 0 {
			t.Fatalf("stats %+v: every republished row should come back as a duplicate, none as on its first publish", st)
		}
		q, _ := srv.Client.Queue(context.Background(), "events")
		if q.Stats.DedupHits != n {
			t.Fatalf("broker dedup hits %d, want %d", q.Stats.DedupHits, n)
		}
	})
}

// The relay retries with backoff while the queue is missing and while the broker
// restarts, and loses nothing.
func TestRelayRetriesThroughMissingQueueAndRestart(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		b, err := chaos.StartBroker(broker.Config{Dir: t.TempDir()}, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		c, _ := client.New(b.URL, client.Options{})
		ob := newOutbox(t, db, "svc")
		r := ob.Relay(c, outbox.RelayOptions{PollInterval: 5 * time.Millisecond, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
		runRelay(t, r)
		add(t, db, ob, "late", outbox.Message{Group: "g", Body: []byte("0")}, outbox.Message{Group: "g", Body: []byte("1")})
		testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Retried >= 2 },
			"two retries; relay %s", testkit.Lazy(func() string { return fmt.Sprintf("%+v", r.Stats()) }))
		if _, err := c.PutQueue(context.Background(), "late", api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return pending(t, ob) == 0 }, "every row published once the queue exists")
		for i := 2; i < 40; i++ {
			add(t, db, ob, "late", outbox.Message{Group: "g", Body: []byte(strconv.Itoa(i))})
			if i%10 == 0 {
				if err := b.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return pending(t, ob) == 0 }, "every row published through the restarts")
		msgs := peekAll(t, c, "late")
		if len(msgs) != 40 {
			t.Fatalf("%d messages, want 40", len(msgs))
		}
		for i, m := range msgs {
			if *m.Body != strconv.Itoa(i) {
				t.Fatalf("message %d is %s: order lost", i, *m.Body)
			}
		}
	})
}

// A row the broker refuses for good is marked failed, and its group moves on.
func TestPermanentFailureMovesGroupOn(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		size := int64(1024)
		srv.PutQueue(t, "small", api.QueueConfig{MaxMessageSize: &size})
		ob := newOutbox(t, db, "svc")
		add(t, db, ob, "small",
			outbox.Message{Group: "g", Body: []byte("a")},
			outbox.Message{Group: "g", Body: []byte(strings.Repeat("x", 4096))},
			outbox.Message{Group: "g", Body: []byte("c")})
		r := ob.Relay(srv.Client, outbox.RelayOptions{})
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		msgs := peekAll(t, srv.Client, "small")
		if len(msgs) != 2 || *msgs[0].Body != "a" || *msgs[1].Body != "c" {
			t.Fatalf("messages %v", msgs)
		}
		if st := r.Stats(); st.Failed != 1 || st.Published != 2 {
			t.Fatalf("stats %+v", st)
		}
		var lastErr string
		db.QueryRow(`SELECT last_error FROM okiba_outbox WHERE failed_at IS NOT NULL`).Scan(&lastErr)
		if !strings.Contains(lastErr, "message_too_large") {
			t.Fatalf("last_error %q", lastErr)
		}
	})
}

func TestCleanupDeletesOldSentRows(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "q")
		now := time.Now()
		ob, err := outbox.New(db.DB, "svc", outbox.Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		first := add(t, db, ob, "q", outbox.Message{Body: []byte("1")}, outbox.Message{Body: []byte("2")})
		r := ob.Relay(srv.Client, outbox.RelayOptions{KeepSent: time.Hour})
		if _, err := r.RunOnce(ctx); err != nil || pending(t, ob) != 0 {
			t.Fatalf("RunOnce: %v, %d rows pending", err, pending(t, ob))
		}
		add(t, db, ob, "q", outbox.Message{Body: []byte("3")}) // pending: never cleaned
		now = now.Add(2 * time.Hour)
		if n, err := r.Cleanup(ctx); n != 2 || err != nil {
			t.Fatalf("cleanup %d, %v", n, err)
		}
		// Ids are never reused after a cleanup, so dedup ids stay unique.
		again := add(t, db, ob, "q", outbox.Message{Body: []byte("4")})
		if again[0] <= first[1] {
			t.Fatalf("row id %d reused after cleanup (earlier %v)", again[0], first)
		}
		if pending(t, ob) != 2 {
			t.Fatalf("pending %d", pending(t, ob))
		}
	})
}

// On PostgreSQL a notification wakes the relay: with a one-hour poll, a committed row
// is published at once.
func TestPostgresNotifyWakesRelay(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	// A table, and so a notification channel, of its own: channels are the database's,
	// not the schema's, and every other outbox test, here or in another process, commits
	// rows to the default one.
	ob, err := outbox.New(db.DB, "svc", outbox.Options{Table: fmt.Sprintf("okiba_outbox_%016x", rand.Uint64())})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The listener's wake-ups pass through here on their way to the relay, counted, so
	// that the test knows when the listener listens and when a notification came.
	heard := make(chan struct{}, 1)
	wake := make(chan struct{}, 1)
	var pokes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pgwake.Listen(ctx, db.DB, ob.Channel(), heard) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-heard:
				select {
				case wake <- struct{}{}:
				default:
				}
				pokes.Add(1) // after forwarding: pokes > 0 means the wake-up is in wake or taken
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	r := ob.Relay(srv.Client, outbox.RelayOptions{PollInterval: time.Hour, Wake: wake})
	runRelay(t, r)
	// Wait for the listener's first wake-up (sent once it listens) to be consumed, so the
	// next ones are notifications. (Before, len(wake) == 0 held before the listener had
	// even started.)
	testkit.Eventually(t, 5*time.Second, func() bool { return pokes.Load() > 0 && len(wake) == 0 },
		"the listener's first wake-up to be consumed; %s",
		testkit.Lazy(func() string { return fmt.Sprintf("listener: %d wake-ups, %d pending", pokes.Load(), len(wake)) }))
	for i := 0; i < 3; i++ {
		before := pokes.Load()
		add(t, db, ob, "q", outbox.Message{Body: []byte(strconv.Itoa(i))})
		// Each commit is notified, and the row published without polling.
		testkit.Eventually(t, 5*time.Second, func() bool { return pokes.Load() > before && pending(t, ob) == 0 },
			"the commit's notification to publish the row; %s", testkit.Lazy(func() string {
				return fmt.Sprintf("not woken: %d wake-ups since the commit, %d rows pending", pokes.Load()-before, pending(t, ob))
			}))
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	for _, name := range []string{"", "a/b", "has space", strings.Repeat("x", 65)} {
		if _, err := outbox.New(db.DB, name, outbox.Options{}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := outbox.New(db.DB, "ok", outbox.Options{Table: "x; DROP TABLE y"}); err == nil {
		t.Error("bad table accepted")
	}
}
