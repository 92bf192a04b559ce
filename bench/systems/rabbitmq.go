package systems

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/okiba/okiba/bench/harness"
)

type rabbitKind int

const (
	rabbitQuorum rabbitKind = iota
	rabbitClassicV1
	rabbitClassicV2
)

// rabbitServer is Debian's rabbitmq-server, started as the rabbitmq user with every
// directory under the run directory, its own epmd on a private port, and one plugin:
// rabbitmq_stream (the stream protocol, for rabbitmq-stream).
// The three RabbitMQ systems share it (queue type is per queue).
type rabbitServer struct {
	env                 *harness.Env
	dir                 string
	nodename            string // RABBITMQ_NODENAME
	port, dist, epmdPrt int
	streamPort          int // the rabbitmq_stream plugin's listener
	version             string

	mu   sync.Mutex
	epmd *harness.Proc
	proc *harness.Proc
}

func startRabbit(ctx context.Context, env *harness.Env) (*rabbitServer, error) {
	s, err := env.Shared("rabbitmq", func() (any, func(), error) {
		if err := rabbitInstalled(); err != nil {
			return nil, nil, err
		}
		dir, err := env.DataDir("rabbitmq")
		if err != nil {
			return nil, nil, err
		}
		epmdPort, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		// The stream plugin (rabbitmq-stream), on loopback only.
		s, err := prepareRabbitNode(env, dir, "okibabench@localhost", epmdPort, true, "")
		if err != nil {
			return nil, nil, err
		}
		if s.epmd, err = startEpmd(ctx, env, epmdPort); err != nil {
			return nil, nil, err
		}
		if err := s.start(ctx); err != nil {
			s.stop()
			return nil, nil, err
		}
		s.version = "RabbitMQ " + rabbitVersion()
		return s, s.stop, nil
	})
	if err != nil {
		return nil, err
	}
	return s.(*rabbitServer), nil
}

func rabbitInstalled() error {
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		return errors.New("rabbitmq-server not installed (make bench-setup installs Debian's rabbitmq-server)")
	}
	return nil
}

// prepareRabbitNode lays out one node under dir (its mnesia, log and home directories,
// rabbitmq.conf on fresh loopback ports, enabled_plugins; with a cookie, the Erlang
// cookie in its home, which the CLI run with that home reads too), all owned by the
// rabbitmq user. The node registers with the epmd on epmdPort.
func prepareRabbitNode(env *harness.Env, dir, nodename string, epmdPort int, stream bool, cookie string) (*rabbitServer, error) {
	s := &rabbitServer{env: env, dir: dir, nodename: nodename, epmdPrt: epmdPort}
	ports := []*int{&s.port, &s.dist}
	if stream {
		ports = append(ports, &s.streamPort)
	}
	for _, p := range ports {
		var err error
		if *p, err = freePort(); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"mnesia", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	plugins := "[].\n"
	if stream {
		plugins = "[rabbitmq_stream].\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(rabbitConf(s.port, s.streamPort)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte(plugins), 0o644); err != nil {
		return nil, err
	}
	if cookie != "" {
		if err := os.WriteFile(filepath.Join(dir, "home", ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
			return nil, err
		}
	}
	// Started as root, RabbitMQ must run as the rabbitmq user, which must own
	// every directory it writes.
	if out, err := exec.Command("chown", "-R", "rabbitmq:rabbitmq", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chown %s: %v: %s", dir, err, out)
	}
	return s, nil
}

// rabbitConf is a node's rabbitmq.conf: AMQP on port, the stream listener on
// streamPort unless 0, all on loopback.
func rabbitConf(port, streamPort int) string {
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\ndisk_free_limit.absolute = 2GB\nlog.console = false\nlog.file.level = warning\n", port)
	if streamPort != 0 {
		conf += fmt.Sprintf("stream.listeners.tcp.1 = 127.0.0.1:%d\nstream.advertised_host = 127.0.0.1\nstream.advertised_port = %d\n", streamPort, streamPort)
	}
	return conf
}

// startEpmd starts an epmd of our own, on a private port, as a child of the harness
// (rabbitmq-server would otherwise start a daemon that outlives the run).
func startEpmd(ctx context.Context, env *harness.Env, port int) (*harness.Proc, error) {
	ep, err := env.StartProc("epmd", exec.Command("runuser", "-u", "rabbitmq", "--", "epmd", "-port", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	if err := harness.WaitFor(ctx, ep, 30*time.Second, "epmd", dialable(fmt.Sprintf("127.0.0.1:%d", port))); err != nil {
		_ = ep.Stop(syscall.SIGTERM, 5*time.Second)
		return nil, err
	}
	return ep, nil
}

func rabbitVersion() string {
	v := output("dpkg-query", "-W", "-f=${Version}", "rabbitmq-server")
	if i := strings.IndexByte(v, '-'); i > 0 {
		v = v[:i]
	}
	return v + " (Debian), Erlang " + output("dpkg-query", "-W", "-f=${Version}", "erlang-base")
}

func (s *rabbitServer) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", s.port) }

func (s *rabbitServer) start(ctx context.Context) error {
	env := append(s.cliEnv(),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(s.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(s.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(s.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(s.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(s.dir, "rabbitmq.pid"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(s.dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(s.dir, "enabled_plugins"),
	)
	args := append([]string{"-u", "rabbitmq", "--", "env"}, env...)
	args = append(args, "/usr/lib/rabbitmq/bin/rabbitmq-server")
	p, err := s.env.StartProc(s.procName(), exec.Command("runuser", args...))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return harness.WaitFor(ctx, p, 3*time.Minute, s.procName(), func(ctx context.Context) error {
		c, err := amqp.Dial(s.url())
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// cliEnv is the environment the node and rabbitmqctl share: its name, its home (its
// Erlang cookie), the epmd and no rabbitmq-env.conf.
func (s *rabbitServer) cliEnv() []string {
	return []string{
		"HOME=" + filepath.Join(s.dir, "home"),
		"RABBITMQ_NODENAME=" + s.nodename,
		"ERL_EPMD_PORT=" + strconv.Itoa(s.epmdPrt),
		"RABBITMQ_CONF_ENV_FILE=/dev/null",
	}
}

// procName names the node's process in the harness's logs: "rabbitmq" for the single
// node, "rabbitmq-NAME" for a cluster's.
func (s *rabbitServer) procName() string {
	if s.nodename == "okibabench@localhost" {
		return "rabbitmq"
	}
	return "rabbitmq-" + strings.TrimSuffix(s.nodename, "@localhost")
}

// ctl runs rabbitmqctl against this node (see cli).
func (s *rabbitServer) ctl(ctx context.Context, timeout time.Duration, args ...string) error {
	_, err := s.cli(ctx, timeout, "rabbitmqctl", args...)
	return err
}

// cli runs one of RabbitMQ's command-line tools (rabbitmqctl, rabbitmq-queues) against
// this node, as the rabbitmq user with the node's environment, bounded by timeout, and
// returns what it printed.
func (s *rabbitServer) cli(ctx context.Context, timeout time.Duration, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := append([]string{"-u", "rabbitmq", "--", "env"}, s.cliEnv()...)
	cmd = append(cmd, "/usr/lib/rabbitmq/bin/"+tool, "-n", s.nodename)
	cmd = append(cmd, args...)
	out, err := exec.CommandContext(ctx, "runuser", cmd...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -n %s %s: %v: %s", tool, s.nodename, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// beamPid reads the node's pid file (the Erlang VM may sit in a process group of its
// own).
func (s *rabbitServer) beamPid() int {
	b, err := os.ReadFile(filepath.Join(s.dir, "rabbitmq.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (s *rabbitServer) stop() {
	s.mu.Lock()
	p, ep := s.proc, s.epmd
	s.mu.Unlock()
	if p != nil {
		if pid := s.beamPid(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		_ = p.Stop(syscall.SIGTERM, 60*time.Second)
		if pid := s.beamPid(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if ep != nil {
		_ = ep.Stop(syscall.SIGTERM, 5*time.Second)
	}
}

func (s *rabbitServer) kill() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if pid := s.beamPid(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return p.Kill()
}

func (s *rabbitServer) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	pids := []int{s.proc.Pid()}
	if b := s.beamPid(); b > 0 {
		pids = append(pids, b)
	}
	return pids
}

// Rabbit is one RabbitMQ queue type: durable queue, persistent messages, publisher
// confirms with a window (one connection per producer), manual acks with prefetch
// (basic.qos), a whole receive acked with one multiple-ack.
type Rabbit struct {
	kind rabbitKind
	srv  *rabbitServer
	ver  string
}

func NewRabbit(kind rabbitKind) *Rabbit { return &Rabbit{kind: kind} }

func (r *Rabbit) Info() harness.Info {
	i := harness.Info{Peer: "rabbitmq", Durability: harness.Durable, Version: r.ver,
		Caps: harness.Caps{Consume: true, Restart: true}}
	common := "durable queue, persistent messages (delivery mode 2), publisher confirms with a window, manual acks, basic.qos = prefetch, multiple-ack per receive"
	switch r.kind {
	case rabbitQuorum:
		i.Name, i.Label, i.Settings = "rabbitmq-quorum", "RabbitMQ quorum queue (1 node)", "x-queue-type quorum; "+common
	case rabbitClassicV1:
		i.Name, i.Label, i.Settings = "rabbitmq-classic-v1", "RabbitMQ classic queue v1", "x-queue-version 1; "+common
	case rabbitClassicV2:
		i.Name, i.Label, i.Settings = "rabbitmq-classic-v2", "RabbitMQ classic queue v2 (confirms before fsync)", "x-queue-version 2; "+common
		i.Durability = harness.Relaxed
	}
	return i
}

func (r *Rabbit) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startRabbit(ctx, env)
	if err != nil {
		return err
	}
	r.srv = srv
	r.ver = srv.version + ", amqp091-go " + moduleVersion("github.com/rabbitmq/amqp091-go")
	return nil
}

func (r *Rabbit) Pids() []int        { return r.srv.pids() }
func (r *Rabbit) DataDirs() []string { return []string{filepath.Join(r.srv.dir, "mnesia")} }
func (r *Rabbit) Close() error       { return nil }

func (r *Rabbit) Kill(ctx context.Context) error    { return r.srv.kill() }
func (r *Rabbit) Restart(ctx context.Context) error { return r.srv.start(ctx) }

func (r *Rabbit) channel() (*amqp.Connection, *amqp.Channel, error) {
	c, err := amqp.Dial(r.srv.url())
	if err != nil {
		return nil, nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, ch, nil
}

func (r *Rabbit) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	c, ch, err := r.channel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	args := amqp.Table{}
	switch r.kind {
	case rabbitQuorum:
		args["x-queue-type"] = "quorum"
	case rabbitClassicV1:
		args["x-queue-version"] = 1
	case rabbitClassicV2:
		args["x-queue-version"] = 2
	}
	if _, err := ch.QueueDeclare(spec.Name, true, false, false, false, args); err != nil {
		return nil, err
	}
	return &rabbitQueue{dial: r.channel, name: spec.Name}, nil
}

type rabbitQueue struct {
	dial func() (*amqp.Connection, *amqp.Channel, error)
	name string
}

func (q *rabbitQueue) Delete(ctx context.Context) error {
	c, ch, err := q.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = ch.QueueDelete(q.name, false, false, false)
	return err
}

func (q *rabbitQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	c, ch, err := q.dial()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		c.Close()
		return nil, err
	}
	return newAsyncProducer(window,
		func(m harness.Msg) (*amqp.DeferredConfirmation, error) {
			return ch.PublishWithDeferredConfirm("", q.name, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: m.Body})
		},
		func(dc *amqp.DeferredConfirmation) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ok, err := dc.WaitContext(ctx)
			if err == nil && !ok {
				err = errors.New("nacked by the broker")
			}
			return err
		},
		c.Close), nil
}

func (q *rabbitQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	c, ch, err := q.dial()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(max(opts.Prefetch, 1), 0, false); err != nil {
		c.Close()
		return nil, err
	}
	ds, err := ch.Consume(q.name, "", false, false, false, false, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &rabbitConsumer{c: c, ch: ch, ds: ds}, nil
}

type rabbitConsumer struct {
	c  *amqp.Connection
	ch *amqp.Channel
	ds <-chan amqp.Delivery
}

func (c *rabbitConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	return receiveChan(ctx, c.ds, max, func(d amqp.Delivery) harness.Delivery {
		return harness.Delivery{Body: d.Body, Handle: d.DeliveryTag}
	})
}

// Ack acks one delivery alone, and a whole receive with one multiple-ack of its last
// tag (deliveries on a channel arrive in tag order).
func (c *rabbitConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	return c.ch.Ack(ds[len(ds)-1].Handle.(uint64), len(ds) > 1)
}

func (c *rabbitConsumer) Close() error { return c.c.Close() }
