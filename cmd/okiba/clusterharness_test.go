package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
)

// procCluster is a cluster of real okiba processes on loopback ports, for the binary
// tier's test and the cluster torture: each node its own process and data directory.
type procCluster struct {
	t      *testing.T
	bin    string
	dir    string
	secret string
	addrs  []string
	peers  []string
	procs  []*childServer
	// wrap, when set, is the command each node runs inside (ip netns exec NS), by node.
	wrap [][]string
	// extra are more serve flags for every node.
	extra []string
}

// newProcCluster builds the binary and starts n nodes.
func newProcCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	c := buildProcCluster(t)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.addrs = append(c.addrs, ln.Addr().String())
		ln.Close()
		c.peers = append(c.peers, fmt.Sprintf("n%d=http://%s", i+1, c.addrs[i]))
	}
	c.procs = make([]*childServer, n)
	for i := range n {
		c.start(i)
	}
	return c
}

// buildProcCluster builds the binary and writes the cluster secret: a cluster with no
// node yet.
func buildProcCluster(t *testing.T) *procCluster {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testkit.Missing(t, "the cluster's binary tests", "no go command in PATH to build it", "PATH=/usr/local/go/bin:$PATH")
	}
	c := &procCluster{t: t, dir: t.TempDir()}
	c.bin = filepath.Join(c.dir, "okiba")
	if out, err := exec.Command(goBin, "build", "-o", c.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c.secret = filepath.Join(c.dir, "cluster-secret")
	if err := os.WriteFile(c.secret, []byte("binary-cluster-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *procCluster) url(i int) string { return "http://" + c.addrs[i] }

// start (re)starts node i on its data directory.
func (c *procCluster) start(i int) {
	c.t.Helper()
	args := []string{"serve", "--node", fmt.Sprintf("n%d", i+1), "--peers", strings.Join(c.peers, ","),
		"--cluster-secret-file", c.secret, "--addr", c.addrs[i], "--data", filepath.Join(c.dir, fmt.Sprintf("data%d", i+1))}
	args = append(args, c.extra...)
	bin := c.bin
	if c.wrap != nil {
		bin, args = c.wrap[i][0], append(append(slices.Clone(c.wrap[i][1:]), c.bin), args...)
	}
	c.procs[i] = startBinary(c.t, bin, cleanEnv(), args...)
}

// kill sends SIGKILL to node i and waits for it; it returns the nodes still running.
func (c *procCluster) kill(i int) []int {
	c.t.Helper()
	if err := c.procs[i].cmd.Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[i].cmd.Wait()
	return c.alive()
}

func (c *procCluster) alive() []int {
	var out []int
	for j, p := range c.procs {
		if p.cmd.ProcessState == nil {
			out = append(out, j)
		}
	}
	return out
}

func (c *procCluster) health(i int) (api.Health, bool) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(c.url(i) + "/healthz")
	if err != nil {
		return api.Health{}, false
	}
	defer resp.Body.Close()
	var h api.Health
	return h, json.NewDecoder(resp.Body).Decode(&h) == nil && h.Cluster != nil
}

// leader waits for one of nodes to lead.
func (c *procCluster) leader(nodes []int) int {
	c.t.Helper()
	l := -1
	testkit.Eventually(c.t, 20*time.Second, func() bool {
		for _, i := range nodes {
			if h, ok := c.health(i); ok && h.Cluster.Role == "leader" {
				l = i
				return true
			}
		}
		return false
	}, "a leader among nodes %v", nodes)
	return l
}
