package systems

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/bench/harness"
	"github.com/okiba/okiba/client"
)

// clusterSize is the member count of every cluster system: three nodes on this one
// machine (loopback, one disk), as issue 15's benchmark asks.
const clusterSize = 3

// OkibaCluster3 is three `okiba serve` processes of one replicated cluster
// (docs/cluster.md) on loopback, each with its own port and data directory, built from
// the working tree as okiba-http's is, driven through the Go client given every node
// (Options.Servers: it follows the leader) with okiba-http's producer and consumer.
type OkibaCluster3 struct {
	env    *harness.Env
	bin    string
	secret string // the cluster secret's file
	nodes  []okibaNode
	c      *client.Client
	ver    string

	mu    sync.Mutex
	procs []*harness.Proc
}

// okibaNode is one member: its name, address and data directory.
type okibaNode struct {
	name, addr, dir string
}

func NewOkibaCluster3() *OkibaCluster3 { return &OkibaCluster3{} }

func (o *OkibaCluster3) Info() harness.Info {
	return harness.Info{
		Name: "okiba-cluster3", Label: "okiba, a cluster of three on this machine (Go client, every node)", Peer: "okiba", Durability: harness.Durable,
		Version: o.ver,
		Settings: "three okiba serve processes on loopback (--node, --peers, --cluster-secret-file; etcd raft, default timeouts), one data directory each on the one disk; " +
			"an answer once its records are in a majority's fsynced raft logs; the Go client with Options.Servers = all three URLs (it follows the leader) and okiba-http's Producer and acker",
		Caps: harness.Caps{Consume: true, Visibility: true, Groups: true},
	}
}

// okibaPeers is --peers for nodes: NAME=http://ADDR, comma-separated, in member order.
func okibaPeers(nodes []okibaNode) string {
	ps := make([]string, len(nodes))
	for i, n := range nodes {
		ps[i] = n.name + "=http://" + n.addr
	}
	return strings.Join(ps, ",")
}

// okibaNodeArgs are node's `okiba serve` arguments in the cluster of nodes.
func okibaNodeArgs(node okibaNode, nodes []okibaNode, secretFile string) []string {
	return []string{"serve", "--node", node.name, "--addr", node.addr, "--data", node.dir,
		"--peers", okibaPeers(nodes), "--cluster-secret-file", secretFile, "--log-level", "warn"}
}

func (o *OkibaCluster3) Start(ctx context.Context, env *harness.Env) error {
	b, err := buildOkiba(ctx, env)
	if err != nil {
		return err
	}
	o.env, o.bin = env, b.bin
	base, err := env.DataDir("okiba-cluster3")
	if err != nil {
		return err
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	o.secret = filepath.Join(base, "cluster-secret")
	if err := os.WriteFile(o.secret, []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		return err
	}
	for i := 1; i <= clusterSize; i++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		n := okibaNode{name: fmt.Sprintf("n%d", i), addr: fmt.Sprintf("127.0.0.1:%d", port), dir: filepath.Join(base, fmt.Sprintf("n%d", i))}
		o.nodes = append(o.nodes, n)
	}
	// Registered before the first process starts, so that a failed start is stopped too.
	env.Shared("okiba-cluster3", func() (any, func(), error) { return o, func() { o.stop(); os.RemoveAll(base) }, nil })
	for _, n := range o.nodes {
		p, err := env.StartProc("okiba-"+n.name, exec.Command(o.bin, okibaNodeArgs(n, o.nodes, o.secret)...))
		if err != nil {
			return err
		}
		o.mu.Lock()
		o.procs = append(o.procs, p)
		o.mu.Unlock()
	}
	// Ready once a node says it leads (each starts an election on its own).
	if err := o.waitLeader(ctx); err != nil {
		return err
	}
	var more []string
	for _, n := range o.nodes[1:] {
		more = append(more, "http://"+n.addr)
	}
	o.c, err = client.New("http://"+o.nodes[0].addr, client.Options{Servers: more})
	o.ver = b.version + ", Go client from the same tree"
	return err
}

// waitLeader waits until a node's /healthz names itself leader.
func (o *OkibaCluster3) waitLeader(ctx context.Context) error {
	o.mu.Lock()
	first := o.procs[0]
	o.mu.Unlock()
	return harness.WaitFor(ctx, first, 2*time.Minute, "okiba-cluster3 leader", func(ctx context.Context) error {
		for i, n := range o.nodes {
			o.mu.Lock()
			p := o.procs[i]
			o.mu.Unlock()
			if ok, err := p.Exited(); ok {
				return fmt.Errorf("okiba %s exited (%v); see its log", n.name, err)
			}
			h, err := nodeHealth(ctx, n.addr)
			if err == nil && h.Cluster != nil && h.Cluster.Role == "leader" {
				if len(h.Cluster.Members) != len(o.nodes) {
					return fmt.Errorf("leader %s has members %v, want %d", n.name, h.Cluster.Members, len(o.nodes))
				}
				o.env.Logf("okiba-cluster3: %s leads (term %d)", n.name, h.Cluster.Term)
				return nil
			}
		}
		return errors.New("no leader yet")
	})
}

// nodeHealth is one node's own /healthz (never forwarded).
func nodeHealth(ctx context.Context, addr string) (api.Health, error) {
	var h api.Health
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/healthz", nil)
	if err != nil {
		return h, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}

// stop stops every node with SIGTERM (a graceful shutdown hands the lead over), all at
// once, so that no node waits for an election it cannot win.
func (o *OkibaCluster3) stop() {
	o.mu.Lock()
	procs := o.procs
	o.mu.Unlock()
	stopAll(procs)
}

func (o *OkibaCluster3) Pids() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return pidsOf(o.procs)
}

func (o *OkibaCluster3) DataDirs() []string {
	dirs := make([]string, len(o.nodes))
	for i, n := range o.nodes {
		dirs[i] = n.dir
	}
	return dirs
}

func (o *OkibaCluster3) Close() error { return nil }

func (o *OkibaCluster3) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return newOkibaQueue(ctx, o.c, spec, false, 0)
}
