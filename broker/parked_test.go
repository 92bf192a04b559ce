package broker

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
)

func sendGroup(t *testing.T, b *Broker, q, group string, bodies ...string) []uint64 {
	t.Helper()
	in := make([]queue.SendInput, len(bodies))
	for i, s := range bodies {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: []byte(s), Group: group}, Delay: -1}
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

// lockedBuffer is a log the broker's goroutines write while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A parked group survives restarts on real files — one replayed from the log, one from a
// checkpoint — and its blocker redriven back goes first. A blocker deleted from the
// dead-letter queue releases its group with a warn line in the broker's log.
func TestParkedGroupSurvivesRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := fakeClock()
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	open := func() *Broker { return start(t, Config{Dir: dir, Clock: clk, Logger: logger}) }
	b := open()
	mustQueue(t, b, "orders", func(c *queue.Config) { c.OnDeadLetter = queue.ParkGroup })
	a := sendGroup(t, b, "orders", "alice", "a1", "a2")
	bob := sendGroup(t, b, "orders", "bob", "b1", "b2")
	ms := append(recv(t, b, "orders", 1, time.Minute), recv(t, b, "orders", 1, time.Minute)...)
	if got := bodies(ms); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("received %v", got)
	}
	if errs, err := b.DeadLetter(ctx, "orders", []string{ms[0].Receipt, ms[1].Receipt}, "bad", ""); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("dead-letter: %v %v", errs, err)
	}
	check := func(b *Broker, want ...string) {
		t.Helper()
		ps, err := b.Parked(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Group+"<"+queue.FormatID(p.Blocker))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("parked %v, want %v", got, want)
		}
	}
	check(b, "alice<"+queue.FormatID(a[0]), "bob<"+queue.FormatID(bob[0]))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = open() // from the log
	check(b, "alice<"+queue.FormatID(a[0]), "bob<"+queue.FormatID(bob[0]))
	if got := recv(t, b, "orders", 10, time.Minute); len(got) != 0 {
		t.Fatalf("parked groups gave %v after a restart", bodies(got))
	}
	// alice's blocker comes back first; bob's is deleted from the dead-letter queue.
	task, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "orders-dlq", Filter: queue.RedriveFilter{IDs: []uint64{a[0]}}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { tk, _ := b.Task(task.ID); return tk.State == queue.TaskCompleted }, "the redrive to complete")
	if err := b.DeleteMessage(ctx, "orders-dlq", bob[0]); err != nil {
		t.Fatal(err)
	}
	check(b)
	if !strings.Contains(logs.String(), "parked group released") || !strings.Contains(logs.String(), "group=bob") {
		t.Fatalf("no release line for bob in the log:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "group=alice") {
		t.Fatalf("alice's redrive back was logged as a release otherwise:\n%s", logs.String())
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = open() // from the checkpoint: alice's order (its blocker at the head) kept
	defer b.Close()
	var got []string
	for len(got) < 4 {
		ms := recv(t, b, "orders", 10, time.Minute)
		if len(ms) == 0 {
			break
		}
		var rs []string
		for _, m := range ms {
			got = append(got, string(m.Payload.Body))
			rs = append(rs, m.Receipt)
		}
		if _, err := b.Ack(ctx, "orders", rs); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, []string{"a1", "a2", "b2"}) && !slices.Equal(got, []string{"b2", "a1", "a2"}) && !slices.Equal(got, []string{"a1", "b2", "a2"}) {
		t.Fatalf("after the restarts received %v: want a1 before a2, and b2", got)
	}
}
