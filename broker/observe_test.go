package broker

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

type testObserver struct {
	mu          sync.Mutex
	records     int
	checkpoints int
	ckptBytes   int
	// taken, if set, receives a value after each checkpoint (dropped when full).
	taken chan struct{}
}

func (o *testObserver) Committed(c wal.Commit) {
	o.mu.Lock()
	o.records += c.Records
	o.mu.Unlock()
}

func (o *testObserver) Checkpointed(d time.Duration, bytes int, err error) {
	o.mu.Lock()
	if err == nil {
		o.checkpoints++
		o.ckptBytes = bytes
		if o.taken != nil {
			select {
			case o.taken <- struct{}{}:
			default:
			}
		}
	}
	o.mu.Unlock()
}

func TestObserverAndLogStats(t *testing.T) {
	t.Parallel()
	var o testObserver
	b := start(t, Config{Dir: t.TempDir(), Observer: &o})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "a", "b", "c")
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	st := b.LogStats()
	o.mu.Lock()
	defer o.mu.Unlock()
	if st.Records == 0 || uint64(o.records) != st.Records {
		t.Fatalf("observed %d records, log stats %+v", o.records, st)
	}
	if o.checkpoints == 0 || o.ckptBytes == 0 {
		t.Fatalf("checkpoints observed %d (%d bytes)", o.checkpoints, o.ckptBytes)
	}
}

// TestBrokerMadeDeadLettersAreLogged: dead letters that no request asked for (a lease
// ending for the last time, retention) get a log line with their reason, like those a
// consumer asks for.
func TestBrokerMadeDeadLettersAreLogged(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	var logs testkit.SyncBuffer
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer b.Close()
	mustQueue(t, b, "jobs", func(c *queue.Config) { c.MaxDeliveries = 1 })
	mustQueue(t, b, "temp", func(c *queue.Config) {
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.MaxDeliveries = 0
		c.Retention = time.Minute
	})
	send(t, b, "jobs", "poison")
	send(t, b, "temp", "stale")
	recv(t, b, "jobs", 1, time.Second)
	want := []string{
		`msg=dead-lettered queue=jobs messages=1 reason=max_deliveries`,
		`msg="expired and removed: the queue has no dead-letter queue" queue=temp messages=1 reason=expired`,
	}
	// The sampler logs once a second of the (fake) clock: move time on until it has, a
	// step of the fake clock per poll.
	testkit.Eventually(t, 10*time.Second, func() bool {
		clk.Advance(time.Minute)
		out := logs.String()
		return strings.Contains(out, want[0]) && strings.Contains(out, want[1])
	}, "log lines %q; %s", want, testkit.Lazy(func() string {
		return fmt.Sprintf("got:\n%s\njobs %+v temp %+v timers %d", logs.String(), stats(t, b, "jobs"), stats(t, b, "temp"), clk.Timers())
	}))
	if n := strings.Count(logs.String(), "reason=max_deliveries"); n != 1 {
		t.Fatalf("max_deliveries logged %d times", n)
	}
}

// With a deep backlog, a checkpoint waits for an eighth of the backlog's count in records
// (a checkpoint visits every message), not only for bytes of log: big messages would
// otherwise call for one every few thousand records.
func TestCheckpointsFollowTheBacklog(t *testing.T) {
	t.Parallel()
	o := testObserver{taken: make(chan struct{}, 1)}
	b := start(t, Config{Dir: t.TempDir(), Observer: &o, CheckpointBytes: 64 << 10})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	small := make([]string, 1000)
	for i := range small {
		small[i] = "s"
	}
	for range 80 {
		send(t, b, "q", small...)
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	before := o.checkpoints
	select { // the checkpoints so far are counted in before
	case <-o.taken:
	default:
	}
	o.mu.Unlock()
	big := make([]string, 100)
	for i := range big {
		big[i] = strings.Repeat("b", 4096)
	}
	// 9,000 records (under an eighth of 80,000 messages) and 36 MiB of log (far over
	// 64 KiB and twice the checkpoint): not due.
	for range 90 {
		send(t, b, "q", big...)
	}
	b.mu.Lock()
	due, since := b.checkpointDueLocked(), b.logBytesSince(b.ckptPos)
	b.mu.Unlock()
	if due || since < 2*b.ckptSize || since < 64<<10 {
		t.Fatalf("after 9000 records (%d bytes of log): due %v", since, due)
	}
	o.mu.Lock()
	taken := o.checkpoints - before
	o.mu.Unlock()
	if taken != 0 {
		t.Fatalf("%d checkpoints taken before an eighth of the backlog was logged", taken)
	}
	// Past 10,000 records (an eighth of the 80,000 messages the checkpoint held; the
	// backlog has grown since, which the next checkpoint will count) the checkpointer runs.
	for range 11 {
		send(t, b, "q", big...)
	}
	testkit.Recv(t, o.taken, 10*time.Second, "a checkpoint after an eighth of the backlog was logged")
}

// A kick the checkpointer has received but not yet acted on when a checkpoint is taken
// (Checkpoint, here just before) is answered by that checkpoint: nothing is due after
// it, and the checkpointer takes none.
func TestAnsweredKickTakesNoCheckpoint(t *testing.T) {
	t.Parallel()
	var o testObserver
	b := start(t, Config{Dir: t.TempDir(), Observer: &o, CheckpointBytes: 1 << 10})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	send(t, b, "q", strings.Repeat("x", 4<<10)) // due, and kicked
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	before := o.checkpoints
	o.mu.Unlock()
	// The checkpointer takes a kick, acts on it, and comes back for the next: once it has
	// taken that one too, it has acted on the first.
	for range 2 {
		kick(b.kickCkpt)
		testkit.Eventually(t, 10*time.Second, func() bool { return len(b.kickCkpt) == 0 }, "the checkpointer to take its kick")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if taken := o.checkpoints - before; taken != 0 {
		t.Fatalf("%d checkpoints taken for kicks that a checkpoint had answered", taken)
	}
}
