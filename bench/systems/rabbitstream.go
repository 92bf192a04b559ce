package systems

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/okiba/okiba/bench/harness"
)

// RabbitStream is RabbitMQ's streams through the stream protocol (the rabbitmq_stream
// plugin of the shared rabbitmq-server) and rabbitmq-stream-go-client: a log of P
// partitions is P streams (what a super stream is underneath), each harness producer
// publishes to one of them (in turn) with BatchSend of whatever has gathered and waits
// for its confirms, one batch at a time; group member i consumes stream i from the
// first offset under the group's name and stores the offset of the last record it
// acked (StoreCustomOffset: the stream protocol's commit, which the server does not
// answer). Streams confirm once a chunk is written on the node, without an fsync of
// its own, so the durability is relaxed. Only the topic scenarios (t1, t2) use it.
type RabbitStream struct {
	// amqpRead reads with AMQP 0.9.1 (basic.consume of the stream queue with
	// x-stream-offset first) instead of the stream protocol: see NewRabbitStreamAMQP.
	amqpRead bool
	srv      *rabbitServer
	env      *stream.Environment
	ver      string
}

func NewRabbitStream() *RabbitStream { return &RabbitStream{} }

// NewRabbitStreamAMQP publishes as RabbitStream does but reads each stream through
// AMQP 0.9.1 (amqp091-go): against Debian's RabbitMQ 3.10.8, rabbitmq-stream-go-client
// 1.8.3's consumers stop receiving after about 1,500 records each (with CRC checks on it
// first logs "Error during the checkSum" and closes its connection), so the stream
// protocol's read side cannot be measured here. AMQP has no server-side offset store
// for streams: the "commit" is the multiple-ack of each receive, which only returns
// credit.
func NewRabbitStreamAMQP() *RabbitStream { return &RabbitStream{amqpRead: true} }

func (r *RabbitStream) Info() harness.Info {
	i := harness.Info{
		Name: "rabbitmq-stream", Label: "RabbitMQ streams (stream protocol)", Peer: "rabbitmq", Durability: harness.Relaxed,
		Version:  r.ver,
		Settings: "single node; streams confirm when a chunk is written on the node, not after an fsync (osiris leaves that to replication); " + r.LogSettings(),
		Caps:     harness.Caps{Log: true},
	}
	if r.amqpRead {
		i.Name, i.Label = "rabbitmq-stream-amqp", "RabbitMQ streams (stream protocol publish, AMQP 0.9.1 read)"
	}
	return i
}

func (r *RabbitStream) LogSettings() string {
	if r.amqpRead {
		return "P streams per log (a super stream's shape); a producer per harness producer on one stream each, BatchSend of what has gathered (≤ window), one batch in flight; member i consumes stream i with AMQP 0.9.1 basic.consume (x-stream-offset first, basic.qos = prefetch), one multiple-ack per receive (no offset is stored: AMQP has no commit for streams)"
	}
	return "P streams per log (a super stream's shape); a producer per harness producer on one stream each, BatchSend of what has gathered (≤ window), one batch in flight; member i consumes stream i from the first offset, StoreCustomOffset of the last acked record per receive"
}

func (r *RabbitStream) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startRabbit(ctx, env)
	if err != nil {
		return err
	}
	r.srv = srv
	deadline := time.Now().Add(time.Minute)
	for {
		r.env, err = stream.NewEnvironment(stream.NewEnvironmentOptions().SetHost("127.0.0.1").SetPort(srv.streamPort).
			SetUser("guest").SetPassword("guest").SetMaxConsumersPerClient(1))
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq stream protocol on port %d: %w", srv.streamPort, err)
	}
	r.ver = srv.version + ", rabbitmq-stream-go-client " + moduleVersion("github.com/rabbitmq/rabbitmq-stream-go-client")
	return nil
}

func (r *RabbitStream) Pids() []int { return r.srv.pids() }
func (r *RabbitStream) Close() error {
	if r.env != nil {
		return r.env.Close()
	}
	return nil
}

func (r *RabbitStream) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return nil, errors.New("rabbitmq-stream is a log: only the topic scenarios (t1, t2) use it")
}

func (r *RabbitStream) NewLog(ctx context.Context, spec harness.LogSpec) (harness.Log, error) {
	l := &rabbitLog{r: r}
	for i := 0; i < max(spec.Partitions, 1); i++ {
		name := fmt.Sprintf("%s-p%d", spec.Name, i)
		if err := r.env.DeclareStream(name, &stream.StreamOptions{}); err != nil {
			l.Delete(ctx)
			return nil, err
		}
		l.streams = append(l.streams, name)
	}
	return l, nil
}

type rabbitLog struct {
	r       *RabbitStream
	streams []string
	next    atomic.Int64
}

func (l *rabbitLog) Delete(ctx context.Context) error {
	var errs []error
	for _, s := range l.streams {
		errs = append(errs, l.r.env.DeleteStream(s))
	}
	return errors.Join(errs...)
}

func (l *rabbitLog) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	s := l.streams[int(l.next.Add(1)-1)%len(l.streams)]
	p, err := l.r.env.NewProducer(s, stream.NewProducerOptions())
	if err != nil {
		return nil, err
	}
	confirms := p.NotifyPublishConfirmation()
	var closeOnce sync.Once
	b := harness.NewBatcher(max(window, 1), 1, func(ctx context.Context, msgs []harness.Msg) error {
		batch := make([]message.StreamMessage, len(msgs))
		for i, m := range msgs {
			batch[i] = amqp.NewMessage(m.Body)
		}
		if err := p.BatchSend(batch); err != nil {
			return err
		}
		// One batch in flight: every confirm that arrives now is one of this batch's.
		for left := len(batch); left > 0; {
			select {
			case sts, ok := <-confirms:
				if !ok {
					return errors.New("producer closed")
				}
				for _, st := range sts {
					if !st.IsConfirmed() {
						return fmt.Errorf("not confirmed: %v", st.GetError())
					}
				}
				left -= len(sts)
			case <-time.After(time.Minute):
				return errors.New("no confirm within a minute")
			}
		}
		return nil
	})
	return &rabbitStreamProducer{Batcher: b, close: func() { closeOnce.Do(func() { p.Close() }) }}, nil
}

type rabbitStreamProducer struct {
	*harness.Batcher
	close func()
}

func (p *rabbitStreamProducer) Close() error {
	err := p.Batcher.Close()
	p.close()
	return err
}

// NewGroup: a stream consumer's offsets are tracked under its name on the server;
// there is nothing to create.
func (l *rabbitLog) NewGroup(ctx context.Context, group string) error { return nil }

func (l *rabbitLog) NewMember(ctx context.Context, group string, i int, opts harness.ConsumerOptions) (harness.Consumer, error) {
	m := &rabbitMember{ch: make(chan harness.Delivery, max(opts.Prefetch, 1)*4)}
	if i >= len(l.streams) {
		return m, nil // more members than partitions: idle, as in a Kafka group
	}
	if l.r.amqpRead {
		c, err := amqp091.Dial(l.r.srv.url())
		if err != nil {
			return nil, err
		}
		ch, err := c.Channel()
		if err == nil {
			err = ch.Qos(max(opts.Prefetch, 1), 0, false)
		}
		var ds <-chan amqp091.Delivery
		if err == nil {
			ds, err = ch.Consume(l.streams[i], group, false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		return &rabbitConsumer{c: c, ch: ch, ds: ds}, nil
	}
	c, err := l.r.env.NewConsumer(l.streams[i], func(cc stream.ConsumerContext, msg *amqp.Message) {
		m.ch <- harness.Delivery{Body: msg.GetData(), Handle: cc.Consumer.GetOffset()}
	}, stream.NewConsumerOptions().SetConsumerName(group).SetManualCommit().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		return nil, err
	}
	m.c = c
	return m, nil
}

type rabbitMember struct {
	c  *stream.Consumer
	ch chan harness.Delivery
}

func (m *rabbitMember) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	return receiveChan(ctx, m.ch, max, func(d harness.Delivery) harness.Delivery { return d })
}

func (m *rabbitMember) Ack(ctx context.Context, ds []harness.Delivery) error {
	if m.c == nil || len(ds) == 0 {
		return nil
	}
	var last int64
	for _, d := range ds {
		last = max(last, d.Handle.(int64))
	}
	return m.c.StoreCustomOffset(last)
}

func (m *rabbitMember) Close() error {
	if m.c == nil {
		return nil
	}
	err := m.c.Close()
	if err != nil && strings.Contains(err.Error(), "closed") {
		return nil
	}
	return err
}
