package systems

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/okiba/okiba/bench/harness"
)

// JetStreamR3 is three nats-server processes clustered by routes on loopback (each with
// its own client and cluster port and store directory, sync_interval always as
// jetstream-always), an R3 file stream with WorkQueue retention, and jetstream-always's
// producer and durable pull consumer, the clients given every server's URL.
type JetStreamR3 struct {
	env   *harness.Env
	nodes []natsNode
	urls  string // every server, comma-separated, as nats.Connect takes them
	ver   string

	mu    sync.Mutex
	procs []*harness.Proc
	nc    *nats.Conn
	js    jetstream.JetStream
}

// natsNode is one server of the cluster: its name, ports and directory.
type natsNode struct {
	name              string
	client, routePort int
	dir               string
}

func NewJetStreamR3() *JetStreamR3 { return &JetStreamR3{} }

func (j *JetStreamR3) Info() harness.Info {
	return harness.Info{
		Name: "jetstream-r3", Label: "NATS JetStream R3 (three servers on this machine)", Peer: "nats", Durability: harness.Durable,
		Version: j.ver,
		Settings: "three nats-server processes with routes on loopback, sync_interval: always on each; R3 file stream (Replicas 3), WorkQueue retention; " +
			"PublishAsync with max pending = window; durable pull consumer, explicit acks (msg.Ack per message, fire-and-forget), MaxAckPending 20000; clients given all three URLs",
		Caps: harness.Caps{Consume: true, Visibility: true},
	}
}

// natsClusterConf is node's configuration in the cluster of nodes: its own client
// listener, JetStream store and route listener, and routes to every other node.
func natsClusterConf(node natsNode, nodes []natsNode) string {
	var routes []string
	for _, n := range nodes {
		if n.name != node.name {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", n.routePort))
		}
	}
	return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
max_payload: 8MB
jetstream {
  store_dir: %q
  max_file_store: 200GB
  sync_interval: always
}
cluster {
  name: okibabench
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, node.name, node.client, filepath.Join(node.dir, "js"), node.routePort, strings.Join(routes, ", "))
}

func (j *JetStreamR3) Start(ctx context.Context, env *harness.Env) error {
	bin := filepath.Join(env.Tools, "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s missing (make bench-setup installs it with go install)", bin)
	}
	j.env = env
	base, err := env.DataDir("jetstream-r3")
	if err != nil {
		return err
	}
	var urls []string
	for i := 1; i <= clusterSize; i++ {
		n := natsNode{name: fmt.Sprintf("n%d", i), dir: filepath.Join(base, fmt.Sprintf("n%d", i))}
		if n.client, err = freePort(); err != nil {
			return err
		}
		if n.routePort, err = freePort(); err != nil {
			return err
		}
		j.nodes = append(j.nodes, n)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.client))
	}
	j.urls = strings.Join(urls, ",")
	env.Shared("jetstream-r3", func() (any, func(), error) { return j, func() { j.stop(); os.RemoveAll(base) }, nil })
	for _, n := range j.nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(n.dir, "nats.conf")
		if err := os.WriteFile(conf, []byte(natsClusterConf(n, j.nodes)), 0o644); err != nil {
			return err
		}
		p, err := env.StartProc("nats-"+n.name, exec.Command(bin, "-c", conf))
		if err != nil {
			return err
		}
		j.mu.Lock()
		j.procs = append(j.procs, p)
		j.mu.Unlock()
	}
	// Ready once JetStream answers through the cluster: its meta group has a leader.
	err = harness.WaitFor(ctx, j.procs[0], 2*time.Minute, "jetstream-r3", func(ctx context.Context) error {
		for _, p := range j.procs[1:] {
			if ok, err := p.Exited(); ok {
				return fmt.Errorf("%s exited (%v)", p.Name, err)
			}
		}
		nc, err := j.connect()
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			// Bounded per try: until the meta group has a leader, a request waits out
			// whatever deadline it is given.
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = js.AccountInfo(actx)
			cancel()
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
	if err != nil {
		return err
	}
	j.ver = "nats-server " + strings.TrimPrefix(output(bin, "--version"), "nats-server: ") + " ×3, nats.go " + moduleVersion("github.com/nats-io/nats.go")
	return nil
}

func (j *JetStreamR3) connect() (*nats.Conn, error) {
	return nats.Connect(j.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}

// stop closes the client and stops the three servers at once.
func (j *JetStreamR3) stop() {
	j.mu.Lock()
	procs, nc := j.procs, j.nc
	j.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
	stopAll(procs)
}

func (j *JetStreamR3) Pids() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return pidsOf(j.procs)
}

func (j *JetStreamR3) DataDirs() []string {
	dirs := make([]string, len(j.nodes))
	for i, n := range j.nodes {
		dirs[i] = n.dir
	}
	return dirs
}

func (j *JetStreamR3) Close() error { return nil }

func (j *JetStreamR3) client() jetstream.JetStream {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.js
}

func (j *JetStreamR3) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return newJSQueue(ctx, j.client, j.connect, spec, clusterSize)
}
