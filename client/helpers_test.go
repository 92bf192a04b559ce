package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
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

func stats(t testing.TB, srv *okibatest.Server, queue string) api.Stats {
	t.Helper()
	q, err := srv.Client.Queue(context.Background(), queue)
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Stats
}

// send sends messages with the given bodies (and group) one request at a time, in order.
func send(t testing.TB, c *client.Client, queue, group string, bodies ...string) []string {
	t.Helper()
	msgs := make([]client.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = client.Message{Body: []byte(b), Group: group}
	}
	res, err := c.SendBatch(context.Background(), queue, msgs)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	ids := make([]string, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("send %q: %v", bodies[i], r.Err)
		}
		ids[i] = r.ID
	}
	return ids
}

// peekAll lists every message of a queue.
func peekAll(t testing.TB, c *client.Client, queue string) []api.Message {
	t.Helper()
	var out []api.Message
	after := ""
	for {
		r, err := c.Peek(context.Background(), queue, client.PeekOptions{After: after, Limit: 1000})
		if err != nil {
			t.Fatalf("peek %s: %v", queue, err)
		}
		out = append(out, r.Messages...)
		if r.Next == "" {
			return out
		}
		after = r.Next
	}
}

// consume runs Consume in a goroutine and returns a channel with its result. The test
// fails at cleanup if Consume has not returned by then.
func consume(t *testing.T, ctx context.Context, c *client.Client, queue string, h client.Handler, opts client.ConsumeOptions) <-chan error {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t, nil)
	}
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		err := c.Consume(ctx, queue, h, opts)
		close(returned)
		done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Errorf("Consume of %s had not returned 10s after the test ended", queue)
		}
	})
	return done
}

// testLogger logs to the test log and, if buf is set, to buf as well.
func testLogger(t testing.TB, buf *testkit.SyncBuffer) *slog.Logger {
	w := &testWriter{t: t, buf: buf}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	t   testing.TB
	buf *testkit.SyncBuffer
}

func (w *testWriter) Write(p []byte) (int, error) {
	if w.buf != nil {
		w.buf.Write(p)
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// countingTransport counts POST requests by the last element of their path ("messages"
// for sends, "extend", "ack", …). It can also hold send requests until hold is closed,
// fail requests, and note when each arrived by a clock.
type countingTransport struct {
	base  http.RoundTripper
	sends atomic.Int64
	// hold, if set, makes send requests wait until it is closed or their context ends.
	hold chan struct{}
	// held, if set, gets a value as each send request starts to wait on hold.
	held chan struct{}
	// fail answers the first fail[op] POSTs of op with 503 unavailable, as a server
	// that is restarting would, without passing them on.
	fail map[string]int
	// clock, if set, stamps each POST with its time (see times).
	clock clock.Clock

	mu    sync.Mutex
	posts map[string]int
	at    map[string][]time.Time
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		op := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		c.mu.Lock()
		if c.posts == nil {
			c.posts, c.at = make(map[string]int), make(map[string][]time.Time)
		}
		c.posts[op]++
		if c.clock != nil {
			c.at[op] = append(c.at[op], c.clock.Now())
		}
		failing := c.posts[op] <= c.fail[op]
		c.mu.Unlock()
		if failing {
			if r.Body != nil {
				r.Body.Close()
			}
			return &http.Response{
				StatusCode: http.StatusServiceUnavailable,
				Header:     http.Header{"Content-Type": {"application/json"}},
				Body:       io.NopCloser(strings.NewReader(`{"error":{"code":"unavailable","message":"restarting (test)"}}`)),
				Request:    r,
			}, nil
		}
		if op == "messages" {
			c.sends.Add(1)
			if c.hold != nil {
				if c.held != nil {
					c.held <- struct{}{}
				}
				select {
				case <-c.hold:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
		}
	}
	return c.base.RoundTrip(r)
}

func (c *countingTransport) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts[op]
}

// times returns when each POST of op arrived, by the transport's clock.
func (c *countingTransport) times(op string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.at[op])
}

// fakeClock returns a fake clock for a client, set far from the system clock's time, so
// that a wait that reads the system clock instead never ends in time for the test.
func fakeClock() *clock.Fake { return clock.NewFake(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)) }

// waitTimers waits until clk has n timers waiting: the goroutines a test drives are
// parked.
func waitTimers(t testing.TB, clk *clock.Fake, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// noLeakedGoroutines fails the test if a goroutine of a consumer runtime (Consume,
// ConsumeGroup) or the producer is still running (they must all be joined before Consume or Close return).
// It looks at every goroutine of the process, so the tests that call it do not run in
// parallel: the parallel ones wait until every other test has finished.
func noLeakedGoroutines(t testing.TB) {
	t.Helper()
	var stacks string
	// A goroutine that closed what its owner waits on has still to return: give it a
	// moment.
	testkit.Eventually(t, 2*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "okiba/client.(*consumer)") || strings.Contains(g, "okiba/client.(*groupConsumer)") ||
				strings.Contains(g, "okiba/client.(*Producer)") || strings.Contains(g, "okiba/client.(*batcher[") { // the Producer's engine
				return false
			}
		}
		return true
	}, "the client runtime's goroutines to end; still running:\n%s", lazy(func() string { return stacks }))
}

// lazy formats as what f returns when it is printed.
type lazy func() string

func (f lazy) String() string { return f() }
