package sqs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
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
