package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// TestClusterBinary runs a cluster of three real okiba processes on loopback, kills its
// leader with SIGKILL twice (each restarted after) and pauses the third with SIGSTOP
// past an election timeout, then resumes it (which must answer nothing stale), and has a
// fourth node join (through a follower), be promoted and removed: every send
// acknowledged before a kill is delivered after it, a receipt handed out by a killed
// leader settles its lease on the next, a restarted node catches up, and every node
// forwards to the leader. A client given every node's URL rides through both kills with
// no retry of its caller's; the test reports the failover time: from the kill to that
// client's first acknowledged send.
func TestClusterBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: builds the okiba binary and runs a cluster of processes: runs in its own tier (make binary), not with -short")
	}
	pc := newProcCluster(t, 3)
	addrs, procs, start, kill, health, leader := pc.addrs, pc.procs, pc.start, pc.kill, pc.health, pc.leader
	ctx := context.Background()
	clients := make([]*client.Client, 3)
	for i := range 3 {
		c, err := client.New("http://"+addrs[i], client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	// retry rides through an election: 503s until a leader takes commands, and a call
	// on a connection the kill broke (which may or may not have happened: a retried send
	// may be delivered twice, as at-least-once allows).
	retry := func(what string, fn func() error) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			err := fn()
			if err == nil {
				return time.Since(start)
			}
			var e *api.Error
			if time.Since(start) > 20*time.Second || !(errors.As(err, &e) && e.Code == api.CodeUnavailable || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "stream broken")) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	acked := map[string]bool{}
	send := func(c *client.Client, body string) {
		retry("send "+body, func() error {
			_, err := c.Send(ctx, "jobs", client.Message{Body: []byte(body)})
			return err
		})
		acked[body] = true
	}

	l := leader([]int{0, 1, 2})
	follower := (l + 1) % 3
	retry("create the queue", func() error {
		_, err := clients[follower].PutQueue(ctx, "jobs", api.QueueConfig{})
		return err
	})
	for i := range 100 {
		send(clients[i%3], fmt.Sprintf("before-%03d", i)) // through every node: followers forward
	}
	scrape := func(i int) string {
		resp, err := http.Get("http://" + addrs[i] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := scrape(l); !strings.Contains(m, "okiba_cluster_leader 1") || !strings.Contains(m, `okiba_cluster_replication_lag_entries{peer="n`) {
		t.Fatalf("the leader's metrics lack its role or its followers' lag:\n%s", grepLines(m, "okiba_cluster_"))
	}
	// The 100 sends, one at a time, and the queue: at least 101 commands, in at most as
	// many entries, counted by the nodes that led meanwhile (summed: a slow machine may
	// have held an election).
	var cmds, ents float64
	for i := range addrs {
		cmds += metric(t, http.DefaultClient, "http://"+addrs[i], "okiba_cluster_proposed_commands_total")
		ents += metric(t, http.DefaultClient, "http://"+addrs[i], "okiba_cluster_proposed_entries_total")
	}
	if cmds < 101 || ents < 1 || ents > cmds {
		t.Fatalf("the nodes count %v commands proposed in %v entries after 101 commands", cmds, ents)
	}
	if m := scrape(follower); !strings.Contains(m, "okiba_cluster_leader 0") || !strings.Contains(m, "okiba_cluster_has_leader 1") {
		t.Fatalf("a follower's metrics:\n%s", grepLines(m, "okiba_cluster_"))
	}
	if out, err := exec.Command(pc.bin, "cluster", "status", "--server", pc.url(follower)).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "(follower)") || !strings.Contains(string(out), fmt.Sprintf("leader   n%d", l+1)) {
		t.Fatalf("okiba cluster status on a follower: %v\n%s", err, out)
	}
	leased, err := clients[follower].Receive(ctx, "jobs", client.ReceiveOptions{Max: 10})
	if err != nil || len(leased) != 10 {
		t.Fatalf("receive through a follower: %d, %v", len(leased), err)
	}
	// A stale read is the follower's own, at the index it has applied; once it has
	// applied the receive, it shows the leases.
	testkit.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(pc.url(follower) + "/v1/queues/jobs?stale=true")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var q api.Queue
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Okiba-Stale") != "true" || resp.Header.Get("Okiba-Applied") == "" ||
			json.NewDecoder(resp.Body).Decode(&q) != nil {
			t.Fatalf("a stale read on a follower: %d, headers %v", resp.StatusCode, resp.Header)
		}
		return q.Stats.InFlight == 10
	}, "the follower's stale read to show the ten leases")
	if resp, err := http.Get(pc.url(follower) + "/v1/queues/jobs?stale=maybe"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("stale=maybe: %v %v", resp, err)
	}
	// The console reached through a follower: made by the leader, it says so.
	if resp, err := http.Get(pc.url(follower) + "/"); err != nil {
		t.Fatal(err)
	} else {
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := []string{fmt.Sprintf("via <strong>n%d</strong>", follower+1), fmt.Sprintf(`node <strong id="cluster-node">n%d</strong> (<span id="cluster-role">leader</span>)`, l+1), "3 members: n1, n2, n3", "id=\"cluster-lag\""}
		for _, w := range want {
			if !strings.Contains(string(page), w) {
				t.Fatalf("the console through a follower lacks %q:\n%s", w, grepLines(string(page), "cluster"))
			}
		}
	}

	var failovers []time.Duration
	// A client given every node, calling the leader, rides through its death by itself.
	var urls []string
	for i := range 3 {
		urls = append(urls, "http://"+addrs[(l+i)%3])
	}
	fc, err := client.New(urls[0], client.Options{Servers: urls[1:]})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if _, err := fc.Send(ctx, "jobs", client.Message{Body: []byte("before-kill")}); err != nil {
		t.Fatal(err)
	}
	acked["before-kill"] = true
	alive := kill(l)
	began := time.Now()
	if _, err := fc.Send(ctx, "jobs", client.Message{Body: []byte("after-kill-1")}); err != nil {
		t.Fatalf("the failover client's first send after the kill: %v", err)
	}
	acked["after-kill-1"] = true
	failovers = append(failovers, time.Since(began))
	var receipts []string
	for _, m := range leased {
		receipts = append(receipts, m.Receipt)
	}
	retry("ack the killed leader's receipts", func() error {
		res, err := clients[alive[1]].Ack(ctx, "jobs", receipts...)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				t.Fatalf("ack of a receipt from the killed leader: %v", e)
			}
		}
		return nil
	})
	for _, m := range leased {
		delete(acked, string(m.Body)) // settled: never delivered again
	}

	// The killed node comes back and catches up; then the current leader is killed.
	start(l)
	testkit.Eventually(t, 20*time.Second, func() bool {
		h, ok := health(l)
		hl, okl := health(leader(alive))
		return ok && okl && h.Cluster.Role == "follower" && h.Cluster.Applied >= hl.Cluster.Commit
	}, "the restarted node to catch up")
	for i := range 20 {
		send(clients[l], fmt.Sprintf("between-%03d", i))
	}
	l2 := leader(alive)
	alive = kill(l2)
	began = time.Now()
	if _, err := fc.Send(ctx, "jobs", client.Message{Body: []byte("after-kill-2")}); err != nil {
		t.Fatalf("the failover client's first send after the second kill: %v", err)
	}
	acked["after-kill-2"] = true
	failovers = append(failovers, time.Since(began))

	// The killed node comes back; then the leader is paused (SIGSTOP) for longer than an
	// election timeout, the others elect another and take a send, and the paused one is
	// resumed: it must not answer from what it held as leader. A read through it right
	// after it resumes either fails or sees the send made while it was paused.
	start(l2)
	testkit.Eventually(t, 20*time.Second, func() bool {
		h, ok := health(l2)
		return ok && h.Cluster.Role == "follower"
	}, "the node killed second to follow")
	all := []int{0, 1, 2}
	paused := leader(all)
	if err := procs[paused].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var others []int
	for _, i := range all {
		if i != paused {
			others = append(others, i)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	leader(others)
	if _, err := fc.Send(ctx, "jobs", client.Message{Body: []byte("during-pause")}); err != nil {
		t.Fatalf("a send while the leader is paused: %v", err)
	}
	acked["during-pause"] = true
	if err := procs[paused].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	page, err := clients[paused].Peek(ctx, "jobs", client.PeekOptions{Limit: 1000})
	if err == nil {
		seen := false
		for _, m := range page.Messages {
			seen = seen || m.Body != nil && *m.Body == "during-pause"
		}
		if !seen {
			t.Fatal("the resumed, deposed leader answered a read without the send made while it was paused")
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		h, ok := health(paused)
		return ok && h.Cluster.Role == "follower"
	}, "the resumed leader to follow")

	// A fourth node joins through a follower, catches up and is promoted; then it is
	// removed again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr4 := ln.Addr().String()
	ln.Close()
	follower = (pc.leader([]int{0, 1, 2}) + 1) % 3
	n4 := startBinary(t, pc.bin, cleanEnv(), "serve", "--node", "n4", "--peers", "n4=http://"+addr4, "--join", pc.url(follower),
		"--cluster-secret-file", pc.secret, "--addr", addr4, "--data", filepath.Join(pc.dir, "data4"))
	testkit.Eventually(t, 20*time.Second, func() bool {
		ms, err := clients[follower].ClusterMembers(ctx)
		return err == nil && len(ms) == 4 && slices.ContainsFunc(ms, func(m api.ClusterMember) bool { return m.Name == "n4" && !m.Learner })
	}, "n4 to join and be promoted")
	if out, err := exec.Command(pc.bin, "cluster", "remove", "n4", "--server", pc.url(follower)).CombinedOutput(); err != nil || strings.Contains(string(out), "n4") {
		t.Fatalf("okiba cluster remove n4: %v\n%s", err, out)
	}
	n4.cmd.Process.Kill()
	n4.cmd.Wait()

	got := map[string]int{}
	for {
		var ms []client.Delivery
		retry("drain", func() error {
			var err error
			ms, err = clients[alive[0]].Receive(ctx, "jobs", client.ReceiveOptions{Max: 100})
			return err
		})
		if len(ms) == 0 {
			break
		}
		var rs []string
		for _, m := range ms {
			got[string(m.Body)]++
			rs = append(rs, m.Receipt)
		}
		retry("ack", func() error { _, err := clients[alive[1]].Ack(ctx, "jobs", rs...); return err })
	}
	var lost, extra []string
	for body := range acked {
		if got[body] == 0 {
			lost = append(lost, body)
		}
	}
	for body := range got {
		if !acked[body] {
			extra = append(extra, body)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 || len(extra) > 0 {
		t.Fatalf("%d acknowledged messages lost %v; %d delivered that were settled or never sent %v", len(lost), lost, len(extra), extra)
	}
	t.Logf("%d acknowledged messages all delivered after two leader kills, a paused leader and a member joining and leaving; failover (kill to first acknowledged send): %v", len(acked), failovers)

	// A graceful stop of the leader hands the lead over and ends the other members' raft
	// streams into it at once: it does not wait out its 30 s grace period on them.
	l = pc.leader([]int{0, 1, 2})
	stopAt := time.Now()
	if code, log := pc.procs[l].stop(t); code != 0 {
		t.Fatalf("the leader's graceful stop exited %d:\n%s", code, log)
	}
	if d := time.Since(stopAt); d > 10*time.Second {
		t.Fatalf("the leader's graceful stop took %v", d)
	} else {
		t.Logf("the leader's graceful stop took %v", d.Round(time.Millisecond))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
