package broker

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/topic"
)

func mustTopic(t *testing.T, b *Broker, name string, edit func(*topic.Config)) topic.TopicInfo {
	t.Helper()
	ti, _, err := b.PutTopic(ctx, name, func(c *topic.Config, _ bool) error {
		if edit != nil {
			edit(c)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("PutTopic %s: %v", name, err)
	}
	return ti
}

func publish(t *testing.T, b *Broker, name string, key string, bodies ...string) []topic.PublishResult {
	t.Helper()
	in := make([]topic.PublishInput, len(bodies))
	for i, s := range bodies {
		in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: []byte(s), HasKey: key != "", Key: []byte(key)}
	}
	res, err := b.Publish(ctx, name, in)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Publish %d: %v", i, r.Err)
		}
	}
	return res
}

// readPartition reads a partition from its start to its end.
func readPartition(t *testing.T, b *Broker, name string, part int) []TopicRecord {
	t.Helper()
	ti, err := b.Topic(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []TopicRecord
	off := ti.Partitions[part].Start
	for {
		r, err := b.ReadTopic(ctx, name, ReadOptions{Partition: part, Offset: off, Max: 7})
		if err != nil {
			t.Fatalf("ReadTopic %s/%d@%d: %v", name, part, off, err)
		}
		if len(r.Records) == 0 {
			return out
		}
		for _, rec := range r.Records {
			if rec.Offset != off {
				t.Fatalf("read offset %d where %d belongs", rec.Offset, off)
			}
			off++
		}
		out = append(out, r.Records...)
	}
}

func TestTopicPublishReadRestartAndCrash(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: fs, SegmentSize: 64 << 10, smallSegments: true, NoPrecreate: true, MinFreeBytes: -1}
	b := start(t, cfg)
	mustTopic(t, b, "orders", func(c *topic.Config) { c.Partitions = 3; c.SegmentBytes = topic.MinSegmentBytes })
	want := map[int][]string{}
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("order-%d", i%17)
		res := publish(t, b, "orders", key, fmt.Sprintf("%s event %d", key, i))
		if p := topic.KeyPartition([]byte(key), 3); res[0].Partition != p {
			t.Fatalf("key %q went to partition %d, its partition is %d", key, res[0].Partition, p)
		}
		want[res[0].Partition] = append(want[res[0].Partition], fmt.Sprintf("%s event %d", key, i))
	}
	check := func(what string, b *Broker) {
		t.Helper()
		for p := 0; p < 3; p++ {
			got := readPartition(t, b, "orders", p)
			if len(got) != len(want[p]) {
				t.Fatalf("%s: partition %d holds %d records, want %d", what, p, len(got), len(want[p]))
			}
			for i, r := range got {
				if string(r.Body) != want[p][i] {
					t.Fatalf("%s: %d/%d is %q, want %q", what, p, i, r.Body, want[p][i])
				}
			}
		}
	}
	check("live", b)
	// The mover empties the tails; the records read back from the partition files.
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, _ := b.store.TopicBacklog()
		return n == 0
	}, "the mover to empty the tails")
	check("moved", b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = start(t, cfg)
	check("after a restart", b)
	publish(t, b, "orders", "", "unkeyed 1", "unkeyed 2", "unkeyed 3")
	for i, body := range []string{"unkeyed 1", "unkeyed 2", "unkeyed 3"} {
		want[i] = append(want[i], body) // round robin from partition 0
	}
	check("round robin", b)
	// Power loss: only what was durable survives, and every publish that was answered was.
	b2 := start(t, Config{Dir: "/data", FS: fs.Crash(), SegmentSize: 64 << 10, smallSegments: true, NoPrecreate: true, MinFreeBytes: -1})
	defer b2.Close()
	check("after a crash", b2)
	b.Close()
}

func TestTopicReadLongPollsAndRefusesBadOffsets(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", nil)
	got := make(chan Read, 1)
	go func() {
		r, err := b.ReadTopic(ctx, "t", ReadOptions{Offset: 0, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	testkit.Eventually(t, 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.readers) == 1
	}, "the reader to wait")
	select {
	case r := <-got:
		t.Fatalf("the long poll answered before a publish: %+v", r)
	default:
	}
	publish(t, b, "t", "", "hello")
	r := testkit.Recv(t, got, 10*time.Second, "the long poll's answer")
	if len(r.Records) != 1 || string(r.Records[0].Body) != "hello" || r.End != 1 {
		t.Fatalf("long poll read %+v", r)
	}
	for _, c := range []struct {
		opts ReadOptions
		want error
	}{
		{ReadOptions{Offset: 2}, topic.ErrOffsetOutOfRange},
		{ReadOptions{Partition: 1}, topic.ErrPartitionOutOfRange},
		{ReadOptions{Max: MaxReadMax + 1}, nil},
	} {
		_, err := b.ReadTopic(ctx, "t", c.opts)
		if c.want != nil && !errors.Is(err, c.want) || c.want == nil && err == nil {
			t.Errorf("read %+v: %v, want %v", c.opts, err, c.want)
		}
	}
	if _, err := b.ReadTopic(ctx, "nope", ReadOptions{}); !errors.Is(err, topic.ErrTopicNotFound) {
		t.Errorf("read of a missing topic: %v", err)
	}
	// A long poll that nothing answers ends empty when its wait does.
	empty := make(chan Read, 1)
	go func() {
		r, err := b.ReadTopic(ctx, "t", ReadOptions{Offset: 1, Wait: 5 * time.Second})
		if err != nil {
			t.Error(err)
		}
		empty <- r
	}()
	testkit.Eventually(t, 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.readers) == 1
	}, "the second reader to wait")
	clk.Advance(6 * time.Second)
	if r := testkit.Recv(t, empty, 10*time.Second, "the timed-out long poll"); len(r.Records) != 0 || r.End != 1 {
		t.Fatalf("timed-out long poll: %+v", r)
	}
	// An empty read at the end answers at once without a wait.
	if r, err := b.ReadTopic(ctx, "t", ReadOptions{Offset: 1}); err != nil || len(r.Records) != 0 || r.End != 1 {
		t.Fatalf("read at the end: %+v %v", r, err)
	}
}

func TestTopicRetentionDeletesOnScheduleAndDiscardNewRefuses(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", func(c *topic.Config) { c.RetentionAge = time.Minute; c.SegmentAge = 10 * time.Second })
	for i := 0; i < 6; i++ {
		publish(t, b, "t", "", fmt.Sprint("r", i))
		clk.Advance(10 * time.Second)
	}
	clk.Advance(15 * time.Second) // the first segments are now past a minute
	testkit.Eventually(t, 10*time.Second, func() bool {
		ti, _ := b.Topic("t")
		return ti.Partitions[0].Start > 0
	}, "retention to delete the oldest segment")
	ti, _ := b.Topic("t")
	if got := readPartition(t, b, "t", 0); int64(len(got)) != ti.Records || string(got[0].Body) != fmt.Sprint("r", ti.Partitions[0].Start) {
		t.Fatalf("after retention read %d records, retained %d", len(got), ti.Records)
	}

	mustTopic(t, b, "full", func(c *topic.Config) { c.RetentionRecords = 2; c.Discard = topic.DiscardNew })
	publish(t, b, "full", "", "a", "b")
	res, err := b.Publish(ctx, "full", []topic.PublishInput{{Partition: topic.AnyPartition, Body: []byte("c")}})
	if err != nil || !errors.Is(res[0].Err, topic.ErrTopicFull) {
		t.Fatalf("publish to a full topic: %+v %v", res, err)
	}
	if ti, _ := b.Topic("full"); ti.Records != 2 {
		t.Fatalf("a refused publish changed the topic: %d records", ti.Records)
	}
}

// TestTheMoverLetsGoOfItsBuffersOnceAtRest: after the records are moved and synced, the
// store keeps its write buffer and free chunks for the next ones, and lets go of them
// once the mover has rested moverRestAfter on the broker's clock.
func TestTheMoverLetsGoOfItsBuffersOnceAtRest(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", func(c *topic.Config) { c.Partitions = 1 })
	in := make([]topic.PublishInput, 200)
	for i := range in {
		in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: bytes.Repeat([]byte{'x'}, 1000)}
	}
	if _, err := b.Publish(ctx, "t", in); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		recs, _ := b.store.TopicBacklog()
		return recs == 0 && b.store.MoveStats().Syncs > 0
	}, "the mover to move and sync the records")
	if k := b.store.Kept(); k == 0 {
		t.Fatal("the store kept nothing for the next records right after the move")
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		clk.Advance(moverRestAfter / 4)
		return b.store.Kept() == 0
	}, "the store to let go of its buffers at rest")
}
