package systems

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/bench/harness"
	"github.com/okiba/okiba/client"
)

// okibaServer is `okiba serve` built from the working tree, shared by every okiba
// system of a run (they are different client paths to the same broker).
type okibaServer struct {
	env     *harness.Env
	bin     string
	dataDir string
	addr    string
	version string

	mu   sync.Mutex
	proc *harness.Proc
}

// okibaBuild is `go build ./cmd/okiba` of the working tree, once per run, shared by
// the single node and the cluster: the binary's path and what it is ("okiba <rev>").
type okibaBuild struct{ bin, version string }

func buildOkiba(ctx context.Context, env *harness.Env) (okibaBuild, error) {
	b, err := env.Shared("okiba-build", func() (any, func(), error) {
		bin := filepath.Join(env.Tools, "okiba")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/okiba")
		build.Dir = env.Repo
		build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false "+os.Getenv("GOFLAGS")) // make's flags kept: its build cache
		if out, err := build.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("go build ./cmd/okiba: %v\n%s", err, out)
		}
		rev := output("git", "-C", env.Repo, "rev-parse", "--short", "HEAD")
		if st := output("git", "-C", env.Repo, "status", "--porcelain", "--untracked-files=no"); st != "" && !strings.HasPrefix(st, "unknown") {
			rev += "+changes"
		}
		return okibaBuild{bin: bin, version: "okiba " + rev}, func() {}, nil
	})
	if err != nil {
		return okibaBuild{}, err
	}
	return b.(okibaBuild), nil
}

func startOkiba(ctx context.Context, env *harness.Env) (*okibaServer, error) {
	s, err := env.Shared("okiba", func() (any, func(), error) {
		b, err := buildOkiba(ctx, env)
		if err != nil {
			return nil, nil, err
		}
		dir, err := env.DataDir("okiba")
		if err != nil {
			return nil, nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		srv := &okibaServer{env: env, bin: b.bin, dataDir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), version: b.version}
		if err := srv.start(ctx); err != nil {
			return nil, nil, err
		}
		return srv, srv.stop, nil
	})
	if err != nil {
		return nil, err
	}
	return s.(*okibaServer), nil
}

func (s *okibaServer) start(ctx context.Context) error {
	cmd := exec.Command(s.bin, "serve", "--addr", s.addr, "--data", s.dataDir, "--log-level", "warn")
	p, err := s.env.StartProc("okiba", cmd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	c, _ := client.New("http://"+s.addr, client.Options{})
	return harness.WaitFor(ctx, p, 2*time.Minute, "okiba", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return c.Health(cctx)
	})
}

func (s *okibaServer) stop() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		_ = p.Stop(syscall.SIGTERM, 30*time.Second)
	}
}

func (s *okibaServer) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return procPids(s.proc)
}

func (s *okibaServer) kill() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p.Kill()
}

// OkibaHTTP is okiba through its native HTTP API with the Go client: the batching
// Producer for windows above 1 (one Send per message otherwise), receives of up to the
// prefetch, and acks of a whole receive in one call. The client's default encoding
// (okiba's compact binary one for sends and receives), or JSON with json set.
type OkibaHTTP struct {
	json      bool
	noStream  bool
	sendBatch bool
	linger    time.Duration // the Producer's Linger; 0 is its default
	srv       *okibaServer
	c         *client.Client
	ver       string
}

func NewOkibaHTTP() *OkibaHTTP { return &OkibaHTTP{} }

// NewOkibaHTTPJSON is the same client path with client.Options.JSON: what curl and
// every non-Go client use.
func NewOkibaHTTPJSON() *OkibaHTTP { return &OkibaHTTP{json: true} }

// NewOkibaHTTP1 is the default client path with client.Options.NoStream: every call a
// plain HTTP/1.1 request, as before the stream existed and as through proxies that
// drop upgrades.
func NewOkibaHTTP1() *OkibaHTTP { return &OkibaHTTP{noStream: true} }

// NewOkibaHTTPBatch sends with Client.SendBatch of whatever has gathered, one request
// at a time per producer (as the Redis pipeline does), instead of the Producer: the
// client path without the Producer's per-message hand-offs.
func NewOkibaHTTPBatch() *OkibaHTTP { return &OkibaHTTP{sendBatch: true} }

// NewOkibaHTTPLinger is the default client path with the Producer's Linger fixed at 1 ms
// (its default before it adapted to the load): batches wait that long even when no
// request is out, to compare the two.
func NewOkibaHTTPLinger() *OkibaHTTP { return &OkibaHTTP{linger: time.Millisecond} }

func (o *OkibaHTTP) Info() harness.Info {
	i := harness.Info{
		Name: "okiba-http", Label: "okiba, native HTTP API (Go client, default encoding)", Peer: "okiba", Durability: harness.Durable,
		Version:  o.ver,
		Settings: "fsync before every answer (group commit); the Go client's default transport (the stream: framed requests on four persistent connections) and encoding (binary sends and receives); client.Producer.Publish (defaults: batches ≤256, 8 requests in flight, a linger that adapts: none while no request is out, else up to 1 ms) for windows > 1; acks handed to one acker goroutine that sends what has gathered, one request in flight (as client.Consume settles them)",
		Caps:     harness.Caps{Consume: true, Visibility: true, Restart: true, Groups: true, Log: true},
	}
	switch {
	case o.json:
		i.Name, i.Label = "okiba-http-json", "okiba, native HTTP API (Go client, JSON)"
		i.Settings = strings.Replace(i.Settings, "and encoding (binary sends and receives)", "and JSON (client.Options.JSON)", 1)
		i.Caps.Restart = false // the same server as okiba-http
		i.Caps.Log = false     // topics speak JSON whatever the client's encoding
	case o.noStream:
		i.Name, i.Label = "okiba-http1", "okiba, native API over plain HTTP/1.1 (Go client, NoStream)"
		i.Settings = strings.Replace(i.Settings, "the Go client's default transport (the stream: framed requests on four persistent connections)", "plain HTTP/1.1 requests (client.Options.NoStream)", 1)
		i.Caps.Restart = false
		i.Caps.Log = false
	case o.sendBatch:
		i.Name, i.Label = "okiba-http-batch", "okiba, native HTTP API (Go client, SendBatch pipeline)"
		i.Settings = strings.Replace(i.Settings, "client.Producer.Publish (defaults: batches ≤256, 8 requests in flight, a linger that adapts: none while no request is out, else up to 1 ms) for windows > 1",
			"Client.SendBatch of everything gathered (≤1000), one request at a time per producer, for windows > 1", 1)
		i.Caps.Restart = false
		i.Caps.Log = false
	case o.linger != 0:
		i.Name, i.Label = "okiba-http-linger1ms", "okiba, native HTTP API (Go client, Producer linger fixed at 1 ms)"
		i.Settings = strings.Replace(i.Settings, "a linger that adapts: none while no request is out, else up to 1 ms", "Linger: 1 ms, also when no request is out", 1)
		i.Caps.Restart = false
		i.Caps.Log = false
	}
	return i
}

func (o *OkibaHTTP) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startOkiba(ctx, env)
	if err != nil {
		return err
	}
	o.srv = srv
	o.c, err = client.New("http://"+srv.addr, client.Options{JSON: o.json, NoStream: o.noStream})
	o.ver = srv.version + ", Go client from the same tree"
	return err
}

func (o *OkibaHTTP) Pids() []int        { return o.srv.pids() }
func (o *OkibaHTTP) DataDirs() []string { return []string{o.srv.dataDir} }
func (o *OkibaHTTP) Close() error       { return nil }

func (o *OkibaHTTP) Kill(ctx context.Context) error    { return o.srv.kill() }
func (o *OkibaHTTP) Restart(ctx context.Context) error { return o.srv.start(ctx) }

func (o *OkibaHTTP) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return newOkibaQueue(ctx, o.c, spec, o.sendBatch, o.linger)
}

// newOkibaQueue creates the spec's queue through c: the queue of every okiba system,
// one node or a cluster.
func newOkibaQueue(ctx context.Context, c *client.Client, spec harness.QueueSpec, sendBatch bool, linger time.Duration) (*okibaQueue, error) {
	vis := spec.Lease()
	cfg := api.QueueConfig{VisibilityTimeout: api.Ptr(vis)}
	if spec.Groups {
		t := true
		cfg.OrderedGroups = &t
	}
	if _, err := c.PutQueue(ctx, spec.Name, cfg); err != nil {
		return nil, err
	}
	return &okibaQueue{c: c, name: spec.Name, sendBatch: sendBatch, linger: linger}, nil
}

type okibaQueue struct {
	c         *client.Client
	name      string
	sendBatch bool
	linger    time.Duration
}

func (q *okibaQueue) Delete(ctx context.Context) error { return q.c.DeleteQueue(ctx, q.name, true) }

func (q *okibaQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	if window <= 1 {
		return &okibaSyncProducer{q: q}, nil
	}
	if q.sendBatch {
		return harness.NewBatcher(min(window, 1000), 1, func(ctx context.Context, msgs []harness.Msg) error {
			batch := make([]client.Message, len(msgs))
			for i, m := range msgs {
				batch[i] = client.Message{Body: m.Body, Group: m.Group}
			}
			res, err := q.c.SendBatch(ctx, q.name, batch)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
			return nil
		}), nil
	}
	return &okibaProducer{p: client.NewProducer(q.c, q.name, client.ProducerOptions{Linger: q.linger})}, nil
}

// okibaSyncProducer sends one message per request and waits for it.
type okibaSyncProducer struct{ q *okibaQueue }

func (p *okibaSyncProducer) Publish(m harness.Msg, done func(error)) {
	_, err := p.q.c.Send(context.Background(), p.q.name, client.Message{Body: m.Body, Group: m.Group})
	done(err)
}
func (p *okibaSyncProducer) Close() error { return nil }

// okibaProducer hands each message to Producer.Publish, which gathers what is in flight
// into batch requests and calls back with each message's outcome: no goroutine per
// message, however large the window.
type okibaProducer struct{ p *client.Producer }

func (p *okibaProducer) Publish(m harness.Msg, done func(error)) {
	p.p.Publish(context.Background(), client.Message{Body: m.Body, Group: m.Group}, func(r client.SendResult) { done(r.Err) })
}

func (p *okibaProducer) Close() error { return p.p.Close(context.Background()) }

func (q *okibaQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return newOkibaConsumer(q), nil
}

// okibaConsumer settles acks the way client.Consume does: Ack hands the receipts to
// one acker goroutine and returns, and the acker sends whatever has gathered in one
// request, with one request in flight. So the ack of one batch (which waits for the
// broker's fsync) overlaps the next receive, and per-message acks are grouped as the
// consumer runtime groups them. A failed ack is reported by a later Ack or by Close.
// RabbitMQ's and JetStream's acks in this harness get no answer at all.
type okibaConsumer struct {
	q    *okibaQueue
	acks chan []string
	done chan struct{}

	mu  sync.Mutex
	err error // the first failed ack
}

func newOkibaConsumer(q *okibaQueue) *okibaConsumer {
	c := &okibaConsumer{q: q, acks: make(chan []string, 1024), done: make(chan struct{})}
	go c.acker()
	return c
}

func (c *okibaConsumer) acker() {
	defer close(c.done)
	for first := range c.acks {
		receipts := first
	gather:
		for len(receipts) < 1000 {
			select {
			case more, ok := <-c.acks:
				if !ok {
					break gather
				}
				receipts = append(receipts, more...)
			default:
				break gather
			}
		}
		for len(receipts) > 0 { // the API takes at most 1000 receipts per request
			n := min(len(receipts), 1000)
			if err := c.ack(receipts[:n]); err != nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				c.mu.Unlock()
			}
			receipts = receipts[n:]
		}
	}
}

func (c *okibaConsumer) ack(receipts []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs, err := c.q.c.Ack(ctx, c.q.name, receipts...)
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (c *okibaConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	wait := 500 * time.Millisecond
	ds, err := c.q.c.Receive(ctx, c.q.name, client.ReceiveOptions{Max: min(max, 1000), Wait: &wait})
	if err != nil {
		return nil, err
	}
	out := make([]harness.Delivery, len(ds))
	for i, d := range ds {
		out[i] = harness.Delivery{Body: d.Body, Group: d.Group, Handle: d.Receipt}
	}
	return out, nil
}

func (c *okibaConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Handle.(string)
	}
	select {
	case c.acks <- receipts:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *okibaConsumer) Close() error {
	close(c.acks)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fsyncs reads okiba_wal_syncs_total from the broker's Prometheus endpoint (/metrics),
// where the build serves one; an error leaves the figure blank in the report.
func (s *okibaServer) fsyncs(ctx context.Context) (uint64, error) { return walSyncs(ctx, s.addr) }

// walSyncs reads okiba_wal_syncs_total from /metrics of the okiba serving on addr.
func walSyncs(ctx context.Context, addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "okiba_wal_syncs_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return uint64(f), err
		}
	}
	return 0, errors.New("/metrics has no okiba_wal_syncs_total")
}

// Fsyncs counts the broker's log fsyncs (see okibaServer.fsyncs).
func (o *OkibaHTTP) Fsyncs(ctx context.Context) (uint64, error) { return o.srv.fsyncs(ctx) }
