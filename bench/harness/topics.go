package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The topic scenarios. Each runs "lanes" — one (cell, system) pair each, so that a
// queue and a log of the same system are lanes of their own — and every repeat runs
// all lanes in a rotated order, so that drift on a shared machine hits them alike.
//
//	t1  publish at TopicProducers × TopicWindow into a queue and into a log
//	t2  fill TopicCount records, then drain: queue receive + ack, or group read + commit
//	t3  fill TopicCount records into a log with 0, 1 and 10 subscriptions (write_bytes
//	    per publish, publish rate), then drain the subscribed queues
//	t4  fill ColdCount records into one partition, drop the page cache, dd its segment
//	    files; drop it again, then a new group reads it from offset 0 (MB/s, RssAnon)

type lane struct {
	cell Cell
	sys  System
}

func (r *Runner) topicCells(s string) []Cell {
	c := r.Cfg
	size := c.TopicSize
	var out []Cell
	switch s {
	case "t1":
		for _, t := range []string{"queue", "log"} {
			out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("%s-p%d-w%d-%s", t, c.TopicProducers, c.TopicWindow, SizeName(size)),
				Size: size, Producers: c.TopicProducers, Window: c.TopicWindow, Target: t})
		}
	case "t2":
		for _, t := range []string{"queue", "log"} {
			kind := map[string]string{"queue": "queue", "log": "group"}[t]
			out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("%s-%dc-%s-%s", kind, c.TopicConsumers, countName(c.TopicCount), SizeName(size)),
				Size: size, Producers: 4, Window: 256, Consumers: c.TopicConsumers, Prefetch: c.TopicPrefetch, Count: c.TopicCount, Target: t})
		}
	case "t3":
		for _, n := range c.FanoutSubs {
			out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("subs%d-%s-%s", n, countName(c.TopicCount), SizeName(size)),
				Size: size, Producers: c.TopicProducers, Window: c.TopicWindow, Consumers: 10, Prefetch: c.TopicPrefetch,
				Count: c.TopicCount, Target: "log", Subs: n})
		}
	case "t4":
		out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("cold-%s-%s", countName(c.ColdCount), SizeName(size)),
			Size: size, Producers: 4, Window: 256, Consumers: 1, Prefetch: 10000, Count: c.ColdCount, Target: "log"})
	}
	return out
}

// logCapable reports whether sys offers the topic seam.
func logCapable(sys System) (LogSystem, bool) {
	ls, ok := sys.(LogSystem)
	return ls, ok && sys.Info().Caps.Log
}

func (r *Runner) topicLanes(s string) ([]lane, []Result) {
	var lanes []lane
	var skipped []Result
	for _, c := range r.topicCells(s) {
		for _, sys := range r.Systems {
			info := sys.Info()
			_, isLog := logCapable(sys)
			why := ""
			switch {
			case !isLog:
				why = "no retained log with consumer groups in this harness"
			case c.Target == "queue" && info.Peer != "okiba":
				why = "the queue side is okiba's own (its peers' queues are in s2, s3, s5)"
			case s == "t3":
				if _, ok := sys.(FanoutLog); !ok {
					why = "no subscriptions into queues"
				}
			case s == "t4":
				if _, ok := sys.(SegmentFilerLog); !ok {
					why = "its log's files are not the harness's to name"
				}
			}
			if why != "" {
				skipped = append(skipped, Result{Cell: c, System: info.Name, Skipped: why})
				continue
			}
			lanes = append(lanes, lane{c, sys})
		}
	}
	return lanes, skipped
}

// FanoutLog and SegmentFilerLog mark systems whose logs implement Fanout and
// SegmentFiler, so that lanes are chosen before any log is made.
type FanoutLog interface{ LogFanout() }
type SegmentFilerLog interface{ LogSegmentFiles() }

func (r *Runner) runTopics(ctx context.Context, s string) error {
	lanes, skipped := r.topicLanes(s)
	r.Logf("scenario %s: %s (%d lanes)", s, ScenarioTitle(s), len(lanes))
	for _, res := range skipped {
		r.add(res)
	}
	repeats := max(r.Cfg.Repeats, 1)
	if s == "t4" {
		repeats = max(r.Cfg.BacklogRepeats, 1)
	}
	var errs []error
	for rep := 0; rep < repeats; rep++ {
		for i := range lanes {
			if ctx.Err() != nil {
				return errors.Join(errs...)
			}
			l := lanes[(i+rep)%len(lanes)]
			res := r.runLane(ctx, l, rep+1)
			r.add(res)
			if res.FirstError != "" && res.Rate == 0 {
				errs = append(errs, fmt.Errorf("%s %s on %s: %s", s, l.cell.Name, res.System, res.FirstError))
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) runLane(ctx context.Context, l lane, rep int) (res Result) {
	c, sys := l.cell, l.sys
	res = Result{Cell: c, System: sys.Info().Name, Repeat: rep, Extra: map[string]float64{}}
	defer func() {
		if p := recover(); p != nil {
			res.FirstError = fmt.Sprintf("panic: %v", p)
		}
	}()
	name := queueName(c.Scenario)
	var q Queue
	var lg Log
	if c.Target == "queue" {
		var err error
		if q, err = sys.NewQueue(ctx, QueueSpec{Name: name, Visibility: 30 * time.Second}); err != nil {
			res.FirstError = "new queue: " + err.Error()
			return res
		}
	} else {
		ls, _ := logCapable(sys)
		parts := r.Cfg.TopicPartitions
		if c.Scenario == "t4" {
			parts = 1
		}
		var err error
		if lg, err = ls.NewLog(ctx, LogSpec{Name: name, Partitions: max(parts, 1)}); err != nil {
			res.FirstError = "new log: " + err.Error()
			return res
		}
		q = logQueue{lg}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := q.Delete(dctx); err != nil {
			r.Logf("  %s: delete %s: %v", res.System, name, err)
		}
	}()
	switch c.Scenario {
	case "t1":
		r.steadyCell(ctx, sys, q, c, &res)
	case "t2":
		r.prefilledDrain(ctx, sys, q, lg, c, &res)
	case "t3":
		r.fanout(ctx, sys, lg, c, &res)
	case "t4":
		r.coldRead(ctx, sys, lg, c, &res)
	}
	return res
}

// seen counts distinct stamped records (a record handed again after a rebalance, or
// a message delivered twice, counts once).
type seen struct {
	bits []atomic.Uint32
	n    atomic.Int64
	max  uint64
}

func newSeen(n int) *seen { return &seen{bits: make([]atomic.Uint32, n/32+1), max: uint64(n)} }

// add marks the records of ds and returns how many were new.
func (s *seen) add(ds []Delivery) int64 {
	var fresh int64
	for _, d := range ds {
		_, seq, ok := ReadStamp(d.Body)
		if !ok || seq == 0 || seq > s.max {
			continue
		}
		bit := uint32(1) << (seq % 32)
		if s.bits[seq/32].Or(bit)&bit == 0 {
			fresh++
		}
	}
	s.n.Add(fresh)
	return fresh
}

// drainAll runs the consumers until every one of n distinct records was acked
// (committed), nothing came for 20 polls in a row on every consumer, or capDur passed.
// It returns the distinct records acked, the deliveries acked and the failed calls.
func drainAll(ctx context.Context, cons []Consumer, prefetch int, n int64, sn *seen, capDur time.Duration, tick func(done int64)) (int64, int64, int64) {
	dctx, cancel := context.WithTimeout(ctx, capDur)
	defer cancel()
	var wg sync.WaitGroup
	var deliveries, errs atomic.Int64
	for _, cn := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			empty := 0
			for dctx.Err() == nil && sn.n.Load() < n {
				ds, err := cn.Receive(dctx, prefetch)
				if err != nil {
					if dctx.Err() == nil {
						errs.Add(1)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if len(ds) == 0 {
					if empty++; empty > 20 {
						return
					}
					continue
				}
				empty = 0
				if err := cn.Ack(dctx, ds); err != nil {
					if dctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				deliveries.Add(int64(len(ds)))
				if sn.add(ds); sn.n.Load() >= n {
					cancel()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return sn.n.Load(), deliveries.Load(), errs.Load()
		case <-t.C:
			if tick != nil {
				tick(sn.n.Load())
			}
		}
	}
}

func closeAll(cons []Consumer) error {
	var errs []error
	for _, c := range cons {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// prefilledDrain is t2: fill c.Count records, then drain them with c.Consumers (queue
// consumers, or members of a new group that starts at the first record).
func (r *Runner) prefilledDrain(ctx context.Context, sys System, q Queue, lg Log, c Cell, res *Result) {
	var series []Point
	n, el, err := r.fill(ctx, sys, q, c, r.Cfg.BacklogPhaseCap, &series, nil)
	res.PublishRate = float64(n) / el.Seconds()
	res.Extra["filled"] = float64(n)
	if err != nil {
		res.FirstError = "fill: " + err.Error()
	}
	if n == 0 || ctx.Err() != nil {
		return
	}
	if n < int64(c.Count) {
		res.Note = fmt.Sprintf("fill stopped at the %v cap with %d of %d records", r.Cfg.BacklogPhaseCap, n, c.Count)
	}
	group := "bench"
	if lg != nil {
		if err := lg.NewGroup(ctx, group); err != nil {
			res.FirstError = "new group: " + err.Error()
			return
		}
	}
	var cons []Consumer
	for i := 0; i < c.Consumers; i++ {
		var cn Consumer
		var err error
		if lg != nil {
			cn, err = lg.NewMember(ctx, group, i, ConsumerOptions{Prefetch: c.Prefetch})
		} else {
			cn, err = q.NewConsumer(ctx, ConsumerOptions{Prefetch: c.Prefetch})
		}
		if err != nil {
			closeAll(cons)
			res.FirstError = "new consumer: " + err.Error()
			return
		}
		cons = append(cons, cn)
	}
	w := r.openWindow(ctx, sys)
	stopPerf := r.perfWindow(sys, c, res)
	start := time.Now()
	sn := newSeen(int(n))
	got, deliveries, errs := drainAll(ctx, cons, c.Prefetch, n, sn, r.Cfg.BacklogPhaseCap, nil)
	del := time.Since(start)
	stopPerf()
	w.close(ctx, r, res, got)
	if err := closeAll(cons); err != nil && res.FirstError == "" {
		res.Note = strings.TrimSpace(res.Note + " close: " + err.Error())
	}
	res.ConsumeRate = float64(got) / del.Seconds()
	res.Rate = res.ConsumeRate
	res.Extra["drained"] = float64(got)
	res.Extra["deliveries"] = float64(deliveries)
	res.Extra["drain_seconds"] = del.Seconds()
	res.Extra["drain_errors"] = float64(errs)
	if got < n {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" drain stopped with %d of %d", got, n))
	}
}

// perfWindow starts perf profiles of the broker and of the harness process when the
// profiler matches the cell (--perf), and returns what stops them.
func (r *Runner) perfWindow(sys System, c Cell, res *Result) func() {
	if !r.Profile.matches(res.System, c.Name) {
		return func() {}
	}
	name := fmt.Sprintf("%s-%s-%s-%d", c.Scenario, strings.ReplaceAll(c.Name, "/", "_"), res.System, res.Repeat)
	var stops []func() (string, error)
	for _, p := range []struct {
		suffix string
		pids   []int
	}{{"-broker", sys.Pids()}, {"-client", []int{os.Getpid()}}} {
		if p.pids == nil {
			continue
		}
		if stop, err := r.Profile.start(name+p.suffix, p.pids); err != nil {
			r.Logf("  perf: %v", err)
		} else {
			stops = append(stops, stop)
		}
	}
	return func() {
		for _, stop := range stops {
			if path, err := stop(); err != nil {
				r.Logf("  perf report: %v", err)
			} else {
				r.Logf("  perf profile: %s", path)
			}
		}
	}
}

// treeWrites is the write_bytes of every process of a sample.
func treeWrites(s TreeSample) int64 {
	var n int64
	for _, u := range s.PerPid {
		n += u.WriteBytes
	}
	return n
}

// settledWrites samples the broker's write_bytes until it has not grown for a second
// (the background move of records into partition files, checkpoints), at most limit.
func settledWrites(sys System, limit time.Duration) int64 {
	last := treeWrites(SampleTree(sys.Pids()))
	stable := time.Now()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		cur := treeWrites(SampleTree(sys.Pids()))
		if cur != last {
			last, stable = cur, time.Now()
		} else if time.Since(stable) >= time.Second {
			break
		}
	}
	return last
}

// fanout is t3: a log with c.Subs subscriptions (each into its own queue), c.Count
// records published at c.Producers × c.Window (publish rate, the broker's write_bytes
// per publish during the fill and once the background work settled, the data
// directory's growth), then the queues drained by c.Consumers consumers spread over
// them (all on the one queue when there is one).
func (r *Runner) fanout(ctx context.Context, sys System, lg Log, c Cell, res *Result) {
	var queues []Queue
	if c.Subs > 0 {
		var err error
		if queues, err = lg.(Fanout).Subscribe(ctx, c.Subs); err != nil {
			res.FirstError = "subscribe: " + err.Error()
			return
		}
	}
	var dirs []string
	if d, ok := sys.(DataDirer); ok {
		dirs = d.DataDirs()
	}
	disk0 := dirsSize(dirs)
	w0 := treeWrites(SampleTree(sys.Pids()))
	w := r.openWindow(ctx, sys)
	var series []Point
	n, el, err := r.fill(ctx, sys, logQueue{lg}, c, r.Cfg.BacklogPhaseCap, &series, nil)
	w.close(ctx, r, res, n)
	res.PublishRate = float64(n) / el.Seconds()
	res.Rate = res.PublishRate
	res.Extra["published"] = float64(n)
	if err != nil {
		res.FirstError = "publish: " + err.Error()
	}
	if n == 0 || ctx.Err() != nil {
		return
	}
	settled := settledWrites(sys, 15*time.Second)
	res.Extra["write_bytes_per_publish_settled"] = float64(settled-w0) / float64(n)
	res.Extra["disk_growth_per_publish"] = float64(dirsSize(dirs)-disk0) / float64(n)
	if len(queues) == 0 {
		return
	}
	total := n * int64(len(queues))
	cons := make([]Consumer, 0, c.Consumers)
	for i := 0; i < max(c.Consumers, len(queues)); i++ {
		cn, err := queues[i%len(queues)].NewConsumer(ctx, ConsumerOptions{Prefetch: c.Prefetch})
		if err != nil {
			closeAll(cons)
			res.FirstError = "new consumer: " + err.Error()
			return
		}
		cons = append(cons, cn)
	}
	// Each queue holds one message of every record: distinct (queue, record) pairs are
	// counted by giving each queue's consumers a seen set of their own.
	stopPerf := r.perfWindow(sys, c, res)
	start := time.Now()
	var got, deliveries, errs atomic.Int64
	var wg sync.WaitGroup
	for qi := range queues {
		var mine []Consumer
		for i, cn := range cons {
			if i%len(queues) == qi {
				mine = append(mine, cn)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, d, e := drainAll(ctx, mine, c.Prefetch, n, newSeen(int(n)), r.Cfg.BacklogPhaseCap, nil)
			got.Add(g)
			deliveries.Add(d)
			errs.Add(e)
		}()
	}
	wg.Wait()
	del := time.Since(start)
	stopPerf()
	closeAll(cons)
	res.ConsumeRate = float64(got.Load()) / del.Seconds()
	res.Extra["drained"] = float64(got.Load())
	res.Extra["drain_expected"] = float64(total)
	res.Extra["drain_seconds"] = del.Seconds()
	res.Extra["drain_errors"] = float64(errs.Load())
	if got.Load() < total {
		res.Note = fmt.Sprintf("drain stopped with %d of %d messages", got.Load(), total)
	}
}

// DropCaches writes 3 to /proc/sys/vm/drop_caches after a sync (root only).
func DropCaches() error {
	exec.Command("sync").Run()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

// RssAnon is the RssAnon of a process in bytes (/proc/<pid>/status), 0 if unreadable.
func RssAnon(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func rssAnonOf(sys System) int64 {
	var n int64
	for _, p := range sys.Pids() {
		n += RssAnon(p)
	}
	return n
}

func filesSize(files []string) int64 {
	var n int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// coldRead is t4: c.Count records into a log of one partition; once its segment files
// stop growing, the page cache is dropped and dd reads the files to /dev/null; the
// cache is dropped again and a new group's one member reads the partition from offset
// 0, committing as it goes, while the broker's RssAnon is sampled.
func (r *Runner) coldRead(ctx context.Context, sys System, lg Log, c Cell, res *Result) {
	sf, ok := lg.(SegmentFiler)
	if !ok {
		res.Skipped = "no segment files"
		return
	}
	var series []Point
	n, el, err := r.fill(ctx, sys, logQueue{lg}, c, 4*r.Cfg.BacklogPhaseCap, &series, nil)
	res.PublishRate = float64(n) / el.Seconds()
	res.Extra["filled"] = float64(n)
	if err != nil {
		res.FirstError = "fill: " + err.Error()
	}
	if n == 0 || ctx.Err() != nil {
		return
	}
	// Wait for the background move into the partition's files.
	var files []string
	want := n * int64(c.Size)
	var size int64
	stable := time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; {
		files, err = sf.SegmentFiles(ctx)
		if err != nil {
			res.FirstError = "segment files: " + err.Error()
			return
		}
		cur := filesSize(files)
		if cur != size {
			size, stable = cur, time.Now()
		} else if size >= want && time.Since(stable) >= time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.Extra["segment_files"] = float64(len(files))
	res.Extra["segment_bytes"] = float64(size)
	drop := func() {
		if !r.Cfg.ColdDropCaches {
			return
		}
		if err := DropCaches(); err != nil {
			res.Note = strings.TrimSpace(res.Note + " drop_caches: " + err.Error())
		}
	}
	drop()
	t0 := time.Now()
	for _, f := range files {
		if out, err := exec.CommandContext(ctx, "dd", "if="+f, "of=/dev/null", "bs=1M").CombinedOutput(); err != nil {
			res.FirstError = fmt.Sprintf("dd %s: %v: %s", f, err, out)
			return
		}
	}
	ddSec := time.Since(t0).Seconds()
	res.Extra["dd_mb_s"] = float64(size) / 1e6 / ddSec
	drop()
	if err := lg.NewGroup(ctx, "cold"); err != nil {
		res.FirstError = "new group: " + err.Error()
		return
	}
	m, err := lg.NewMember(ctx, "cold", 0, ConsumerOptions{Prefetch: c.Prefetch, PullAhead: true})
	if err != nil {
		res.FirstError = "new member: " + err.Error()
		return
	}
	anon0 := rssAnonOf(sys)
	var anonMu sync.Mutex
	anonMin, anonMax := anon0, anon0
	start := time.Now()
	w := r.openWindow(ctx, sys)
	sn := newSeen(int(n))
	got, _, errs := drainAll(ctx, []Consumer{m}, c.Prefetch, n, sn, 4*r.Cfg.BacklogPhaseCap, func(done int64) {
		a := rssAnonOf(sys)
		anonMu.Lock()
		anonMin, anonMax = min(anonMin, a), max(anonMax, a)
		res.Series = append(res.Series, Point{T: time.Since(start).Seconds(), Done: done, RSS: a, Phase: "read"})
		anonMu.Unlock()
	})
	readSec := time.Since(start).Seconds()
	w.close(ctx, r, res, got)
	m.Close()
	res.ConsumeRate = float64(got) / readSec
	res.Rate = res.ConsumeRate
	readMB := float64(size) / 1e6 / readSec
	res.Extra["read_mb_s"] = readMB
	res.Extra["payload_mb_s"] = float64(got) * float64(c.Size) / 1e6 / readSec
	res.Extra["read_vs_dd"] = readMB / res.Extra["dd_mb_s"]
	res.Extra["read_seconds"] = readSec
	res.Extra["dd_seconds"] = ddSec
	res.Extra["read_errors"] = float64(errs)
	res.Extra["rss_anon_start"] = float64(anon0)
	res.Extra["rss_anon_min"] = float64(anonMin)
	res.Extra["rss_anon_max"] = float64(anonMax)
	res.Extra["drained"] = float64(got)
	if got < n {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" read stopped with %d of %d", got, n))
	}
	slices.SortFunc(res.Series, func(a, b Point) int { return int(a.T*1e6) - int(b.T*1e6) })
}
