package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// noBackoff is a queue configuration whose nacked messages come back at once.
func noBackoff() api.QueueConfig {
	return api.QueueConfig{BackoffBase: api.Ptr(0), BackoffMax: api.Ptr(0)}
}

func bodiesN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestConsumeAcksWhenTheHandlerSucceeds(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", bodiesN("m", 50)...)
	c, tr := countingClient(t, srv)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	seen := sync.Map{}
	done := consume(t, ctx, c, "q", func(ctx context.Context, d *client.Delivery) error {
		if _, dup := seen.LoadOrStore(d.ID, true); dup {
			t.Errorf("message %s handled twice", d.ID)
		}
		if handled.Add(1) == 50 {
			cancel()
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 4})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	// Consume returns once its acks are answered.
	st := stats(t, srv, "q")
	if st.Acked != 50 || st.Ready != 0 || st.InFlight != 0 || st.Delayed != 0 {
		t.Fatalf("stats %+v: want 50 acked and nothing left", st)
	}
	if n := tr.count("ack"); n > 25 {
		t.Fatalf("%d ack requests for 50 messages: acks were not batched", n)
	}
	noLeakedGoroutines(t)
}

func TestConsumeNacksOnErrorAndTheMessageComesBack(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "q", noBackoff())
	send(t, srv.Client, "q", "", "flaky")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls []uint32
	var mu sync.Mutex
	done := consume(t, ctx, srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		mu.Lock()
		calls = append(calls, d.Deliveries)
		mu.Unlock()
		if d.Deliveries == 1 {
			return errors.New("temporary trouble")
		}
		cancel()
		return nil
	}, client.ConsumeOptions{})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if fmt.Sprint(calls) != "[1 2]" {
		t.Fatalf("handler saw deliveries %v, want [1 2]", calls)
	}
	st := stats(t, srv, "q")
	if st.Nacked != 1 || st.Acked != 1 || st.Ready+st.InFlight+st.Delayed != 0 {
		t.Fatalf("stats %+v: want 1 nack then 1 ack", st)
	}
}

func TestConsumeRetryAfterSetsTheNackDelay(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{FakeClock: true})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "later")
	start := srv.Clock.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := consume(t, ctx, srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		cancel()
		return fmt.Errorf("rate limited: %w", client.RetryAfter(time.Hour))
	}, client.ConsumeOptions{})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	ms := peekAll(t, srv.Client, "q")
	if len(ms) != 1 || ms[0].State != "delayed" || ms[0].VisibleAt == nil || !ms[0].VisibleAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("after RetryAfter(1h) the message is %+v, want delayed until %v", ms, start.Add(time.Hour))
	}
}

func TestConsumeDeadLettersWithTheHandlersReason(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	ids := send(t, srv.Client, "q", "", "poison")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := consume(t, ctx, srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		cancel()
		return fmt.Errorf("parse order: %w", client.DeadLetter("bad-payload", "field total is missing"))
	}, client.ConsumeOptions{})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if st := stats(t, srv, "q"); st.Ready+st.InFlight+st.Delayed != 0 || st.DeadLettered != 1 {
		t.Fatalf("source stats %+v: want the message dead-lettered", st)
	}
	dl := peekAll(t, srv.Client, "q-dlq")
	if len(dl) != 1 || dl[0].ID != ids[0] || dl[0].DeadLetter == nil {
		t.Fatalf("q-dlq holds %+v, want message %s", dl, ids[0])
	}
	if got := dl[0].DeadLetter; got.Reason != "bad-payload" || got.Description != "field total is missing" || got.Source != "q" {
		t.Fatalf("dead letter %+v, want reason bad-payload from q with the description", got)
	}
}

func TestConsumeRecoversAPanicAndRetries(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "q", noBackoff())
	send(t, srv.Client, "q", "", "boom")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.SyncBuffer
	var second atomic.Uint32
	done := consume(t, ctx, srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		if d.Deliveries == 1 {
			panic("nil map somewhere")
		}
		second.Store(d.Deliveries)
		cancel()
		return nil
	}, client.ConsumeOptions{Logger: testLogger(t, &logs)})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if second.Load() != 2 {
		t.Fatalf("after the panic the message came back with deliveries %d, want 2", second.Load())
	}
	if !strings.Contains(logs.String(), "panicked") || !strings.Contains(logs.String(), "nil map somewhere") {
		t.Fatalf("the panic was not logged; log:\n%s", logs.String())
	}
	if st := stats(t, srv, "q"); st.Acked != 1 || st.Nacked != 1 {
		t.Fatalf("stats %+v: want 1 nack (the panic) and 1 ack", st)
	}
}

// Handlers that run for three lease lengths keep their leases. The server and the
// client each run on a fake clock, moved in step: the leases would end at 8s, and each
// extension must come at its time — an eighth of the lease before half of it has passed,
// so every 3s — in one request for the five leases received together. While the clocks
// stand still, nothing is extended.
func TestConsumeExtendsTheLeaseOfALongHandler(t *testing.T) {
	t.Parallel()
	const vis = 8 * time.Second
	srv := okibatest.New(t, okibatest.Options{FakeClock: true})
	srv.PutQueue(t, "q", api.QueueConfig{VisibilityTimeout: api.Ptr(vis)})
	const n = 5
	send(t, srv.Client, "q", "", bodiesN("slow", n)...)
	clk := clock.NewFake(srv.Clock.Now())
	c, tr := countingClientWith(t, srv, &countingTransport{clock: clk}, client.Options{Clock: clk})
	advance := func(d time.Duration) { srv.Clock.Advance(d); clk.Advance(d) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, n)
	release := make(chan struct{})
	var runs atomic.Int32
	done := consume(t, ctx, c, "q", func(hctx context.Context, d *client.Delivery) error {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
		case <-hctx.Done():
			t.Errorf("handler context cancelled: %v", context.Cause(hctx))
		}
		return nil
	}, client.ConsumeOptions{Concurrency: n, Prefetch: -1, AckLinger: client.NoLinger})
	for range n {
		testkit.Recv(t, started, 10*time.Second, "the handlers to start")
	}
	t0 := clk.Now()
	waitTimers(t, clk, 1) // the extender, parked until the first extension is due
	if got := tr.count("extend"); got != 0 {
		t.Fatalf("%d extend requests while the clock stood still", got)
	}
	const step = vis/2 - vis/8
	const rounds = 8 // 8 × 3s = 24s: three lease lengths
	for i := 1; i <= rounds; i++ {
		advance(step - time.Millisecond)
		if clk.Timers() != 1 || tr.count("extend") != i-1 {
			t.Fatalf("extension %d: %d extend requests %v before it was due (%d timers wait)", i, tr.count("extend"), step-time.Millisecond, clk.Timers())
		}
		advance(time.Millisecond)
		waitTimers(t, clk, 1) // extended, and parked until the next
		if got := tr.count("extend"); got != i {
			t.Fatalf("extension %d: %d extend requests when it was due", i, got)
		}
	}
	for i, at := range tr.times("extend") {
		if want := t0.Add(time.Duration(i+1) * step); !at.Equal(want) {
			t.Errorf("extension %d at %v, want %v", i+1, at.Sub(t0), want.Sub(t0))
		}
	}

	// A second consumer finds nothing: without the extensions the leases would have
	// ended 16s ago.
	got, err := srv.Client.Receive(context.Background(), "q", client.ReceiveOptions{Max: 10, Wait: ptr(time.Duration(0))})
	if err != nil {
		t.Fatalf("second consumer: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("second consumer received %d messages while the handlers ran", len(got))
	}
	st := stats(t, srv, "q")
	if st.Extended != rounds*n || st.InFlight != n {
		t.Fatalf("stats %+v: want every lease extended %d times and still in flight", st, rounds)
	}
	// The leases were received together, so they are extended together.
	if reqs := tr.count("extend"); reqs != rounds {
		t.Fatalf("%d extend requests for %d extensions: extensions were not batched", reqs, st.Extended)
	}
	close(release)
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	st = stats(t, srv, "q")
	if st.Delivered != n || st.Redelivered != 0 || st.Acked != n || runs.Load() != n {
		t.Fatalf("stats %+v, runs %d: want one delivery each, each acked once", st, runs.Load())
	}
}

// A receive that fails for a reason that may pass is retried after a backoff on the
// client's clock: the nth failure waits between half and all of 100ms·2ⁿ⁻¹.
func TestConsumeBacksOffBeforeRetryingAFailedReceive(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "m")
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{fail: map[string]int{"receive": 3}}, client.Options{Clock: clk})
	var logs testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan struct{})
	done := consume(t, ctx, c, "q", func(context.Context, *client.Delivery) error {
		close(handled)
		return nil
	}, client.ConsumeOptions{Visibility: time.Hour, Prefetch: -1, AckLinger: client.NoLinger, Logger: testLogger(t, &logs)})
	for n, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		waitTimers(t, clk, 1) // parked in its backoff
		if got := tr.count("receive"); got != n+1 {
			t.Fatalf("%d receives after failure %d", got, n+1)
		}
		clk.Advance(d/2 - time.Millisecond)
		if clk.Timers() != 1 {
			t.Fatalf("failure %d: retried before half its backoff (%v)", n+1, d/2)
		}
		clk.Advance(d/2 + time.Millisecond)
		if clk.Timers() != 0 {
			t.Fatalf("failure %d: not retried after its whole backoff (%v)", n+1, d)
		}
	}
	testkit.Recv(t, handled, 10*time.Second, "the message, at the fourth receive")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if n := strings.Count(logs.String(), "receive failed; retrying"); n != 3 {
		t.Fatalf("%d failed receives logged, want 3; log:\n%s", n, logs.String())
	}
	if st := stats(t, srv, "q"); st.Acked != 1 {
		t.Fatalf("stats %+v: want the message acked", st)
	}
}

// A settle that fails for a reason that may pass is retried after a backoff on the
// client's clock, while the lease lasts.
func TestConsumeBacksOffBeforeRetryingAFailedSettle(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "m")
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{fail: map[string]int{"ack": 2}}, client.Options{Clock: clk})
	var logs testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	release := make(chan struct{})
	done := consume(t, ctx, c, "q", func(context.Context, *client.Delivery) error {
		close(started)
		<-release
		return nil
	}, client.ConsumeOptions{Visibility: time.Hour, Prefetch: -1, AckLinger: client.NoLinger, Logger: testLogger(t, &logs)})
	testkit.Recv(t, started, 10*time.Second, "the handler to start")
	// The extender parks until the first extension is due, in 22m30s, and stays parked
	// once the lease is being settled; the settler's backoff is the other timer.
	waitTimers(t, clk, 1)
	close(release)
	for n, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		waitTimers(t, clk, 2)
		if got := tr.count("ack"); got != n+1 {
			t.Fatalf("%d acks after failure %d", got, n+1)
		}
		clk.Advance(d/2 - time.Millisecond)
		if clk.Timers() != 2 {
			t.Fatalf("failure %d: retried before half its backoff (%v)", n+1, d/2)
		}
		clk.Advance(d/2 + time.Millisecond)
		if clk.Timers() != 1 {
			t.Fatalf("failure %d: not retried after its whole backoff (%v)", n+1, d)
		}
	}
	cancel() // Consume returns once the third ack is answered
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if st := stats(t, srv, "q"); st.Acked != 1 {
		t.Fatalf("stats %+v: want the message acked at the third try", st)
	}
	if n := strings.Count(logs.String(), "settle failed; retrying"); n != 2 || tr.count("ack") != 3 {
		t.Fatalf("%d failed settles logged and %d ack requests, want 2 and 3; log:\n%s", n, tr.count("ack"), logs.String())
	}
}

func TestConsumeKeepsGroupOrderAndRunsGroupsInParallel(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	const groups, perGroup = 4, 25
	// Interleave the groups' sends, plus messages without a group.
	for i := range perGroup {
		for g := range groups {
			send(t, srv.Client, "q", fmt.Sprintf("g%d", g), strconv.Itoa(i))
		}
		send(t, srv.Client, "q", "", "free")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		next     = make(map[string]int)  // group → the index it must process next
		inGroup  = make(map[string]int)  // group → handlers running now
		heads    = make(map[string]bool) // groups whose first message is running
		allHeads = make(chan struct{})
		handled  int
	)
	done := consume(t, ctx, srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		if d.Group == "" {
			mu.Lock()
			handled++
			if handled == groups*perGroup+perGroup {
				cancel()
			}
			mu.Unlock()
			return nil
		}
		i, _ := strconv.Atoi(string(d.Body))
		mu.Lock()
		inGroup[d.Group]++
		if inGroup[d.Group] > 1 {
			t.Errorf("group %s: two messages run at once", d.Group)
		}
		if i != next[d.Group] {
			t.Errorf("group %s: got message %d, want %d", d.Group, i, next[d.Group])
		}
		next[d.Group] = i + 1
		first := i == 0
		if first {
			heads[d.Group] = true
			if len(heads) == groups {
				close(allHeads)
			}
		}
		mu.Unlock()
		if first {
			// Every group's first message must be running at the same time: groups run
			// in parallel.
			select {
			case <-allHeads:
			case <-time.After(10 * time.Second):
				t.Errorf("group %s: the other groups did not run in parallel", d.Group)
			}
		}
		mu.Lock()
		inGroup[d.Group]--
		handled++
		if handled == groups*perGroup+perGroup {
			cancel()
		}
		mu.Unlock()
		return nil
	}, client.ConsumeOptions{Concurrency: 8, Prefetch: 200}) // room for every message: one receive takes a group's whole run
	if err := testkit.Recv(t, done, 20*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	for g := range groups {
		if n := next[fmt.Sprintf("g%d", g)]; n != perGroup {
			t.Errorf("group g%d: processed up to %d, want %d", g, n, perGroup)
		}
	}
	if st := stats(t, srv, "q"); st.Acked != groups*perGroup+perGroup || st.Redelivered != 0 {
		t.Fatalf("stats %+v: want every message acked once", st)
	}
}

func TestConsumeFailureInAGroupNacksTheRestAndKeepsOrder(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "q", noBackoff())
	send(t, srv.Client, "q", "g", bodiesN("", 10)...)
	send(t, srv.Client, "q", "other", bodiesN("", 10)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type run struct {
		body       string
		deliveries uint32
		ok         bool
	}
	var mu sync.Mutex
	var order []run // group g only
	var acked int
	done := consume(t, ctx, srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		fail := d.Group == "g" && string(d.Body) == "3" && d.Deliveries == 1
		if d.Group == "g" {
			order = append(order, run{string(d.Body), d.Deliveries, !fail})
		}
		if fail {
			return errors.New("cannot process 3 yet")
		}
		acked++
		if acked == 20 {
			cancel()
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 4, Prefetch: 32})
	if err := testkit.Recv(t, done, 20*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	var got []string
	for _, r := range order {
		s := r.body
		if !r.ok {
			s += "!"
		}
		got = append(got, s)
	}
	if want := "0 1 2 3! 3 4 5 6 7 8 9"; strings.Join(got, " ") != want {
		t.Fatalf("group g ran %v, want %s", got, want)
	}
	// 4..9 were held when 3 failed (one receive leases a group's consecutive messages):
	// they were handed back without running and came back with a second delivery.
	for _, r := range order[5:] {
		if r.deliveries != 2 {
			t.Fatalf("message %s ran at delivery %d, want 2 (nacked unrun, then redelivered)", r.body, r.deliveries)
		}
	}
	if st := stats(t, srv, "q"); st.Acked != 20 || st.Ready+st.InFlight+st.Delayed != 0 {
		t.Fatalf("stats %+v: want all 20 acked", st)
	}
}

func TestConsumeGracefulShutdownDrainsInFlightWork(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", bodiesN("m", 10)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 10)
	release := make(chan struct{})
	var cancelledEarly atomic.Bool
	done := consume(t, ctx, srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		started <- d.ID
		<-release
		if hctx.Err() != nil {
			cancelledEarly.Store(true)
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 2, Prefetch: 8})
	testkit.Recv(t, started, 10*time.Second, "a handler to start")
	testkit.Recv(t, started, 10*time.Second, "a second handler to start")
	// Two running and eight prefetched: the consumer holds all ten.
	testkit.Eventually(t, 10*time.Second, func() bool { return stats(t, srv, "q").InFlight == 10 }, "all ten leased")

	cancel()
	// The eight that never started are handed back at once, while the two still run.
	testkit.Eventually(t, 10*time.Second, func() bool {
		st := stats(t, srv, "q")
		return st.Ready == 8 && st.InFlight == 2
	}, "the prefetched messages handed back")
	select {
	case err := <-done:
		t.Fatalf("Consume returned (%v) before its running handlers finished", err)
	default:
	}
	close(release)
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if cancelledEarly.Load() {
		t.Fatal("a running handler's context was cancelled during a graceful drain")
	}
	if len(started) != 0 {
		t.Fatalf("%d more handlers started after the drain began", len(started))
	}
	st := stats(t, srv, "q")
	if st.Acked != 2 || st.Ready != 8 || st.InFlight != 0 || st.Delayed != 0 {
		t.Fatalf("stats %+v: want the 2 running acked and the 8 others ready again", st)
	}
	for _, m := range peekAll(t, srv.Client, "q") {
		if m.Deliveries != 1 {
			t.Fatalf("message %s has %d deliveries, want 1", m.ID, m.Deliveries)
		}
	}
	noLeakedGoroutines(t)
}

// The drain timeout runs on the client's clock: a handler that only stops when told is
// told when the clock reaches it, not a moment before.
func TestConsumeDrainTimeoutCancelsHandlers(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "stuck")
	clk := fakeClock()
	c, err := client.New(srv.URL, client.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	cancelled := make(chan struct{})
	const drain = 30 * time.Second
	done := consume(t, ctx, c, "q", func(hctx context.Context, d *client.Delivery) error {
		close(started)
		<-hctx.Done() // a handler that only stops when told
		close(cancelled)
		return hctx.Err()
	}, client.ConsumeOptions{DrainTimeout: drain, Visibility: time.Hour, Prefetch: -1})
	testkit.Recv(t, started, 10*time.Second, "the handler to start")
	waitTimers(t, clk, 1) // the extender's
	cancel()
	waitTimers(t, clk, 2) // and the drain's
	clk.Advance(drain - time.Millisecond)
	if clk.Timers() != 2 {
		t.Fatalf("%d timers wait a moment before the drain timeout: it fired early", clk.Timers())
	}
	select {
	case <-cancelled:
		t.Fatal("the handler was cancelled before the drain timeout")
	default:
	}
	clk.Advance(time.Millisecond)
	testkit.Recv(t, cancelled, 10*time.Second, "the handler to be cancelled at the drain timeout")
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	// Cut short by the consumer, not failed: handed back with no backoff.
	st := stats(t, srv, "q")
	if st.Ready != 1 || st.Nacked != 1 || st.Delayed != 0 {
		t.Fatalf("stats %+v: want the message ready again", st)
	}
}

func TestConsumeHardStopCancelsHandlersAtOnce(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "a", "b")

	hardStop := make(chan struct{})
	started := make(chan struct{}, 2)
	done := consume(t, context.Background(), srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		started <- struct{}{}
		<-hctx.Done()
		return hctx.Err()
	}, client.ConsumeOptions{Concurrency: 2, HardStop: hardStop})
	testkit.Recv(t, started, 10*time.Second, "a handler to start")
	testkit.Recv(t, started, 10*time.Second, "the second handler to start")
	close(hardStop)
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if st := stats(t, srv, "q"); st.Ready != 2 || st.InFlight != 0 {
		t.Fatalf("stats %+v: want both messages ready again", st)
	}
	noLeakedGoroutines(t)
}

func TestConsumeWithoutPrefetchLeasesOnlyWhatRuns(t *testing.T) {
	t.Parallel()
	// Prefetch none, one handler: the fetcher waits for room while the handler runs, so
	// only the running message is leased, and the drain leaves nothing else leased.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	send(t, srv.Client, "q", "", "a", "b", "c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	done := consume(t, ctx, srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		started <- struct{}{}
		<-release
		return nil
	}, client.ConsumeOptions{Prefetch: -1})
	testkit.Recv(t, started, 10*time.Second, "the handler to start")
	if st := stats(t, srv, "q"); st.InFlight != 1 {
		t.Fatalf("stats %+v: with no prefetch only the running message is leased", st)
	}
	cancel()
	close(release)
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if st := stats(t, srv, "q"); st.Acked != 1 || st.Ready != 2 || st.InFlight != 0 {
		t.Fatalf("stats %+v: want 1 acked and 2 ready", st)
	}
}

func TestConsumeEndsOnAnUnrecoverableError(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	h := func(context.Context, *client.Delivery) error { return nil }
	// Reading the queue's visibility fails at once.
	err := srv.Client.Consume(context.Background(), "missing", h, client.ConsumeOptions{Logger: testLogger(t, nil)})
	if !client.IsCode(err, api.CodeQueueNotFound) {
		t.Fatalf("Consume on a missing queue: %v, want queue_not_found", err)
	}
	// With a visibility given, the receive fails.
	err = srv.Client.Consume(context.Background(), "missing", h, client.ConsumeOptions{Visibility: time.Second, Logger: testLogger(t, nil)})
	if !client.IsCode(err, api.CodeQueueNotFound) {
		t.Fatalf("Consume with Visibility on a missing queue: %v, want queue_not_found", err)
	}
	// Deleted while consuming.
	srv.CreateQueue(t, "q")
	started := make(chan struct{})
	done := consume(t, context.Background(), srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		close(started)
		return nil
	}, client.ConsumeOptions{})
	send(t, srv.Client, "q", "", "x")
	testkit.Recv(t, started, 10*time.Second, "the handler to start")
	if err := srv.Client.DeleteQueue(context.Background(), "q", true); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); !client.IsCode(err, api.CodeQueueNotFound) {
		t.Fatalf("Consume of a deleted queue: %v, want queue_not_found", err)
	}
	noLeakedGoroutines(t)
}

func TestConsumeLostLeaseCancelsTheHandlerAndSkipsTheSettle(t *testing.T) {
	t.Parallel()
	// The broker's clock is fake: jumping it past the lease makes the next extension
	// answer receipt_stale, as when this process stalled longer than its lease.
	srv := okibatest.New(t, okibatest.Options{FakeClock: true})
	srv.PutQueue(t, "q", api.QueueConfig{VisibilityTimeout: api.Ptr(200 * time.Millisecond)})
	send(t, srv.Client, "q", "", "m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	cancelled := make(chan struct{})
	done := consume(t, ctx, srv.Client, "q", func(hctx context.Context, d *client.Delivery) error {
		if d.Deliveries > 1 {
			return nil // someone else's turn; not reached in this test
		}
		close(started)
		<-hctx.Done()
		close(cancelled)
		return nil // would be an ack, but the lease is gone
	}, client.ConsumeOptions{Prefetch: -1})
	testkit.Recv(t, started, 10*time.Second, "the handler to start")
	// Receive it elsewhere once the lease has ended, so that the message is not only
	// stale but in someone else's hands.
	srv.Clock.Advance(time.Second)
	got, err := srv.Client.Receive(context.Background(), "q", client.ReceiveOptions{Max: 1, Visibility: ptr(time.Hour)})
	if err != nil || len(got) != 1 {
		t.Fatalf("second consumer: %v, %d messages", err, len(got))
	}
	testkit.Recv(t, cancelled, 10*time.Second, "the handler's context to be cancelled")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if st := stats(t, srv, "q"); st.Acked != 0 || st.Nacked != 0 || st.InFlight != 1 {
		t.Fatalf("stats %+v: the lost lease must be neither acked nor nacked", st)
	}
	if err := srv.Client.AckOne(context.Background(), "q", got[0].Receipt); err != nil {
		t.Fatalf("the second consumer's ack: %v", err)
	}
}

// unreadableTransport answers the first n receives with a success the client cannot
// read (JSON to a binary request, as a proxy or a test double might), then passes them on.
type unreadableTransport struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (u *unreadableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/receive") && u.n.Add(-1) >= 0 {
		body := `{"messages":[]}`
		return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r}, nil
	}
	return u.base.RoundTrip(r)
}

// An answer Consume cannot read is not the end of it: it logs it once, retries, and
// processes the message once the answers are readable again.
func TestConsumeSurvivesAnswersItCannotRead(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	tr := &unreadableTransport{base: http.DefaultTransport}
	tr.n.Store(3)
	c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	send(t, srv.Client, "q", "", "after the noise")
	got := make(chan string, 1)
	var logs testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := consume(t, ctx, c, "q", func(_ context.Context, d *client.Delivery) error {
		got <- string(d.Body)
		return nil
	}, client.ConsumeOptions{Logger: testLogger(t, &logs)})
	if body := testkit.Recv(t, got, 10*time.Second, "the message after three unreadable answers"); body != "after the noise" {
		t.Fatalf("handled %q", body)
	}
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"okiba: a receive's answer cannot be read"); n != 1 {
		t.Fatalf("unreadable answers logged %d times at WARN, want once:\n%s", n, logs.String())
	}
}

// Consume nacks with the handler's error: explain shows it, and once max_deliveries ends
// the message, it is its dead letter's description (it used to be empty).
func TestConsumeNacksWithTheHandlersError(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	cfg := noBackoff()
	two := 2
	cfg.MaxDeliveries = &two
	srv.PutQueue(t, "q", cfg)
	ids := send(t, srv.Client, "q", "", "poison")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := consume(t, ctx, srv.Client, "q", func(ctx context.Context, d *client.Delivery) error {
		if d.Deliveries >= 2 {
			cancel()
		}
		return fmt.Errorf("charge card: attempt %d: gateway timeout", d.Deliveries)
	}, client.ConsumeOptions{})
	if err := testkit.Recv(t, done, 10*time.Second, "Consume to return"); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	var ex *api.Explanation
	testkit.Eventually(t, 10*time.Second, func() bool {
		var err error
		ex, err = srv.Client.Explain(context.Background(), "q", ids[0])
		return err == nil && ex.State == "dead_lettered"
	}, "message %s dead-lettered (last: %+v)", ids[0], testkit.Lazy(func() string { return fmt.Sprint(ex) }))
	if d := ex.DeadLetter; d == nil || d.Reason != "max_deliveries" || d.Description != "charge card: attempt 2: gateway timeout" {
		t.Fatalf("dead letter %+v, want max_deliveries described by the handler's last error", d)
	}
}
