package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

var ctx = context.Background()

func start(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

func mustQueue(t *testing.T, b *Broker, name string, edit func(*queue.Config)) {
	t.Helper()
	_, _, err := b.PutQueue(ctx, name, func(c *queue.Config, _ bool) error {
		if edit != nil {
			edit(c)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("PutQueue %s: %v", name, err)
	}
}

func send(t *testing.T, b *Broker, q string, bodies ...string) []uint64 {
	t.Helper()
	in := make([]queue.SendInput, len(bodies))
	for i, s := range bodies {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: []byte(s)}, Delay: -1}
	}
	res, err := b.Send(ctx, q, in)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	ids := make([]uint64, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Send %d: %v", i, r.Err)
		}
		ids[i] = r.ID
	}
	return ids
}

func recv(t *testing.T, b *Broker, q string, max int, vis time.Duration) []Message {
	t.Helper()
	ms, err := b.Receive(ctx, q, ReceiveOptions{Max: max, Wait: 0, Visibility: vis})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ms
}

func bodies(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Payload.Body))
	}
	return out
}

func stats(t *testing.T, b *Broker, q string) queue.Stats {
	t.Helper()
	qi, err := b.Queue(q)
	if err != nil {
		t.Fatalf("Queue %s: %v", q, err)
	}
	return qi.Stats
}

func fakeClock() *clock.Fake { return clock.NewFake(time.UnixMilli(1_800_000_000_000)) }

func TestRestartKeepsLeasesCountsAndAcks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := fakeClock()
	b := start(t, Config{Dir: dir, Clock: clk})
	mustQueue(t, b, "jobs", nil)
	send(t, b, "jobs", "a", "b", "c")
	ms := recv(t, b, "jobs", 2, time.Minute)
	if got := bodies(ms); strings.Join(got, ",") != "a,b" {
		t.Fatalf("received %v", got)
	}
	if errs, err := b.Ack(ctx, "jobs", []string{ms[0].Receipt}); err != nil || errs[0] != nil {
		t.Fatalf("Ack: %v %v", err, errs)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	b = start(t, Config{Dir: dir, Clock: clk})
	defer b.Close()
	st := stats(t, b, "jobs")
	if st.Ready != 1 || st.InFlight != 1 || st.Acked != 1 || st.Delivered != 2 {
		t.Fatalf("after restart: %+v", st)
	}
	// The lease on b survived, with its receipt: a second consumer cannot get b, and
	// the first can still ack it.
	if got := bodies(recv(t, b, "jobs", 10, time.Minute)); strings.Join(got, ",") != "c" {
		t.Fatalf("after restart received %v, want only c", got)
	}
	if errs, err := b.Ack(ctx, "jobs", []string{ms[1].Receipt}); err != nil || errs[0] != nil {
		t.Fatalf("ack with a receipt from before the restart: %v %v", err, errs)
	}
	// The acked message never comes back.
	clk.Advance(2 * time.Minute)
	for _, m := range recv(t, b, "jobs", 10, time.Minute) {
		if string(m.Payload.Body) != "c" {
			t.Fatalf("message %q came back after its ack", m.Payload.Body)
		}
		if m.Deliveries != 2 {
			t.Fatalf("delivery count of c = %d, want 2 (counts survive restarts)", m.Deliveries)
		}
	}
}

// A message whose consumer crashes the broker (or itself) every time reaches the DLQ
// after exactly max_deliveries attempts, counted across kill -9 restarts.
func TestMaxDeliveriesCountsAcrossCrashes(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMemFS()
	clk := fakeClock()
	cfg := Config{Dir: "/data", FS: mem, Clock: clk}
	b := start(t, cfg)
	mustQueue(t, b, "pay", func(c *queue.Config) { c.MaxDeliveries = 3 })
	send(t, b, "pay", "poison")
	for attempt := 1; attempt <= 3; attempt++ {
		ms := recv(t, b, "pay", 1, time.Second)
		if len(ms) != 1 || ms[0].Deliveries != uint32(attempt) {
			t.Fatalf("attempt %d: got %+v", attempt, ms)
		}
		// Power loss: only what was fsynced survives; the abandoned broker is not closed.
		mem = mem.Crash()
		cfg.FS = mem
		b = start(t, cfg)
		clk.Advance(2 * time.Second)
	}
	if ms := recv(t, b, "pay", 1, time.Second); len(ms) != 0 {
		t.Fatalf("poison delivered a 4th time: %+v", ms)
	}
	dl, err := b.Peek(ctx, "pay-dlq", 0, 10)
	if err != nil || len(dl) != 1 {
		t.Fatalf("DLQ: %v %+v", err, dl)
	}
	if d := dl[0].Dead; d == nil || d.Reason != queue.ReasonMaxDeliveries || d.Deliveries != 3 || d.SourceName != "pay" {
		t.Fatalf("dead-letter info %+v", dl[0].Dead)
	}
	b.Close()
}

// Every send that was answered survives a power loss; every ack that was answered stays
// acked.
func TestPowerLossKeepsEveryAcknowledgedOperation(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: mem}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	var mu sync.Mutex
	sent := map[string]bool{}
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				body := fmt.Sprintf("p%d-%d", p, i)
				res, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte(body)}, Delay: -1}})
				if err == nil && res[0].Err == nil {
					mu.Lock()
					sent[body] = true
					mu.Unlock()
				} else {
					t.Errorf("send %s before the crash: %v %+v", body, err, res)
				}
			}
		}(p)
	}
	wg.Wait()
	acked := map[string]bool{}
	for _, m := range recv(t, b, "q", 50, time.Hour) {
		if errs, err := b.Ack(ctx, "q", []string{m.Receipt}); err == nil && errs[0] == nil {
			acked[string(m.Payload.Body)] = true
		} else {
			t.Errorf("ack of %s before the crash: %v %v", m.Payload.Body, err, errs)
		}
	}
	// Nothing fails before the crash: with fewer answered operations the checks below
	// would prove less (with none, nothing).
	if len(sent) != 200 || len(acked) != 50 {
		t.Fatalf("before the crash: %d sends and %d acks answered, want 200 and 50", len(sent), len(acked))
	}
	// Unanswered work in flight at the moment of the crash may or may not survive.
	go b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte("maybe")}, Delay: -1}})
	crashed := mem.Crash()
	b2 := start(t, Config{Dir: "/data", FS: crashed})
	defer b2.Close()
	found := map[string]bool{}
	for {
		ms := recv(t, b2, "q", 100, time.Hour)
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			found[string(m.Payload.Body)] = true
		}
	}
	for body := range sent {
		if !acked[body] && !found[body] {
			t.Errorf("acknowledged send %q lost", body)
		}
		if acked[body] && found[body] {
			t.Errorf("acknowledged ack of %q lost: message came back", body)
		}
	}
}

func TestFsyncFailureStopsWritesAndNeverPretends(t *testing.T) {
	t.Parallel()
	var fail bool
	var mu sync.Mutex
	fs := vfs.NewFaulty(vfs.NewMemFS(), func(e vfs.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if fail && e.Op == vfs.OpSync {
			return vfs.ErrInjected
		}
		return nil
	})
	b := start(t, Config{Dir: "/data", FS: fs, NoPrecreate: true})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "before")
	mu.Lock()
	fail = true
	mu.Unlock()
	_, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte("x")}, Delay: -1}})
	if !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("send during fsync failure: %v, want ErrStorageFailed", err)
	}
	mu.Lock()
	fail = false // the disk "recovers": the broker must still refuse
	mu.Unlock()
	if _, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte("y")}, Delay: -1}}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("send after fsync failure: %v, want ErrStorageFailed", err)
	}
	if _, err := b.Receive(ctx, "q", ReceiveOptions{Max: 1, Visibility: -1}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("receive after fsync failure: %v, want ErrStorageFailed", err)
	}
	if err := b.Healthy(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("Healthy: %v", err)
	}
}

func TestCorruptionInTheMiddleRefusesToStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := start(t, Config{Dir: dir, CheckpointBytes: 1 << 40})
	mustQueue(t, b, "q", nil)
	for i := 0; i < 20; i++ {
		send(t, b, "q", strings.Repeat("x", 100))
	}
	// Drop the final checkpoint so that start-up replays the log.
	b.Close()
	os.RemoveAll(filepath.Join(dir, "checkpoints"))
	seg := filepath.Join(dir, "wal", "00000001.wal")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside the third record's payload.
	off := 32 + 8
	for r := 0; r < 2; r++ {
		n := int(data[off-8]) | int(data[off-7])<<8
		off += (8 + n + 7) &^ 7
	}
	data[off+3] ^= 0xff
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{Dir: dir})
	if err == nil {
		t.Fatal("Open succeeded on a corrupt log")
	}
	if !strings.Contains(err.Error(), "00000001.wal") || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("error does not name the file and offset: %v", err)
	}
}

func TestSecondProcessIsLockedOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := start(t, Config{Dir: dir})
	defer b.Close()
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

func TestNewerFormatIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("okiba data directory format 99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("Open: %v, want ErrNewerFormat", err)
	}
}

// A directory of an earlier format is marked with this one before anything is written,
// so that the earlier okiba refuses it rather than choke on a record it cannot read.
func TestOlderFormatIsMarkedOnOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("okiba data directory format 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := start(t, Config{Dir: dir})
	b.Close()
	got, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
	if err != nil || strings.TrimSpace(string(got)) != fmt.Sprintf("okiba data directory format %d", FormatVersion) || FormatVersion < 2 {
		t.Fatalf("FORMAT after opening a format-1 directory: %q %v", got, err)
	}
}

// Under steady send-and-ack load, checkpoints and segment deletion keep the log's disk
// use bounded, even with one message that stays unacked in an old segment (compaction
// moves it).
func TestDiskStaysBoundedUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentSize: 2 << 20, CheckpointBytes: 1 << 20}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	mustQueue(t, b, "keep", nil)
	send(t, b, "keep", "I stay")
	body := strings.Repeat("z", 4096)
	maxSegs := 0
	for round := 0; round < 60; round++ {
		batch := make([]string, 64)
		for i := range batch {
			batch[i] = body
		}
		send(t, b, "q", batch...)
		ms := recv(t, b, "q", 64, time.Minute)
		rs := make([]string, len(ms))
		for i, m := range ms {
			rs[i] = m.Receipt
		}
		if _, err := b.Ack(ctx, "q", rs); err != nil {
			t.Fatal(err)
		}
		if n := len(b.log.Segments()); n > maxSegs {
			maxSegs = n
		}
	}
	// ~16 MiB went through the log; let the checkpointer finish its current round.
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	segs := b.log.Segments()
	if len(segs) > 3 {
		t.Fatalf("%d segments remain after 16 MiB of send+ack with 2 MiB segments: %+v", len(segs), segs)
	}
	if segs[0].Index == 1 {
		t.Fatalf("segment 1 (holding the unacked message) was never compacted away: %+v", segs)
	}
	b.Close()
	b = start(t, cfg)
	defer b.Close()
	// Restart time does not grow with history: the final checkpoint leaves nothing to replay.
	if r := b.Recovery(); !r.Checkpoint || r.Records != 0 {
		t.Fatalf("recovery after a clean close replayed %d records (checkpoint %v)", r.Records, r.Checkpoint)
	}
	ms := recv(t, b, "keep", 1, time.Minute)
	if len(ms) != 1 || string(ms[0].Payload.Body) != "I stay" {
		t.Fatalf("the long-lived message after compaction and restart: %+v", ms)
	}
}

// After a crash, replay covers at most the log written since the last checkpoint.
func TestReplayIsBoundedByCheckpoints(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: mem, SegmentSize: 2 << 20, CheckpointBytes: 256 << 10}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	body := strings.Repeat("r", 1000)
	for i := 0; i < 200; i++ {
		send(t, b, "q", body, body, body, body, body)
		ms := recv(t, b, "q", 5, time.Minute)
		rs := make([]string, len(ms))
		for j, m := range ms {
			rs[j] = m.Receipt
		}
		b.Ack(ctx, "q", rs)
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	send(t, b, "q", "after the checkpoint")
	b2 := start(t, Config{Dir: "/data", FS: mem.Crash(), SegmentSize: 2 << 20, CheckpointBytes: 256 << 10})
	defer b2.Close()
	// 200 rounds wrote about 3000 records; only what followed the checkpoint is replayed.
	if r := b2.Recovery(); !r.Checkpoint || r.Records > 10 {
		t.Fatalf("replayed %d records after a checkpoint (checkpoint %v)", r.Records, r.Checkpoint)
	}
	if got := bodies(recv(t, b2, "q", 10, time.Minute)); len(got) != 1 || got[0] != "after the checkpoint" {
		t.Fatalf("after crash: %v", got)
	}
}

// With no payload cache, every body is read back from the log, before and after restart.
func TestBodiesReadFromDiskBeyondTheCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir, CacheBytes: -1}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	in := []queue.SendInput{{Payload: queue.Payload{Body: []byte("from disk"), Group: "g", DedupID: "d1",
		Attrs: []queue.Attr{{Name: "k", Type: "String", Value: []byte("v")}}}, Delay: -1}}
	if _, err := b.Send(ctx, "q", in); err != nil {
		t.Fatal(err)
	}
	ms := recv(t, b, "q", 1, 10*time.Millisecond)
	if len(ms) != 1 || string(ms[0].Payload.Body) != "from disk" || ms[0].Payload.DedupID != "d1" || string(ms[0].Payload.Attrs[0].Value) != "v" {
		t.Fatalf("read from the log: %+v", ms)
	}
	b.Close()
	b = start(t, cfg)
	defer b.Close()
	peek, err := b.Peek(ctx, "q", 0, 10)
	if err != nil || len(peek) != 1 || string(peek[0].Payload.Body) != "from disk" || peek[0].Group != "g" {
		t.Fatalf("peek after restart: %+v %v", peek, err)
	}
}

func TestLongPollWakesOnSend(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Dir: t.TempDir()})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	got := make(chan []Message, 1)
	go func() {
		ms, _ := b.Receive(ctx, "q", ReceiveOptions{Max: 1, Wait: 30 * time.Second, Visibility: -1})
		got <- ms
	}()
	// Wait until the receiver is parked, then send.
	testkit.Eventually(t, 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.waiters["q"] != nil
	}, "the receiver to wait")
	send(t, b, "q", "hello")
	if ms := testkit.Recv(t, got, 10*time.Second, "the long poll to wake on send"); len(ms) != 1 || string(ms[0].Payload.Body) != "hello" {
		t.Fatalf("long poll returned %+v", ms)
	}
}

func TestLeaseExpiryRedeliversWithTicker(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	b := start(t, Config{Dir: t.TempDir(), Clock: clk})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "m")
	first := recv(t, b, "q", 1, 5*time.Second)
	clk.Advance(5 * time.Second)
	second := recv(t, b, "q", 1, 5*time.Second)
	if len(second) != 1 || second[0].Deliveries != 2 {
		t.Fatalf("redelivery after lease expiry: %+v", second)
	}
	errs, err := b.Ack(ctx, "q", []string{first[0].Receipt})
	if err != nil || !errors.Is(errs[0], queue.ErrReceiptStale) {
		t.Fatalf("stale receipt ack: %v %v", err, errs)
	}
	errs, _ = b.Ack(ctx, "q", []string{"garbage", second[0].Receipt})
	if !errors.Is(errs[0], ErrInvalidReceipt) || errs[1] != nil {
		t.Fatalf("mixed ack results: %v", errs)
	}
}

func TestRedriveResumesAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := fakeClock()
	cfg := Config{Dir: dir, Clock: clk, RedriveBatch: 2}
	b := start(t, cfg)
	mustQueue(t, b, "q", func(c *queue.Config) { c.MaxDeliveries = 1 })
	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, fmt.Sprintf("m%d", i))
	}
	send(t, b, "q", want...)
	ms := recv(t, b, "q", 10, time.Minute)
	rs := make([]string, len(ms))
	for i, m := range ms {
		rs[i] = m.Receipt
	}
	if _, err := b.DeadLetter(ctx, "q", rs, "bad_input", "could not parse"); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, b, "q-dlq"); st.Ready != 10 {
		t.Fatalf("DLQ holds %d, want 10", st.Ready)
	}
	// A rate of 10/s moves one message per step, then waits 100ms on the fake clock:
	// the task cannot finish before the restart.
	task, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "q-dlq", Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = start(t, cfg)
	defer b.Close()
	var tk queue.Task
	testkit.Eventually(t, 20*time.Second, func() bool {
		if tk, err = b.Task(task.ID); err != nil {
			t.Fatal(err)
		}
		if tk.State == queue.TaskCompleted {
			return true
		}
		clk.Advance(100 * time.Millisecond) // the task's next step, looked at on the next poll
		return false
	}, "the redrive to finish; %s", testkit.Lazy(func() string { return fmt.Sprintf("last seen %+v", tk) }))
	if tk.Moved != 10 {
		t.Fatalf("task moved %d, want 10", tk.Moved)
	}
	var got []string
	for _, m := range recv(t, b, "q", 100, time.Minute) {
		got = append(got, string(m.Payload.Body))
		if m.Deliveries != 1 {
			t.Fatalf("redriven message delivery count %d, want 1 (restarted at 0)", m.Deliveries)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after redrive received %v, want %v", got, want)
	}
}

func TestDedupSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := fakeClock()
	b := start(t, Config{Dir: dir, Clock: clk})
	mustQueue(t, b, "q", nil)
	in := []queue.SendInput{{Payload: queue.Payload{Body: []byte("x"), DedupID: "order-1"}, Delay: -1}}
	r1, _ := b.Send(ctx, "q", in)
	b.Close()
	b = start(t, Config{Dir: dir, Clock: clk})
	defer b.Close()
	r2, err := b.Send(ctx, "q", in)
	if err != nil || !r2[0].Duplicate || r2[0].ID != r1[0].ID {
		t.Fatalf("resend after restart: %+v %v, want duplicate of %d", r2, err, r1[0].ID)
	}
	clk.Advance(6 * time.Minute)
	r3, _ := b.Send(ctx, "q", in)
	if r3[0].Duplicate {
		t.Fatalf("dedup window did not end after 5 minutes")
	}
}

// A wall clock that steps back stalls nothing: logged time never goes backwards.
func TestClockSteppingBack(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	b := start(t, Config{Dir: t.TempDir(), Clock: clk})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "m")
	ms := recv(t, b, "q", 1, 10*time.Second)
	clk.Set(clk.Now().Add(-time.Hour))
	if errs, err := b.Ack(ctx, "q", []string{ms[0].Receipt}); err != nil || errs[0] != nil {
		t.Fatalf("ack after the clock stepped back: %v %v", err, errs)
	}
	send(t, b, "q", "n")
	if got := bodies(recv(t, b, "q", 1, time.Second)); len(got) != 1 || got[0] != "n" {
		t.Fatalf("receive after the clock stepped back: %v", got)
	}
}
