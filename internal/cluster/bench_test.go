package cluster

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

// cpu is the process's user and system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSends sends b.N one-message requests from 64 goroutines and reports messages a
// second and the CPU each took (of this process: for the cluster, all three brokers).
func benchSends(b *testing.B, br *broker.Broker) {
	body := make([]byte, 256)
	in := []queue.SendInput{{Payload: queue.Payload{Body: body}, Delay: -1}}
	benchRequests(b, br, 32, in) // × GOMAXPROCS senders, as many clients would
}

// benchBatches sends b.N requests of 64 messages of 1 KiB from 16 goroutines (the load
// of okibabench's publish cell, without HTTP), reporting as benchSends does.
func benchBatches(b *testing.B, br *broker.Broker) {
	in := make([]queue.SendInput, 64)
	for i := range in {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: make([]byte, 1024)}, Delay: -1}
	}
	benchRequests(b, br, 8, in)
}

// benchRequests sends b.N requests of in from parallelism × GOMAXPROCS goroutines into
// a queue of its own and reports messages a second and the CPU each took.
func benchRequests(b *testing.B, br *broker.Broker, parallelism int, in []queue.SendInput) {
	if _, _, err := br.PutQueue(context.Background(), "bench", func(*queue.Config, bool) error { return nil }); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(parallelism)
	c0, t0 := cpu(), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := br.Send(context.Background(), "bench", in)
			if err == nil {
				for _, r := range res {
					if r.Err != nil {
						err = r.Err
						break
					}
				}
			}
			if err != nil {
				b.Error(err)
				return
			}
			n.Add(int64(len(in)))
		}
	})
	b.StopTimer()
	el, c := time.Since(t0), cpu()-c0
	b.ReportMetric(float64(n.Load())/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(c.Microseconds())/float64(n.Load()), "cpu-µs/msg")
}

// BenchmarkSendSingleNode: one broker, its own log.
func BenchmarkSendSingleNode(b *testing.B) { benchSends(b, singleNode(b)) }

// singleNode opens a broker of its own log, closed when b ends.
func singleNode(b *testing.B) *broker.Broker {
	br, err := broker.Open(broker.Config{Dir: filepath.Join(b.TempDir(), "single")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	return br
}

// BenchmarkSendCluster3: the leader of three brokers in this process, each with its own
// data directory, raft between them over loopback HTTP; each answer waits for a
// majority's fsync.
//
// Beside the rate it reports the fsyncs and the log bytes of the three nodes per
// message: every log a node writes (its broker's, and a raft log of its own where the
// node keeps one in raft/wal).
func BenchmarkSendCluster3(b *testing.B) {
	c := newClusterTB(b, 3)
	l := c.leader()
	before := l.raft.Status()
	s0, w0 := c.logWork()
	benchSends(b, l.b)
	// The status is noted at the end of run's round: the last answers' may still be due.
	after := l.raft.Status()
	if p := after.Proposed - before.Proposed; p > 0 {
		b.ReportMetric(float64(after.Commands-before.Commands)/float64(p), "cmds/entry")
	}
	s1, w1 := c.logWork()
	b.ReportMetric(float64(s1-s0)/float64(b.N), "fsyncs/msg")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "log-B/msg")
}

// BenchmarkSendBatchesSingleNode and BenchmarkSendBatchesCluster3: benchBatches on one
// broker, and on the leader of three (as BenchmarkSendCluster3), which also reports the
// log bytes the three nodes wrote per message.
func BenchmarkSendBatchesSingleNode(b *testing.B) { benchBatches(b, singleNode(b)) }

func BenchmarkSendBatchesCluster3(b *testing.B) {
	c := newClusterTB(b, 3)
	l := c.leader()
	_, w0 := c.logWork()
	benchBatches(b, l.b)
	_, w1 := c.logWork()
	b.ReportMetric(float64(w1-w0)/float64(b.N*64), "log-B/msg")
}

// logWork sums the fsyncs and the bytes of every node's logs.
func (c *testCluster) logWork() (syncs, bytes uint64) {
	for _, m := range c.nodes {
		st := m.b.LogStats()
		syncs, bytes = syncs+st.Syncs, bytes+st.Bytes
		if _, err := os.Stat(filepath.Join(m.dir, "raft", "wal")); err == nil {
			st := m.raft.storage.Log().Stats()
			syncs, bytes = syncs+st.Syncs, bytes+st.Bytes
		}
	}
	return syncs, bytes
}
