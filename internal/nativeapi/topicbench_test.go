package nativeapi_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// Topic benchmarks through the Go client on loopback, each beside the queue's in the same
// shape, so that the two targets of the topics issue (publish ≥ the queue's, group read +
// commit ≥ 2× queue receive + ack) read as ratios within one run. 1 KiB bodies; json/ runs
// them with client.Options{JSON: true}. docs/benchmarks.md records results.

// encodings are the client's two encodings of sends, receives, publishes and pulls.
var encodings = []struct {
	name string
	opts client.Options
}{{"binary", client.Options{}}, {"json", client.Options{JSON: true}}}

// benchServer starts a server with topic "bench" (4 partitions) and queue "bench", and
// returns a client with opts.
func benchServer(b *testing.B, opts client.Options) *client.Client {
	_, c := benchServerAndClient(b, opts)
	return c
}

func benchServerAndClient(b *testing.B, opts client.Options) (*okibatest.Server, *client.Client) {
	srv := okibatest.New(b, okibatest.Options{})
	srv.CreateTopic(b, "bench", 4)
	srv.CreateQueue(b, "bench")
	c, err := client.New(srv.URL, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return srv, c
}

// pipelineWindow is how many records a pipelining benchmark keeps out at once (t1's 16
// producers × 64).
const pipelineWindow = 1024

// pipelined runs b.N calls of send, at most pipelineWindow of them out at once; send
// starts one and calls done with its outcome.
func pipelined(b *testing.B, send func(done func(error))) {
	slots := make(chan struct{}, pipelineWindow)
	var wg sync.WaitGroup
	b.ResetTimer()
	for range b.N {
		slots <- struct{}{}
		wg.Add(1)
		send(func(err error) {
			if err != nil {
				b.Error(err)
			}
			<-slots
			wg.Done()
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkTopicPublish: a TopicPublisher with its defaults, 1024 records in flight. It
// also reports the mover's fsyncs of partition files and the log's own, per 1000 records,
// counted while it measured (the mover's second write is what a queue publish has not).
func BenchmarkTopicPublish(b *testing.B) {
	for _, enc := range encodings {
		b.Run(enc.name, func(b *testing.B) {
			srv, c := benchServerAndClient(b, enc.opts)
			p := client.NewTopicPublisher(c, "bench", client.TopicPublisherOptions{})
			defer p.Close(context.Background())
			rec := client.Record{Body: []byte(strings.Repeat("x", 1024))}
			mv0, log0 := srv.Broker.MoveStats(), srv.Broker.LogStats()
			pipelined(b, func(done func(error)) {
				p.PublishAsync(context.Background(), rec, func(r client.Published) { done(r.Err) })
			})
			mv, lg := srv.Broker.MoveStats(), srv.Broker.LogStats()
			b.ReportMetric(float64(mv.Syncs-mv0.Syncs)*1000/float64(b.N), "move-fsyncs/krec")
			b.ReportMetric(float64(lg.Syncs-log0.Syncs)*1000/float64(b.N), "wal-fsyncs/krec")
		})
	}
}

// BenchmarkQueuePublish is BenchmarkTopicPublish for a queue: a Producer with its
// defaults, 1024 messages in flight.
func BenchmarkQueuePublish(b *testing.B) {
	for _, enc := range encodings {
		b.Run(enc.name, func(b *testing.B) {
			c := benchServer(b, enc.opts)
			p := client.NewProducer(c, "bench", client.ProducerOptions{})
			defer p.Close(context.Background())
			m := client.Message{Body: []byte(strings.Repeat("x", 1024))}
			pipelined(b, func(done func(error)) {
				p.Publish(context.Background(), m, func(r client.SendResult) { done(r.Err) })
			})
		})
	}
}

// fillBatch is the batch the drain benchmarks fill their topic or queue with.
func fillBatch(n int) ([]client.Record, []client.Message) {
	body := []byte(strings.Repeat("x", 1024))
	recs, msgs := make([]client.Record, n), make([]client.Message, n)
	for i := range recs {
		recs[i], msgs[i] = client.Record{Body: body}, client.Message{Body: body}
	}
	return recs, msgs
}

// BenchmarkGroupPull: b.N records pre-filled (outside the timer), then 4 members of a new
// group drain them, each pulling up to 1000 and committing the offset after the last of
// each partition before its next pull (t2's shape, without its committer goroutine).
func BenchmarkGroupPull(b *testing.B) {
	for _, enc := range encodings {
		b.Run(enc.name, func(b *testing.B) {
			c := benchServer(b, enc.opts)
			ctx := context.Background()
			recs, _ := fillBatch(1000)
			for left := b.N; left > 0; left -= len(recs) {
				if _, err := c.PublishRecords(ctx, "bench", recs[:min(left, len(recs))]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := c.PutGroup(ctx, "bench", "g", api.GroupConfig{}); err != nil {
				b.Fatal(err)
			}
			var got atomic.Int64
			total := int64(b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := client.Member{Name: "m" + string(rune('0'+i))}
					for got.Load() < total {
						res, err := c.Pull(ctx, "bench", "g", m, client.PullOptions{Max: 1000, Wait: 100 * time.Millisecond})
						if err != nil {
							b.Error(err)
							return
						}
						m.Session = res.Session
						if len(res.Records) == 0 {
							continue
						}
						next := map[int]uint64{}
						for _, r := range res.Records {
							next[r.Partition] = r.Offset + 1
						}
						var offs []api.CommitOffset
						for _, a := range res.Assignment {
							if o, ok := next[a.Partition]; ok {
								offs = append(offs, api.CommitOffset{Partition: a.Partition, Offset: o, Epoch: a.Epoch})
							}
						}
						if _, err := c.Commit(ctx, "bench", "g", m, offs...); err != nil {
							b.Error(err)
							return
						}
						got.Add(int64(len(res.Records)))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkQueueReceiveAck is BenchmarkGroupPull for a queue: b.N messages pre-filled,
// then 4 consumers receive up to 1000 and ack them before their next receive.
func BenchmarkQueueReceiveAck(b *testing.B) {
	for _, enc := range encodings {
		b.Run(enc.name, func(b *testing.B) {
			c := benchServer(b, enc.opts)
			ctx := context.Background()
			_, msgs := fillBatch(1000)
			for left := b.N; left > 0; left -= len(msgs) {
				if _, err := c.SendBatch(ctx, "bench", msgs[:min(left, len(msgs))]); err != nil {
					b.Fatal(err)
				}
			}
			var got atomic.Int64
			total := int64(b.N)
			var wg sync.WaitGroup
			wait := 100 * time.Millisecond
			b.ResetTimer()
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for got.Load() < total {
						ds, err := c.Receive(ctx, "bench", client.ReceiveOptions{Max: 1000, Wait: &wait})
						if err != nil {
							b.Error(err)
							return
						}
						if len(ds) == 0 {
							continue
						}
						rs := make([]string, len(ds))
						for i, d := range ds {
							rs[i] = d.Receipt
						}
						if _, err := c.Ack(ctx, "bench", rs...); err != nil {
							b.Error(err)
							return
						}
						got.Add(int64(len(ds)))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
