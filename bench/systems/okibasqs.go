package systems

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/bench/harness"
)

// OkibaSQS is okiba through its SQS-compatible API with the AWS SDK for Go v2:
// SendMessageBatch (10 per request, the SQS limit) for windows above 1, receives of 10
// with a short long-poll, DeleteMessageBatch for acks. Scenario 8 uses a FIFO queue.
type OkibaSQS struct {
	srv *okibaServer
	c   *sqs.Client
	ver string
}

func NewOkibaSQS() *OkibaSQS { return &OkibaSQS{} }

func (o *OkibaSQS) Info() harness.Info {
	return harness.Info{
		Name: "okiba-sqs", Label: "okiba, SQS API (aws-sdk-go-v2)", Peer: "okiba", Durability: harness.Durable,
		Version:  o.ver,
		Settings: "the same broker as okiba-http; SendMessageBatch of ≤10, ReceiveMessage of ≤10, DeleteMessageBatch",
		Caps:     harness.Caps{Consume: true, Visibility: true, Groups: true},
	}
}

func (o *OkibaSQS) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startOkiba(ctx, env)
	if err != nil {
		return err
	}
	o.srv = srv
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second}}
	o.c = sqs.New(sqs.Options{
		BaseEndpoint:     aws.String("http://" + srv.addr),
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		HTTPClient:       hc,
		RetryMaxAttempts: 1,
	})
	o.ver = srv.version + ", aws-sdk-go-v2/service/sqs " + moduleVersion("github.com/aws/aws-sdk-go-v2/service/sqs")
	return nil
}

func (o *OkibaSQS) Pids() []int        { return o.srv.pids() }
func (o *OkibaSQS) DataDirs() []string { return []string{o.srv.dataDir} }
func (o *OkibaSQS) Close() error       { return nil }

// Fsyncs counts the broker's log fsyncs (see okibaServer.fsyncs).
func (o *OkibaSQS) Fsyncs(ctx context.Context) (uint64, error) { return o.srv.fsyncs(ctx) }

func (o *OkibaSQS) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	vis := spec.Lease()
	name := spec.Name
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second))}
	if spec.Groups {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := o.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return nil, err
	}
	return &sqsQueue{c: o.c, url: *out.QueueUrl, fifo: spec.Groups}, nil
}

type sqsQueue struct {
	c    *sqs.Client
	url  string
	fifo bool
	seq  atomic.Uint64
}

func (q *sqsQueue) Delete(ctx context.Context) error {
	_, err := q.c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.url)})
	return err
}

func (q *sqsQueue) entry(i int, m harness.Msg) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Body))}
	if q.fifo {
		e.MessageGroupId = aws.String(m.Group)
		e.MessageDeduplicationId = aws.String(strconv.FormatUint(q.seq.Add(1), 10))
	}
	return e
}

func (q *sqsQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	send := func(ctx context.Context, msgs []harness.Msg) error {
		entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
		for i, m := range msgs {
			entries[i] = q.entry(i, m)
		}
		out, err := q.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("%d of %d failed: %s %s", len(out.Failed), len(msgs), aws.ToString(f.Code), aws.ToString(f.Message))
		}
		return nil
	}
	if window <= 1 {
		return harness.NewBatcher(1, 1, send), nil
	}
	return harness.NewBatcher(10, (window+9)/10, send), nil
}

func (q *sqsQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return &sqsConsumer{q: q}, nil
}

type sqsConsumer struct{ q *sqsQueue }

func (c *sqsConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(c.q.url), MaxNumberOfMessages: int32(min(max, 10)), WaitTimeSeconds: 1}
	if c.q.fifo {
		in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}
	}
	out, err := c.q.c.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, err
	}
	ds := make([]harness.Delivery, len(out.Messages))
	for i, m := range out.Messages {
		ds[i] = harness.Delivery{Body: []byte(aws.ToString(m.Body)), Handle: aws.ToString(m.ReceiptHandle),
			Group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]}
	}
	return ds, nil
}

func (c *sqsConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	for len(ds) > 0 {
		n := min(len(ds), 10)
		entries := make([]types.DeleteMessageBatchRequestEntry, n)
		for i := range n {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(ds[i].Handle.(string))}
		}
		out, err := c.q.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.q.url), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return errors.New("delete failed: " + aws.ToString(out.Failed[0].Message))
		}
		ds = ds[n:]
	}
	return nil
}

func (c *sqsConsumer) Close() error { return nil }
