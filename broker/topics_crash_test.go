package broker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/topic"
)

// The crash-point enumeration of crash_test.go, for topics: before every file-system
// operation of a workload of publishes — with the mover copying records into partition
// files, retention deleting them and a checkpoint in the middle — the disk is taken as a
// power loss would leave it (synced only, everything written, the write torn), a broker
// recovers from it, and every publish acknowledged before that instant must be there: at
// the partition and offset its answer gave, with its body, offsets dense, no record that
// was never published.

type topicLedger struct {
	mu        sync.Mutex
	attempted map[string]bool
	acked     map[string]topicAck // body → where, and the op count when answered
}

type topicAck struct {
	partition int
	offset    uint64
	seq       int64
}

func TestTopicCrashAtEveryFileSystemOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: storage fault injection runs in its own tier (make storage)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OKIBA_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (set OKIBA_CRASH_SEED to replay)", seed)
	mem := vfs.NewMemFS()
	l := &topicLedger{attempted: map[string]bool{}, acked: map[string]topicAck{}}
	clk := fakeClock()
	rng := rand.New(rand.NewPCG(seed, 13))
	var mu sync.Mutex
	var failure error
	points, torn := 0, 0
	files := map[string]bool{}
	mutating := map[vfs.Op]bool{vfs.OpWrite: true, vfs.OpSync: true, vfs.OpSyncDir: true, vfs.OpRename: true,
		vfs.OpRemove: true, vfs.OpCreate: true, vfs.OpTruncate: true, vfs.OpPreallocate: true}
	cfg := func(fs vfs.FS, clk clock.Clock) Config {
		return Config{Dir: "/data", FS: fs, Clock: clk, SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true, MinFreeBytes: -1}
	}
	check := func(e vfs.Event) error {
		if !mutating[e.Op] {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if failure != nil {
			return failure
		}
		files[strings.TrimPrefix(filepath.Dir(e.Name), "/data/")] = true
		now, limit := clk.Now(), e.Seq
		points++
		verify := func(what string, disk *vfs.MemFS) {
			if failure == nil {
				failure = verifyTopics(fmt.Sprintf("crash before op %v (%s)", e, what), cfg(disk, clock.NewFake(now)), l, limit)
			}
		}
		verify("synced only", mem.Crash())
		verify("all written", mem.CrashWith(func(_ string, _, cur []byte) []byte { return cur }))
		if e.Op == vfs.OpWrite && len(e.Data) > 1 {
			cut := 1 + rng.IntN(len(e.Data)-1)
			data := slices.Clone(e.Data[:cut])
			off := e.Offset
			torn++
			verify(fmt.Sprintf("torn at byte %d", cut), mem.CrashWith(func(name string, synced, cur []byte) []byte {
				if name != e.Name {
					return synced
				}
				out := slices.Clone(cur)
				if need := off + int64(len(data)); int64(len(out)) < need {
					out = append(out, make([]byte, need-int64(len(out)))...)
				}
				copy(out[off:], data)
				return out
			}))
		}
		return failure
	}
	fs := vfs.NewFaulty(mem, nil)
	b, err := Open(cfg(fs, clk))
	if err != nil {
		t.Fatal(err)
	}
	fs.SetHook(check)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if failure != nil {
			t.Fatalf("seed %d: %v", seed, failure)
		}
	}()
	mustTopic(t, b, "t", func(c *topic.Config) {
		c.Partitions = 3
		c.SegmentBytes = 64 << 10
		c.RetentionRecords = 30 // whole old segments go as the workload publishes
	})
	n := 0
	for round := 0; round < 12; round++ {
		k := 1 + rng.IntN(12)
		in := make([]topic.PublishInput, k)
		l.mu.Lock()
		for i := range in {
			n++
			s := fmt.Sprintf("rec-%05d-", n)
			body := s + strings.Repeat(string(rune('a'+n%26)), 16<<10+rng.IntN(8<<10)-len(s))
			l.attempted[body] = true
			in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: []byte(body)}
			if rng.IntN(2) == 0 {
				in[i].HasKey, in[i].Key = true, []byte(fmt.Sprint("k", rng.IntN(5)))
			}
		}
		l.mu.Unlock()
		res, err := b.Publish(ctx, "t", in)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		s := fs.Ops()
		l.mu.Lock()
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("publish %d: %v", i, r.Err)
			}
			l.acked[string(in[i].Body)] = topicAck{partition: r.Partition, offset: r.Offset, seq: s}
		}
		l.mu.Unlock()
		if round == 6 {
			if err := b.Checkpoint(ctx); err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	fs.SetHook(nil)
	if err := verifyTopics("after a clean close", cfg(mem.Crash(), clock.NewFake(clk.Now())), l, fs.Ops()+1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("crash points checked: %d, torn writes: %d, acknowledged publishes: %d, directories touched: %v",
		points, torn, len(l.acked), slices.Sorted(func(yield func(string) bool) {
			for f := range files {
				if !yield(f) {
					return
				}
			}
		}))
	ti, _ := b.Topic("t")
	if points < 50 || !files["topics/1/0"] || ti.Stats.Truncated == 0 {
		t.Fatalf("%d crash points, directories %v, %d records deleted by retention: the workload no longer exercises partition files", points, files, ti.Stats.Truncated)
	}
}

// verifyTopics recovers a broker and checks every partition against the ledger.
func verifyTopics(what string, cfg Config, l *topicLedger, limit int64) error {
	fail := func(format string, args ...any) error { return fmt.Errorf(what+": "+format, args...) }
	b, err := Open(cfg)
	if err != nil {
		return fail("recovery refused a crashed (not corrupted) disk: %v", err)
	}
	defer b.Close()
	ti, err := b.Topic("t")
	if err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for body, a := range l.acked {
			if a.seq < limit {
				return fail("topic gone, but %.12s… was acknowledged", body)
			}
		}
		return nil // the topic's creation itself was not durable yet
	}
	found := map[string]topicAck{}
	for p := range ti.Partitions {
		pi := ti.Partitions[p]
		off := pi.Start
		for off < pi.End {
			r, err := b.ReadTopic(ctx, "t", ReadOptions{Partition: p, Offset: off, Max: 1000})
			if err != nil {
				return fail("read %d@%d (retained %d..%d): %v", p, off, pi.Start, pi.End, err)
			}
			if len(r.Records) == 0 {
				return fail("read %d@%d returned nothing before the end %d", p, off, pi.End)
			}
			for _, rec := range r.Records {
				if rec.Offset != off {
					return fail("partition %d: offset %d where %d belongs", p, rec.Offset, off)
				}
				found[string(rec.Body)] = topicAck{partition: p, offset: off}
				off++
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for body, at := range found {
		if !l.attempted[body] {
			return fail("record %d@%d (%.12s…) was never published", at.partition, at.offset, body)
		}
		if a, ok := l.acked[body]; ok && (a.partition != at.partition || a.offset != at.offset) {
			return fail("%.12s… was acknowledged at %d@%d, found at %d@%d", body, a.partition, a.offset, at.partition, at.offset)
		}
	}
	for body, a := range l.acked {
		if a.seq >= limit {
			continue
		}
		if _, ok := found[body]; ok {
			continue
		}
		if a.offset < ti.Partitions[a.partition].Start {
			continue // retention deleted it, as it may
		}
		return fail("acknowledged publish %d@%d (%.12s…) lost (partition retains %d..%d)", a.partition, a.offset, body,
			ti.Partitions[a.partition].Start, ti.Partitions[a.partition].End)
	}
	return nil
}
