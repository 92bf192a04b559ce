package broker

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/queue"
)

// BenchmarkFairDwell is the fair-delivery benchmark of docs/benchmarks.md: on an
// unordered queue, tenant A keeps a backlog of 100,000 messages (its producer sends back
// as many as the consumer acked), one consumer drains it steadily (receive up to 10, ack
// them in one call), and tenant B sends 10 messages a second. It reports B's dwell — its
// send call's start to the answer of the receive that leased it — at the median and
// p99 over -fair.samples of B's messages (default 200), beside the consumer's median interval between receives
// and its median ack (one commit).
//
// "fair": the messages carry their tenant as their group, so fair delivery serves B
// before A's backlog. "arrival": the same load without groups, which is arrival order —
// what every unordered queue did before fair delivery, and still what messages without
// a group get — so B waits behind A's whole backlog.
//
// "absent": B alone, with A's backlog absent and the same consumer — the measure
// is B's p99 with A's backlog against B's p99 without it.
// fairSamples is how many of B's messages one case measures: its p99 is the largest of
// them below 100, so the default of 200 makes the p99 the 3rd largest, not the maximum.
var fairSamples = flag.Int("fair.samples", 200, "BenchmarkFairDwell: B's messages measured per case")

func BenchmarkFairDwell(b *testing.B) {
	for _, mode := range []string{"arrival", "fair", "absent"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				fairDwell(b, mode != "arrival", mode == "absent")
			}
		})
	}
}

func fairDwell(b *testing.B, grouped, absent bool) {
	backlog := 100_000
	if absent {
		backlog = 0
	}
	samples := *fairSamples
	const bEvery = 100 * time.Millisecond // B's 10 messages a second
	b.StopTimer()
	br, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if _, _, err := br.PutQueue(ctx, "tenants", func(c *queue.Config, _ bool) error {
		c.OrderedGroups = false
		c.DeadLetterQueue, c.MaxDeliveries = queue.NoDeadLetterQueue, 0
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	group := func(tenant string) string {
		if grouped {
			return tenant
		}
		return ""
	}
	sendA := func(n int) {
		in := make([]queue.SendInput, n)
		for i := range in {
			in[i] = queue.SendInput{Payload: queue.Payload{Body: []byte("A"), Group: group("A")}, Delay: -1}
		}
		if _, err := br.Send(ctx, "tenants", in); err != nil {
			b.Error(err)
		}
	}
	for sent := 0; sent < backlog; sent += 1000 {
		sendA(1000)
	}
	b.StartTimer()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // tenant B
		defer wg.Done()
		t := time.NewTicker(bEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			body := "B " + strconv.FormatInt(time.Now().UnixNano(), 10)
			in := []queue.SendInput{{Payload: queue.Payload{Body: []byte(body), Group: group("B")}, Delay: -1}}
			if _, err := br.Send(ctx, "tenants", in); err != nil {
				b.Error(err)
				return
			}
		}
	}()

	var dwell, intervals, commits []time.Duration
	last := time.Time{}
	for len(dwell) < samples && !b.Failed() {
		start := time.Now()
		if !last.IsZero() {
			intervals = append(intervals, start.Sub(last))
		}
		last = start
		ms, err := br.Receive(ctx, "tenants", ReceiveOptions{Max: 10, Visibility: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		leased := time.Now()
		receipts := make([]string, len(ms))
		as := 0
		for i, m := range ms {
			receipts[i] = m.Receipt
			if sent, ok := strings.CutPrefix(string(m.Payload.Body), "B "); ok {
				ns, _ := strconv.ParseInt(sent, 10, 64)
				dwell = append(dwell, leased.Sub(time.Unix(0, ns)))
			} else {
				as++
			}
		}
		if len(receipts) > 0 {
			t := time.Now()
			if _, err := br.Ack(ctx, "tenants", receipts); err != nil {
				b.Fatal(err)
			}
			commits = append(commits, time.Since(t))
		}
		if as > 0 {
			sendA(as)
		}
	}
	close(done)
	wg.Wait()
	b.StopTimer()
	pct := func(xs []time.Duration, p int) float64 {
		slices.Sort(xs)
		return float64(xs[(len(xs)-1)*p/100].Microseconds()) / 1000
	}
	b.ReportMetric(pct(dwell, 50), "B-dwell-p50-ms")
	b.ReportMetric(pct(dwell, 99), "B-dwell-p99-ms")
	b.ReportMetric(pct(intervals, 50), "receive-interval-p50-ms")
	b.ReportMetric(pct(intervals, 99), "receive-interval-p99-ms")
	b.ReportMetric(pct(intervals, 100), "receive-interval-max-ms")
	var sum time.Duration
	for _, d := range intervals {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(intervals))/1000, "receive-interval-mean-ms")
	b.ReportMetric(pct(commits, 50), "commit-p50-ms")
	b.StartTimer()
}
