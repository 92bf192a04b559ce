package nativeapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/okibatest"
)

// Benchmarks through the Go client against a real server on loopback (by default on
// the client's stream; the serial ones compare transports), every send fsynced before
// its answer. docs/benchmarks.md records results.

// BenchmarkHTTPSend: 16 concurrent producers, one 1 KiB message per request.
func BenchmarkHTTPSend(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	srv.CreateQueue(b, "bench")
	body := []byte(strings.Repeat("x", 1024))
	ctx := context.Background()
	b.SetParallelism(8) // 8 × GOMAXPROCS (2 here) = 16 producers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := srv.Client.Send(ctx, "bench", client.Message{Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// transports are the ways the Go client can reach the server, for the serial
// benchmarks: the stream (its default), plain HTTP/1.1 (NoStream), and HTTP/2 without
// TLS (h2c), the stream's alternative that docs/benchmarks.md compares it with.
var transports = []struct {
	name string
	dial func(b *testing.B) *client.Client
}{
	{"stream", func(b *testing.B) *client.Client { return benchClient(b, false, client.Options{}) }},
	{"http1", func(b *testing.B) *client.Client { return benchClient(b, false, client.Options{NoStream: true}) }},
	{"h2c", func(b *testing.B) *client.Client {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		return benchClient(b, true, client.Options{HTTPClient: &http.Client{Transport: &http.Transport{Protocols: &p}}})
	}},
}

// benchClient starts a server with queue "bench" and returns a client for it.
func benchClient(b *testing.B, h2c bool, opts client.Options) *client.Client {
	_, e := serverAt(b, nativeapi.Options{}, func(_ *nativeapi.Server, hs *httptest.Server) {
		if h2c {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			hs.Config.Protocols = &p
		}
	})
	c, err := client.New(e.base, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.PutQueue(context.Background(), "bench", api.QueueConfig{}); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHTTPSendSerial: one producer, one 1 KiB message per request, each waiting
// for its answer (so for its fsync): the latency a lone synchronous sender sees, over
// each transport. p50-µs and p99-µs are of the per-request round trip.
func BenchmarkHTTPSendSerial(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	serialLatency(b, func(ctx context.Context, c *client.Client) error {
		_, err := c.Send(ctx, "bench", client.Message{Body: body})
		return err
	})
}

// BenchmarkHTTPQueueSerial: one client reading a queue's description and statistics,
// one request at a time: the cost of a round trip that waits for no fsync, to set
// BenchmarkHTTPSendSerial against.
func BenchmarkHTTPQueueSerial(b *testing.B) {
	serialLatency(b, func(ctx context.Context, c *client.Client) error {
		_, err := c.Queue(ctx, "bench")
		return err
	})
}

// serialLatency runs call one at a time over each transport and reports the round
// trip's percentiles.
func serialLatency(b *testing.B, call func(context.Context, *client.Client) error) {
	ctx := context.Background()
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			c := tr.dial(b)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if err := call(ctx, c); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// reportLatency reports the median and 99th percentile of lat in microseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkHTTPSendBatch: 16 concurrent producers, batches of 64 messages of 1 KiB.
func BenchmarkHTTPSendBatch(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	srv.CreateQueue(b, "bench")
	body := []byte(strings.Repeat("x", 1024))
	ctx := context.Background()
	batch := make([]client.Message, 64)
	for i := range batch {
		batch[i] = client.Message{Body: body}
	}
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := srv.Client.SendBatch(ctx, "bench", batch); err != nil {
				b.Fatal(err)
			}
			n.Add(int64(len(batch)))
		}
	})
	b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkHTTPEndToEnd: 4 producers sending batches of 16 and 4 consumers receiving up
// to 64 and acking each batch, 1 KiB messages; one op = one message sent, received and
// acked.
func BenchmarkHTTPEndToEnd(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	srv.CreateQueue(b, "bench")
	body := []byte(strings.Repeat("x", 1024))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	total := int64(b.N)
	var sent, acked atomic.Int64
	done := make(chan struct{})
	b.ResetTimer()
	for p := 0; p < 4; p++ {
		go func() {
			batch := make([]client.Message, 16)
			for i := range batch {
				batch[i] = client.Message{Body: body}
			}
			for sent.Add(16) <= total+15 {
				if _, err := srv.Client.SendBatch(ctx, "bench", batch); err != nil {
					return
				}
			}
		}()
	}
	wait := 100 * time.Millisecond
	for c := 0; c < 4; c++ {
		go func() {
			for ctx.Err() == nil {
				ds, err := srv.Client.Receive(ctx, "bench", client.ReceiveOptions{Max: 64, Wait: &wait})
				if err != nil || len(ds) == 0 {
					continue
				}
				rs := make([]string, len(ds))
				for i, d := range ds {
					rs[i] = d.Receipt
				}
				if _, err := srv.Client.Ack(ctx, "bench", rs...); err != nil {
					return
				}
				if acked.Add(int64(len(ds))) >= total {
					select {
					case <-done:
					default:
						close(done)
					}
				}
			}
		}()
	}
	<-done
	b.StopTimer()
	b.ReportMetric(float64(acked.Load())/b.Elapsed().Seconds(), "msgs/s")
}
