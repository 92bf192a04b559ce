package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/inbox"
	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/okibatest/chaos"
	"github.com/okiba/okiba/outbox"
)

// The conformance suite: every test runs on SQLite and on PostgreSQL.

func setup(t *testing.T, db *dbtest.DB, name string, opts inbox.Options) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(db.DB, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS effects (k TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return ib
}

func effect(ctx context.Context, tx *sql.Tx, db *dbtest.DB, k string) error {
	_, err := tx.ExecContext(ctx, db.Dialect.Rebind(`INSERT INTO effects (k) VALUES (?)`), k)
	return err
}

func countEffects(t *testing.T, db *dbtest.DB, k string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.Dialect.Rebind(`SELECT COUNT(*) FROM effects WHERE k = ?`), k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ib := setup(t, db, "points", inbox.Options{})
		other := setup(t, db, "inventory", inbox.Options{})

		run := func(ib *inbox.Inbox, key string, fail error) (bool, error) {
			return ib.Once(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
				if err := effect(ctx, tx, db, ib.Name()+"/"+key); err != nil {
					return err
				}
				return fail
			})
		}
		if ran, err := run(ib, "e1", nil); !ran || err != nil {
			t.Fatalf("first: ran %v, err %v", ran, err)
		}
		if ran, err := run(ib, "e1", nil); ran || err != nil {
			t.Fatalf("duplicate: ran %v, err %v; want skipped", ran, err)
		}
		// Another consumer sharing the table has its own record of the same key.
		if ran, err := run(other, "e1", nil); !ran || err != nil {
			t.Fatalf("other consumer: ran %v, err %v", ran, err)
		}
		// A failing handler rolls back its effects and the record: the retry runs again.
		boom := errors.New("boom")
		if ran, err := run(ib, "e2", boom); ran || !errors.Is(err, boom) {
			t.Fatalf("failing: ran %v, err %v", ran, err)
		}
		if seen, _, err := ib.Seen(ctx, "e2"); seen || err != nil {
			t.Fatalf("after a failure the key must not be recorded: seen %v, err %v", seen, err)
		}
		if n := countEffects(t, db, "points/e2"); n != 0 {
			t.Fatalf("failed handler's effect was kept (%d rows)", n)
		}
		if ran, err := run(ib, "e2", nil); !ran || err != nil {
			t.Fatalf("retry: ran %v, err %v", ran, err)
		}
		if n := countEffects(t, db, "points/e1") + countEffects(t, db, "points/e2") + countEffects(t, db, "inventory/e1"); n != 3 {
			t.Fatalf("effects: %d, want 3", n)
		}
		want := inbox.Stats{Processed: 2, Duplicates: 1, Failed: 1}
		if got := ib.Stats(); got != want {
			t.Fatalf("stats %+v, want %+v", got, want)
		}
	})
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ib := setup(t, db, "c", inbox.Options{})
		var wg sync.WaitGroup
		var ran atomic.Int64
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := ib.Once(ctx, "same", func(ctx context.Context, tx *sql.Tx) error {
					return effect(ctx, tx, db, "same")
				})
				if err != nil {
					t.Error(err)
				}
				if ok {
					ran.Add(1)
				}
			}()
		}
		wg.Wait()
		if ran.Load() != 1 || countEffects(t, db, "same") != 1 {
			t.Fatalf("ran %d times, %d effects; want exactly one", ran.Load(), countEffects(t, db, "same"))
		}
	})
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		now := time.UnixMilli(1_700_000_000_000)
		clock := func() time.Time { return now }
		ib := setup(t, db, "c", inbox.Options{Now: clock, Horizon: time.Hour})
		other := setup(t, db, "other", inbox.Options{Now: clock})
		noop := func(context.Context, *sql.Tx) error { return nil }
		once := func(ib *inbox.Inbox, key string) {
			t.Helper()
			if ran, err := ib.Once(ctx, key, noop); !ran || err != nil {
				t.Fatalf("%s: ran %v, err %v", key, ran, err)
			}
		}
		for i := 0; i < 1500; i++ {
			once(ib, fmt.Sprintf("old-%d", i))
		}
		once(other, "old")
		now = now.Add(2 * time.Hour)
		once(ib, "new")
		if _, err := other.Cleanup(ctx, 0); err == nil {
			t.Fatal("Cleanup without a horizon must refuse")
		}
		n, err := ib.Cleanup(ctx, 0)
		if err != nil || n != 1500 {
			t.Fatalf("cleanup: %d, %v; want 1500", n, err)
		}
		for key, want := range map[string]bool{"old-7": false, "new": true} {
			if seen, _, err := ib.Seen(ctx, key); err != nil || seen != want {
				t.Errorf("%s seen %v (%v), want %v", key, seen, err, want)
			}
		}
		if seen, _, err := other.Seen(ctx, "old"); err != nil || !seen {
			t.Errorf("cleanup of one consumer removed another's record (%v)", err)
		}
	})
}

// consumer runs ib's handler under client.Consume on a chaos transport; stop joins it.
type consumer struct {
	tr     *chaos.Transport
	cancel context.CancelFunc
	done   chan error
}

func consume(t *testing.T, srv *okibatest.Server, queue string, h client.Handler) *consumer {
	t.Helper()
	return consumeOn(t, srv, queue, chaos.NewTransport(nil), h)
}

func consumeOn(t *testing.T, srv *okibatest.Server, queue string, tr *chaos.Transport, h client.Handler) *consumer {
	t.Helper()
	c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &consumer{tr: tr, cancel: cancel, done: make(chan error, 1)}
	go func() {
		x.done <- c.Consume(ctx, queue, h, client.ConsumeOptions{Concurrency: 4, PollWait: 200 * time.Millisecond, DrainTimeout: 5 * time.Second})
	}()
	t.Cleanup(x.stop)
	return x
}

func (x *consumer) stop() {
	x.cancel()
	if x.done != nil {
		<-x.done
		x.done = nil
	}
}

func queueWith(t *testing.T, srv *okibatest.Server, name string, lease time.Duration) {
	srv.PutQueue(t, name, api.QueueConfig{VisibilityTimeout: api.Ptr(lease), MaxDeliveries: new(int)})
}

func queueStats(t *testing.T, srv *okibatest.Server, name string) api.Stats {
	q, err := srv.Client.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return q.Stats
}

// Lost acks bring processed messages back; the inbox skips them and acks them.
func TestLostAcksAreSkipped(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		srv := okibatest.New(t, okibatest.Options{})
		queueWith(t, srv, "q", time.Second)
		ib := setup(t, db, "q-consumer", inbox.Options{})
		dice := chaos.Dice{Seed: 7}
		var tr atomic.Pointer[chaos.Transport]
		handler := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			return effect(ctx, tx, db, string(d.Body))
		})
		lossy := func(ctx context.Context, d *client.Delivery) error {
			err := handler(ctx, d)
			if err == nil && dice.Hit(0.5, "ack", d.ID, uint64(d.Deliveries)) {
				tr.Load().LoseAck(d.Receipt)
			}
			return err
		}
		const n = 40
		for i := 0; i < n; i++ {
			if _, err := srv.Client.Send(context.Background(), "q", client.Message{Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
				t.Fatal(err)
			}
		}
		c := consume(t, srv, "q", lossy)
		tr.Store(c.tr)
		testkit.Eventually(t, 30*time.Second, func() bool {
			st := queueStats(t, srv, "q")
			return st.Acked == n
		}, "every message acked; %s", testkit.Lazy(func() string {
			return fmt.Sprintf("stats %+v, inbox %+v", queueStats(t, srv, "q"), ib.Stats())
		}))
		c.stop()
		for i := 0; i < n; i++ {
			if k := countEffects(t, db, fmt.Sprintf("m%d", i)); k != 1 {
				t.Fatalf("m%d applied %d times", i, k)
			}
		}
		// Every lost ack comes back as a skipped duplicate; on a loaded machine a lease can
		// also end while its handler runs (the broker counts that redelivery too), so the
		// duplicates are bounded by the redeliveries, not equal to the lost acks.
		st, qs := ib.Stats(), queueStats(t, srv, "q")
		if st.Processed != n || st.Duplicates == 0 || st.Duplicates < c.tr.LostAcks() || uint64(st.Duplicates) > qs.Redelivered {
			t.Fatalf("inbox %+v, lost acks %d, redeliveries %d: every lost ack must come back as a skipped duplicate, and only redeliveries can",
				st, c.tr.LostAcks(), qs.Redelivered)
		}
	})
}

// A consumer that crashes after its commit but before its ack: the redelivery goes to
// the next incarnation, which skips it.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		srv := okibatest.New(t, okibatest.Options{})
		queueWith(t, srv, "q", 300*time.Millisecond)
		ib := setup(t, db, "c", inbox.Options{})
		if _, err := srv.Client.Send(context.Background(), "q", client.Message{Body: []byte("order-1")}); err != nil {
			t.Fatal(err)
		}
		crashed := make(chan struct{})
		tr := chaos.NewTransport(nil)
		inner := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			return effect(ctx, tx, db, string(d.Body))
		})
		first := consumeOn(t, srv, "q", tr, func(ctx context.Context, d *client.Delivery) error {
			err := inner(ctx, d) // the inbox's transaction has committed when this returns nil
			if err == nil && !tr.Crashed() {
				tr.Crash() // dies before the ack leaves
				close(crashed)
			}
			return err
		})
		<-crashed
		first.stop()
		second := consume(t, srv, "q", ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			return effect(ctx, tx, db, string(d.Body))
		}))
		testkit.Eventually(t, 10*time.Second, func() bool { return queueStats(t, srv, "q").Acked == 1 },
			"the message acked; stats %s", testkit.Lazy(func() string { return fmt.Sprintf("%+v", queueStats(t, srv, "q")) }))
		second.stop()
		if n := countEffects(t, db, "order-1"); n != 1 {
			t.Fatalf("applied %d times", n)
		}
		// Every delivery after the first is a duplicate the inbox skipped: the crash
		// makes one at least, and a redelivery whose lease (300 ms) ran out on a loaded
		// machine makes another, which at-least-once allows.
		st, qs := ib.Stats(), queueStats(t, srv, "q")
		if qs.Delivered < 2 {
			t.Fatalf("the message was delivered %d times; the crash should have caused a redelivery", qs.Delivered)
		}
		if st.Processed != 1 || st.Duplicates != int64(qs.Delivered-1) {
			t.Fatalf("inbox %+v after %d deliveries: want 1 processed, the rest duplicates", st, qs.Delivered)
		}
	})
}

// A handler error rolls back the inbox record with the effects: the retry runs the
// handler again, and the effect lands once.
func TestHandlerErrorRetries(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		srv := okibatest.New(t, okibatest.Options{})
		srv.PutQueue(t, "q", api.QueueConfig{VisibilityTimeout: api.Ptr(2 * time.Second), BackoffBase: api.Ptr(time.Millisecond), BackoffMax: api.Ptr(time.Millisecond)})
		ib := setup(t, db, "c", inbox.Options{})
		var calls atomic.Int64
		c := consume(t, srv, "q", ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			calls.Add(1)
			if err := effect(ctx, tx, db, "x"); err != nil {
				return err
			}
			if d.Deliveries < 3 {
				return errors.New("payment service down")
			}
			return nil
		}))
		srv.Client.Send(context.Background(), "q", client.Message{Body: []byte("x")})
		testkit.Eventually(t, 10*time.Second, func() bool { return queueStats(t, srv, "q").Acked == 1 },
			"the message acked; stats %s", testkit.Lazy(func() string { return fmt.Sprintf("%+v", queueStats(t, srv, "q")) }))
		c.stop()
		if calls.Load() != 3 || countEffects(t, db, "x") != 1 {
			t.Fatalf("handler ran %d times, effect %d; want 3 and 1", calls.Load(), countEffects(t, db, "x"))
		}
		if st := ib.Stats(); st.Processed != 1 || st.Failed != 2 || st.Duplicates != 0 {
			t.Fatalf("inbox %+v", st)
		}
	})
}

func TestNaturalAndApply(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		db.Exec(`INSERT INTO orders VALUES ('o1', 'placed')`)
		var changes []bool
		h := inbox.Natural(db.DB, func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
			changed, err := inbox.Apply(ctx, tx, db.Dialect.Rebind(`UPDATE orders SET status = 'paid' WHERE id = ? AND status = 'placed'`), string(d.Body))
			changes = append(changes, changed)
			return err
		})
		for i := 0; i < 3; i++ {
			if err := h(ctx, &client.Delivery{ID: "m", Body: []byte("o1")}); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(changes) != "[true false false]" {
			t.Fatalf("changes %v: only the first application changes anything", changes)
		}
	})
}

func TestKeyAndIdempotencyKey(t *testing.T) {
	t.Parallel()
	d := &client.Delivery{ID: "m1"}
	if inbox.Key(d) != "m1" {
		t.Error("message id")
	}
	d.DedupID = "orders/5"
	if inbox.Key(d) != "orders/5" {
		t.Error("dedup id")
	}
	d.Headers = map[string]string{inbox.EventIDHeader: "evt-9"}
	if inbox.Key(d) != "evt-9" {
		t.Error("event id")
	}
	if inbox.EventIDHeader != outbox.EventIDHeader {
		t.Error("inbox and outbox disagree on the event id header")
	}
	a, b := inbox.IdempotencyKey("mail", "evt-9", "email"), inbox.IdempotencyKey("mail", "evt-9", "email")
	if a != b || a == inbox.IdempotencyKey("mail", "evt-9", "sms") || a == inbox.IdempotencyKey("other", "evt-9", "email") {
		t.Errorf("idempotency keys must be stable per consumer, message and effect: %s %s", a, b)
	}
}
