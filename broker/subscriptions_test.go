package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

func subscribe(t *testing.T, b *Broker, name, q string, filterJSON string, start SubStart) SubscriptionInfo {
	t.Helper()
	cfg := topic.SubscriptionConfig{Queue: q}
	if filterJSON != "" {
		cfg.Filter = []byte(filterJSON)
	}
	si, _, err := b.Subscribe(ctx, "t", name, cfg, start)
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
	return si
}

// drain receives and acks every message of a queue, in receive order.
func drain(t *testing.T, b *Broker, q string) []Message {
	t.Helper()
	var out []Message
	for {
		ms := recv(t, b, q, 100, time.Minute)
		if len(ms) == 0 {
			return out
		}
		var rs []string
		for _, m := range ms {
			rs = append(rs, m.Receipt)
		}
		if errs, err := b.Ack(ctx, q, rs); err != nil || errs[0] != nil {
			t.Fatalf("ack: %v %v", err, errs)
		}
		out = append(out, ms...)
	}
}

func msgHeader(m Message, name string) string {
	for _, a := range m.Payload.Attrs {
		if a.Name == name {
			return string(a.Value)
		}
	}
	return ""
}

func TestSubscriptionsFanOutFilterAndSurviveACrash(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: fs, MinFreeBytes: -1, CacheBytes: -1}
	b := start(t, cfg)
	mustTopic(t, b, "t", func(c *topic.Config) { c.Partitions = 2 })
	mustQueue(t, b, "all", func(c *queue.Config) { c.OrderedGroups = false })
	mustQueue(t, b, "paid", nil) // ordered: a record's key is its group
	subscribe(t, b, "all", "all", "", SubStart{})
	subscribe(t, b, "paid", "paid", `{"type":["OrderPaid"]}`, SubStart{})
	for i := 0; i < 10; i++ {
		typ := "OrderPlaced"
		if i%2 == 1 {
			typ = "OrderPaid"
		}
		in := []topic.PublishInput{{Partition: topic.AnyPartition, HasKey: true, Key: []byte(fmt.Sprint("order-", i/2)),
			Headers: []topic.Header{{Name: "type", Value: typ}}, Body: []byte(fmt.Sprint(typ, " ", i/2))}}
		if _, err := b.Publish(ctx, "t", in); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, b *Broker) {
		t.Helper()
		all, err := b.Peek(ctx, "all", 0, 100)
		if err != nil || len(all) != 10 {
			t.Fatalf("%s: queue all holds %d (%v)", what, len(all), err)
		}
		paid, err := b.Peek(ctx, "paid", 0, 100)
		if err != nil || len(paid) != 5 {
			t.Fatalf("%s: queue paid holds %d (%v)", what, len(paid), err)
		}
		for _, m := range paid {
			if string(m.Payload.Body[:9]) != "OrderPaid" || m.Payload.Group != msgHeader(Message{Payload: m.Payload}, topic.HeaderKey) ||
				msgHeader(Message{Payload: m.Payload}, topic.HeaderTopic) != "t" || msgHeader(Message{Payload: m.Payload}, topic.HeaderRecordID) == "" {
				t.Fatalf("%s: paid got %q group %q headers %+v", what, m.Payload.Body, m.Payload.Group, m.Payload.Attrs)
			}
		}
	}
	check("live", b)
	b2 := start(t, Config{Dir: "/data", FS: fs.Crash(), MinFreeBytes: -1, CacheBytes: -1})
	check("after a crash", b2)
	b2.Close()
	// The shared body: with ten records fanned out to two queues, the log holds each body once.
	si, _ := b.Subscription("t", "paid")
	if si.Delivered != 5 || si.Filtered != 5 || si.Lag != 0 {
		t.Fatalf("paid: %+v", si.SubscriptionInfo)
	}
	// In use: a subscribed queue, a topic with subscriptions.
	if err := b.DeleteQueue(ctx, "paid", false); !errors.Is(err, queue.ErrQueueInUse) {
		t.Fatalf("delete of a subscribed queue: %v", err)
	}
	if err := b.DeleteTopic(ctx, "t", false); !errors.Is(err, topic.ErrTopicInUse) {
		t.Fatalf("delete of a topic with subscriptions: %v", err)
	}
	if err := b.DeleteQueue(ctx, "paid", true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscription("t", "paid"); !errors.Is(err, topic.ErrSubscriptionNotFound) {
		t.Fatalf("subscription of a queue deleted with force: %v", err)
	}
	b.Close()
}

func TestSubscriptionBackfillsThenJoinsTheLivePathInKeyOrder(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Dir: t.TempDir(), MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", func(c *topic.Config) { c.Partitions = 3 })
	mustQueue(t, b, "late", nil)
	publishN := func(from, to int) {
		for i := from; i < to; i++ {
			publish(t, b, "t", fmt.Sprint("k", i%4), fmt.Sprint(i))
		}
	}
	publishN(0, 600)
	subscribe(t, b, "late", "late", "", SubStart{First: true})
	publishN(600, 700) // while it backfills
	testkit.Eventually(t, 20*time.Second, func() bool {
		si, _ := b.Subscription("t", "late")
		return si.Lag == 0
	}, "the subscription to catch up")
	publishN(700, 720) // live
	got := drain(t, b, "late")
	if len(got) != 720 {
		t.Fatalf("late got %d messages, want 720", len(got))
	}
	last := map[string]int{}
	for _, m := range got {
		var n int
		fmt.Sscan(string(m.Payload.Body), &n)
		k := m.Payload.Group
		if prev, ok := last[k]; ok && n <= prev {
			t.Fatalf("key %s: %d after %d", k, n, prev)
		}
		last[k] = n
	}
}

func TestSubscriptionPausesAtAFullQueueAndNeverRefusesAPublish(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Dir: t.TempDir(), MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", nil)
	mustQueue(t, b, "small", func(c *queue.Config) { c.MaxMessages = 5; c.OrderedGroups = false })
	mustQueue(t, b, "big", func(c *queue.Config) { c.OrderedGroups = false })
	subscribe(t, b, "small", "small", "", SubStart{})
	subscribe(t, b, "big", "big", "", SubStart{})
	for i := 0; i < 20; i++ {
		publish(t, b, "t", "", fmt.Sprint(i)) // never refused
	}
	if st := stats(t, b, "big"); st.Ready != 20 {
		t.Fatalf("big holds %d", st.Ready)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		si, _ := b.Subscription("t", "small")
		return si.Paused && si.Lag == 15
	}, "small to pause with 15 behind")
	var got []Message
	testkit.Eventually(t, 20*time.Second, func() bool {
		got = append(got, drain(t, b, "small")...)
		return len(got) == 20
	}, "small to receive all 20 as room is made")
	for i, m := range got {
		if string(m.Payload.Body) != fmt.Sprint(i) {
			t.Fatalf("small's message %d is %q", i, m.Payload.Body)
		}
	}
}

// TestPublishKeepsNoReferenceToTheCallersBodies: the service hands a binary publish's
// bodies over as slices of the request, uncopied, so what the broker keeps of a publish —
// the tail cache's record, the read-back, a fan-out's message — must be its own bytes.
// The caller's buffer is overwritten once Publish has returned, and nothing changes.
func TestPublishKeepsNoReferenceToTheCallersBodies(t *testing.T) {
	t.Parallel()
	// The payload cache on (its default): it keeps messages' bodies as they were applied.
	b := start(t, Config{Dir: "/data", FS: vfs.NewMemFS(), MinFreeBytes: -1})
	mustTopic(t, b, "t", func(c *topic.Config) { c.Partitions = 1 })
	mustQueue(t, b, "q", func(c *queue.Config) { c.OrderedGroups = false })
	subscribe(t, b, "s", "q", `{"type":["kept"]}`, SubStart{}) // the first record passes, the second not
	buf := []byte("first-body|second-body")
	in := []topic.PublishInput{
		{Partition: topic.AnyPartition, Headers: []topic.Header{{Name: "type", Value: "kept"}}, Body: buf[:10]},
		{Partition: topic.AnyPartition, Headers: []topic.Header{{Name: "type", Value: "other"}}, Body: buf[11:]},
	}
	if _, err := b.Publish(ctx, "t", in); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = '#'
	}
	r, err := b.ReadTopic(ctx, "t", ReadOptions{Partition: 0, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Records) != 2 || string(r.Records[0].Body) != "first-body" || string(r.Records[1].Body) != "second-body" {
		t.Fatalf("read back %+v, want first-body and second-body", r.Records)
	}
	if got := bodies(drain(t, b, "q")); len(got) != 1 || got[0] != "first-body" {
		t.Fatalf("the subscription's queue holds %q, want [first-body]", got)
	}
}
