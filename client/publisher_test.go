package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// Many goroutines publishing at once share requests; each gets its own place, and every
// record is where its Publish said, each key's records in the order they were published.
func TestTopicPublisherBatchesConcurrentPublishes(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "events", api.TopicConfig{Partitions: ptr(4)})
	c, tr := countingClient(t, srv)
	p := client.NewTopicPublisher(c, "events", client.TopicPublisherOptions{})
	ctx := context.Background()

	const publishers, perPublisher = 16, 100
	type place struct {
		partition int
		offset    uint64
	}
	var mu sync.Mutex
	bodyAt := make(map[place]string)
	var wg sync.WaitGroup
	errs := make(chan error, publishers*perPublisher)
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprint("k", g))
			for i := range perPublisher {
				body := fmt.Sprintf("g%02d-r%03d", g, i)
				res, err := p.Publish(ctx, client.Record{Key: key, HasKey: true, Body: []byte(body)})
				if err != nil {
					errs <- fmt.Errorf("publish %s: %w", body, err)
					continue
				}
				mu.Lock()
				at := place{res.Partition, res.Offset}
				if prev, dup := bodyAt[at]; dup {
					errs <- fmt.Errorf("%d/%d returned for both %s and %s", at.partition, at.offset, prev, body)
				}
				bodyAt[at] = body
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
	if len(bodyAt) != publishers*perPublisher {
		t.Fatalf("%d distinct places, want %d", len(bodyAt), publishers*perPublisher)
	}

	read := readTopic(t, srv.Client, "events")
	total := 0
	next := make(map[string]int) // key → the index its next record must have
	for part, recs := range read {
		total += len(recs)
		for _, r := range recs {
			if want := bodyAt[place{part, r.Offset}]; string(r.Body) != want {
				t.Fatalf("record %d/%d is %q; its Publish sent %q", part, r.Offset, r.Body, want)
			}
			var g, i int
			if _, err := fmt.Sscanf(string(r.Body), "g%d-r%d", &g, &i); err != nil || string(r.Key) != fmt.Sprint("k", g) {
				t.Fatalf("record %d/%d: key %q, body %q", part, r.Offset, r.Key, r.Body)
			}
			if i != next[string(r.Key)] {
				t.Fatalf("key %s: record %d follows %d in partition %d", r.Key, i, next[string(r.Key)]-1, part)
			}
			next[string(r.Key)]++
		}
	}
	if total != publishers*perPublisher {
		t.Fatalf("the topic holds %d records, want %d", total, publishers*perPublisher)
	}
	n := tr.count("records")
	t.Logf("%d records in %d publish requests", publishers*perPublisher, n)
	if n >= publishers*perPublisher/2 {
		t.Fatalf("%d publish requests for %d records: publishes were not batched", n, publishers*perPublisher)
	}
}

// A record over the topic's max_record_size fails alone: the topic refuses it in its own
// result, and the rest of its request is appended.
func TestTopicPublisherRecordTooLargeFailsAlone(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "small", api.TopicConfig{MaxRecordSize: ptr(int64(64))})
	c, tr := countingClient(t, srv)
	// One batch of exactly 8: it leaves when full, the linger never matters.
	p := client.NewTopicPublisher(c, "small", client.TopicPublisherOptions{MaxBatch: 8, Linger: time.Hour})
	defer p.Close(context.Background())

	out := publishEach(p, 8, func(i int) client.Record {
		if i == 5 {
			return client.Record{Body: []byte(strings.Repeat("x", 100))}
		}
		return client.Record{Body: fmt.Appendf(nil, "r%d", i)}
	})
	for range 8 {
		o := testkit.Recv(t, out, 10*time.Second, "a Publish's result")
		if o.i == 5 {
			if !client.IsCode(o.err, api.CodeRecordTooLarge) || !errors.Is(o.res.Err, o.err) {
				t.Errorf("Publish of a record too large: %v (result %+v), want record_too_large", o.err, o.res)
			}
		} else if o.err != nil {
			t.Errorf("Publish %d: %v", o.i, o.err)
		}
	}
	if n := tr.count("records"); n != 1 {
		t.Fatalf("%d publish requests, want 1 batch", n)
	}
	if got := len(readTopic(t, srv.Client, "small")[0]); got != 7 {
		t.Fatalf("the topic holds %d records, want 7", got)
	}
}

// A request the server refuses as a whole for one record (a partition number no topic
// has) is split until that record fails alone.
func TestTopicPublisherSplitsABatchRefusedForOneRecord(t *testing.T) {
	t.Parallel()
	forEncodings(t, testTopicPublisherSplitsABatchRefusedForOneRecord)
}

func testTopicPublisherSplitsABatchRefusedForOneRecord(t *testing.T, opts client.Options) {
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "t", api.TopicConfig{})
	c, tr := countingClientWith(t, srv, &countingTransport{}, opts)
	p := client.NewTopicPublisher(c, "t", client.TopicPublisherOptions{MaxBatch: 8, Linger: time.Hour})
	defer p.Close(context.Background())

	out := publishEach(p, 8, func(i int) client.Record {
		r := client.Record{Body: fmt.Appendf(nil, "r%d", i)}
		switch i {
		case 5:
			r.Partition = ptr(1000) // past any topic's partitions: the server refuses the request
		case 6:
			r.Partition = ptr(-1) // refused by the server in JSON, by the client in binary
		}
		return r
	})
	for range 8 {
		o := testkit.Recv(t, out, 10*time.Second, "a Publish's result")
		if o.i == 5 || o.i == 6 {
			if !client.IsCode(o.err, api.CodePartitionOutOfRange) {
				t.Errorf("Publish %d to a partition out of range: %v, want partition_out_of_range", o.i, o.err)
			}
		} else if o.err != nil {
			t.Errorf("Publish %d: %v", o.i, o.err)
		}
	}
	t.Logf("%d publish requests", tr.count("records"))
	if got := len(readTopic(t, srv.Client, "t")[0]); got != 6 {
		t.Fatalf("the topic holds %d records, want 6", got)
	}
}

// The publisher does not send a request again when its answer is lost: the caller does,
// and a DedupID makes that safe — the record is appended once, and the second Publish
// says so with Duplicate and the first one's place.
func TestTopicPublisherLeavesRetriesToTheCallerAndDedupIDs(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "orders", api.TopicConfig{})
	lose := &loseAnswer{base: &http.Transport{}}
	lose.left.Store(1)
	c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: lose}})
	if err != nil {
		t.Fatal(err)
	}
	p := client.NewTopicPublisher(c, "orders", client.TopicPublisherOptions{})
	defer p.Close(context.Background())
	ctx := context.Background()
	rec := client.Record{Body: []byte("order 1"), DedupID: "order-1"}

	if _, err := p.Publish(ctx, rec); !errors.Is(err, errAnswerLost) {
		t.Fatalf("Publish whose answer was lost: %v, want the transport's error", err)
	}
	if n := lose.posts.Load(); n != 1 {
		t.Fatalf("%d publish requests after a lost answer, want 1: the publisher must not retry", n)
	}
	res, err := p.Publish(ctx, rec)
	if err != nil {
		t.Fatalf("Publish again: %v", err)
	}
	recs := readTopic(t, srv.Client, "orders")[0]
	if len(recs) != 1 {
		t.Fatalf("the topic holds %d records, want the first Publish's one", len(recs))
	}
	if !res.Duplicate || res.Partition != 0 || res.Offset != recs[0].Offset {
		t.Fatalf("Publish again: %+v, want a duplicate of 0/%d", res, recs[0].Offset)
	}
}

// Flush sends what lingers and waits for it; Close drains what is left, then refuses.
func TestTopicPublisherFlushAndCloseDrain(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "t", api.TopicConfig{})
	p, parked := client.NewWatchedTopicPublisher(srv.Client, "t", client.TopicPublisherOptions{Linger: time.Hour})
	ctx := context.Background()

	results := make(chan error, 10)
	publishAsync := func(n int) {
		for i := range n {
			go func() {
				_, err := p.Publish(ctx, client.Record{Body: fmt.Appendf(nil, "r%d", i)})
				results <- err
			}()
		}
	}
	publishAsync(5)
	waitAccepted(t, parked, 5)
	select {
	case err := <-results:
		t.Fatalf("a Publish returned (%v) before its batch's linger or a flush", err)
	default:
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := topicRecords(t, srv, "t"); got != 5 {
		t.Fatalf("after Flush the topic holds %d records, want 5", got)
	}
	for range 5 {
		if err := testkit.Recv(t, results, 5*time.Second, "a flushed Publish"); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	publishAsync(3)
	waitAccepted(t, parked, 8)
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 3 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Publish drained by Close"); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if got := topicRecords(t, srv, "t"); got != 8 {
		t.Fatalf("after Close the topic holds %d records, want 8", got)
	}

	if _, err := p.Publish(ctx, client.Record{Body: []byte("late")}); !errors.Is(err, client.ErrTopicPublisherClosed) {
		t.Fatalf("Publish after Close: %v, want ErrTopicPublisherClosed", err)
	}
	late := make(chan client.Published, 1)
	p.PublishAsync(ctx, client.Record{Body: []byte("late")}, func(r client.Published) { late <- r })
	if r := testkit.Recv(t, late, 5*time.Second, "the callback of a PublishAsync after Close"); !errors.Is(r.Err, client.ErrTopicPublisherClosed) {
		t.Fatalf("PublishAsync after Close: %v, want ErrTopicPublisherClosed", r.Err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := topicRecords(t, srv, "t"); got != 8 {
		t.Fatalf("the topic holds %d records after the late Publishes, want 8", got)
	}
	noLeakedGoroutines(t)
}

// With the default linger, a record published to an idle publisher leaves at once, and
// those published while its request is out gather into one batch that leaves when it
// comes back — on a client clock that stands still, so that only the rule can send.
func TestTopicPublisherDefaultLingerAdaptsToTheLoad(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "t", api.TopicConfig{})
	clk := fakeClock()
	c, tr, hold := holdingClient(t, srv, client.Options{Clock: clk})
	p, parked := client.NewWatchedTopicPublisher(c, "t", client.TopicPublisherOptions{})
	defer func() {
		hold.release()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(cctx)
	}()

	results := make(chan error, 11)
	publish := func(body string) {
		go func() {
			_, err := p.Publish(context.Background(), client.Record{Body: []byte(body)})
			results <- err
		}()
	}
	publish("first")
	testkit.Recv(t, hold.held, 5*time.Second, "the first record's request, at once")
	for i := range 10 {
		publish(fmt.Sprint("r", i))
	}
	waitAccepted(t, parked, 11)
	if n := tr.count("records"); n != 1 {
		t.Fatalf("%d publish requests while the first was out, want the others gathered", n)
	}
	hold.release()
	for range 11 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Publish's result"); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if n := tr.count("records"); n != 2 {
		t.Fatalf("%d publish requests, want 2 (the first alone, then the other 10 together)", n)
	}
	if got := topicRecords(t, srv, "t"); got != 11 {
		t.Fatalf("the topic holds %d records, want 11", got)
	}
}

// A fixed Linger holds a batch that is not full for its time on the client's clock, even
// when nothing is outstanding.
func TestTopicPublisherLingerWaitsItsTimeOnTheClock(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "t", api.TopicConfig{})
	clk := fakeClock()
	c, tr := countingClientWith(t, srv, &countingTransport{}, client.Options{Clock: clk})
	const linger = 50 * time.Millisecond
	p, parked := client.NewWatchedTopicPublisher(c, "t", client.TopicPublisherOptions{Linger: linger})
	defer p.Close(context.Background())
	results := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := p.Publish(context.Background(), client.Record{Body: fmt.Appendf(nil, "r%d", i)})
			results <- err
		}()
	}
	waitAccepted(t, parked, 5)
	clk.Advance(linger - time.Nanosecond)
	if clk.Timers() != 1 || tr.count("records") != 0 {
		t.Fatalf("%d publish requests, %d timers a moment before the linger's end: the batch left early", tr.count("records"), clk.Timers())
	}
	clk.Advance(time.Nanosecond)
	for range 5 {
		if err := testkit.Recv(t, results, 5*time.Second, "a Publish's result, once the linger ended"); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if n := tr.count("records"); n != 1 {
		t.Fatalf("%d publish requests, want the 5 records in 1", n)
	}
}

// readTopic reads every record of a topic, by partition.
func readTopic(t testing.TB, c *client.Client, topic string) map[int][]client.TopicRecord {
	t.Helper()
	ctx := context.Background()
	tp, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatalf("topic %s: %v", topic, err)
	}
	out := make(map[int][]client.TopicRecord)
	for _, part := range tp.Partitions {
		for off := part.Start; off < part.End; {
			b, err := c.ReadPartition(ctx, topic, part.Partition, client.ReadOptions{Offset: off, Max: 1000})
			if err != nil {
				t.Fatalf("read %s/%d from %d: %v", topic, part.Partition, off, err)
			}
			if len(b.Records) == 0 {
				t.Fatalf("read %s/%d from %d: nothing, though the partition ends at %d", topic, part.Partition, off, part.End)
			}
			out[part.Partition] = append(out[part.Partition], b.Records...)
			off = b.Next
		}
	}
	return out
}

// topicRecords is how many records a topic holds.
func topicRecords(t testing.TB, srv *okibatest.Server, topic string) int64 {
	t.Helper()
	tp, err := srv.Client.Topic(context.Background(), topic)
	if err != nil {
		t.Fatalf("topic %s: %v", topic, err)
	}
	return tp.Stats.Records
}

type published struct {
	i   int
	res client.Published
	err error
}

// publishEach publishes n records, record(i) each from a goroutine of its own, and
// returns the channel of their outcomes.
func publishEach(p *client.TopicPublisher, n int, record func(i int) client.Record) <-chan published {
	out := make(chan published, n)
	for i := range n {
		go func() {
			res, err := p.Publish(context.Background(), record(i))
			out <- published{i, res, err}
		}()
	}
	return out
}

// holdingClient returns a client for srv whose publish requests are counted (tr), then
// held until hold.release.
func holdingClient(t testing.TB, srv *okibatest.Server, opts client.Options) (*client.Client, *countingTransport, *holdPublishes) {
	t.Helper()
	hold := &holdPublishes{base: &http.Transport{MaxIdleConnsPerHost: 64}, hold: make(chan struct{}), held: make(chan struct{}, 10)}
	tr := &countingTransport{base: hold}
	opts.HTTPClient = &http.Client{Transport: tr}
	c, err := client.New(srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, tr, hold
}

// holdPublishes holds publish requests (POST …/records) until release or their context
// ends, saying on held as each starts to wait.
type holdPublishes struct {
	base       http.RoundTripper
	hold, held chan struct{}
	once       sync.Once
}

func (h *holdPublishes) release() { h.once.Do(func() { close(h.hold) }) }

func (h *holdPublishes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/records") {
		h.held <- struct{}{}
		select {
		case <-h.hold:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return h.base.RoundTrip(r)
}

var errAnswerLost = errors.New("the answer was lost (test)")

// loseAnswer passes publish requests on, but loses the answer of the first left of
// them: the server has appended the records, the client cannot know it.
type loseAnswer struct {
	base  http.RoundTripper
	left  atomic.Int64
	posts atomic.Int64
}

func (l *loseAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/records") {
		return l.base.RoundTrip(r)
	}
	l.posts.Add(1)
	resp, err := l.base.RoundTrip(r)
	if err == nil && l.left.Add(-1) >= 0 {
		resp.Body.Close()
		return nil, errAnswerLost
	}
	return resp, err
}

// BenchmarkTopicPublisherPublishParallel is BenchmarkProducerSendParallel/loopback for a
// topic of four partitions: many goroutines, each with one Publish out.
func BenchmarkTopicPublisherPublishParallel(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	srv.PutTopic(b, "bench", api.TopicConfig{Partitions: ptr(4)})
	c, tr := countingClientWith(b, srv, &countingTransport{}, client.Options{})
	p := client.NewTopicPublisher(c, "bench", client.TopicPublisherOptions{})
	defer p.Close(context.Background())
	body := []byte(strings.Repeat("x", 128)) // text: a zero byte would be escaped in JSON
	b.SetParallelism(16)
	b.ResetTimer()
	start := tr.count("records")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Publish(context.Background(), client.Record{Body: body}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if n := tr.count("records") - start; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "records/req")
	}
}

// A batch is filled up to MaxBytes as the client's encoding sizes its records: in the
// binary encoding a record is its bytes and a few more, whatever they hold; in JSON a body
// of characters that JSON escapes takes six bytes for each. The linger runs on a fake
// clock that never moves, so a batch leaves only when it is full (or flushed).
func TestTopicPublisherBatchesByTheSizeInItsEncoding(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutTopic(t, "t", api.TopicConfig{})
	body := []byte(strings.Repeat("<", 1000)) // 1,000 bytes; 6,000 in JSON ("\u003c")
	for _, c := range []struct {
		name     string
		json     bool
		requests int
	}{{"binary", false, 10}, {"json", true, 60}} {
		t.Run(c.name, func(t *testing.T) {
			cl, tr := countingClientWith(t, srv, &countingTransport{}, client.Options{Clock: fakeClock(), JSON: c.json})
			p := client.NewTopicPublisher(cl, "t", client.TopicPublisherOptions{MaxBatch: 1000, MaxBytes: 61_000, Linger: time.Hour})
			defer p.Close(context.Background())
			const n = 600
			done := make(chan error, n)
			for range n {
				p.PublishAsync(context.Background(), client.Record{Body: body}, func(r client.Published) { done <- r.Err })
			}
			if err := p.Flush(context.Background()); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			for range n {
				if err := testkit.Recv(t, done, 10*time.Second, "a publish's result"); err != nil {
					t.Fatalf("publish: %v", err)
				}
			}
			if got := tr.count("records"); got != c.requests {
				t.Fatalf("%d records of %d bytes in %d requests of at most 61,000 bytes, want %d", n, len(body), got, c.requests)
			}
		})
	}
}
