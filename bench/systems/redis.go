package systems

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/okiba/okiba/bench/harness"
)

// Redis is Debian's redis-server with a stream and a consumer group: XADD (pipelined,
// one pipeline of everything queued per round trip), XREADGROUP, XACK then XDEL, and
// XAUTOCLAIM for leases past the visibility timeout. Durable: appendonly yes,
// appendfsync always (replies leave after the event loop's write + fsync). Relaxed:
// appendfsync everysec. Each is its own server.
type Redis struct {
	always bool
	env    *harness.Env
	dir    string
	addr   string
	ver    string

	mu   sync.Mutex
	proc *harness.Proc
	rdb  *redis.Client
}

func NewRedis(always bool) *Redis { return &Redis{always: always} }

func (r *Redis) name() string {
	if r.always {
		return "redis-always"
	}
	return "redis-everysec"
}

func (r *Redis) fsyncMode() string {
	if r.always {
		return "always"
	}
	return "everysec"
}

func (r *Redis) Info() harness.Info {
	d := harness.Durable
	if !r.always {
		d = harness.Relaxed
	}
	return harness.Info{
		Name: r.name(), Label: "Redis streams, appendfsync " + r.fsyncMode(), Peer: "redis", Durability: d,
		Version:  r.ver,
		Settings: "appendonly yes, appendfsync " + r.fsyncMode() + ", no RDB snapshots; XADD pipelined per window, XREADGROUP COUNT prefetch, XACK+XDEL in one pipeline, XAUTOCLAIM for expired leases",
		Caps:     harness.Caps{Consume: true, Visibility: true, Restart: true, Log: true},
	}
}

func (r *Redis) Start(ctx context.Context, env *harness.Env) error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("redis-server not installed (make bench-setup installs Debian's redis-server)")
	}
	r.env = env
	dir, err := env.DataDir(r.name())
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	r.dir, r.addr = dir, fmt.Sprintf("127.0.0.1:%d", port)
	if err := r.start(ctx); err != nil {
		return err
	}
	r.ver = redisVersion() + ", go-redis " + moduleVersion("github.com/redis/go-redis/v9")
	env.Shared(r.name(), func() (any, func(), error) { return r, r.stop, nil })
	return nil
}

func (r *Redis) start(ctx context.Context) error {
	_, port, _ := strings.Cut(r.addr, ":")
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", r.fsyncMode(), "--save", "", "--daemonize", "no",
		"--protected-mode", "no", "--loglevel", "warning")
	p, err := r.env.StartProc(r.name(), cmd)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.addr, PoolSize: 256, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	r.mu.Lock()
	r.proc, r.rdb = p, rdb
	r.mu.Unlock()
	return harness.WaitFor(ctx, p, time.Minute, r.name(), func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	})
}

func (r *Redis) stop() {
	r.mu.Lock()
	p, rdb := r.proc, r.rdb
	r.mu.Unlock()
	if rdb != nil {
		rdb.Close()
	}
	if p != nil {
		_ = p.Stop(syscall.SIGTERM, 30*time.Second)
	}
}

func (r *Redis) client() *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rdb
}

func (r *Redis) Pids() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return procPids(r.proc)
}

func (r *Redis) DataDirs() []string { return []string{r.dir} }
func (r *Redis) Close() error       { return nil }

func (r *Redis) Kill(ctx context.Context) error {
	r.mu.Lock()
	p, rdb := r.proc, r.rdb
	r.mu.Unlock()
	rdb.Close()
	return p.Kill()
}

func (r *Redis) Restart(ctx context.Context) error { return r.start(ctx) }

func (r *Redis) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	vis := spec.Lease()
	if err := r.client().XGroupCreateMkStream(ctx, spec.Name, "g", "0").Err(); err != nil {
		return nil, err
	}
	return &redisQueue{r: r, key: spec.Name, vis: vis}, nil
}

type redisQueue struct {
	r    *Redis
	key  string
	vis  time.Duration
	next sync.Mutex
	n    int
}

func (q *redisQueue) Delete(ctx context.Context) error { return q.r.client().Del(ctx, q.key).Err() }

func (q *redisQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	send := func(ctx context.Context, msgs []harness.Msg) error {
		rdb := q.r.client()
		if len(msgs) == 1 {
			return rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.key, Values: []any{"b", msgs[0].Body}}).Err()
		}
		pipe := rdb.Pipeline()
		for _, m := range msgs {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.key, Values: []any{"b", m.Body}})
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	// One connection's worth: a pipeline of everything queued, one at a time, as
	// redis-benchmark -P does.
	return harness.NewBatcher(max(window, 1), 1, send), nil
}

func (q *redisQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	q.next.Lock()
	q.n++
	name := "c" + strconv.Itoa(q.n)
	q.next.Unlock()
	return &redisConsumer{q: q, name: name, lastClaim: time.Now()}, nil
}

type redisConsumer struct {
	q         *redisQueue
	name      string
	lastClaim time.Time
}

func (c *redisConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	rdb := c.q.r.client()
	var out []harness.Delivery
	// Leases past the visibility timeout come back through XAUTOCLAIM, checked at
	// most every 100ms per consumer.
	if time.Since(c.lastClaim) > 100*time.Millisecond {
		c.lastClaim = time.Now()
		msgs, _, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.q.key, Group: "g", Consumer: c.name,
			MinIdle: c.q.vis, Start: "0-0", Count: int64(max)}).Result()
		if err != nil {
			return nil, err
		}
		out = appendRedis(out, msgs)
		if len(out) > 0 {
			return out, nil
		}
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: c.name, Streams: []string{c.q.key, ">"},
		Count: int64(max), Block: 500 * time.Millisecond}).Result()
	if errors.Is(err, redis.Nil) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range res {
		out = appendRedis(out, s.Messages)
	}
	return out, nil
}

func appendRedis(out []harness.Delivery, msgs []redis.XMessage) []harness.Delivery {
	for _, m := range msgs {
		b, _ := m.Values["b"].(string)
		out = append(out, harness.Delivery{Body: []byte(b), Handle: m.ID})
	}
	return out
}

func (c *redisConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.Handle.(string)
	}
	pipe := c.q.r.client().Pipeline()
	pipe.XAck(ctx, c.q.key, "g", ids...)
	pipe.XDel(ctx, c.q.key, ids...)
	_, err := pipe.Exec(ctx)
	return err
}

func (c *redisConsumer) Close() error { return nil }

// redisVersion turns "Redis server v=7.0.15 sha=…" into "Redis 7.0.15".
func redisVersion() string {
	out := output("redis-server", "--version")
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v + " (Debian)"
		}
	}
	return out
}
