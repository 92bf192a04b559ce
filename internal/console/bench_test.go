package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/service"
	"github.com/okiba/okiba/queue"
)

// BenchmarkOverview measures what the overview page costs the server with 1,000 queues
// (500 queues and their 500 dead-letter queues, each source with 10 messages, 2 of them
// in flight, and 30 history samples): the time to answer one poll and the bytes each
// answer carries. Results are in docs/benchmarks.md.
//
//	go test -run '^$' -bench Overview -benchmem ./web
func BenchmarkOverview(b *testing.B) {
	br, err := broker.Open(broker.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	for i := range 500 {
		name := fmt.Sprintf("service-%03d-events", i)
		if _, _, err := br.PutQueue(ctx, name, nil); err != nil {
			b.Fatal(err)
		}
		in := make([]queue.SendInput, 10)
		for j := range in {
			in[j] = queue.SendInput{Payload: queue.Payload{Body: []byte(`{"n":` + strconv.Itoa(j) + `}`)}, Delay: -1}
		}
		if _, err := br.Send(ctx, name, in); err != nil {
			b.Fatal(err)
		}
		if _, err := br.Receive(ctx, name, broker.ReceiveOptions{Max: 2, Wait: 0, Visibility: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	if n := len(br.Queues("")); n != 1000 {
		b.Fatalf("%d queues", n)
	}
	// The benchmark takes the samples itself; 120 kept, as with the defaults (10 min / 5 s).
	svc := service.New(br, service.Options{})
	c, err := New(svc, Options{SampleInterval: time.Hour, History: 120 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	for i := range 30 {
		c.hist.sample(svc.Queues(ctx, ""), nil, start.Add(time.Duration(i)*5*time.Second))
	}
	_, seq := c.hist.depths(0, 1)

	get := func(b *testing.B, since uint64, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/ui/api/overview?since="+strconv.FormatUint(since, 10), nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		c.overview(w, req)
		return w
	}
	run := func(name string, since uint64, hdr ...string) {
		b.Run(name, func(b *testing.B) {
			var w *httptest.ResponseRecorder
			b.ReportAllocs()
			for b.Loop() {
				w = get(b, since, hdr...)
			}
			if w.Code != http.StatusOK && w.Code != http.StatusNotModified {
				b.Fatalf("status %d", w.Code)
			}
			b.ReportMetric(float64(w.Body.Len()), "bytes/update")
		})
	}
	run("first-load", 0)
	run("update", seq-1)
	run("update-gzip", seq-1, "Accept-Encoding", "gzip")
	etag := get(b, seq-1).Header().Get("ETag")
	run("unchanged-304", seq-1, "If-None-Match", etag)
	// What the broker alone takes to list the queues with their statistics (under its
	// lock), and the service to list them in the API's wire types, which every answer
	// above and every sample below starts with.
	b.Run("broker-queues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			br.Queues("")
		}
	})
	b.Run("service-queues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			svc.Queues(ctx, "")
		}
	})
	b.Run("history-sample", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.hist.sample(svc.Queues(ctx, ""), nil, time.Now())
		}
	})
}
