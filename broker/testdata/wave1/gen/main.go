// Command gen writes the wave-1 data-directory fixture: two data directories written by
// the broker as it was before the reshape, and expect.json, which says what they hold.
// broker/compat_test.go (TestOpenWave1Fixture) opens them with today's broker and checks
// that nothing was lost.
//
// It is built by ../make.sh at a fixed commit, not by the current tree: the point is
// that the directories were written by the old code. It lives under testdata so that
// go build ./... and go vet ./... leave it alone, and it uses only the broker's public
// API of that commit (broker, queue, clock, vfs).
//
//	go run ./broker/testdata/wave1/gen -out DIR    (from the root of that commit's tree)
//
// writes DIR/data (closed cleanly: a final checkpoint, nothing after it), DIR/crashed
// (the same directory reopened, changed, and taken as a power loss would leave it: the
// checkpoint plus log records after it) and DIR/expect.json.
//
// Everything runs on a fake clock, so ids, times and deadlines are the same on every run;
// only the receipt secret (and so the receipts) differs between runs.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/vfs"
)

// segmentSize is the smallest the broker accepts. Segments are preallocated with zeros,
// so each file is 2 MiB on disk but a few kilobytes in git.
const segmentSize = 2 << 20

// start is the fake clock's time when the first queue is created.
var start = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

var ctx = context.Background()

func main() {
	out := flag.String("out", "", "directory to write data/, crashed/ and expect.json into (must not exist)")
	commit := flag.String("commit", "", "the commit this generator was built at, recorded in expect.json")
	flag.Parse()
	if *out == "" {
		log.Fatal("gen: -out is required")
	}
	if err := run(*out, *commit); err != nil {
		log.Fatalf("gen: %v", err)
	}
}

// issued is a receipt the generator was given, with the lease it names.
type issued struct {
	queue   string
	id      uint64
	epoch   uint32
	receipt string
}

// sent is an accepted send whose dedup key the queue remembers.
type sent struct {
	queue string
	in    queue.Payload
	id    uint64
}

// gen drives one broker and remembers what it was given.
type gen struct {
	b        *broker.Broker
	clk      *clock.Fake
	receipts []issued
	dedup    []sent
}

func run(out, commit string) error {
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	dataDir := filepath.Join(out, "data")
	exp := Expect{
		About: "Written by broker/testdata/wave1/gen at the commit below; checked by broker.TestOpenWave1Fixture. " +
			"Times are Unix milliseconds; ids are as the API prints them.",
		Commit:      commit,
		SegmentSize: segmentSize,
	}

	// Phase 1: build the state on the real file system and close cleanly.
	clk := clock.NewFake(start)
	b, err := broker.Open(config(dataDir, vfs.OS, clk))
	if err != nil {
		return err
	}
	g := &gen{b: b, clk: clk}
	if err := g.phase1(); err != nil {
		b.Close()
		return fmt.Errorf("phase 1: %w", err)
	}
	clean, err := g.collect("data", "closed cleanly: the final checkpoint holds everything, no log records after it")
	if err != nil {
		b.Close()
		return err
	}
	if err := b.Close(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dataDir, "wal", "00000001.wal")); err == nil {
		return errors.New("segment 1 survived: compaction and collection did not run as planned")
	}

	// Phase 2: reopen a copy in memory a minute later, change it, and keep only what a
	// power loss would leave.
	mem := vfs.NewMemFS()
	if err := copyTree(mem, "/data", vfs.OS, dataDir); err != nil {
		return err
	}
	clk2 := clock.NewFake(time.UnixMilli(clean.ClockMS).Add(time.Minute))
	b2, err := broker.Open(config("/data", mem, clk2))
	if err != nil {
		return err
	}
	g2 := &gen{b: b2, clk: clk2, receipts: g.receipts, dedup: g.dedup}
	if err := g2.phase2(); err != nil {
		b2.Close()
		return fmt.Errorf("phase 2: %w", err)
	}
	crashed, err := g2.collect("crashed", "the data directory reopened and changed, then cut off by a power loss: "+
		"only what was fsynced, the checkpoint of the clean close plus log records after it")
	if err != nil {
		b2.Close()
		return err
	}
	disk := mem.Crash()
	b2.Close()
	if err := copyTree(vfs.OS, filepath.Join(out, "crashed"), disk, "/data"); err != nil {
		return err
	}

	// How today's broker opens them (on throwaway copies).
	for _, f := range []*Fixture{&clean, &crashed} {
		rec, err := recovery(filepath.Join(out, f.Dir), time.UnixMilli(f.ClockMS))
		if err != nil {
			return fmt.Errorf("reopen %s: %w", f.Dir, err)
		}
		if !rec.Checkpoint {
			return fmt.Errorf("reopen %s: no checkpoint used", f.Dir)
		}
		f.ReplayedRecords = rec.Records
	}
	if crashed.ReplayedRecords == 0 {
		return errors.New("the crashed copy has no records after its checkpoint")
	}
	exp.Fixtures = []Fixture{clean, crashed}
	js, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "expect.json"), append(js, '\n'), 0o644)
}

func config(dir string, fs vfs.FS, clk clock.Clock) broker.Config {
	return broker.Config{Dir: dir, FS: fs, Clock: clk, SegmentSize: segmentSize, MinFreeBytes: -1}
}

// step moves the fake clock on, so that what follows has its own time.
func (g *gen) step() { g.clk.Advance(time.Second) }

// phase1 builds queues of every kind, messages in every state, dead letters, dedup
// entries, a segment compacted away, and a redrive that is still running at the end.
func (g *gen) phase1() error {
	b := g.b
	put := func(name string, edit func(c *queue.Config)) error {
		_, _, err := b.PutQueue(ctx, name, func(c *queue.Config, _ bool) error {
			if edit != nil {
				edit(c)
			}
			return nil
		})
		return err
	}
	// orders: native defaults (ordered groups, orders-dlq), two deliveries at most, a
	// long dedup window.
	if err := put("orders", func(c *queue.Config) {
		c.MaxDeliveries = 2
		c.DedupWindow = time.Hour
		c.Tags = map[string]string{"team": "cafe"}
	}); err != nil {
		return err
	}
	// jobs.fifo: FIFO, dedup per group, by content when no dedup id is given.
	if err := put("jobs.fifo", func(c *queue.Config) {
		c.DedupScope = queue.DedupGroup
		c.ContentDedup = true
		c.DedupWindow = time.Hour
		c.ReceiveWait = 20 * time.Second
		c.Tags = map[string]string{"env": "test"}
		c.Attrs = map[string]string{"sqs.FifoThroughputLimit": "perQueue"}
	}); err != nil {
		return err
	}
	// events: a standard (unordered) queue with no dead-letter queue and every other
	// field away from its default.
	if err := put("events", func(c *queue.Config) {
		c.OrderedGroups = false
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.MaxDeliveries = 0
		c.VisibilityTimeout = 20 * time.Second
		c.BackoffBase = 2 * time.Second
		c.BackoffMax = time.Minute
		c.Retention = 2 * time.Hour
		c.DedupWindow = 0
		c.MaxMessages = 1000
		c.MaxBytes = 1 << 20
		c.MaxMessageSize = 64 << 10
		c.ReceiveWait = 5 * time.Second
	}); err != nil {
		return err
	}
	// bulk: a dead-letter queue with a name of its own.
	if err := put("bulk", func(c *queue.Config) {
		c.DeadLetterQueue = "bulk-parking"
		c.MaxDeliveries = 5
	}); err != nil {
		return err
	}
	// filler: fills the first segment, then goes, so that the segment is compacted.
	if err := put("filler", func(c *queue.Config) {
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.MaxDeliveries = 0
	}); err != nil {
		return err
	}
	g.step()

	// A poison message: nacked twice, dead-lettered by max_deliveries.
	if _, err := g.send("orders", queue.Payload{Body: []byte(`{"order":0,"item":"poison"}`), Group: "carol", DedupID: "o-poison",
		Attrs: headers("content-type", "application/json")}, -1); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		r, err := g.receiveOne("orders", time.Hour)
		if err != nil {
			return err
		}
		if err := one(b.Nack(ctx, "orders", []string{r}, 0)); err != nil {
			return err
		}
	}
	if d := b.Queues("orders-dlq")[0].Stats.Ready; d != 1 {
		return fmt.Errorf("orders-dlq holds %d after two nacks, want 1", d)
	}
	g.step()

	// A consumer's dead letter, with its own reason.
	if _, err := g.send("orders", queue.Payload{Body: []byte("not json")}, -1); err != nil {
		return err
	}
	r, err := g.receiveOne("orders", time.Hour)
	if err != nil {
		return err
	}
	if err := one(b.DeadLetter(ctx, "orders", []string{r}, "bad_input", "body is not JSON")); err != nil {
		return err
	}
	g.step()

	// Ready messages of every kind. Their bodies land in segment 1 and are compacted.
	for i, p := range []queue.Payload{
		{Body: []byte(`{"order":1,"item":"latte"}`), Group: "alice", DedupID: "o-1",
			Attrs: headers("content-type", "application/json", "correlation-id", "c-1", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Body: []byte(`{"order":2,"item":"scone"}`), Group: "alice", DedupID: "o-2"},
		{Body: []byte(`{"order":3,"item":"tea"}`), Group: "bob", DedupID: "o-3", Attrs: headers("content-type", "application/json")},
		{Body: []byte(`{"order":5,"item":"water"}`)},
	} {
		if _, err := g.send("orders", p, -1); err != nil {
			return fmt.Errorf("orders message %d: %w", i, err)
		}
	}
	for _, p := range []queue.Payload{
		{Body: []byte("job-1"), Group: "g1", DedupID: "j-1"},
		{Body: []byte("job-2"), Group: "g1", DedupID: "j-2"},
		{Body: []byte("job-3"), Group: "g2"},                 // dedup by content
		{Body: []byte("job-4"), Group: "g2", DedupID: "j-1"}, // same id, other group: not a duplicate
	} {
		if _, err := g.send("jobs.fifo", p, -1); err != nil {
			return err
		}
	}
	for _, p := range []queue.Payload{
		{Body: []byte{0xff, 0xfe, 0x00, 'o', 'k', 'i', 'b', 'a', 0x80}, Attrs: []queue.Attr{
			{Name: "price", Type: "Number", Value: []byte("3.50")},
			{Name: "ratio", Type: "Number.float", Value: []byte("0.25")},
			{Name: "sig", Type: "Binary", Value: []byte{0x00, 0x01, 0xfe, 0xff}},
			{Name: "note", Type: "String.utf8", Value: []byte("h\u00e9llo")},
		}},
		{Body: []byte("tenant event"), Group: "tenant-a", Attrs: headers("content-type", "text/plain", "x-tenant", "a")},
		{Body: []byte("plain event")},
	} {
		if _, err := g.send("events", p, -1); err != nil {
			return err
		}
	}
	for i := 1; i <= 8; i++ {
		p := queue.Payload{Body: []byte(fmt.Sprintf("bulk-%d", i)), Attrs: headers("n", fmt.Sprint(i))}
		if i%2 == 1 {
			p.Group = "batch-a"
		}
		if _, err := g.send("bulk", p, -1); err != nil {
			return err
		}
	}
	g.step()

	// Fill segment 1 past its end, then empty it: only the messages above remain in it.
	filler := make([]queue.SendInput, 36)
	for i := range filler {
		filler[i] = queue.SendInput{Payload: queue.Payload{Body: bytes.Repeat([]byte("filler "), 64<<10/7)}, Delay: -1}
	}
	if _, err := b.Send(ctx, "filler", filler); err != nil {
		return err
	}
	g.step()
	if _, err := b.Purge(ctx, "filler"); err != nil {
		return err
	}
	if err := b.DeleteQueue(ctx, "filler", false); err != nil {
		return err
	}
	g.step()
	// The first checkpoint compacts segment 1 (its live messages are rewritten at the
	// head of the log); the second frees it.
	for i := 0; i < 2; i++ {
		if err := b.Checkpoint(ctx); err != nil {
			return err
		}
	}
	g.step()

	// A scheduled message, and leases live long after the fixture's time.
	if _, err := g.send("orders", queue.Payload{Body: []byte(`{"order":4,"item":"cake","at":"later"}`), DedupID: "o-4"}, 30*time.Minute); err != nil {
		return err
	}
	if _, err := g.receiveOne("orders", time.Hour); err != nil {
		return err
	}
	g.step()
	rj, err := g.receiveOne("jobs.fifo", time.Hour)
	if err != nil {
		return err
	}
	if err := one(b.Extend(ctx, "jobs.fifo", []string{rj}, 90*time.Minute)); err != nil {
		return err
	}
	// The head of g2, nacked with a delay: it keeps its place and holds its group.
	rj2, err := g.receiveOne("jobs.fifo", time.Hour)
	if err != nil {
		return err
	}
	if err := one(b.Nack(ctx, "jobs.fifo", []string{rj2}, 10*time.Minute)); err != nil {
		return err
	}
	g.step()
	if _, err := g.receiveOne("events", time.Hour); err != nil {
		return err
	}
	g.step()

	// Eight dead letters in bulk-parking, and a redrive at one message a second that
	// the clock, stopped from here on, never lets finish.
	var bulk []string
	for len(bulk) < 8 {
		ms, err := b.Receive(ctx, "bulk", broker.ReceiveOptions{Max: 8, Wait: 0, Visibility: time.Hour})
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return fmt.Errorf("bulk: received %d of 8", len(bulk))
		}
		for _, m := range ms {
			g.receipts = append(g.receipts, issued{queue: "bulk", id: m.ID, epoch: m.Deliveries, receipt: m.Receipt})
			bulk = append(bulk, m.Receipt)
		}
	}
	errs, err := b.DeadLetter(ctx, "bulk", bulk, "replay_me", "downstream fixed; redrive after the deploy")
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	g.step()
	task, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "bulk-parking", Rate: 1})
	if err != nil {
		return err
	}
	return g.waitMoved(task.ID, 1)
}

// phase2 reopens the clean directory a minute later: the redrive resumes (one step, then
// it waits for a clock that does not move), receipts from before the restart settle and
// extend, and new records follow the checkpoint.
func (g *gen) phase2() error {
	b := g.b
	tasks := b.Tasks()
	if len(tasks) != 1 {
		return fmt.Errorf("%d tasks after reopening, want 1", len(tasks))
	}
	if err := g.waitMoved(tasks[0].ID, 2); err != nil {
		return err
	}
	// The lease on orders from before the restart: acked.
	r := g.live("orders")
	if r == nil {
		return errors.New("no live lease on orders")
	}
	if err := one(b.Ack(ctx, "orders", []string{r.receipt})); err != nil {
		return fmt.Errorf("ack of a receipt from before the restart: %w", err)
	}
	// Its dedup id outlives the ack.
	res, err := b.Send(ctx, "orders", []queue.SendInput{{Payload: queue.Payload{Body: []byte("again"), Group: "alice", DedupID: "o-1"}, Delay: -1}})
	if err != nil || res[0].Err != nil || !res[0].Duplicate || res[0].ID != r.id {
		return fmt.Errorf("resend of o-1 after its ack: %+v, %v", res, err)
	}
	if _, err := g.send("orders", queue.Payload{Body: []byte(`{"order":9,"item":"bagel"}`), Group: "alice", DedupID: "o-9"}, -1); err != nil {
		return err
	}
	rx, err := g.receiveOne("orders", time.Hour)
	if err != nil {
		return err
	}
	if err := one(b.DeadLetter(ctx, "orders", []string{rx}, "manual_review", "refund requested")); err != nil {
		return err
	}
	if _, err := g.receiveOne("orders", time.Hour); err != nil {
		return err
	}
	// The jobs.fifo lease from before the restart: extended.
	rj := g.live("jobs.fifo")
	if rj == nil {
		return errors.New("no live lease on jobs.fifo")
	}
	if err := one(b.Extend(ctx, "jobs.fifo", []string{rj.receipt}, 2*time.Hour)); err != nil {
		return fmt.Errorf("extend of a receipt from before the restart: %w", err)
	}
	// events: the old lease nacked with a delay, a new one taken.
	re := g.live("events")
	if re == nil {
		return errors.New("no live lease on events")
	}
	if err := one(b.Nack(ctx, "events", []string{re.receipt}, 10*time.Minute)); err != nil {
		return err
	}
	if _, err := g.receiveOne("events", time.Hour); err != nil {
		return err
	}
	// A configuration change and a queue created after the checkpoint.
	if _, _, err := b.PutQueue(ctx, "events", func(c *queue.Config, _ bool) error {
		c.VisibilityTimeout = 45 * time.Second
		return nil
	}); err != nil {
		return err
	}
	if _, _, err := b.PutQueue(ctx, "late", nil); err != nil {
		return err
	}
	_, err = g.send("late", queue.Payload{Body: []byte("late-1"), DedupID: "l-1", Attrs: headers("content-type", "text/plain")}, -1)
	return err
}

// live returns the last receipt issued on name whose lease is still in flight.
func (g *gen) live(name string) *issued {
	for i := len(g.receipts) - 1; i >= 0; i-- {
		r := &g.receipts[i]
		if r.queue != name {
			continue
		}
		mi, err := g.b.GetMessage(ctx, name, r.id)
		if err == nil && mi.State == queue.StateInFlight && mi.Deliveries == r.epoch {
			return r
		}
	}
	return nil
}

// waitMoved waits until task id has moved at least n messages. The redrive runs in the
// broker's background; a real-time deadline bounds the wait.
func (g *gen) waitMoved(id uint64, n int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		t, err := g.b.Task(id)
		if err != nil {
			return err
		}
		if t.Moved >= n {
			if t.Moved != n || t.State != queue.TaskRunning {
				return fmt.Errorf("task %d: moved %d (%s), want %d and running", id, t.Moved, t.State, n)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("task %d moved %d, want %d", id, t.Moved, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func headers(kv ...string) []queue.Attr {
	out := make([]queue.Attr, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, queue.Attr{Name: kv[i], Type: "String", Value: []byte(kv[i+1])})
	}
	return out
}

// send sends one message (delay < 0: the queue's) and remembers its dedup key.
func (g *gen) send(name string, p queue.Payload, delay time.Duration) (uint64, error) {
	in := queue.SendInput{Payload: p, Delay: -1}
	if delay >= 0 {
		in.Delay = delay.Milliseconds()
	}
	res, err := g.b.Send(ctx, name, []queue.SendInput{in})
	if err != nil {
		return 0, err
	}
	if res[0].Err != nil || res[0].Duplicate {
		return 0, fmt.Errorf("send to %s: %+v", name, res[0])
	}
	qi, err := g.b.QueueConfig(name)
	if err != nil {
		return 0, err
	}
	if qi.Config.DedupWindow > 0 && (p.DedupID != "" || qi.Config.ContentDedup) {
		g.dedup = append(g.dedup, sent{queue: name, in: p, id: res[0].ID})
	}
	return res[0].ID, nil
}

// receiveOne leases one message and remembers its receipt.
func (g *gen) receiveOne(name string, vis time.Duration) (string, error) {
	ms, err := g.b.Receive(ctx, name, broker.ReceiveOptions{Max: 1, Wait: 0, Visibility: vis})
	if err != nil {
		return "", err
	}
	if len(ms) != 1 {
		return "", fmt.Errorf("receive from %s: %d messages, want 1", name, len(ms))
	}
	m := ms[0]
	g.receipts = append(g.receipts, issued{queue: name, id: m.ID, epoch: m.Deliveries, receipt: m.Receipt})
	return m.Receipt, nil
}

// one returns the error of a one-receipt settle.
func one(errs []error, err error) error {
	if err != nil {
		return err
	}
	return errs[0]
}

// collect describes the broker's state as its public API shows it.
func (g *gen) collect(dir, how string) (Fixture, error) {
	b := g.b
	now := g.clk.Now()
	f := Fixture{Dir: dir, How: how, ClockMS: now.UnixMilli(), Clock: now.UTC().Format(time.RFC3339Nano),
		Leases: []Lease{}, StaleReceipts: []Stale{}, Dedup: []Dedup{}, DeadLetters: []DeadLetter{}, Tasks: []Task{}}
	for _, qi := range b.Queues("") {
		q := Queue{
			Name: qi.Name, ID: qi.ID, CreatedAtMS: qi.CreatedAt, UpdatedAtMS: qi.UpdatedAt,
			Config: wireConfig(qi.Config), DeadLetterSources: qi.DeadLetterSources, Stats: wireStats(qi.Stats),
			Messages: []Message{},
		}
		var after uint64
		for {
			page, err := b.Peek(ctx, qi.Name, after, 1000)
			if err != nil {
				return f, err
			}
			for i := range page {
				m := wireMessage(&page[i].MessageInfo, &page[i].Payload)
				q.Messages = append(q.Messages, m)
				if m.Dead != nil {
					f.DeadLetters = append(f.DeadLetters, DeadLetter{Queue: qi.Name, ID: m.ID, Source: m.Dead.SourceName, Reason: m.Dead.Reason, Description: m.Dead.Description})
				}
				after = page[i].Seq
			}
			if len(page) < 1000 {
				break
			}
		}
		f.Queues = append(f.Queues, q)
	}
	for _, r := range g.receipts {
		mi, err := b.GetMessage(ctx, r.queue, r.id)
		if err == nil && mi.State == queue.StateInFlight && mi.Deliveries == r.epoch {
			f.Leases = append(f.Leases, Lease{Queue: r.queue, ID: queue.FormatID(r.id), Deliveries: r.epoch, DeadlineMS: mi.VisibleAt, Receipt: r.receipt})
			continue
		}
		f.StaleReceipts = append(f.StaleReceipts, Stale{Queue: r.queue, ID: queue.FormatID(r.id), Deliveries: r.epoch, Receipt: r.receipt})
	}
	for _, d := range g.dedup {
		// A duplicate writes nothing: this changes no state, and proves the entry is there.
		res, err := b.Send(ctx, d.queue, []queue.SendInput{{Payload: d.in, Delay: -1}})
		if err != nil {
			return f, err
		}
		if !res[0].Duplicate || res[0].ID != d.id {
			return f, fmt.Errorf("dedup entry of %s in %s: resend answered %+v", queue.FormatID(d.id), d.queue, res[0])
		}
		f.Dedup = append(f.Dedup, Dedup{Queue: d.queue, DedupID: d.in.DedupID, Group: d.in.Group, Body: string(d.in.Body), ID: queue.FormatID(d.id)})
	}
	for _, t := range b.Tasks() {
		f.Tasks = append(f.Tasks, wireTask(t))
	}
	sort.Slice(f.Tasks, func(i, j int) bool { return f.Tasks[i].ID < f.Tasks[j].ID })
	return f, nil
}

// recovery opens a throwaway copy of dir at now and reports what Open found.
func recovery(dir string, now time.Time) (broker.Recovery, error) {
	tmp, err := os.MkdirTemp("", "wave1-")
	if err != nil {
		return broker.Recovery{}, err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(vfs.OS, filepath.Join(tmp, "data"), vfs.OS, dir); err != nil {
		return broker.Recovery{}, err
	}
	b, err := broker.Open(config(filepath.Join(tmp, "data"), vfs.OS, clock.NewFake(now)))
	if err != nil {
		return broker.Recovery{}, err
	}
	rec := b.Recovery()
	return rec, b.Close()
}

// copyTree copies the files under src in sfs to dst in dfs, durably (each file synced,
// each directory synced), skipping nothing.
func copyTree(dfs vfs.FS, dst string, sfs vfs.FS, src string) error {
	if err := dfs.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	names, err := sfs.ReadDir(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		fi, err := sfs.Stat(filepath.Join(src, name))
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := copyTree(dfs, filepath.Join(dst, name), sfs, filepath.Join(src, name)); err != nil {
				return err
			}
			continue
		}
		data, err := vfs.ReadFile(sfs, filepath.Join(src, name))
		if err != nil {
			return err
		}
		f, err := dfs.OpenFile(filepath.Join(dst, name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return dfs.SyncDir(dst)
}

// ---------------------------------------------------------------------------------------
// expect.json. broker/compat_test.go reads it with a copy of these types: keep the two in
// step when either changes (the fixture, once written, does not).

type Expect struct {
	About       string    `json:"about"`
	Commit      string    `json:"commit"`
	SegmentSize int64     `json:"segment_size"`
	Fixtures    []Fixture `json:"fixtures"`
}

type Fixture struct {
	Dir     string `json:"dir"`
	How     string `json:"how"`
	ClockMS int64  `json:"clock_ms"`
	Clock   string `json:"clock"`
	// ReplayedRecords is what the generating broker replayed after the checkpoint when it
	// opened a copy of the directory.
	ReplayedRecords int64        `json:"replayed_records"`
	Queues          []Queue      `json:"queues"`
	Leases          []Lease      `json:"leases"`
	StaleReceipts   []Stale      `json:"stale_receipts"`
	Dedup           []Dedup      `json:"dedup"`
	DeadLetters     []DeadLetter `json:"dead_letters"`
	Tasks           []Task       `json:"tasks"`
}

type Queue struct {
	Name              string    `json:"name"`
	ID                uint64    `json:"id"`
	CreatedAtMS       int64     `json:"created_at_ms"`
	UpdatedAtMS       int64     `json:"updated_at_ms"`
	Config            Config    `json:"config"`
	DeadLetterSources []string  `json:"dead_letter_sources,omitempty"`
	Stats             Stats     `json:"stats"`
	Messages          []Message `json:"messages"`
}

type Config struct {
	VisibilityTimeoutMS int64             `json:"visibility_timeout_ms"`
	MaxDeliveries       int               `json:"max_deliveries"`
	DeadLetterQueue     string            `json:"dead_letter_queue"`
	BackoffBaseMS       int64             `json:"backoff_base_ms"`
	BackoffMaxMS        int64             `json:"backoff_max_ms"`
	DelayMS             int64             `json:"delay_ms"`
	RetentionMS         int64             `json:"retention_ms"`
	DedupWindowMS       int64             `json:"dedup_window_ms"`
	DedupScope          string            `json:"dedup_scope"`
	ContentDedup        bool              `json:"content_dedup"`
	MaxMessages         int64             `json:"max_messages"`
	MaxBytes            int64             `json:"max_bytes"`
	MaxMessageSize      int64             `json:"max_message_size"`
	ReceiveWaitMS       int64             `json:"receive_wait_ms"`
	OrderedGroups       bool              `json:"ordered_groups"`
	Tags                map[string]string `json:"tags,omitempty"`
	Attrs               map[string]string `json:"attrs,omitempty"`
}

type Stats struct {
	Ready    int64    `json:"ready"`
	Delayed  int64    `json:"delayed"`
	InFlight int64    `json:"in_flight"`
	Bytes    int64    `json:"bytes"`
	Groups   int      `json:"groups"`
	DedupIDs int      `json:"dedup_ids"`
	Counters Counters `json:"counters"`
}

type Counters struct {
	Sent              uint64            `json:"sent"`
	Acked             uint64            `json:"acked"`
	Nacked            uint64            `json:"nacked"`
	Delivered         uint64            `json:"delivered"`
	Redelivered       uint64            `json:"redelivered"`
	Extended          uint64            `json:"extended"`
	DeadLettered      uint64            `json:"dead_lettered"`
	Expired           uint64            `json:"expired"`
	DeadLetteredIn    uint64            `json:"dead_lettered_in"`
	Overflow          uint64            `json:"overflow"`
	RedrivenIn        uint64            `json:"redriven_in"`
	RedrivenOut       uint64            `json:"redriven_out"`
	Purged            uint64            `json:"purged"`
	Deleted           uint64            `json:"deleted"`
	WaitSum           uint64            `json:"wait_sum_ms"`
	WaitCount         uint64            `json:"wait_count"`
	SojournSum        uint64            `json:"sojourn_sum_ms"`
	SojournCount      uint64            `json:"sojourn_count"`
	ByReason          map[string]uint64 `json:"by_reason,omitempty"`
	DedupEvictedEarly uint64            `json:"dedup_evicted_early"`
}

type Message struct {
	ID               string  `json:"id"`
	Seq              uint64  `json:"seq"`
	Body             *string `json:"body,omitempty"`
	BodyBase64       *string `json:"body_base64,omitempty"`
	Attrs            []Attr  `json:"attrs,omitempty"`
	Group            string  `json:"group,omitempty"`
	DedupID          string  `json:"dedup_id,omitempty"`
	State            string  `json:"state"`
	Deliveries       uint32  `json:"deliveries"`
	EnqueuedAtMS     int64   `json:"enqueued_at_ms"`
	EnteredAtMS      int64   `json:"entered_at_ms"`
	VisibleAtMS      int64   `json:"visible_at_ms,omitempty"`
	FirstDeliveredMS int64   `json:"first_delivered_ms,omitempty"`
	Size             int64   `json:"size"`
	Dead             *Dead   `json:"dead,omitempty"`
}

type Attr struct {
	Name        string  `json:"name"`
	Type        string  `json:"type"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

type Dead struct {
	SourceName  string `json:"source"`
	Reason      string `json:"reason"`
	Description string `json:"description,omitempty"`
	AtMS        int64  `json:"at_ms"`
	Deliveries  uint32 `json:"deliveries"`
}

type Lease struct {
	Queue      string `json:"queue"`
	ID         string `json:"id"`
	Deliveries uint32 `json:"deliveries"`
	DeadlineMS int64  `json:"deadline_ms"`
	Receipt    string `json:"receipt"`
}

type Stale struct {
	Queue      string `json:"queue"`
	ID         string `json:"id"`
	Deliveries uint32 `json:"deliveries"`
	Receipt    string `json:"receipt"`
}

type Dedup struct {
	Queue   string `json:"queue"`
	DedupID string `json:"dedup_id,omitempty"`
	Group   string `json:"group,omitempty"`
	Body    string `json:"body"`
	ID      string `json:"id"`
}

type DeadLetter struct {
	Queue       string `json:"queue"`
	ID          string `json:"id"`
	Source      string `json:"source"`
	Reason      string `json:"reason"`
	Description string `json:"description,omitempty"`
}

type Task struct {
	ID          uint64   `json:"id"`
	Source      string   `json:"source"`
	Target      string   `json:"target,omitempty"`
	From        string   `json:"from,omitempty"`
	Reason      string   `json:"filter_reason,omitempty"`
	Group       string   `json:"filter_group,omitempty"`
	OlderThanMS int64    `json:"filter_older_than_ms,omitempty"`
	IDs         []string `json:"filter_ids,omitempty"`
	State       string   `json:"state"`
	Total       int64    `json:"total"`
	Moved       int64    `json:"moved"`
	Skipped     int64    `json:"skipped"`
	Rate        int      `json:"rate"`
	MaxSeq      uint64   `json:"max_seq"`
	Cursor      uint64   `json:"cursor"`
	CreatedAtMS int64    `json:"created_at_ms"`
	UpdatedAtMS int64    `json:"updated_at_ms"`
	Message     string   `json:"message,omitempty"`
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func wireConfig(c queue.Config) Config {
	return Config{
		VisibilityTimeoutMS: ms(c.VisibilityTimeout), MaxDeliveries: c.MaxDeliveries, DeadLetterQueue: c.DeadLetterQueue,
		BackoffBaseMS: ms(c.BackoffBase), BackoffMaxMS: ms(c.BackoffMax), DelayMS: ms(c.Delay), RetentionMS: ms(c.Retention),
		DedupWindowMS: ms(c.DedupWindow), DedupScope: c.DedupScope.String(), ContentDedup: c.ContentDedup,
		MaxMessages: c.MaxMessages, MaxBytes: c.MaxBytes, MaxMessageSize: c.MaxMessageSize, ReceiveWaitMS: ms(c.ReceiveWait),
		OrderedGroups: c.OrderedGroups, Tags: c.Tags, Attrs: c.Attrs,
	}
}

func wireStats(s queue.Stats) Stats {
	c := s.Counters
	return Stats{
		Ready: s.Ready, Delayed: s.Delayed, InFlight: s.InFlight, Bytes: s.Bytes, Groups: s.Groups, DedupIDs: s.DedupIDs,
		Counters: Counters{
			Sent: c.Sent, Acked: c.Acked, Nacked: c.Nacked, Delivered: c.Delivered, Redelivered: c.Redelivered,
			Extended: c.Extended, DeadLettered: c.DeadLettered, Expired: c.Expired, DeadLetteredIn: c.DeadLetteredIn,
			Overflow: c.Overflow, RedrivenIn: c.RedrivenIn, RedrivenOut: c.RedrivenOut, Purged: c.Purged, Deleted: c.Deleted,
			WaitSum: c.WaitSum, WaitCount: c.WaitCount, SojournSum: c.SojournSum, SojournCount: c.SojournCount,
			ByReason: c.ByReason, DedupEvictedEarly: c.DedupEvictedEarly,
		},
	}
}

// text returns b as a string if it is UTF-8, else as base64.
func text(b []byte) (*string, *string) {
	s := string(b)
	if utf8.ValidString(s) {
		return &s, nil
	}
	e := base64.StdEncoding.EncodeToString(b)
	return nil, &e
}

func wireMessage(mi *queue.MessageInfo, p *queue.Payload) Message {
	m := Message{
		ID: queue.FormatID(mi.ID), Seq: mi.Seq, Group: mi.Group, DedupID: p.DedupID, State: mi.State.String(),
		Deliveries: mi.Deliveries, EnqueuedAtMS: mi.EnqueuedAt, EnteredAtMS: mi.EnteredAt, VisibleAtMS: mi.VisibleAt,
		FirstDeliveredMS: mi.FirstDelivered, Size: mi.Size,
	}
	m.Body, m.BodyBase64 = text(p.Body)
	for _, a := range p.Attrs {
		w := Attr{Name: a.Name, Type: a.Type}
		w.Value, w.ValueBase64 = text(a.Value)
		m.Attrs = append(m.Attrs, w)
	}
	if d := mi.Dead; d != nil {
		m.Dead = &Dead{SourceName: d.SourceName, Reason: d.Reason, Description: d.Description, AtMS: d.At, Deliveries: d.Deliveries}
	}
	return m
}

func wireTask(t queue.Task) Task {
	w := Task{
		ID: t.ID, Source: t.SourceName, Target: t.TargetName, From: t.FromName,
		Reason: t.Filter.Reason, Group: t.Filter.Group, OlderThanMS: t.Filter.OlderThan,
		State: t.State.String(), Total: t.Total, Moved: t.Moved, Skipped: t.Skipped, Rate: t.Rate,
		MaxSeq: t.MaxSeq, Cursor: t.Cursor, CreatedAtMS: t.CreatedAt, UpdatedAtMS: t.UpdatedAt, Message: t.Message,
	}
	for _, id := range t.Filter.IDs {
		w.IDs = append(w.IDs, queue.FormatID(id))
	}
	return w
}
