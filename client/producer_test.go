package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// countingClient returns a client for srv whose requests are counted.
func countingClient(t *testing.T, srv *okibatest.Server) (*client.Client, *countingTransport) {
	t.Helper()
	return countingClientWith(t, srv, &countingTransport{}, client.Options{})
}

// countingClientWith returns a client for srv with opts whose requests go through tr.
func countingClientWith(t testing.TB, srv *okibatest.Server, tr *countingTransport, opts client.Options) (*client.Client, *countingTransport) {
	t.Helper()
	tr.base = &http.Transport{MaxIdleConnsPerHost: 64}
	opts.HTTPClient = &http.Client{Transport: tr}
	c, err := client.New(srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, tr
}

func TestProducerBatchesConcurrentSends(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "orders")
	c, tr := countingClient(t, srv)
	p := client.NewProducer(c, "orders", client.ProducerOptions{})
	ctx := context.Background()

	const senders, perSender = 16, 200
	var mu sync.Mutex
	bodyOf := make(map[string]string) // id → body
	var wg sync.WaitGroup
	errs := make(chan error, senders*perSender)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				body := fmt.Sprintf("g%d-m%d", g, i)
				res, err := p.Send(ctx, client.Message{Body: []byte(body)})
				if err != nil {
					errs <- fmt.Errorf("send %s: %w", body, err)
					continue
				}
				mu.Lock()
				if prev, dup := bodyOf[res.ID]; dup {
					errs <- fmt.Errorf("id %s returned for both %s and %s", res.ID, prev, body)
				}
				bodyOf[res.ID] = body
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(bodyOf) != senders*perSender {
		t.Fatalf("%d distinct ids, want %d", len(bodyOf), senders*perSender)
	}
	msgs := peekAll(t, srv.Client, "orders")
	if len(msgs) != senders*perSender {
		t.Fatalf("server holds %d messages, want %d", len(msgs), senders*perSender)
	}
	for _, m := range msgs {
		if want, ok := bodyOf[m.ID]; !ok || m.Body == nil || *m.Body != want {
			t.Fatalf("server message %s has body %v; its Send got %q", m.ID, m.Body, want)
		}
	}
	n := tr.sends.Load()
	t.Logf("%d messages in %d send requests", senders*perSender, n)
	if n >= senders*perSender/2 {
		t.Fatalf("%d send requests for %d messages: sends were not batched", n, senders*perSender)
	}

	if _, err := p.Send(ctx, client.Message{Body: []byte("late")}); !errors.Is(err, client.ErrProducerClosed) {
		t.Fatalf("Send after Close: %v, want ErrProducerClosed", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	noLeakedGoroutines(t)
}

func TestProducerQueueFullFailsOnlyItsOwnSend(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "small", api.QueueConfig{MaxMessages: ptr(int64(10))})
	c, tr := countingClient(t, srv)
	// One batch of exactly 20: it leaves when full, the linger never matters.
	p := client.NewProducer(c, "small", client.ProducerOptions{MaxBatch: 20, Linger: time.Hour})
	defer p.Close(context.Background())

	type outcome struct {
		body string
		res  client.SendResult
		err  error
	}
	out := make(chan outcome, 20)
	for i := range 20 {
		go func() {
			body := fmt.Sprintf("m%02d", i)
			res, err := p.Send(context.Background(), client.Message{Body: []byte(body)})
			out <- outcome{body, res, err}
		}()
	}
	sent := make(map[string]string) // id → body
	full := 0
	for range 20 {
		o := testkit.Recv(t, out, 10*time.Second, "a Send's result")
		switch {
		case o.err == nil:
			sent[o.res.ID] = o.body
		case client.IsCode(o.err, api.CodeQueueFull):
			full++
			if !errors.Is(o.res.Err, o.err) || o.res.ID != "" {
				t.Errorf("queue_full Send returned result %+v", o.res)
			}
		default:
			t.Errorf("Send %s: %v", o.body, o.err)
		}
	}
	if len(sent) != 10 || full != 10 {
		t.Fatalf("%d accepted and %d queue_full, want 10 and 10", len(sent), full)
	}
	if n := tr.sends.Load(); n != 1 {
		t.Fatalf("%d send requests, want 1 batch", n)
	}
	for _, m := range peekAll(t, srv.Client, "small") {
		if want := sent[m.ID]; m.Body == nil || *m.Body != want {
			t.Fatalf("message %s has body %v, but its Send sent %q", m.ID, m.Body, want)
		}
	}
}

func TestProducerSplitsABatchRejectedForOneMessage(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	p := client.NewProducer(srv.Client, "q", client.ProducerOptions{MaxBatch: 8, Linger: time.Hour})
	defer p.Close(context.Background())
	tooLong := 200 * time.Hour // over the 7-day limit: the server rejects the whole request
	type outcome struct {
		i   int
		err error
	}
	out := make(chan outcome, 8)
	for i := range 8 {
		go func() {
			m := client.Message{Body: []byte(fmt.Sprint(i))}
			if i == 5 {
				m.Delay = &tooLong
			}
			_, err := p.Send(context.Background(), m)
			out <- outcome{i, err}
		}()
	}
	for range 8 {
		o := testkit.Recv(t, out, 10*time.Second, "a Send's result")
		if o.i == 5 {
			if !client.IsCode(o.err, api.CodeInvalidDelay) {
				t.Errorf("Send with a bad delay: %v, want invalid_delay", o.err)
			}
		} else if o.err != nil {
			t.Errorf("Send %d: %v", o.i, o.err)
		}
	}
	if got := len(peekAll(t, srv.Client, "q")); got != 7 {
		t.Fatalf("server holds %d messages, want 7", got)
	}
}

func TestProducerFlushAndCloseSendWithoutWaitingForLinger(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	p, parked := client.NewWatchedProducer(srv.Client, "q", client.ProducerOptions{Linger: time.Hour})
	ctx := context.Background()

	results := make(chan error, 10)
	sendAsync := func(n int) {
		for i := range n {
			go func() {
				_, err := p.Send(ctx, client.Message{Body: fmt.Appendf(nil, "m%d", i)})
				results <- err
			}()
		}
	}
	sendAsync(5)
	waitAccepted(t, parked, 5)
	select {
	case err := <-results:
		t.Fatalf("a Send returned (%v) before its batch's linger or a flush", err)
	default:
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := stats(t, srv, "q").Ready; got != 5 {
		t.Fatalf("after Flush the server holds %d messages, want 5", got)
	}
	for range 5 {
		if err := testkit.Recv(t, results, 5*time.Second, "a flushed Send"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}

	sendAsync(3)
	waitAccepted(t, parked, 8)
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 3 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Send drained by Close"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if got := stats(t, srv, "q").Ready; got != 8 {
		t.Fatalf("after Close the server holds %d messages, want 8", got)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
	noLeakedGoroutines(t)
}

func TestProducerSendHonoursItsContext(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	p, parked := client.NewWatchedProducer(srv.Client, "q", client.ProducerOptions{Linger: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Send(ctx, client.Message{Body: []byte("never")})
		done <- err
	}()
	waitAccepted(t, parked, 1)
	cancel()
	if err := testkit.Recv(t, done, 5*time.Second, "the cancelled Send"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Send: %v", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := stats(t, srv, "q").Sent; got != 0 {
		t.Fatalf("a Send cancelled before its batch left was sent anyway (%d sent)", got)
	}
}

func TestProducerCloseGivesUpWhenItsContextEnds(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	// Send requests hang until their context ends: the server never answers in time.
	c, tr := countingClientWith(t, srv, &countingTransport{hold: make(chan struct{}), held: make(chan struct{}, 10)}, client.Options{})
	p, parked := client.NewWatchedProducer(c, "q", client.ProducerOptions{MaxBatch: 2, MaxInFlight: 1, Linger: client.NoLinger})
	results := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := p.Send(context.Background(), client.Message{Body: fmt.Appendf(nil, "m%d", i)})
			results <- err
		}()
	}
	testkit.Recv(t, tr.held, 5*time.Second, "the first request to be out")
	waitAccepted(t, parked, 5)
	if n := tr.sends.Load(); n != 1 {
		t.Fatalf("%d send requests out, want 1 (MaxInFlight)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the deadline error", err)
	}
	closed := 0
	for range 5 {
		err := testkit.Recv(t, results, 5*time.Second, "a Send's result")
		switch {
		case errors.Is(err, client.ErrProducerClosed):
			closed++
		case errors.Is(err, context.Canceled):
			// its request was cut
		default:
			t.Fatalf("Send: %v, want ErrProducerClosed or a cancelled request", err)
		}
	}
	if closed == 0 {
		t.Fatal("no Send was failed with ErrProducerClosed, though most never left")
	}
	noLeakedGoroutines(t)
}

func ptr[T any](v T) *T { return &v }

// Publish pipelines without a goroutine per message: every callback runs exactly once,
// with a distinct id, and the queue holds every message.
func TestProducerPublishCallsBackOnce(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "pub")
	p := client.NewProducer(srv.Client, "pub", client.ProducerOptions{})
	const n = 5000
	var mu sync.Mutex
	ids := map[string]int{}
	done := make(chan struct{})
	for i := 0; i < n; i++ {
		p.Publish(context.Background(), client.Message{Body: []byte(fmt.Sprint(i))}, func(r client.SendResult) {
			mu.Lock()
			defer mu.Unlock()
			if r.Err != nil {
				t.Errorf("publish: %v", r.Err)
			}
			ids[r.ID]++
			if len(ids) == n {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("only %d of %d callbacks", len(ids), n)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for id, k := range ids {
		if k != 1 {
			t.Fatalf("id %s reported %d times", id, k)
		}
	}
	q, err := srv.Client.Queue(context.Background(), "pub")
	if err != nil || q.Stats.Ready != n {
		t.Fatalf("queue holds %v, want %d (%v)", q.Stats.Ready, n, err)
	}
	late := make(chan client.SendResult, 1)
	p.Publish(context.Background(), client.Message{Body: []byte("late")}, func(r client.SendResult) { late <- r })
	if r := testkit.Recv(t, late, 10*time.Second, "the callback of a Publish after Close"); !errors.Is(r.Err, client.ErrProducerClosed) {
		t.Errorf("publish after close: %v", r.Err)
	}
}

// With the default linger, a message sent to an idle producer leaves at once, and the
// messages sent while its request is out gather into one batch that leaves when it comes
// back. The producer runs on a fake clock that stands still, so that only the rule can
// send, not the default's 1ms cap.
func TestProducerDefaultLingerAdaptsToTheLoad(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	hold := make(chan struct{})
	var release sync.Once
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{hold: hold, held: make(chan struct{}, 10)}, client.Options{Clock: clk})
	p, parked := client.NewWatchedProducer(c, "q", client.ProducerOptions{})
	defer func() {
		release.Do(func() { close(hold) })
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(cctx)
	}()
	ctx := context.Background()

	results := make(chan error, 11)
	go func() {
		_, err := p.Send(ctx, client.Message{Body: []byte("first")})
		results <- err
	}()
	testkit.Recv(t, tr.held, 5*time.Second, "the first message's request, at once")
	for i := range 10 {
		go func() {
			_, err := p.Send(ctx, client.Message{Body: fmt.Appendf(nil, "m%d", i)})
			results <- err
		}()
	}
	waitAccepted(t, parked, 11)
	if n := tr.sends.Load(); n != 1 {
		t.Fatalf("%d send requests while the first was out, want the others gathered", n)
	}
	release.Do(func() { close(hold) })
	for range 11 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Send's result"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if n := tr.sends.Load(); n != 2 {
		t.Fatalf("%d send requests, want 2 (the first alone, then the other 10 together)", n)
	}
	if got := stats(t, srv, "q").Ready; got != 11 {
		t.Fatalf("server holds %d messages, want 11", got)
	}
}

// The default linger gathers behind an outstanding request for at most 1ms of the
// client's clock: then the batch leaves, though the request is still out.
func TestProducerDefaultLingerWaitsAtMostItsCap(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	hold := make(chan struct{})
	var release sync.Once
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{hold: hold, held: make(chan struct{}, 10)}, client.Options{Clock: clk})
	p, parked := client.NewWatchedProducer(c, "q", client.ProducerOptions{})
	defer p.Close(context.Background())
	defer release.Do(func() { close(hold) }) // before Close, which waits for the held request

	results := make(chan error, 11)
	sendAsync := func(body string) {
		go func() {
			_, err := p.Send(context.Background(), client.Message{Body: []byte(body)})
			results <- err
		}()
	}
	sendAsync("first")
	testkit.Recv(t, tr.held, 5*time.Second, "the first message's request, at once")
	for i := range 10 {
		sendAsync(fmt.Sprint("m", i))
	}
	waitAccepted(t, parked, 11) // and the linger's timer armed
	clk.Advance(time.Millisecond - time.Nanosecond)
	if clk.Timers() != 1 || tr.sends.Load() != 1 {
		t.Fatalf("%d send requests, %d timers a moment before the cap: the batch left early", tr.sends.Load(), clk.Timers())
	}
	clk.Advance(time.Nanosecond)
	testkit.Recv(t, tr.held, 5*time.Second, "the gathered batch to leave at the cap, the first request still out")
	release.Do(func() { close(hold) })
	for range 11 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Send's result"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if n := tr.sends.Load(); n != 2 {
		t.Fatalf("%d send requests, want 2", n)
	}
}

// A fixed Linger holds a batch that is not full for its time on the client's clock,
// even when nothing is outstanding.
func TestProducerLingerWaitsItsTimeOnTheClock(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{}, client.Options{Clock: clk})
	const linger = 50 * time.Millisecond
	p, parked := client.NewWatchedProducer(c, "q", client.ProducerOptions{Linger: linger})
	defer p.Close(context.Background())
	results := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := p.Send(context.Background(), client.Message{Body: fmt.Appendf(nil, "m%d", i)})
			results <- err
		}()
	}
	waitAccepted(t, parked, 5)
	clk.Advance(linger - time.Nanosecond)
	if clk.Timers() != 1 || tr.sends.Load() != 0 {
		t.Fatalf("%d send requests, %d timers a moment before the linger's end: the batch left early", tr.sends.Load(), clk.Timers())
	}
	clk.Advance(time.Nanosecond)
	for range 5 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Send's result, once the linger ended"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if n := tr.sends.Load(); n != 1 {
		t.Fatalf("%d send requests, want the 5 messages in 1", n)
	}
}

// waitAccepted waits until the producer's owner has taken in n Sends and parked.
func waitAccepted(t *testing.T, parked <-chan int64, n int64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-parked:
			if got > n {
				t.Fatalf("the producer took %d Sends, want %d", got, n)
			}
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for the producer to take %d Sends", n)
		}
	}
}

// Benchmarks of the Producer: what a message costs the client, and how many messages a
// request carries, for the two ways of handing it messages. "loopback" sends to a real
// broker on a loopback port (each request durable: it waits for an fsync); "instant"
// answers every request in memory at once, so that what is measured is the client's
// own work — the batching engine, encoding, the hand-offs — without the server's.

func BenchmarkProducerSendParallel(b *testing.B) {
	for _, where := range benchTargets {
		b.Run(where.name, func(b *testing.B) {
			c, reqs := where.client(b)
			p := client.NewProducer(c, "bench", client.ProducerOptions{})
			defer p.Close(context.Background())
			body := make([]byte, 128)
			b.SetParallelism(16) // 16 goroutines per core, each with one Send out
			b.ResetTimer()
			start := reqs.Load()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := p.Send(context.Background(), client.Message{Body: body}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportBatching(b, reqs.Load()-start)
		})
	}
}

func BenchmarkProducerPublishPipelined(b *testing.B) {
	for _, where := range benchTargets {
		b.Run(where.name, func(b *testing.B) {
			c, reqs := where.client(b)
			p := client.NewProducer(c, "bench", client.ProducerOptions{})
			defer p.Close(context.Background())
			body := make([]byte, 128)
			// At most window messages out at once, as a pipelining caller keeps them.
			const window = 1024
			slots := make(chan struct{}, window)
			var wg sync.WaitGroup
			done := func(r client.SendResult) {
				if r.Err != nil {
					b.Error(r.Err)
				}
				<-slots
				wg.Done()
			}
			b.ResetTimer()
			start := reqs.Load()
			for range b.N {
				slots <- struct{}{}
				wg.Add(1)
				p.Publish(context.Background(), client.Message{Body: body}, done)
			}
			wg.Wait()
			b.StopTimer()
			reportBatching(b, reqs.Load()-start)
		})
	}
}

// reportBatching adds the messages per request to a benchmark's result.
func reportBatching(b *testing.B, reqs int64) {
	if reqs > 0 {
		b.ReportMetric(float64(b.N)/float64(reqs), "msgs/req")
	}
}

// benchTargets are the servers a Producer benchmark sends to: a client for one, with
// queue "bench", and the count of its send requests.
var benchTargets = []struct {
	name   string
	client func(b *testing.B) (*client.Client, *atomic.Int64)
}{
	{"loopback", func(b *testing.B) (*client.Client, *atomic.Int64) {
		srv := okibatest.New(b, okibatest.Options{})
		srv.CreateQueue(b, "bench")
		tr := &countingTransport{}
		c, _ := countingClientWith(b, srv, tr, client.Options{})
		return c, &tr.sends
	}},
	{"instant", func(b *testing.B) (*client.Client, *atomic.Int64) {
		tr := &instantTransport{}
		c, err := client.New("http://okiba.invalid", client.Options{HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			b.Fatal(err)
		}
		return c, &tr.sends
	}},
}

// instantTransport answers every binary send request at once, in memory, accepting
// each of its messages.
type instantTransport struct {
	sends atomic.Int64
	ids   atomic.Uint64
}

func (t *instantTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	data, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	msgs, err := api.DecodeSendRequest(data)
	if err != nil {
		return nil, fmt.Errorf("instant transport: %w", err)
	}
	t.sends.Add(1)
	rs := make([]api.BinaryResult, len(msgs))
	first := t.ids.Add(uint64(len(msgs))) - uint64(len(msgs))
	for i := range rs {
		rs[i].ID = first + uint64(i) + 1
	}
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {api.ContentTypeBinary}},
		Body:       io.NopCloser(bytes.NewReader(api.AppendSendAnswer(nil, rs))),
		Request:    r,
	}, nil
}
