package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/outbox"
)

// addTopic commits one transaction with the given messages for topic.
func addTopic(t *testing.T, db *dbtest.DB, ob *outbox.Outbox, topic string, msgs ...outbox.Message) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var ids []int64
	for _, m := range msgs {
		id, err := ob.AddToTopic(ctx, tx, topic, m)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// readAll reads every record of every partition of a topic.
func readAll(t *testing.T, c *client.Client, topic string) []client.TopicRecord {
	t.Helper()
	ctx := context.Background()
	tp, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []client.TopicRecord
	for _, p := range tp.Partitions {
		for off := p.Start; off < p.End; {
			b, err := c.ReadPartition(ctx, topic, p.Partition, client.ReadOptions{Offset: off, Max: 1000})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b.Records...)
			off = b.Next
		}
	}
	return out
}

func waitPublished(t *testing.T, ob *outbox.Outbox) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool { return pending(t, ob) == 0 },
		"every row published; %s", testkit.Lazy(func() string { return fmt.Sprintf("%d rows pending", pending(t, ob)) }))
}

// crashingTopicPublisher publishes records, then "crashes" the relay before it marks
// the rows sent.
type crashingTopicPublisher struct {
	crashingPublisher
}

func (p *crashingTopicPublisher) PublishRecords(ctx context.Context, topic string, recs []client.Record) ([]client.Published, error) {
	res, err := p.c.PublishRecords(ctx, topic, recs)
	p.crash()
	return res, err
}

// A row added for a topic becomes one record: keyed by its group (one partition per
// group, in row order), with the row's dedup id, so a relay that dies between publishing
// and marking publishes nothing twice; queue rows of the same outbox keep working beside
// it.
func TestRelayPublishesToTopic(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "audit")
		partitions := 4
		if _, err := srv.Client.PutTopic(ctx, "orders", api.TopicConfig{Partitions: &partitions}); err != nil {
			t.Fatal(err)
		}
		ob := newOutbox(t, db, "svc")

		tx, _ := db.BeginTx(ctx, nil)
		if _, err := ob.AddToTopic(ctx, tx, "orders", outbox.Message{Body: []byte("x"), Delay: time.Second}); err == nil {
			t.Error("AddToTopic accepted a delay")
		}
		if _, err := ob.Add(ctx, tx, "topic:orders", outbox.Message{Body: []byte("x")}); err == nil {
			t.Error(`Add accepted a queue named "topic:orders"`)
		}
		tx.Rollback()

		const groups, perGroup = 6, 5
		var rowIDs []int64
		for i := 0; i < perGroup; i++ {
			var msgs []outbox.Message
			for g := 0; g < groups; g++ {
				msgs = append(msgs, outbox.Message{Group: "o" + strconv.Itoa(g), Body: []byte(strconv.Itoa(i)),
					Headers: map[string]string{"type": "T" + strconv.Itoa(i)}})
			}
			rowIDs = append(rowIDs, addTopic(t, db, ob, "orders", msgs...)...)
		}
		own := addTopic(t, db, ob, "orders", outbox.Message{Body: []byte("loose"), Headers: map[string]string{"event-id": "evt-loose"}})
		add(t, db, ob, "audit", outbox.Message{Body: []byte("a")})
		n := groups*perGroup + 2

		crashed, crash := context.WithCancel(ctx)
		p := &crashingTopicPublisher{crashingPublisher{c: srv.Client, crash: crash}}
		if _, err := ob.Relay(p, outbox.RelayOptions{Lease: 300 * time.Millisecond}).RunOnce(crashed); err == nil {
			t.Fatal("the crashed round should fail")
		}
		if pending(t, ob) != int64(n) {
			t.Fatalf("%d rows pending after the crash, want %d", pending(t, ob), n)
		}
		next := ob.Relay(srv.Client, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		runRelay(t, next)
		waitPublished(t, ob)

		recs := readAll(t, srv.Client, "orders")
		if len(recs) != n-1 {
			t.Fatalf("%d records, want %d: the topic's dedup should absorb the republished rows", len(recs), n-1)
		}
		partOf := map[string]int{}
		nextBody := map[string]int{}
		byEvent := map[string]bool{}
		for _, r := range recs {
			byEvent[r.Headers["event-id"]] = true
			if !r.HasKey {
				if string(r.Body) != "loose" || r.Headers["event-id"] != "evt-loose" {
					t.Errorf("unkeyed record %+v", r)
				}
				continue
			}
			k := string(r.Key)
			if p, ok := partOf[k]; ok && p != r.Partition {
				t.Fatalf("group %s in partitions %d and %d", k, p, r.Partition)
			}
			partOf[k] = r.Partition
			if want := strconv.Itoa(nextBody[k]); string(r.Body) != want || r.Headers["type"] != "T"+want {
				t.Fatalf("group %s: record %q (headers %v) where %s was next: order lost", k, r.Body, r.Headers, want)
			}
			nextBody[k]++
		}
		for _, id := range rowIDs {
			if !byEvent[ob.DedupID(id)] {
				t.Fatalf("no record with event id %s (the row's dedup id)", ob.DedupID(id))
			}
		}
		if len(partOf) != groups {
			t.Fatalf("%d keys, want %d", len(partOf), groups)
		}
		if m := peekAll(t, srv.Client, "audit"); len(m) != 1 || *m[0].Body != "a" {
			t.Fatalf("queue row beside the topic rows: %v", m)
		}
		// The crash came after the topic's request, before the queue's.
		if st := next.Stats(); st.Duplicates != int64(n-1) || st.Published != int64(n) {
			t.Fatalf("stats %+v: every republished topic row should come back as a duplicate", st)
		}
		var where string
		if err := db.QueryRow(db.Dialect.Rebind(`SELECT message_id FROM okiba_outbox WHERE id = ?`), own[0]).Scan(&where); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Headers["event-id"] == "evt-loose" && where != fmt.Sprintf("%d/%d", r.Partition, r.Offset) {
				t.Fatalf("message_id %q of the topic row, want partition/offset %d/%d", where, r.Partition, r.Offset)
			}
		}
	})
}

// queueOnly is a Publisher written before topics: it cannot publish records.
type queueOnly struct{ c *client.Client }

func (p queueOnly) SendBatch(ctx context.Context, q string, msgs []client.Message) ([]client.SendResult, error) {
	return p.c.SendBatch(ctx, q, msgs)
}

// A relay whose Publisher cannot publish to topics keeps the topic's rows, retrying and
// saying why, and still publishes its queue rows; a relay that can then takes them.
func TestTopicRowWaitsForATopicPublisher(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	ctx := context.Background()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	if _, err := srv.Client.PutTopic(ctx, "events", api.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ob := newOutbox(t, db, "svc")
	addTopic(t, db, ob, "events", outbox.Message{Group: "g", Body: []byte("1")})
	add(t, db, ob, "q", outbox.Message{Body: []byte("2")})
	old := ob.Relay(queueOnly{srv.Client}, outbox.RelayOptions{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	if _, err := old.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if st := old.Stats(); st.Published != 1 || st.Retried != 1 || st.Failed != 0 {
		t.Fatalf("stats %+v: the queue row published, the topic row retried", st)
	}
	var lastErr string
	db.QueryRow(`SELECT last_error FROM okiba_outbox WHERE sent_at IS NULL`).Scan(&lastErr)
	if !strings.Contains(lastErr, "TopicPublisher") {
		t.Fatalf("last_error %q should say why", lastErr)
	}
	runRelay(t, ob.Relay(srv.Client, outbox.RelayOptions{PollInterval: 5 * time.Millisecond}))
	waitPublished(t, ob)
	if recs := readAll(t, srv.Client, "events"); len(recs) != 1 || string(recs[0].Body) != "1" {
		t.Fatalf("records %+v", recs)
	}
}
