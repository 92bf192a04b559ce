package systems

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/okiba/okiba/bench/harness"
)

// JetStream is nats-server (installed by make bench-setup into bench/.tools/bin) with
// an R1 file stream, WorkQueue retention, async publishes with a window of pending
// acks (one connection per producer), and a durable pull consumer with explicit acks.
// Durable: sync_interval always (an fsync per message on R1, under the stream lock).
// Relaxed: the default sync interval (2 minutes). Each is its own server.
type JetStream struct {
	always bool
	env    *harness.Env
	dir    string
	url    string
	ver    string

	mu   sync.Mutex
	proc *harness.Proc
	nc   *nats.Conn
	js   jetstream.JetStream
}

func NewJetStream(always bool) *JetStream { return &JetStream{always: always} }

func (j *JetStream) name() string {
	if j.always {
		return "jetstream-always"
	}
	return "jetstream-default"
}

func (j *JetStream) Info() harness.Info {
	d, sync := harness.Durable, "sync_interval: always"
	if !j.always {
		d, sync = harness.Relaxed, "default sync_interval (2 min)"
	}
	return harness.Info{
		Name: j.name(), Label: "NATS JetStream, " + sync, Peer: "nats", Durability: d,
		Version:  j.ver,
		Settings: sync + "; R1 file stream, WorkQueue retention; PublishAsync with max pending = window; durable pull consumer, explicit acks (msg.Ack per message: acks are fire-and-forget in NATS), MaxAckPending 20000",
		Caps:     harness.Caps{Consume: true, Visibility: true, Restart: true, Log: true},
	}
}

func (j *JetStream) Start(ctx context.Context, env *harness.Env) error {
	bin := filepath.Join(env.Tools, "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s missing (make bench-setup installs it with go install)", bin)
	}
	j.env = env
	dir, err := env.DataDir(j.name())
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	j.dir = dir
	j.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nmax_payload: 8MB\njetstream {\n  store_dir: %q\n  max_file_store: 200GB\n", port, filepath.Join(dir, "js"))
	if j.always {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := j.start(ctx); err != nil {
		return err
	}
	j.ver = "nats-server " + strings.TrimPrefix(output(bin, "--version"), "nats-server: ") + ", nats.go " + moduleVersion("github.com/nats-io/nats.go")
	env.Shared(j.name(), func() (any, func(), error) { return j, j.stop, nil })
	return nil
}

func (j *JetStream) start(ctx context.Context) error {
	bin := filepath.Join(j.env.Tools, "nats-server")
	p, err := j.env.StartProc(j.name(), exec.Command(bin, "-c", filepath.Join(j.dir, "nats.conf")))
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.proc = p
	j.mu.Unlock()
	return harness.WaitFor(ctx, p, time.Minute, j.name(), func(ctx context.Context) error {
		nc, err := nats.Connect(j.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			_, err = js.AccountInfo(ctx)
		}
		if err != nil {
			nc.Close()
			return err
		}
		j.mu.Lock()
		j.nc, j.js = nc, js
		j.mu.Unlock()
		return nil
	})
}

func (j *JetStream) stop() {
	j.mu.Lock()
	p, nc := j.proc, j.nc
	j.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
	if p != nil {
		_ = p.Stop(syscall.SIGTERM, 30*time.Second)
	}
}

func (j *JetStream) client() jetstream.JetStream {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.js
}

func (j *JetStream) Pids() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return procPids(j.proc)
}

func (j *JetStream) DataDirs() []string { return []string{j.dir} }
func (j *JetStream) Close() error       { return nil }

func (j *JetStream) Kill(ctx context.Context) error {
	j.mu.Lock()
	p, nc := j.proc, j.nc
	j.mu.Unlock()
	nc.Close()
	return p.Kill()
}

func (j *JetStream) Restart(ctx context.Context) error { return j.start(ctx) }

func (j *JetStream) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return newJSQueue(ctx, j.client, j.connect, spec, 1)
}

// connect opens a connection of its own (a producer's).
func (j *JetStream) connect() (*nats.Conn, error) {
	return nats.Connect(j.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}

// newJSQueue creates the spec's stream (of replicas) and its durable consumer through
// client's (the system's connection now: a restart replaces it); connect opens each
// producer's own connection.
func newJSQueue(ctx context.Context, client func() jetstream.JetStream, connect func() (*nats.Conn, error), spec harness.QueueSpec, replicas int) (harness.Queue, error) {
	vis := spec.Lease()
	js := client()
	name := strings.ReplaceAll(spec.Name, "-", "_")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Replicas: replicas,
	})
	if err != nil {
		return nil, err
	}
	if replicas > 1 {
		// What is measured is a stream on every server: a leader and replicas-1 others.
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		if c := info.Cluster; c == nil || c.Leader == "" || len(c.Replicas) != replicas-1 {
			return nil, fmt.Errorf("stream %s: want a leader and %d replicas, got %+v", name, replicas-1, info.Cluster)
		}
	}
	_, err = js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: vis, MaxAckPending: 20000,
		MaxWaiting: 512, MaxDeliver: -1,
	})
	if err != nil {
		return nil, err
	}
	return &jsQueue{client: client, connect: connect, name: name}, nil
}

type jsQueue struct {
	client  func() jetstream.JetStream
	connect func() (*nats.Conn, error)
	name    string
}

func (q *jsQueue) Delete(ctx context.Context) error {
	return q.client().DeleteStream(ctx, q.name)
}

func (q *jsQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	nc, err := q.connect()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(window, 1)))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return newAsyncProducer(window,
		func(m harness.Msg) (jetstream.PubAckFuture, error) { return js.PublishAsync(q.name, m.Body) },
		func(f jetstream.PubAckFuture) error {
			select {
			case <-f.Ok():
				return nil
			case err := <-f.Err():
				return err
			case <-time.After(time.Minute):
				return errors.New("no publish ack within a minute")
			}
		},
		func() error { nc.Close(); return nil }), nil
}

func (q *jsQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	c, err := q.client().Consumer(ctx, q.name, "workers")
	if err != nil {
		return nil, err
	}
	return &jsConsumer{c: c}, nil
}

type jsConsumer struct{ c jetstream.Consumer }

func (c *jsConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	b, err := c.c.Fetch(max, jetstream.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	var out []harness.Delivery
	for m := range b.Messages() {
		out = append(out, harness.Delivery{Body: m.Data(), Handle: m})
	}
	if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && len(out) == 0 {
		return nil, err
	}
	return out, nil
}

func (c *jsConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	for _, d := range ds {
		if err := d.Handle.(jetstream.Msg).Ack(); err != nil {
			return err
		}
	}
	return nil
}

func (c *jsConsumer) Close() error { return nil }
