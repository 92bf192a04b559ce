package systems

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/okiba/okiba/bench/harness"
)

// RabbitQuorum3 is three nodes of Debian's rabbitmq-server on this machine, each with
// its own RABBITMQ_NODENAME, ports and directories, one epmd for the three, one Erlang
// cookie, nodes 2 and 3 joined to node 1 with rabbitmqctl join_cluster; the queue is a
// quorum queue of three replicas, declared on node 1 (which holds its first leader),
// with rabbitmq-quorum's producer and consumer, every client on node 1.
type RabbitQuorum3 struct {
	nodes []*rabbitServer
	epmd  *harness.Proc // the nodes' one epmd
	ver   string
	// checked is set once a queue was seen to have a member on every node.
	checked bool
}

func NewRabbitQuorum3() *RabbitQuorum3 { return &RabbitQuorum3{} }

func (r *RabbitQuorum3) Info() harness.Info {
	return harness.Info{
		Name: "rabbitmq-quorum3", Label: "RabbitMQ quorum queue, three nodes on this machine", Peer: "rabbitmq", Durability: harness.Durable,
		Version: r.ver,
		Settings: "three rabbitmq-server nodes (distinct RABBITMQ_NODENAME, ports, directories; one epmd), joined with rabbitmqctl join_cluster; " +
			"x-queue-type quorum, x-quorum-initial-group-size 3, declared on node 1; durable queue, persistent messages (delivery mode 2), publisher confirms with a window, manual acks, basic.qos = prefetch, multiple-ack per receive; every client connected to node 1 (the queue's leader)",
		Caps: harness.Caps{Consume: true},
	}
}

// rabbitNodeName is the i-th (from 1) node's RABBITMQ_NODENAME.
func rabbitNodeName(i int) string { return fmt.Sprintf("okibabench-q%d@localhost", i) }

// rabbitCookie is a fresh Erlang cookie: 20 upper-case letters, as Erlang makes its own.
func rabbitCookie() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = 'A' + b[i]%26
	}
	return string(b), nil
}

func (r *RabbitQuorum3) Start(ctx context.Context, env *harness.Env) error {
	if err := rabbitInstalled(); err != nil {
		return err
	}
	base, err := env.DataDir("rabbitmq-quorum3")
	if err != nil {
		return err
	}
	epmdPort, err := freePort()
	if err != nil {
		return err
	}
	cookie, err := rabbitCookie()
	if err != nil {
		return err
	}
	for i := 1; i <= clusterSize; i++ {
		n, err := prepareRabbitNode(env, filepath.Join(base, fmt.Sprintf("n%d", i)), rabbitNodeName(i), epmdPort, false, cookie)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
	}
	epmd, err := startEpmd(ctx, env, epmdPort)
	if err != nil {
		return err
	}
	r.epmd = epmd
	env.Shared("rabbitmq-quorum3", func() (any, func(), error) { return r, func() { r.stop(); os.RemoveAll(base) }, nil })
	// The three boot at once (each takes seconds of Erlang start-up), then 2 and 3 join 1.
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, n := range r.nodes[1:] {
		for _, step := range [][]string{{"stop_app"}, {"join_cluster", r.nodes[0].nodename}, {"start_app"}} {
			if err := n.ctl(ctx, 2*time.Minute, step...); err != nil {
				return err
			}
		}
	}
	if err := r.nodes[0].ctl(ctx, 2*time.Minute, "await_online_nodes", fmt.Sprint(clusterSize)); err != nil {
		return err
	}
	r.ver = "RabbitMQ " + rabbitVersion() + " ×3, amqp091-go " + moduleVersion("github.com/rabbitmq/amqp091-go")
	return nil
}

// stop stops the nodes at once (each waits for its own shutdown), then the epmd.
func (r *RabbitQuorum3) stop() {
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.stop()
		}()
	}
	wg.Wait()
	if r.epmd != nil {
		_ = r.epmd.Stop(syscall.SIGTERM, 5*time.Second)
	}
}

func (r *RabbitQuorum3) Pids() []int {
	var pids []int
	for _, n := range r.nodes {
		pids = append(pids, n.pids()...)
	}
	return pids
}

func (r *RabbitQuorum3) DataDirs() []string {
	dirs := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		dirs[i] = filepath.Join(n.dir, "mnesia")
	}
	return dirs
}

func (r *RabbitQuorum3) Close() error { return nil }

func (r *RabbitQuorum3) channel() (*amqp.Connection, *amqp.Channel, error) {
	c, err := amqp.Dial(r.nodes[0].url())
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

func (r *RabbitQuorum3) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	c, ch, err := r.channel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	args := amqp.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": clusterSize}
	if _, err := ch.QueueDeclare(spec.Name, true, false, false, false, args); err != nil {
		return nil, err
	}
	if !r.checked {
		// Once a run (the tool takes seconds): what is measured is a queue on all three.
		out, err := r.nodes[0].cli(ctx, time.Minute, "rabbitmq-queues", "quorum_status", spec.Name, "--formatter", "json", "--quiet")
		if err != nil {
			return nil, err
		}
		if n := quorumMembers(out); n != clusterSize {
			return nil, fmt.Errorf("quorum queue %s has %d members, want %d:\n%s", spec.Name, n, clusterSize, out)
		}
		r.checked = true
	}
	return &rabbitQueue{dial: r.channel, name: spec.Name}, nil
}

// quorumMembers counts the members in rabbitmq-queues quorum_status's JSON answer
// (one object per member), or -1 if it is not that.
func quorumMembers(status string) int {
	var rows []map[string]any
	if err := json.Unmarshal([]byte(status), &rows); err != nil {
		return -1
	}
	n := 0
	for _, row := range rows {
		if name, _ := row["Node Name"].(string); strings.HasPrefix(name, "okibabench-q") {
			n++
		}
	}
	return n
}
