package systems

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/okiba/okiba/bench/harness"
)

// The peers' retained logs behind harness.Log: a Redis stream read by a consumer group
// with XREADGROUP and XACK (no XDEL: the entries stay, as a topic's records do), and a
// JetStream stream with limits retention read by a durable pull consumer with explicit
// acks. Neither has partitions: each log is one stream, its consumers compete in one
// group (Redis) or on one durable consumer (JetStream).

func (r *Redis) LogSettings() string {
	return "one stream (no partitions); XADD pipelined per window; a consumer group created at 0 after the fill; XREADGROUP COUNT prefetch per member, XACK of each read in one call, no XDEL (the entries are retained)"
}

func (r *Redis) NewLog(ctx context.Context, spec harness.LogSpec) (harness.Log, error) {
	return &redisLog{q: &redisQueue{r: r, key: spec.Name}}, nil
}

type redisLog struct{ q *redisQueue }

func (l *redisLog) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return l.q.NewProducer(ctx, window)
}

func (l *redisLog) NewGroup(ctx context.Context, group string) error {
	return l.q.r.client().XGroupCreateMkStream(ctx, l.q.key, group, "0").Err()
}

func (l *redisLog) NewMember(ctx context.Context, group string, i int, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return &redisMember{l: l, group: group, name: "m" + strconv.Itoa(i)}, nil
}

func (l *redisLog) Delete(ctx context.Context) error { return l.q.Delete(ctx) }

type redisMember struct {
	l           *redisLog
	group, name string
}

func (m *redisMember) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	res, err := m.l.q.r.client().XReadGroup(ctx, &redis.XReadGroupArgs{Group: m.group, Consumer: m.name,
		Streams: []string{m.l.q.key, ">"}, Count: int64(max), Block: 500 * time.Millisecond}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []harness.Delivery
	for _, s := range res {
		out = appendRedis(out, s.Messages)
	}
	return out, nil
}

func (m *redisMember) Ack(ctx context.Context, ds []harness.Delivery) error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.Handle.(string)
	}
	return m.l.q.r.client().XAck(ctx, m.l.q.key, m.group, ids...).Err()
}

func (m *redisMember) Close() error { return nil }

func (j *JetStream) LogSettings() string {
	return "one R1 file stream (no partitions), limits retention; PublishAsync with max pending = window; a durable pull consumer (deliver all, explicit acks, MaxAckPending 20000) created after the fill, Fetch(prefetch) per member, msg.Ack per record (fire-and-forget)"
}

func (j *JetStream) NewLog(ctx context.Context, spec harness.LogSpec) (harness.Log, error) {
	name := strings.ReplaceAll(spec.Name, "-", "_")
	_, err := j.client().CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Replicas: 1,
	})
	if err != nil {
		return nil, err
	}
	return &jsLog{q: &jsQueue{client: j.client, connect: j.connect, name: name}}, nil
}

type jsLog struct {
	q *jsQueue
}

func (l *jsLog) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return l.q.NewProducer(ctx, window)
}

func (l *jsLog) NewGroup(ctx context.Context, group string) error {
	_, err := l.q.client().CreateOrUpdateConsumer(ctx, l.q.name, jetstream.ConsumerConfig{
		Durable: group, DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 20000, MaxWaiting: 512, MaxDeliver: -1,
	})
	return err
}

func (l *jsLog) NewMember(ctx context.Context, group string, i int, opts harness.ConsumerOptions) (harness.Consumer, error) {
	c, err := l.q.client().Consumer(ctx, l.q.name, group)
	if err != nil {
		return nil, err
	}
	return &jsConsumer{c: c}, nil
}

func (l *jsLog) Delete(ctx context.Context) error { return l.q.Delete(ctx) }
