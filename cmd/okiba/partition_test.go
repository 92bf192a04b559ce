package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// netnsHosts puts each of n hosts in a network namespace of its own, joined to a bridge
// in this one by a veth pair: a host is cut off from all the others (and from the test)
// by setting its end of the pair down, and healed by setting it up. Every name is unique
// to the run; everything is removed when the test ends, whatever happened.
type netnsHosts struct {
	t      *testing.T
	ns     []string
	hosts  []string // the bridge's end of each host's pair
	ips    []string
	bridge string
}

func newNetnsHosts(t *testing.T, n int) *netnsHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		testkit.Missing(t, "the cluster's partition test", "network namespaces need root", "run the tests as root (CI does)")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		testkit.Missing(t, "the cluster's partition test", "no ip command (iproute2)", "apt-get install iproute2")
	}
	id := fmt.Sprintf("%x", os.Getpid()&0xffff)
	net := fmt.Sprintf("10.%d.%d", 100+os.Getpid()%100, (os.Getpid()/100)%250)
	h := &netnsHosts{t: t, bridge: "okbr" + id}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for _, ns := range h.ns {
			exec.Command(ip, "netns", "del", ns).Run()
		}
		exec.Command(ip, "link", "del", h.bridge).Run()
	})
	run("link", "add", h.bridge, "type", "bridge")
	run("addr", "add", net+".254/24", "dev", h.bridge)
	run("link", "set", h.bridge, "up")
	for i := range n {
		ns, host, peer := fmt.Sprintf("ok%sn%d", id, i+1), fmt.Sprintf("ok%sh%d", id, i+1), fmt.Sprintf("ok%sc%d", id, i+1)
		h.ns = append(h.ns, ns)
		run("netns", "add", ns)
		run("link", "add", host, "type", "veth", "peer", "name", peer)
		run("link", "set", peer, "netns", ns)
		run("link", "set", host, "master", h.bridge, "up")
		addr := fmt.Sprintf("%s.%d", net, i+1)
		run("-n", ns, "addr", "add", addr+"/24", "dev", peer)
		run("-n", ns, "link", "set", peer, "up")
		run("-n", ns, "link", "set", "lo", "up")
		h.hosts, h.ips = append(h.hosts, host), append(h.ips, addr)
	}
	return h
}

// newNetnsCluster builds the binary and starts a node in each of the hosts.
func newNetnsCluster(t *testing.T, hosts *netnsHosts) *procCluster {
	t.Helper()
	pc := buildProcCluster(t)
	for i := range hosts.ns {
		pc.addrs = append(pc.addrs, hosts.ips[i]+":7070")
		pc.peers = append(pc.peers, fmt.Sprintf("n%d=http://%s", i+1, pc.addrs[i]))
		pc.wrap = append(pc.wrap, []string{"ip", "netns", "exec", hosts.ns[i]})
	}
	pc.extra = []string{"--insecure"}
	pc.procs = make([]*childServer, len(hosts.ns))
	for i := range hosts.ns {
		pc.start(i)
	}
	return pc
}

func (h *netnsHosts) cut(i int, off bool) {
	h.t.Helper()
	state := "up"
	if off {
		state = "down"
	}
	if out, err := exec.Command("ip", "link", "set", h.hosts[i], state).CombinedOutput(); err != nil {
		h.t.Fatalf("ip link set %s %s: %v\n%s", h.hosts[i], state, err, out)
	}
}

// A leader cut off from the others by a real network partition (network namespaces)
// stops answering — inside its own namespace a write and a read both fail rather than
// answer from a state the majority has moved past — while the majority elects a leader
// and acknowledges sends; healed, the old leader follows and every acknowledged send is
// there once.
func TestClusterPartitionBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: builds the okiba binary and runs a cluster of processes in network namespaces: runs in its own tier (make binary), not with -short")
	}
	hosts := newNetnsHosts(t, 3)
	pc := newNetnsCluster(t, hosts)
	ctx := context.Background()
	urls := make([]string, 3)
	for i := range urls {
		urls[i] = pc.url(i)
	}
	all, err := client.New(urls[0], client.Options{Servers: urls})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	l := pc.leader([]int{0, 1, 2})
	if _, err := all.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	send := func(c *client.Client, body string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		if _, err := c.Send(sctx, "jobs", client.Message{Body: []byte(body)}); err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		acked[body] = true
	}
	for i := range 20 {
		send(all, fmt.Sprintf("before-%02d", i))
	}

	hosts.cut(l, true)
	cutAt := time.Now()
	var rest []int
	var restURLs []string
	for i := range 3 {
		if i != l {
			rest, restURLs = append(rest, i), append(restURLs, urls[i])
		}
	}
	majority, err := client.New(restURLs[0], client.Options{Servers: restURLs})
	if err != nil {
		t.Fatal(err)
	}
	defer majority.Close()
	send(majority, "during-00")
	t.Logf("failover: the first send acknowledged %v after the partition", time.Since(cutAt).Round(time.Millisecond))
	for i := 1; i < 20; i++ {
		send(majority, fmt.Sprintf("during-%02d", i))
	}
	nl := pc.leader(rest)

	// Inside the cut-off leader's namespace: neither a write nor a read is answered.
	inside := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, "ip", append([]string{"netns", "exec", hosts.ns[l], pc.bin}, args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := inside("send", "jobs", "stale-write", "--server", urls[l]); err == nil {
		t.Fatalf("the cut-off leader acknowledged a send:\n%s", out)
	} else if !strings.Contains(out, "unavailable") {
		// Quorum lost: a 503 with Retry-After, which clients and SDKs retry.
		t.Fatalf("the cut-off leader refused a send other than as unavailable: %v:\n%s", err, out)
	} else {
		t.Logf("send on the cut-off leader: %v: %s", err, strings.TrimSpace(out))
	}
	if out, err := inside("stats", "--server", urls[l]); err == nil {
		t.Fatalf("the cut-off leader answered a read the majority has moved past:\n%s", out)
	}

	hosts.cut(l, false)
	testkit.Eventually(t, 20*time.Second, func() bool {
		h, ok := pc.health(l)
		return ok && h.Cluster.Role == "follower"
	}, "the old leader to follow once healed")
	send(all, "after-00")
	if got := pc.leader([]int{0, 1, 2}); got == l && nl != l {
		t.Logf("the old leader leads again (an election after the heal)")
	}

	seen := map[string]int{}
	for len(seen) < len(acked) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msgs, err := all.Receive(rctx, "jobs", client.ReceiveOptions{Max: 100, Wait: new(time.Second)})
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(msgs) == 0 {
			break
		}
		var receipts []string
		for _, m := range msgs {
			seen[string(m.Body)]++
			receipts = append(receipts, m.Receipt)
		}
		if _, err := all.Ack(ctx, "jobs", receipts...); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	var lost []string
	for body := range acked {
		if seen[body] == 0 {
			lost = append(lost, body)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 || seen["stale-write"] > 0 {
		t.Fatalf("acknowledged %d, lost %v; the cut-off leader's write delivered %d times", len(acked), lost, seen["stale-write"])
	}
	t.Logf("partition: %d acknowledged sends, 0 lost", len(acked))
}
