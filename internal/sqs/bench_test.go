package sqs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/okibatest"
)

// BenchmarkSQSSend measures durable sends through the SQS front with the real
// aws-sdk-go-v2 client (checksum validation on), 16 concurrent senders, 1 KiB bodies:
// one message per SendMessage, and ten per SendMessageBatch. The SDK keeps at most 10
// idle connections per host by default; with more concurrent senders than that it opens
// and closes connections all the time, so the client here keeps 64. docs/sqs.md records
// a run.
//
//	go test -run '^$' -bench SQSSend -benchtime 5s ./sqs
func BenchmarkSQSSend(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	e := &env{srv: srv, headers: &headerCapture{}}
	c := e.client("AKID", "secret", 3, func(o *awssqs.Options) {
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 64 })
	})
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bench")})
	if err != nil {
		b.Fatal(err)
	}
	url := out.QueueUrl
	body := aws.String(strings.Repeat("x", 1024))
	b.Run("SendMessage", func(b *testing.B) {
		b.SetParallelism(16 / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: body}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("SendMessageBatch10", func(b *testing.B) {
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("m", i)), MessageBody: body}
		}
		b.SetParallelism(16 / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: entries})
				if err != nil || len(out.Failed) > 0 {
					b.Error(err, out)
					return
				}
			}
		})
		b.ReportMetric(float64(10*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkSQSSendRaw is BenchmarkSQSSend/SendMessage without the SDK: plain HTTP posts
// of the same JSON request, unsigned, so that the front's own cost can be told from the
// SDK's.
func BenchmarkSQSSendRaw(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(target, body string) error {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", "AmazonSQS."+target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", target, resp.Status)
		}
		return nil
	}
	if err := post("CreateQueue", `{"QueueName":"bench"}`); err != nil {
		b.Fatal(err)
	}
	body := `{"QueueUrl":"bench","MessageBody":"` + strings.Repeat("x", 1024) + `"}`
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := post("SendMessage", body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSQSDrain measures a drain of a backlog through the SQS front with the real
// aws-sdk-go-v2 client, in okibabench's S5 shape: 4 consumers, each with 4
// ReceiveMessage loops of 10 in flight, deleting what it received with
// DeleteMessageBatches of 10 sent at once; 1 KiB bodies. The backlog (b.N messages) is
// sent before the timer starts. Client and server share the process, so a CPU profile
// of it shows both (the fill included). It reports records per group commit and commits
// per message, from the server's metrics: whether the commit batches the requests.
//
//	go test -run '^$' -bench SQSDrain -benchtime 50000x -cpuprofile /tmp/drain.prof ./internal/sqs
func BenchmarkSQSDrain(b *testing.B) {
	srv := okibatest.New(b, okibatest.Options{})
	e := &env{srv: srv, headers: &headerCapture{}}
	c := e.client("AKID", "secret", 1, func(o *awssqs.Options) {
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 512 })
	})
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("drain")})
	if err != nil {
		b.Fatal(err)
	}
	url := out.QueueUrl
	body := aws.String(strings.Repeat("x", 1024))
	fill := make(chan int)
	var fwg sync.WaitGroup
	for range 16 {
		fwg.Go(func() {
			for n := range fill {
				entries := make([]types.SendMessageBatchRequestEntry, n)
				for i := range entries {
					entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("m", i)), MessageBody: body}
				}
				if out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: entries}); err != nil || len(out.Failed) > 0 {
					b.Error(err, out)
				}
			}
		})
	}
	for left := b.N; left > 0; left -= 10 {
		fill <- min(left, 10)
	}
	close(fill)
	fwg.Wait()
	b.ResetTimer()
	m0 := scrapeMetrics(b, srv.URL)
	var acked atomic.Int64
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		ch := make(chan types.Message, 256)
		for range 4 {
			wg.Go(func() {
				in := &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1}
				for dctx.Err() == nil {
					out, err := c.ReceiveMessage(dctx, in)
					if err != nil {
						continue
					}
					for _, m := range out.Messages {
						select {
						case ch <- m:
						case <-dctx.Done():
							return
						}
					}
				}
			})
		}
		wg.Go(func() {
			for dctx.Err() == nil {
				var got []types.Message
				select {
				case m := <-ch:
					got = append(got, m)
				case <-dctx.Done():
					return
				}
			more:
				for len(got) < 256 {
					select {
					case m := <-ch:
						got = append(got, m)
					default:
						break more
					}
				}
				var dwg sync.WaitGroup
				for i := 0; i < len(got); i += 10 {
					chunk := got[i:min(len(got), i+10)]
					dwg.Go(func() {
						entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
						for j, m := range chunk {
							entries[j] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), ReceiptHandle: m.ReceiptHandle}
						}
						out, err := c.DeleteMessageBatch(dctx, &awssqs.DeleteMessageBatchInput{QueueUrl: url, Entries: entries})
						if err != nil || len(out.Failed) > 0 {
							if dctx.Err() == nil {
								b.Error(err, out)
							}
							return
						}
						if acked.Add(int64(len(chunk))) >= int64(b.N) {
							cancel()
						}
					})
				}
				dwg.Wait()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(acked.Load())/b.Elapsed().Seconds(), "msgs/s")
	// Whether the group commit batches the receives' and deletes' records across
	// requests: records per commit, and commits per message drained.
	m1 := scrapeMetrics(b, srv.URL)
	commits := m1["okiba_wal_commits_total"] - m0["okiba_wal_commits_total"]
	if commits > 0 {
		b.ReportMetric((m1["okiba_wal_records_total"]-m0["okiba_wal_records_total"])/commits, "records/commit")
		b.ReportMetric(commits/float64(acked.Load()), "commits/msg")
	}
}

// scrapeMetrics reads the server's /metrics into a map of series (name and labels) to
// value; series of one name with different labels are kept apart by their labels.
func scrapeMetrics(b *testing.B, base string) map[string]float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		var v float64
		fmt.Sscan(f[1], &v)
		m[f[0]] += v
	}
	return m
}
