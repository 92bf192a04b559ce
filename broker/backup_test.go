package broker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/export"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// semantic is the broker's replicated state as bytes: equal on two brokers that hold the
// same queues, messages, topics and principals, wherever their bytes lie.
func semantic(b *Broker) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.m.AppendSnapshot(nil)
	out = append(out, b.t.AppendSnapshot(nil)...)
	return append(out, b.a.AppendSnapshot(nil)...)
}

// A restored backup is the broker it was taken of: the same semantic state byte for
// byte, every body (read back from the restored log, not a cache), every retained topic
// record, principals, and receipts issued before the backup still settle their leases.
func TestBackupRestoresEverything(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	src := Config{Dir: filepath.Join(t.TempDir(), "src"), Clock: clk, SegmentSize: 64 << 10, smallSegments: true, CacheBytes: -1}
	b := start(t, src)
	mustQueue(t, b, "jobs", nil)
	mustQueue(t, b, "ordered.fifo", nil)
	var want []string
	for i := range 300 {
		want = append(want, fmt.Sprintf("job %d %s", i, bytes.Repeat([]byte{'x'}, i%97)))
	}
	send(t, b, "jobs", want...)
	send(t, b, "ordered.fifo", "a", "b")
	leased := recv(t, b, "jobs", 3, time.Minute)
	if len(leased) != 3 {
		t.Fatalf("leased %d", len(leased))
	}
	mustTopic(t, b, "events", func(c *topic.Config) { c.Partitions = 3 })
	for i := range 40 {
		publish(t, b, "events", fmt.Sprintf("key-%d", i%5), fmt.Sprintf("event %d", i))
	}
	g, _ := access.ParseGrant("send queue:jobs")
	if _, err := b.CreatePrincipal(ctx, "worker", []access.Grant{g}, []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	// Half of the topic records moved into partition files, the rest in the log's tail.
	if _, _, err := b.store.MoveTopics(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		publish(t, b, "events", "", fmt.Sprintf("late %d", i))
	}
	var out bytes.Buffer
	info, err := b.Backup(ctx, &out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != 302 || info.Queues != 4 || info.Partitions != 3 || info.TopicRecords != 50 || info.Bytes != int64(out.Len()) {
		t.Fatalf("backup info %+v (%d bytes written)", info, out.Len())
	}
	before := semantic(b)
	var events [][]TopicRecord
	for p := range 3 {
		events = append(events, readPartition(t, b, "events", p))
	}
	b.Close()

	dst := src
	dst.Dir = filepath.Join(t.TempDir(), "restored")
	got, err := Restore(dst, bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Messages != info.Messages || got.TopicRecords != info.TopicRecords || !got.At.Equal(info.At) {
		t.Fatalf("restore says %+v, the backup %+v", got, info)
	}
	r := start(t, dst)
	defer r.Close()
	if after := semantic(r); !bytes.Equal(before, after) {
		t.Fatal("the restored broker's semantic state differs from the original's")
	}
	// The receipts of the original's leases settle on the restored copy.
	var receipts []string
	for _, m := range leased {
		receipts = append(receipts, m.Receipt)
	}
	errs, err := r.Ack(ctx, "jobs", receipts)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("ack %d of a receipt from before the backup: %v", i, e)
		}
	}
	var gotBodies []string
	for {
		ms := recv(t, r, "jobs", 10, time.Minute)
		if len(ms) == 0 {
			break
		}
		gotBodies = append(gotBodies, bodies(ms)...)
	}
	if len(gotBodies) != 297 || !slices.Equal(gotBodies, want[3:]) {
		t.Fatalf("restored bodies: %d, want the 297 not leased, in order", len(gotBodies))
	}
	for p := range 3 {
		if got := readPartition(t, r, "events", p); !slices.EqualFunc(got, events[p], func(a, b TopicRecord) bool {
			return a.Offset == b.Offset && bytes.Equal(a.Body, b.Body) && bytes.Equal(a.Key, b.Key) && a.Time == b.Time
		}) {
			t.Fatalf("partition %d: %d records restored, %d in the original", p, len(got), len(events[p]))
		}
	}
	if _, err := r.Principal("worker"); err != nil {
		t.Fatalf("principal: %v", err)
	}
	// The restored directory is an ordinary one: it restarts from its own checkpoint.
	r.Close()
	r = start(t, dst)
	if after := semantic(r); len(after) == 0 {
		t.Fatal("no state after a restart")
	}
}

// A backup taken while senders keep sending holds every message whose send was answered
// before the backup began, and the senders are not stopped by it.
func TestBackupUnderLoad(t *testing.T) {
	t.Parallel()
	src := Config{Dir: filepath.Join(t.TempDir(), "src"), SegmentSize: 256 << 10, smallSegments: true, CacheBytes: 64 << 10}
	b := start(t, src)
	defer b.Close()
	mustQueue(t, b, "load", nil)
	var mu sync.Mutex
	var acked []uint64
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := b.Send(ctx, "load", []queue.SendInput{{Payload: queue.Payload{Body: fmt.Appendf(nil, "w%d-%d", w, i)}, Delay: -1}})
				if err != nil || res[0].Err != nil {
					t.Errorf("send: %v %v", err, res)
					return
				}
				mu.Lock()
				acked = append(acked, res[0].ID)
				mu.Unlock()
				sent.Add(1)
			}
		}()
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return sent.Load() >= 500 }, "500 sends answered")
	mu.Lock()
	beforeBackup := slices.Clone(acked)
	mu.Unlock()
	var out bytes.Buffer
	info, err := b.Backup(ctx, &out)
	during := sent.Load()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages < int64(len(beforeBackup)) {
		t.Fatalf("backup of %d messages; %d were acknowledged before it began", info.Messages, len(beforeBackup))
	}
	dst := Config{Dir: filepath.Join(t.TempDir(), "restored"), SegmentSize: 256 << 10, smallSegments: true}
	if _, err := Restore(dst, &out); err != nil {
		t.Fatal(err)
	}
	r := start(t, dst)
	defer r.Close()
	have := make(map[uint64]bool)
	var after uint64
	for {
		page, err := r.Peek(ctx, "load", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			have[m.ID] = true
			after = m.Seq
		}
	}
	for _, id := range beforeBackup {
		if !have[id] {
			t.Fatalf("message %s, acknowledged before the backup began, is not in the restored copy", queue.FormatID(id))
		}
	}
	t.Logf("%d sends answered before the backup, %d by its end; %d in it, %d bytes", len(beforeBackup), during, info.Messages, info.Bytes)
}

// A restore never overwrites, and one that fails — a stream cut anywhere, a flipped
// byte — leaves nothing behind: no directory at the destination, none beside it.
func TestRestoreRefusesAndLeavesNothing(t *testing.T) {
	t.Parallel()
	src := Config{Dir: filepath.Join(t.TempDir(), "src"), Clock: fakeClock()}
	b := start(t, src)
	mustQueue(t, b, "jobs", nil)
	send(t, b, "jobs", "one", "two", "three")
	mustTopic(t, b, "events", nil)
	publish(t, b, "events", "", "e1", "e2")
	var out bytes.Buffer
	if _, err := b.Backup(ctx, &out); err != nil {
		t.Fatal(err)
	}
	b.Close()
	full := out.Bytes()

	if _, err := Restore(src, bytes.NewReader(full)); err == nil {
		t.Fatal("a restore over a live data directory succeeded")
	}
	parent := t.TempDir()
	dst := Config{Dir: filepath.Join(parent, "restored")}
	check := func(what string, stream []byte) {
		t.Helper()
		_, err := Restore(dst, bytes.NewReader(stream))
		if !errors.Is(err, export.ErrCorrupt) {
			t.Fatalf("%s: restore: %v, want a corrupt export", what, err)
		}
		if names, _ := os.ReadDir(parent); len(names) != 0 {
			t.Fatalf("%s: a failed restore left %v", what, names)
		}
	}
	for _, cut := range []int{0, 3, 5, 9, len(full) / 3, len(full) / 2, len(full) - 5, len(full) - 1} {
		check(fmt.Sprintf("cut at %d of %d", cut, len(full)), full[:cut])
	}
	for _, at := range []int{7, len(full) / 2, len(full) - 6} {
		bad := slices.Clone(full)
		bad[at] ^= 0x10
		check(fmt.Sprintf("byte %d flipped", at), bad)
	}
	if _, err := Restore(dst, bytes.NewReader(full)); err != nil {
		t.Fatalf("the whole stream: %v", err)
	}
}
