package systems

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/bench/harness"
)

// OkibaSQS is okiba through its SQS-compatible API with the AWS SDK for Go v2:
// SendMessageBatch (10 per request, the SQS limit) for windows above 1; consumers that
// keep several receives of 10 in flight (sqsPollers) and delete in batches of 10.
// Scenario 8 uses a FIFO queue.
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
		Settings: "the same broker as okiba-http; SendMessageBatch of ≤10; per consumer ⌈prefetch/10⌉ (at most 4) ReceiveMessage loops of 10 in flight, as real SQS consumers poll ahead; DeleteMessageBatch of ≤10, the batches of one ack at once",
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

// sqsPollers is how many ReceiveMessage calls an okiba-sqs consumer keeps in flight.
// Real SQS consumers keep several (Celery's kombu polls ahead of its workers, and
// sqs-consumer is run as several pollers): one receive → delete → receive loop is
// bound by two group commits (the receive's leases, the deletes) and two round trips
// per ten messages, whatever the broker does in between (docs/benchmarks.md, "The SQS
// path").
const sqsPollers = 4

func (q *sqsQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	n := min(max((opts.Prefetch+9)/10, 1), sqsPollers)
	pctx, cancel := context.WithCancel(context.Background())
	c := &sqsConsumer{q: q, ch: make(chan types.Message, max(opts.Prefetch, 10)), cancel: cancel}
	for range n {
		c.wg.Go(func() { c.poll(pctx) })
	}
	return c, nil
}

// sqsConsumer is n pollers, each a loop of ReceiveMessage of 10 handing what it got to
// Receive through ch; Ack deletes in batches of 10, all at once.
type sqsConsumer struct {
	q      *sqsQueue
	ch     chan types.Message
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    atomic.Pointer[error] // a poller's last error, reported by the next Receive
}

func (c *sqsConsumer) poll(ctx context.Context) {
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(c.q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1}
	if c.q.fifo {
		in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}
	}
	for ctx.Err() == nil {
		out, err := c.q.c.ReceiveMessage(ctx, in)
		if err != nil {
			if ctx.Err() == nil {
				c.err.Store(&err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		for _, m := range out.Messages {
			select {
			case c.ch <- m:
			case <-ctx.Done():
				return // leased and never delivered: it comes back after its visibility timeout
			}
		}
	}
}

func (c *sqsConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	if err := c.err.Swap(nil); err != nil {
		return nil, *err
	}
	return receiveChan(ctx, c.ch, max, func(m types.Message) harness.Delivery {
		return harness.Delivery{Body: []byte(aws.ToString(m.Body)), Handle: aws.ToString(m.ReceiptHandle),
			Group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]}
	})
}

func (c *sqsConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	var wg sync.WaitGroup
	errs := make([]error, (len(ds)+9)/10)
	for i := range errs {
		chunk := ds[i*10 : min(len(ds), i*10+10)]
		wg.Go(func() { errs[i] = c.delete(ctx, chunk) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *sqsConsumer) delete(ctx context.Context, ds []harness.Delivery) error {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(ds))
	for i, d := range ds {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(d.Handle.(string))}
	}
	out, err := c.q.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.q.url), Entries: entries})
	if err != nil {
		return err
	}
	if len(out.Failed) > 0 {
		return errors.New("delete failed: " + aws.ToString(out.Failed[0].Message))
	}
	return nil
}

func (c *sqsConsumer) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}
