//go:build torture

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// TestClusterTorture is `make torture-cluster`: a cluster of three processes under a
// steady load of sends and receives, through OKIBA_CLUSTER_CYCLES (default 200) fault
// cycles — the leader killed with SIGKILL (50 %), a follower killed (20 %), the leader
// paused with SIGSTOP past an election timeout (10 %), and, as root, where the nodes run
// in network namespaces of their own, the leader (10 %) or a follower (10 %) cut off by a
// real partition for 1.5–3 s (without root those cycles are pauses too); each node
// brought back after — within 30 minutes. Then everything is drained and the history checked: every send
// acknowledged is delivered (lost: 0), nothing is delivered that was never sent
// (unexpected: 0), and no acknowledged ack is followed by a delivery of its message
// (resurrected: 0); duplicates before an ack are at-least-once's and counted. It reports
// the failover time (from a leader's kill to the first acknowledged send after it) at
// the median and the maximum. OKIBA_CLUSTER_SEED replays a run's choice of faults.
func TestClusterTorture(t *testing.T) {
	cycles := 200
	if v, err := strconv.Atoi(os.Getenv("OKIBA_CLUSTER_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("OKIBA_CLUSTER_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (OKIBA_CLUSTER_SEED replays it), %d cycles", seed, cycles)
	rng := rand.New(rand.NewPCG(seed, seed))
	deadline := time.Now().Add(30 * time.Minute)

	// As root the nodes run in network namespaces of their own, so that a fault may be a
	// real partition; otherwise on loopback, with kills and pauses only.
	var hosts *netnsHosts
	var pc *procCluster
	if os.Geteuid() == 0 {
		hosts = newNetnsHosts(t, 3)
		pc = newNetnsCluster(t, hosts)
	} else {
		t.Log("not root: no partitions, only kills and pauses")
		pc = newProcCluster(t, 3)
	}
	var urls []string
	for i := range pc.addrs {
		urls = append(urls, pc.url(i))
	}
	newClient := func() *client.Client {
		c, err := client.New(urls[0], client.Options{Servers: urls[1:], FailoverTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()
	admin := newClient()
	if _, err := admin.PutQueue(ctx, "torture", api.QueueConfig{VisibilityTimeout: api.Ptr(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	attempted, acked := map[string]bool{}, map[string]bool{}
	delivered := map[string]int{}
	settled := map[string]bool{} // acks acknowledged
	var resurrected []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sendErrs atomic.Int64
	for w := range 4 {
		c := newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("w%d-%06d", w, i)
				mu.Lock()
				attempted[body] = true
				mu.Unlock()
				if _, err := c.Send(ctx, "torture", client.Message{Body: []byte(body)}); err != nil {
					sendErrs.Add(1)
					continue
				}
				mu.Lock()
				acked[body] = true
				mu.Unlock()
			}
		}()
	}
	consumerStop := make(chan struct{})
	var cwg sync.WaitGroup
	for range 2 {
		c := newClient()
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				select {
				case <-consumerStop:
					return
				default:
				}
				ms, err := c.Receive(ctx, "torture", client.ReceiveOptions{Max: 10})
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var rs []string
				mu.Lock()
				for _, m := range ms {
					b := string(m.Body)
					delivered[b]++
					if settled[b] {
						resurrected = append(resurrected, b)
					}
					rs = append(rs, m.Receipt)
				}
				mu.Unlock()
				errs, err := c.Ack(ctx, "torture", rs...)
				if err != nil {
					continue // the lease runs out, the message comes again
				}
				mu.Lock()
				for i, e := range errs {
					if e == nil {
						settled[string(ms[i].Body)] = true
					}
				}
				mu.Unlock()
			}
		}()
	}

	probe := newClient()
	var failovers []time.Duration
	kills, followerKills, pauses, partitions := 0, 0, 0, 0
	for cycle := 1; cycle <= cycles && time.Now().Before(deadline); cycle++ {
		all := []int{0, 1, 2}
		l := pc.leader(all)
		switch r := rng.IntN(10); {
		case r >= 8 && hosts != nil:
			// The leader or a follower cut off by the network past an election timeout,
			// then healed.
			partitions++
			n := l
			if r == 9 {
				n = all[(slices.Index(all, l)+1+rng.IntN(2))%3]
			}
			hosts.cut(n, true)
			time.Sleep(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
			hosts.cut(n, false)
		case r < 5:
			kills++
			pc.kill(l)
			began := time.Now()
			if _, err := probe.Send(ctx, "torture", client.Message{Body: []byte(fmt.Sprintf("probe-%d", cycle)), DedupID: fmt.Sprintf("probe-%d", cycle)}); err != nil {
				t.Fatalf("cycle %d: no send after the leader's kill: %v", cycle, err)
			}
			failovers = append(failovers, time.Since(began))
			mu.Lock()
			attempted[fmt.Sprintf("probe-%d", cycle)], acked[fmt.Sprintf("probe-%d", cycle)] = true, true
			mu.Unlock()
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			pc.start(l)
		case r < 7:
			followerKills++
			f := all[(slices.Index(all, l)+1+rng.IntN(2))%3]
			pc.kill(f)
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			pc.start(f)
		default:
			pauses++
			if err := pc.procs[l].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(2000+rng.IntN(1000)) * time.Millisecond)
			if err := pc.procs[l].cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		// Every node follows again before the next fault: a fault never lands on a
		// cluster still short of a majority.
		for _, i := range all {
			for tries := 0; ; tries++ {
				if h, ok := pc.health(i); ok && h.Cluster.Role != "no_leader" {
					break
				}
				if tries > 200 {
					h, _ := pc.health(i)
					t.Fatalf("cycle %d: node %d does not rejoin (health %+v); its log:\n%s", cycle, i+1, h.Cluster, lastLines(pc.procs[i].log.String(), 60))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	close(stop)
	wg.Wait()
	// Drain: until the queue is empty, then the consumers stop.
	drainBy := time.Now().Add(2 * time.Minute)
	for {
		q, err := admin.Queue(ctx, "torture")
		if err == nil && q.Stats.Ready+q.Stats.Delayed+q.Stats.InFlight == 0 {
			break
		}
		if time.Now().After(drainBy) {
			t.Fatalf("not drained within 2 minutes: %+v %v", q.Stats, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(consumerStop)
	cwg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var lost, unexpected []string
	dups := 0
	for b := range acked {
		if delivered[b] == 0 {
			lost = append(lost, b)
		}
	}
	for b, n := range delivered {
		if !attempted[b] {
			unexpected = append(unexpected, b)
		}
		dups += n - 1
	}
	slices.Sort(lost)
	slices.Sort(failovers)
	p50, worst := time.Duration(0), time.Duration(0)
	if len(failovers) > 0 {
		p50, worst = failovers[len(failovers)/2], failovers[len(failovers)-1]
	}
	t.Logf("cycles: %d leader kills, %d follower kills, %d leader pauses, %d partitions; sends acknowledged %d (%d failed: unanswered, may or may not have happened), delivered %d distinct, %d redeliveries",
		kills, followerKills, pauses, partitions, len(acked), sendErrs.Load(), len(delivered), dups)
	t.Logf("acknowledged lost: %d; unexpected: %d; resurrected: %d; failover p50 %v, max %v over %d kills",
		len(lost), len(unexpected), len(resurrected), p50, worst, len(failovers))
	if len(lost)+len(unexpected)+len(resurrected) > 0 {
		t.Fatalf("lost %v, unexpected %v, resurrected %v", head(lost), head(unexpected), head(resurrected))
	}
}

func head(s []string) []string { return s[:min(len(s), 10)] }
