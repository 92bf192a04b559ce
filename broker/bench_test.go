package broker

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/queue"
)

// Benchmarks of the broker in-process (no HTTP), on the real file system, every send
// fsynced before it returns. docs/benchmarks.md records their results.

func benchBroker(b *testing.B) *Broker { return benchBrokerWith(b, Config{}) }

func benchBrokerWith(b *testing.B, cfg Config) *Broker {
	cfg.Dir = b.TempDir()
	br, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	if _, _, err := br.PutQueue(ctx, "bench", nil); err != nil {
		b.Fatal(err)
	}
	return br
}

func reportFsyncs(b *testing.B, br *Broker, msgs int64) {
	st := br.log.Stats()
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
	if msgs > 0 {
		b.ReportMetric(float64(st.Syncs)/float64(msgs), "fsyncs/msg")
	}
}

// BenchmarkSend: concurrent producers each sending one 1 KiB message per call and waiting
// for it to be durable; group commit shares fsyncs among them.
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{128, 1024} {
		b.Run(byteSize(size), func(b *testing.B) {
			br := benchBroker(b)
			body := make([]byte, size)
			b.SetParallelism(16) // 16 × GOMAXPROCS producers
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				in := []queue.SendInput{{Payload: queue.Payload{Body: body}, Delay: -1}}
				for pb.Next() {
					if res, err := br.Send(ctx, "bench", in); err != nil || res[0].Err != nil {
						b.Fatal(err, res)
					}
					n.Add(1)
				}
			})
			reportFsyncs(b, br, n.Load())
		})
	}
}

// BenchmarkSendSerial: one producer sending one 1 KiB message per call and waiting for
// it to be durable: the broker's share of a lone sender's latency, beside the log's
// (wal's BenchmarkAppendSync, writers=serial) and the HTTP API's (BenchmarkHTTPSendSerial).
func BenchmarkSendSerial(b *testing.B) {
	br := benchBroker(b)
	in := []queue.SendInput{{Payload: queue.Payload{Body: make([]byte, 1024)}, Delay: -1}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if res, err := br.Send(ctx, "bench", in); err != nil || res[0].Err != nil {
			b.Fatal(err, res)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkSendBatch: producers sending batches of 64.
func BenchmarkSendBatch(b *testing.B) {
	br := benchBroker(b)
	body := make([]byte, 1024)
	b.SetParallelism(4)
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		in := make([]queue.SendInput, 64)
		for i := range in {
			in[i] = queue.SendInput{Payload: queue.Payload{Body: body}, Delay: -1}
		}
		for pb.Next() {
			if _, err := br.Send(ctx, "bench", in); err != nil {
				b.Fatal(err)
			}
			n.Add(64)
		}
	})
	reportFsyncs(b, br, n.Load())
}

// BenchmarkReceiveAck: consumers draining a pre-filled queue, 64 messages per receive,
// one ack call per batch. One op = one message. Bodies are cached up to the default
// budget (256 MiB): a long run (b.N beyond 256k messages) reads the rest from the log.
func BenchmarkReceiveAck(b *testing.B) { benchReceiveAck(b, benchBroker(b)) }

// BenchmarkReceiveAckAllCached: the same with a cache that holds every body (8 GiB), so
// that every receive is the common case, all in memory, however long the run.
func BenchmarkReceiveAckAllCached(b *testing.B) {
	benchReceiveAck(b, benchBrokerWith(b, Config{CacheBytes: 8 << 30}))
}

// BenchmarkReceiveAckUncached: the same with no body cached (CacheBytes -1), so that
// every body a receive returns is read from the log: the deep-backlog case.
func BenchmarkReceiveAckUncached(b *testing.B) {
	benchReceiveAck(b, benchBrokerWith(b, Config{CacheBytes: -1}))
}

func benchReceiveAck(b *testing.B, br *Broker) {
	body := make([]byte, 1024)
	in := make([]queue.SendInput, 256)
	for i := range in {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: body}, Delay: -1}
	}
	for sent := 0; sent < b.N+64*8; sent += len(in) {
		if _, err := br.Send(ctx, "bench", in); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(2)
	var n atomic.Int64
	syncs := br.log.Stats().Syncs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ms, err := br.Receive(ctx, "bench", ReceiveOptions{Max: 64, Visibility: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			rs := make([]string, len(ms))
			for i, m := range ms {
				rs[i] = m.Receipt
			}
			if len(rs) > 0 {
				if _, err := br.Ack(ctx, "bench", rs); err != nil {
					b.Fatal(err)
				}
			}
			n.Add(int64(len(ms)))
			for i := 1; i < len(ms) && pb.Next(); i++ {
			}
		}
	})
	b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "msgs/s")
	if n.Load() > 0 {
		b.ReportMetric(float64(br.log.Stats().Syncs-syncs)/float64(n.Load()), "fsyncs/msg")
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkRestartWithBacklog measures Open on a data directory holding 1M queued
// messages (128 B), after a clean close (from its checkpoint) and after a crash (from the
// checkpoint plus the log since it). docs/benchmarks.md: ready to serve in under 2 s.
func BenchmarkRestartWithBacklog(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	br, err := Open(Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := br.PutQueue(ctx, "backlog", nil); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 128)
	in := make([]queue.SendInput, 1000)
	for i := range in {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: body}, Delay: -1}
	}
	for sent := 0; sent < n; sent += len(in) {
		if _, err := br.Send(ctx, "backlog", in); err != nil {
			b.Fatal(err)
		}
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		br, err := Open(Config{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		ms, err := br.Receive(ctx, "backlog", ReceiveOptions{Max: 1, Visibility: 0})
		if err != nil || len(ms) != 1 {
			b.Fatalf("first receive after restart: %v %v", len(ms), err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-to-first-receive")
		b.StopTimer()
		br.Close()
		b.StartTimer()
	}
}
