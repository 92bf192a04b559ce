package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/node"
	"github.com/okiba/okiba/internal/testkit"
)

// streamServer is a real broker and server whose HTTP requests are counted before they
// reach the server: a call carried by a stream never shows up there.
type streamServer struct {
	n        *node.Node
	url      string
	requests atomic.Int64 // HTTP requests, upgrades included
	upgrades atomic.Int64
}

func newStreamServer(t *testing.T, token string, noStreams bool) *streamServer {
	t.Helper()
	n, err := node.Open(context.Background(), node.Config{Data: t.TempDir(), AuthToken: token,
		SQS: node.SQSConfig{Disabled: true}, Console: node.ConsoleConfig{Disabled: true}},
		node.Runtime{External: true, NoGCPace: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &streamServer{n: n}
	h := http.Handler(n)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.URL.Path == api.StreamPath {
			s.upgrades.Add(1)
			if noStreams { // an older server, or a proxy that does not pass upgrades
				http.NotFound(w, r)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	s.url = hs.URL
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n.Close(ctx) // its streams first: the test server waits for none of them
		hs.Close()
	})
	return s
}

func newClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	return newClientWith(t, url, client.Options{Token: token})
}

func newClientWith(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends n messages from concurrent goroutines, receives and acks them all.
func exchange(t *testing.T, c *client.Client, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.PutQueue(ctx, queue, api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := c.Send(ctx, queue, client.Message{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		ms, err := c.Receive(ctx, queue, client.ReceiveOptions{Max: 100, Wait: ptr(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			t.Fatalf("received %d of %d", len(seen), n)
		}
		receipts := make([]string, len(ms))
		for i, m := range ms {
			seen[string(m.Body)] = true
			receipts[i] = m.Receipt
		}
		if _, err := c.Ack(ctx, queue, receipts...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientCallsTravelOnStreams: concurrent calls share a few connections, each opened
// once, with the token checked when it opens.
func TestClientCallsTravelOnStreams(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "tok-tok-tok-tok-tok-tok-tok", false)
	c := newClient(t, s.url, "tok-tok-tok-tok-tok-tok-tok")
	exchange(t, c, "jobs", 200)
	if got, up := s.requests.Load(), s.upgrades.Load(); got != up || up < 1 || up > client.StreamConns {
		t.Fatalf("%d HTTP requests, %d of them upgrades; want only upgrades, 1 to %d", got, up, client.StreamConns)
	}

	wrong := newClient(t, s.url, "nope")
	_, err := wrong.Queue(context.Background(), "jobs")
	if e := (*api.Error)(nil); !errors.As(err, &e) || e.Code != api.CodeUnauthorized {
		t.Fatalf("wrong token: %v, want unauthorized", err)
	}
}

// TestClientFallsBackToHTTP: against a server without streams the client makes plain
// HTTP requests, and asks for a stream only once.
func TestClientFallsBackToHTTP(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "", true)
	c := newClient(t, s.url, "")
	exchange(t, c, "jobs", 20)
	if got := s.upgrades.Load(); got != 1 {
		t.Fatalf("%d upgrade attempts, want 1", got)
	}
	if got := s.requests.Load(); got < 20 {
		t.Fatalf("%d HTTP requests for 20 sends", got)
	}
}

// TestClientReopensABrokenStream: when the connections break, the calls waiting on them
// fail, and the next calls open new streams.
func TestClientReopensABrokenStream(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "", false)
	p := newCutter(t, s.url)
	c := newClient(t, p.url, "")
	ctx := context.Background()
	exchange(t, c, "jobs", 10)

	waiting := make(chan error, 1)
	sent := p.sent.Load()
	go func() {
		_, err := c.Receive(ctx, "jobs", client.ReceiveOptions{Wait: ptr(30 * time.Second)})
		waiting <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return p.sent.Load() > sent }, "the long poll to leave the client")
	p.cut()
	if err := testkit.Recv(t, waiting, 10*time.Second, "the long poll to fail"); err == nil {
		t.Fatal("a call on a broken stream succeeded")
	}
	// Reads that meet a broken stream are sent again on the next one; writes that meet
	// one fail, as on a broken HTTP connection. A read can find a broken stream that
	// still looks alive (its reader has not noticed yet): it fails that one over, and
	// the next visit to that slot reopens it. Two reads per connection visit every slot
	// twice, so all are open again after them.
	for range 2 * client.StreamConns {
		if _, err := c.Queue(ctx, "jobs"); err != nil {
			t.Fatalf("a read after the cut: %v", err)
		}
	}
	before := s.upgrades.Load()
	exchange(t, c, "jobs2", 10)
	if got := s.upgrades.Load(); got != before || s.requests.Load() != got || got <= int64(client.StreamConns) {
		t.Fatalf("%d upgrades after the reads, %d after the exchange, %d HTTP requests: want new streams opened by the reads, and no plain requests", before, got, s.requests.Load())
	}
}

// TestClientCancelLeasesNothing: a call whose context ends is cancelled on the server
// too: a long poll given up does not lease the message that arrives afterwards.
func TestClientCancelLeasesNothing(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "", false)
	c := newClient(t, s.url, "")
	ctx := context.Background()
	if _, err := c.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Receive(short, "jobs", client.ReceiveOptions{Wait: ptr(20 * time.Second)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive past its deadline: %v", err)
	}
	// The cancel frame left before Receive returned, but the send below may go on another
	// of the client's streams: it waits for the server to have ended the long poll.
	waitNoLongPoll(t, c, "jobs")
	if _, err := c.Send(ctx, "jobs", client.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	q, err := c.Queue(ctx, "jobs")
	if err != nil || q.Stats.Ready != 1 || q.Stats.InFlight != 0 {
		t.Fatalf("after a cancelled receive: %+v %v", q.Stats, err)
	}
}

// cutter forwards TCP connections to a server and can cut them all.
type cutter struct {
	url   string
	sent  atomic.Int64 // bytes from clients to the server
	mu    sync.Mutex
	conns []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &cutter{url: "http://" + ln.Addr().String()}
	addr := target[len("http://"):]
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(countingWriter{out, &p.sent}, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutter) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// TestClientClosesIdleStreams: a stream unused for the idle time, by the client's clock,
// is closed and replaced at the next call, before a server would close it under the
// call; one used a moment before is kept.
func TestClientClosesIdleStreams(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "", false)
	clk := fakeClock()
	c := newClientWith(t, s.url, client.Options{Clock: clk})
	ctx := context.Background()
	// Calls take the slots in turn: one round uses every stream once.
	round := func() {
		t.Helper()
		for range client.StreamConns {
			if _, err := c.Queues(ctx, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	opened := s.upgrades.Load()
	clk.Advance(client.StreamIdle - time.Millisecond)
	round()
	if got := s.upgrades.Load(); got != opened {
		t.Fatalf("%d upgrades after a round a moment short of the idle time, %d before: want the streams kept", got, opened)
	}
	clk.Advance(client.StreamIdle)
	if _, err := c.Queues(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := s.upgrades.Load(); got != opened+1 {
		t.Fatalf("%d upgrades after an idle call, %d before: want one new stream", got, opened)
	}
}

// TestClientCallHonoursItsContextWhileAStreamOpens: a server that accepts connections
// but never answers holds up the call that opens a stream, not the others' contexts.
func TestClientCallHonoursItsContextWhileAStreamOpens(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	c := newClient(t, "http://"+ln.Addr().String(), "")
	slow, cancelSlow := context.WithCancel(context.Background())
	defer cancelSlow()
	first := make(chan error, 1)
	go func() { _, err := c.Queue(slow, "q"); first <- err }()
	// Every slot, one call each (calls take the slots in turn): whichever the first call
	// holds, some call waits for it.
	done := make(chan error, client.StreamConns)
	for range client.StreamConns {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := c.Queue(ctx, "q")
			done <- err
		}()
	}
	for range client.StreamConns {
		if err := testkit.Recv(t, done, 5*time.Second, "a call with a 100ms deadline to return"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call with a 100ms deadline: %v", err)
		}
	}
	select {
	case err := <-first:
		t.Fatalf("the call opening the stream returned before its context ended: %v", err)
	default:
	}
	cancelSlow()
	if err := testkit.Recv(t, first, 15*time.Second, "the first call to end with its context"); err == nil {
		t.Fatal("a call to a server that never answers succeeded")
	}
}

// waitNoLongPoll waits until the server has no long poll of queue waiting (its
// consumers table, GET /v1/queues/{name}/consumers): a call the client gave up on, or
// whose connection broke, has ended there too.
func waitNoLongPoll(t *testing.T, c *client.Client, queue string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		l, err := c.Consumers(context.Background(), queue)
		if err != nil {
			return false
		}
		for _, x := range l.Consumers {
			if x.Waiting > 0 {
				return false
			}
		}
		return true
	}, "the server to end the long poll")
}
