package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
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

// Effectively once on a stream, consume-transform-produce: a consumer group reads the
// topic payments, adds each payment to its customer's total and produces a receipt to the
// topic receipts — the total's update, the inbox's record of (topic, partition, offset)
// and the receipt's outbox row in one transaction. The first consumer dies after handling
// 25 records, so the group hands what it had not committed again to the next one; the inbox skips them, and every total and every receipt
// is there once.
func TestConsumeTransformProduceOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateTopic(t, "payments", 3)
		srv.CreateTopic(t, "receipts", 3)
		if _, err := srv.Client.PutGroup(ctx, "payments", "totals", api.GroupConfig{MemberLease: api.Ptr(time.Second)}); err != nil {
			t.Fatal(err)
		}
		ib := setup(t, db, "payments-totals", inbox.Options{})
		ob, err := outbox.New(db.DB, "totals", outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS totals (customer TEXT PRIMARY KEY, cents BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}

		const n = 60
		want := map[string]int64{}
		var recs []client.Record
		for i := 0; i < n; i++ {
			customer := "c" + strconv.Itoa(i%5)
			want[customer] += int64(i + 1)
			recs = append(recs, client.Record{Key: []byte(customer), HasKey: true, Body: []byte(strconv.Itoa(i + 1))})
		}
		srv.Publish(t, "payments", recs...)

		rctx, stopRelay := context.WithCancel(ctx)
		relayDone := make(chan error, 1)
		go func() {
			relayDone <- ob.Relay(srv.Client, outbox.RelayOptions{PollInterval: 20 * time.Millisecond}).Run(rctx)
		}()
		defer func() { stopRelay(); <-relayDone }()

		var handled atomic.Int64
		transform := func(ctx context.Context, tx *sql.Tx, r client.TopicRecord, key string) error {
			cents, err := strconv.ParseInt(string(r.Body), 10, 64)
			if err != nil {
				return err
			}
			customer := string(r.Key)
			res, err := tx.ExecContext(ctx, db.Dialect.Rebind(`UPDATE totals SET cents = cents + ? WHERE customer = ?`), cents, customer)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k == 0 {
				if _, err := tx.ExecContext(ctx, db.Dialect.Rebind(`INSERT INTO totals (customer, cents) VALUES (?, ?)`), customer, cents); err != nil {
					return err
				}
			}
			_, err = ob.AddToTopic(ctx, tx, "receipts", outbox.Message{Group: customer, Body: r.Body,
				Headers: map[string]string{"event-id": key}})
			return err
		}
		handler := func(tr *chaos.Transport, dieAt int64) client.RecordHandler {
			return func(ctx context.Context, r client.TopicRecord) error {
				key := inbox.RecordKey("payments", r.Partition, r.Offset)
				if _, err := ib.Once(ctx, key, func(ctx context.Context, tx *sql.Tx) error { return transform(ctx, tx, r, key) }); err != nil {
					return err
				}
				if handled.Add(1) == dieAt {
					tr.Crash() // from here nothing this consumer sends arrives: its commits are lost
				}
				return nil
			}
		}
		member := func(name string, tr *chaos.Transport, dieAt int64) (stop func()) {
			c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- c.ConsumeGroup(cctx, "payments", "totals", handler(tr, dieAt), client.ConsumeGroupOptions{
					Member: name, CommitInterval: time.Hour, CommitRecords: 1 << 20, PollWait: 200 * time.Millisecond,
					DrainTimeout: time.Second})
			}()
			return func() { cancel(); <-done; c.Close() }
		}

		// The first member handles 25 records and dies: what it committed before is done,
		// what it handled since is not, as far as okiba knows.
		first := chaos.NewTransport(nil)
		stopFirst := member("first", first, 25)
		testkit.Eventually(t, 30*time.Second, first.Crashed, "the first member to handle 25 records")
		stopFirst()
		// The second takes the partitions once the first's lease has run out, and is handed
		// them from the committed offsets.
		stopSecond := member("second", chaos.NewTransport(nil), -1)
		defer stopSecond()
		testkit.Eventually(t, 30*time.Second, func() bool {
			g, err := srv.Client.Group(ctx, "payments", "totals")
			return err == nil && g.LagRecords == 0
		}, "the group to commit every record; inbox %s", testkit.Lazy(func() string { return fmt.Sprintf("%+v", ib.Stats()) }))

		st := ib.Stats()
		// What the first member handled after its last commit that reached okiba (its 25,
		// and what its other partitions' handlers finished while it died) is handed again,
		// how much depending on where its pulls and commits fell: the inbox skips it.
		if st.Processed != n || st.Duplicates == 0 {
			t.Fatalf("inbox %+v: want %d processed once, and what the first member had not committed skipped when handed again", st, n)
		}
		for customer, cents := range want {
			var got int64
			if err := db.QueryRow(db.Dialect.Rebind(`SELECT cents FROM totals WHERE customer = ?`), customer).Scan(&got); err != nil || got != cents {
				t.Fatalf("total of %s: %d (%v), want %d", customer, got, err, cents)
			}
		}
		// Every receipt once: the outbox wrote one row per record, and the relay's dedup
		// ids absorb its own repeats.
		testkit.Eventually(t, 30*time.Second, func() bool {
			n, err := ob.Pending(ctx)
			return err == nil && n == 0
		}, "the relay to publish every receipt")
		seen := map[string]int{}
		total := 0
		for p := 0; p < 3; p++ {
			for _, r := range srv.ReadAll(t, "receipts", p) {
				seen[r.Headers["event-id"]]++
				total++
			}
		}
		if total != n || len(seen) != n {
			t.Fatalf("%d receipts for %d distinct records, want %d of each", total, len(seen), n)
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("receipt for %s produced %d times", k, c)
			}
		}
	})
}
