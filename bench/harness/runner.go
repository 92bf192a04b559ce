package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is a run's shape. Zero fields take the values of Full().
type Config struct {
	Scenarios []string      `json:"scenarios"` // "s1" … "s8"
	Sizes     []int         `json:"sizes"`
	Warmup    time.Duration `json:"warmup"`
	Duration  time.Duration `json:"duration"`
	Repeats   int           `json:"repeats"`

	S1Sizes         []int         `json:"s1_sizes"`
	S2Producers     []int         `json:"s2_producers"`
	S2Windows       []int         `json:"s2_windows"`
	S2Sizes         []int         `json:"s2_sizes,omitempty"`
	S3Pairs         []int         `json:"s3_pairs"`
	S3AckModes      []string      `json:"s3_ack_modes"` // "batched", "each"
	S3Sizes         []int         `json:"s3_sizes,omitempty"`
	S3Window        int           `json:"s3_window"`
	Prefetch        int           `json:"prefetch"`
	S4Fracs         []float64     `json:"s4_load_fracs"`
	S4Size          int           `json:"s4_size"`
	BacklogCount    int           `json:"backlog_count"`
	BacklogSize     int           `json:"backlog_size"`
	BacklogPhaseCap time.Duration `json:"backlog_phase_cap"`
	BacklogRepeats  int           `json:"backlog_repeats"`
	LeaseCount      int           `json:"lease_count"`
	Visibility      time.Duration `json:"visibility"`
	GroupKeys       int           `json:"group_keys"`

	// The topic scenarios (t1–t4, harness/topics.go).
	TopicSize       int   `json:"topic_size,omitempty"`       // record bytes in t1–t4
	TopicProducers  int   `json:"topic_producers,omitempty"`  // t1, t3: producers …
	TopicWindow     int   `json:"topic_window,omitempty"`     // … × window
	TopicPartitions int   `json:"topic_partitions,omitempty"` // t1–t3
	TopicCount      int   `json:"topic_count,omitempty"`      // t2, t3: records pre-filled
	TopicConsumers  int   `json:"topic_consumers,omitempty"`  // t2: consumers (group members)
	TopicPrefetch   int   `json:"topic_prefetch,omitempty"`   // t2–t4: records per receive / pull
	FanoutSubs      []int `json:"fanout_subs,omitempty"`      // t3: subscription counts
	ColdCount       int   `json:"cold_count,omitempty"`       // t4: records retained, read cold
	// ColdDropCaches drops the page cache (echo 3 > /proc/sys/vm/drop_caches) before
	// the dd and before the group's read in t4; off in smoke mode.
	ColdDropCaches bool `json:"cold_drop_caches,omitempty"`
}

// Full is the whole matrix of the issue (hours on a 2-core machine; see the docs).
func Full() Config {
	return Config{
		Scenarios: []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "t1", "t2", "t3", "t4"},
		Sizes:     []int{16, 128, 1024},
		Warmup:    2 * time.Second, Duration: 5 * time.Second, Repeats: 3,
		S1Sizes:     []int{16, 128, 1024},
		S2Producers: []int{1, 4, 16, 64}, S2Windows: []int{1, 64, 512},
		S3Pairs: []int{1, 4, 16}, S3AckModes: []string{"batched", "each"}, S3Window: 256, Prefetch: 256,
		S4Fracs: []float64{0.25, 0.5, 0.75, 0.9}, S4Size: 1024,
		BacklogCount: 1_000_000, BacklogSize: 1024, BacklogPhaseCap: 5 * time.Minute, BacklogRepeats: 1,
		LeaseCount: 50_000, Visibility: 5 * time.Second, GroupKeys: 100_000,
		TopicSize: 1024, TopicProducers: 16, TopicWindow: 64, TopicPartitions: 4, TopicCount: 1_000_000,
		TopicConsumers: 4, TopicPrefetch: 1000, FanoutSubs: []int{0, 1, 10}, ColdCount: 10_000_000, ColdDropCaches: true,
	}
}

// Runner runs scenarios over systems and collects results.
type Runner struct {
	Cfg     Config
	Env     *Env
	Systems []System
	Logf    func(string, ...any)
	// Profile, when set, records perf profiles of the cells it matches.
	Profile *Profiler

	mu      sync.Mutex
	results []Result
	disk    string
	// steady is each system's s3 rate at 4/4 per size (s4's reference load).
	steady map[string]map[int]float64
}

// Results returns what has been measured so far.
func (r *Runner) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.results)
}

func (r *Runner) add(res Result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
	switch {
	case res.Skipped != "":
		r.Logf("  %-22s %-24s skipped: %s", res.System, res.Cell.Name, res.Skipped)
	case res.FirstError != "" && res.Rate == 0:
		r.Logf("  %-22s %-24s #%d FAILED: %s", res.System, res.Cell.Name, res.Repeat, res.FirstError)
	default:
		line := fmt.Sprintf("  %-22s %-24s #%d %10.0f msg/s", res.System, res.Cell.Name, res.Repeat, res.Rate)
		if res.Ack != nil {
			line += fmt.Sprintf("  ack p50 %.2fms p99 %.2fms", res.Ack.P50, res.Ack.P99)
		}
		if res.E2E != nil {
			line += fmt.Sprintf("  e2e p50 %.2fms p99 %.2fms", res.E2E.P50, res.E2E.P99)
		}
		if res.BrokerCPUPerMsg > 0 {
			line += fmt.Sprintf("  cpu %.1fµs/msg", res.BrokerCPUPerMsg)
		}
		if res.Errors > 0 {
			line += fmt.Sprintf("  errors %d (%s)", res.Errors, res.FirstError)
		}
		for _, k := range slices.Sorted(maps.Keys(res.Extra)) {
			line += fmt.Sprintf("  %s=%.4g", k, res.Extra[k])
		}
		r.Logf("%s", line)
	}
}

// Cells returns the cells of scenario s under the config.
func (c Config) Cells(s string) []Cell {
	sizes := func(override []int) []int {
		if len(override) > 0 {
			return override
		}
		return c.Sizes
	}
	var out []Cell
	switch s {
	case "s1":
		for _, size := range sizes(c.S1Sizes) {
			out = append(out, Cell{Scenario: s, Name: "sync-" + SizeName(size), Size: size, Producers: 1, Window: 1})
		}
	case "s2":
		for _, size := range sizes(c.S2Sizes) {
			for _, p := range c.S2Producers {
				for _, w := range c.S2Windows {
					out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("p%d-w%d-%s", p, w, SizeName(size)), Size: size, Producers: p, Window: w})
				}
			}
		}
	case "s3":
		for _, size := range sizes(c.S3Sizes) {
			for _, n := range c.S3Pairs {
				for _, mode := range c.S3AckModes {
					out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("%d/%d-%s-%s", n, n, mode, SizeName(size)), Size: size,
						Producers: n, Window: c.S3Window, Consumers: n, Prefetch: c.Prefetch, AckEach: mode == "each"})
				}
			}
		}
	case "s4":
		for _, f := range c.S4Fracs {
			out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("load%02.0f-%s", f*100, SizeName(c.S4Size)), Size: c.S4Size,
				Producers: 4, Window: 4096, Consumers: 4, Prefetch: c.Prefetch, LoadFrac: f})
		}
	case "s5":
		out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("backlog-%s-%s", countName(c.BacklogCount), SizeName(c.BacklogSize)),
			Size: c.BacklogSize, Producers: 4, Window: 256, Consumers: 4, Prefetch: c.Prefetch, Count: c.BacklogCount})
	case "s6":
		out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("lease-%s-128B", countName(c.LeaseCount)), Size: 128,
			Producers: 4, Window: 256, Consumers: 4, Prefetch: c.Prefetch, Count: c.LeaseCount})
	case "s8":
		out = append(out, Cell{Scenario: s, Name: fmt.Sprintf("groups-%s-1KiB", countName(c.GroupKeys)), Size: 1024,
			Producers: 4, Window: 256, Consumers: 4, Prefetch: c.Prefetch, Keys: c.GroupKeys})
	}
	return out
}

// SizeName is "16B", "128B", "1KiB".
func SizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

func countName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// Run runs every scenario of the config. Steady scenarios run each cell Repeats
// times, and each time over every system in a rotated order, so that a system's
// repeats are spread over the session and drift hits all systems alike. s5 and s7
// share one run per system (fill, kill -9 and restart, drain).
func (r *Runner) Run(ctx context.Context) error {
	r.disk = DiskOf(r.Env.Dir)
	r.steady = map[string]map[int]float64{}
	var errs []error
	for _, s := range r.Cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		if s == "s7" && slices.Contains(r.Cfg.Scenarios, "s5") {
			continue // runs inside s5
		}
		if strings.HasPrefix(s, "t") {
			errs = append(errs, r.runTopics(ctx, s))
			continue
		}
		cells := r.Cfg.Cells(s)
		if s == "s7" {
			cells = r.Cfg.Cells("s5")
		}
		r.Logf("scenario %s: %s (%d cells × %d systems)", s, ScenarioTitle(s), len(cells), len(r.Systems))
		repeats := r.Cfg.Repeats
		if s == "s5" || s == "s7" {
			repeats = max(r.Cfg.BacklogRepeats, 1)
		}
		for _, cell := range cells {
			for rep := 0; rep < repeats; rep++ {
				for i := range r.Systems {
					if ctx.Err() != nil {
						break
					}
					sys := r.Systems[(i+rep)%len(r.Systems)]
					if why := r.unsupported(sys, cell, s); why != "" {
						if rep == 0 {
							r.add(Result{Cell: cell, System: sys.Info().Name, Skipped: why})
						}
						continue
					}
					res := r.runCell(ctx, sys, cell, rep+1, s)
					r.add(res)
					if res.FirstError != "" && res.Rate == 0 {
						errs = append(errs, fmt.Errorf("%s %s on %s: %s", s, cell.Name, res.System, res.FirstError))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ScenarioTitle names a scenario for logs and the report.
func ScenarioTitle(s string) string {
	return map[string]string{
		"s1": "one synchronous publisher: ack latency",
		"s2": "publish throughput, no consumers",
		"s3": "steady publish + consume + ack",
		"s4": "fixed-rate (open-loop) end-to-end latency",
		"s5": "deep backlog: fill, then drain with 4 consumers",
		"s6": "lease expiry: 10% of deliveries never acked",
		"s7": "restart: kill -9 with a backlog, time to first receive",
		"s8": "per-key order with many group keys",
		"t1": "topic publish beside queue publish",
		"t2": "pre-filled log: group read + commit beside queue receive + ack",
		"t3": "fan-out: publish into a topic with 0, 1 and 10 subscriptions, then drain the queues",
		"t4": "cold read: a new group reads a retained partition from offset 0, beside dd of its files",
	}[s]
}

func (r *Runner) unsupported(sys System, c Cell, s string) string {
	info := sys.Info()
	caps := info.Caps
	switch {
	case c.Consumers > 0 && !caps.Consume:
		return "publish only (the log ceiling has no consumers)"
	case s == "s6" && !caps.Visibility:
		return "no lease that expires and redelivers"
	case s == "s7" && !caps.Restart:
		return "no separate server process to kill"
	case s == "s8" && !caps.Groups:
		return "no per-key FIFO with competing consumers"
	case s == "s4" && r.steadyRate(info.Name, c.Size) == 0:
		return "no s3 4/4 rate measured for this size to set the load from"
	}
	return ""
}

func (r *Runner) steadyRate(sys string, size int) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rates []float64
	for _, res := range r.results {
		c := res.Cell
		if res.System == sys && c.Scenario == "s3" && c.Consumers == 4 && !c.AckEach && c.Size == size && res.Rate > 0 {
			rates = append(rates, res.Rate)
		}
	}
	return Median(rates)
}

// Median of xs (0 when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

var queueSeq struct {
	sync.Mutex
	n int
}

func queueName(s string) string {
	queueSeq.Lock()
	defer queueSeq.Unlock()
	queueSeq.n++
	return fmt.Sprintf("bench-%s-%d-%d", s, time.Now().Unix()%100000, queueSeq.n)
}

// runCell runs one cell on one system and never panics the run: failures end up in
// the result.
func (r *Runner) runCell(ctx context.Context, sys System, c Cell, rep int, s string) (res Result) {
	res = Result{Cell: c, System: sys.Info().Name, Repeat: rep}
	if s == "s7" {
		res.Cell.Scenario = "s7"
	}
	defer func() {
		if p := recover(); p != nil {
			res.FirstError = fmt.Sprintf("panic: %v", p)
		}
	}()
	spec := QueueSpec{Name: queueName(c.Scenario), Visibility: 30 * time.Second, Groups: c.Keys > 0}
	if s == "s6" {
		spec.Visibility = r.Cfg.Visibility
	}
	q, err := sys.NewQueue(ctx, spec)
	if err != nil {
		res.FirstError = "new queue: " + err.Error()
		return res
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := q.Delete(dctx); err != nil {
			r.Logf("  %s: delete queue %s: %v", res.System, spec.Name, err)
		}
	}()
	switch s {
	case "s5", "s7":
		r.backlog(ctx, sys, q, c, &res, s == "s7" || slices.Contains(r.Cfg.Scenarios, "s7"))
	case "s6":
		r.lease(ctx, sys, q, c, &res)
	default:
		r.steadyCell(ctx, sys, q, c, &res)
	}
	return res
}

// window samples a system's processes, the harness and the disk at the start and end
// of a measured window, and the peak PSS in between.
type window struct {
	sys        System
	b0, c0     TreeSample
	mu         sync.Mutex
	usage      *Usage
	d0         DiskStat
	dOK        bool
	f0         uint64
	fOK        bool
	peak       int64
	stop, done chan struct{}

	ended      bool
	b1, c1     TreeSample
	d1         DiskStat
	d1OK, f1OK bool
	f1         uint64
}

func (r *Runner) openWindow(ctx context.Context, sys System) *window {
	w := &window{sys: sys, stop: make(chan struct{}), done: make(chan struct{})}
	w.b0 = SampleTree(sys.Pids())
	w.c0 = SampleTree(nil)
	w.d0, w.dOK = ReadDisk(r.disk)
	if fc, ok := sys.(FsyncCounter); ok {
		if n, err := fc.Fsyncs(ctx); err == nil {
			w.f0, w.fOK = n, true
		}
	}
	w.peak = w.b0.RSS
	w.usage = NewUsage(w.b0)
	go func() {
		defer close(w.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				s := SampleTree(sys.Pids())
				w.mu.Lock()
				w.usage.Add(s)
				w.peak = max(w.peak, s.RSS)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// end takes the closing samples; it may run before the message count is known.
func (w *window) end(ctx context.Context, r *Runner) {
	if w.ended {
		return
	}
	w.ended = true
	close(w.stop)
	<-w.done
	w.b1 = SampleTree(w.sys.Pids())
	w.c1 = SampleTree(nil)
	w.usage.Add(w.b1)
	w.d1, w.d1OK = ReadDisk(r.disk)
	if fc, ok := w.sys.(FsyncCounter); ok && w.fOK {
		if n, err := fc.Fsyncs(ctx); err == nil {
			w.f1, w.f1OK = n, true
		}
	}
}

// close ends the window (if end was not called) and fills res's resource figures for
// msgs messages.
func (w *window) close(ctx context.Context, r *Runner, res *Result, msgs int64) {
	w.end(ctx, r)
	el := w.b1.At.Sub(w.b0.At).Seconds()
	res.RSS = max(w.peak, w.b1.RSS)
	if msgs > 0 {
		n := float64(msgs)
		if !w.sys.Info().InProcess || w.sys.Pids() != nil {
			res.BrokerCPUPerMsg = float64(w.usage.CPU) / 1e3 / n
		}
		res.ClientCPUPerMsg = float64(w.c1.CPU-w.c0.CPU) / 1e3 / n
		res.WriteBytesPerMsg = float64(w.usage.WriteBytes) / n
	}
	if w.d1OK && w.dOK && el > 0 {
		res.DiskFlushesPerSec = float64(w.d1.Flushes-w.d0.Flushes) / el
		if msgs > 0 {
			res.DeviceBytesPerMsg = float64(w.d1.SectorsWritten-w.d0.SectorsWritten) * 512 / float64(msgs)
		}
	}
	if w.f1OK && el > 0 {
		v := float64(w.f1-w.f0) / el
		res.FsyncsPerSec = &v
	}
}

func (r *Runner) steadyCell(ctx context.Context, sys System, q Queue, c Cell, res *Result) {
	l := load{size: c.Size, producers: c.Producers, window: c.Window, consumers: c.Consumers,
		prefetch: c.Prefetch, ackEach: c.AckEach, keys: c.Keys}
	if c.LoadFrac > 0 {
		l.openRate = c.LoadFrac * r.steadyRate(res.System, c.Size)
		res.TargetRate = l.openRate
	}
	start := time.Now()
	m := &meter{from: start.Add(r.Cfg.Warmup), to: start.Add(r.Cfg.Warmup + r.Cfg.Duration)}
	wch := make(chan *window, 1)
	var stopPerf func() (string, error)
	timer := time.AfterFunc(time.Until(m.from), func() {
		if r.Profile.matches(res.System, c.Name) {
			name := fmt.Sprintf("%s-%s-%s-%d", c.Scenario, strings.ReplaceAll(c.Name, "/", "_"), res.System, res.Repeat)
			var stops []func() (string, error)
			if pids := sys.Pids(); pids != nil {
				if stop, err := r.Profile.start(name+"-broker", pids); err != nil {
					r.Logf("  perf: %v", err)
				} else {
					stops = append(stops, stop)
				}
			}
			// The harness process: the clients (and in-process systems).
			if stop, err := r.Profile.start(name+"-client", []int{os.Getpid()}); err != nil {
				r.Logf("  perf: %v", err)
			} else {
				stops = append(stops, stop)
			}
			stopPerf = func() (string, error) {
				var paths []string
				var errs []error
				for _, stop := range stops {
					p, err := stop()
					paths = append(paths, filepath.Base(p))
					errs = append(errs, err)
				}
				return strings.Join(paths, ", "), errors.Join(errs...)
			}
		}
		w := r.openWindow(ctx, sys)
		// The window's resources are sampled at its end, not after the tail of
		// outstanding publishes that runLoad still waits for.
		time.AfterFunc(time.Until(m.to), func() { w.end(ctx, r); wch <- w })
	})
	err := runLoad(ctx, q, l, m)
	var w *window
	if !timer.Stop() {
		w = <-wch
	}
	if stopPerf != nil {
		if path, err := stopPerf(); err != nil {
			r.Logf("  perf report: %v", err)
		} else {
			r.Logf("  perf profiles: %s", path)
			res.Note = strings.TrimSpace(res.Note + " profiles: " + path)
		}
	}
	dur := m.to.Sub(m.from).Seconds()
	res.PublishRate = float64(m.pubOK.Load()) / dur
	res.ConsumeRate = float64(m.acked.Load()) / dur
	res.Rate = res.PublishRate
	msgs := m.pubOK.Load()
	if c.Consumers > 0 {
		res.Rate = res.ConsumeRate
		msgs = max(m.acked.Load(), msgs)
	}
	res.Ack = m.ack.Summary()
	res.E2E = m.e2e.Summary()
	res.Errors = m.pubErr.Load() + m.consErr.Load()
	res.FirstError = m.firstErr
	if err != nil && res.FirstError == "" {
		res.FirstError = err.Error()
	} else if err != nil {
		res.Note = err.Error()
	}
	if c.Keys > 0 {
		res.Extra = map[string]float64{"order_violations": float64(m.violations.Load()), "keys_seen": float64(len(m.lastSeq))}
	}
	if w != nil {
		w.close(ctx, r, res, msgs)
	}
}

// fill publishes c.Count messages (or until cap) with c.Producers × c.Window,
// sampling every second; it returns how many were confirmed.
func (r *Runner) fill(ctx context.Context, sys System, q Queue, c Cell, capDur time.Duration, series *[]Point, dataDirs []string) (int64, time.Duration, error) {
	var published atomic.Int64
	var errOnce sync.Once
	var firstErr error
	start := time.Now()
	stopAt := start.Add(capDur)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < c.Producers; p++ {
		pr, err := q.NewProducer(ctx, c.Window)
		if err != nil {
			return 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, c.Window)
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(c.Count) {
					break
				}
				slots <- struct{}{}
				pr.Publish(Msg{Body: NewBody(c.Size, time.Now(), uint64(i))}, func(err error) {
					if err != nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					} else {
						published.Add(1)
					}
					<-slots
				})
			}
			pr.Close()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			el := time.Since(start)
			*series = append(*series, curvePoint(sys, dataDirs, el, published.Load(), "fill"))
			return published.Load(), el, firstErr
		case <-t.C:
			*series = append(*series, curvePoint(sys, dataDirs, time.Since(start), published.Load(), "fill"))
		}
	}
}

// DataDirer is implemented by systems that can say where their data lives (for the
// disk-use curve of scenario 5).
type DataDirer interface {
	DataDirs() []string
}

// curvePoint is one sample of scenario 5's curves, t into the phase with done messages.
func curvePoint(sys System, dirs []string, t time.Duration, done int64, phase string) Point {
	return Point{T: t.Seconds(), Done: done, RSS: SampleTree(sys.Pids()).RSS, Disk: dirsSize(dirs), Phase: phase}
}

func dirsSize(dirs []string) int64 {
	var n int64
	for _, d := range dirs {
		n += DirSize(d)
	}
	return n
}

// backlog is scenarios 5 and 7: fill with no consumers, optionally kill -9 and
// restart (time to the first successful receive), then drain with c.Consumers.
func (r *Runner) backlog(ctx context.Context, sys System, q Queue, c Cell, res *Result, restart bool) {
	var dirs []string
	if d, ok := sys.(DataDirer); ok {
		dirs = d.DataDirs()
	}
	res.Extra = map[string]float64{}
	w := r.openWindow(ctx, sys)
	n, el, err := r.fill(ctx, sys, q, c, r.Cfg.BacklogPhaseCap, &res.Series, dirs)
	if err != nil {
		res.FirstError = "fill: " + err.Error()
	}
	w.close(ctx, r, res, n)
	res.Rate = float64(n) / el.Seconds()
	res.PublishRate = res.Rate
	res.Extra["filled"] = float64(n)
	res.Extra["fill_seconds"] = el.Seconds()
	res.Extra["disk_after_fill"] = float64(dirsSize(dirs))
	res.Extra["rss_after_fill"] = float64(SampleTree(sys.Pids()).RSS)
	if n < int64(c.Count) {
		res.Note = fmt.Sprintf("fill stopped at the %v cap with %d of %d messages", r.Cfg.BacklogPhaseCap, n, c.Count)
	}
	if n == 0 || ctx.Err() != nil {
		return
	}
	drained := int64(0)
	if rs, ok := sys.(Restarter); ok && restart && sys.Info().Caps.Restart {
		if err := rs.Kill(ctx); err != nil {
			res.FirstError = "kill: " + err.Error()
			return
		}
		t0 := time.Now()
		if err := rs.Restart(ctx); err != nil {
			res.FirstError = "restart: " + err.Error()
			return
		}
		res.Extra["restart_accepting_s"] = time.Since(t0).Seconds()
		got, err := firstReceive(ctx, q, 2*time.Minute)
		if err != nil {
			res.FirstError = "first receive after restart: " + err.Error()
			return
		}
		drained += int64(got)
		res.Extra["restart_first_receive_s"] = time.Since(t0).Seconds()
	}
	// Drain, with its own CPU window: the fill's figures above say nothing of what a
	// receive and its acks cost each side.
	dw := r.openWindow(ctx, sys)
	defer dw.end(ctx, r) // on the early returns; the drain's close below ends it first
	start := time.Now()
	var acked atomic.Int64
	acked.Add(drained)
	dctx, cancel := context.WithTimeout(ctx, r.Cfg.BacklogPhaseCap)
	defer cancel()
	var wg sync.WaitGroup
	var cerrs atomic.Int64
	var errMu sync.Mutex
	var firstErr error // the first drain error, for the note
	noteErr := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for i := 0; i < c.Consumers; i++ {
		cons, err := q.NewConsumer(dctx, ConsumerOptions{Prefetch: c.Prefetch})
		if err != nil {
			res.FirstError = "drain: new consumer: " + err.Error()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			empty := 0
			for dctx.Err() == nil && acked.Load() < n {
				ds, err := cons.Receive(dctx, c.Prefetch)
				if err != nil {
					if dctx.Err() == nil {
						cerrs.Add(1)
						noteErr(fmt.Errorf("receive: %w", err))
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if len(ds) == 0 {
					if empty++; empty > 20 {
						return // nothing left for 20 polls
					}
					continue
				}
				empty = 0
				if err := cons.Ack(dctx, ds); err != nil {
					if dctx.Err() == nil {
						cerrs.Add(1)
						noteErr(fmt.Errorf("ack of %d: %w", len(ds), err))
					}
					continue
				}
				if acked.Add(int64(len(ds))) >= n {
					cancel()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-t.C:
			res.Series = append(res.Series, curvePoint(sys, dirs, time.Since(start), acked.Load(), "drain"))
		}
	}
	del := time.Since(start)
	var dres Result
	dw.close(ctx, r, &dres, acked.Load()-drained)
	res.Extra["drain_broker_cpu_us_per_msg"] = dres.BrokerCPUPerMsg
	res.Extra["drain_client_cpu_us_per_msg"] = dres.ClientCPUPerMsg
	if dres.FsyncsPerSec != nil {
		res.Extra["drain_fsyncs_per_s"] = *dres.FsyncsPerSec
	}
	res.Series = append(res.Series, curvePoint(sys, dirs, del, acked.Load(), "drain"))
	res.ConsumeRate = float64(acked.Load()-drained) / del.Seconds()
	res.Extra["drained"] = float64(acked.Load())
	res.Extra["drain_seconds"] = del.Seconds()
	res.Extra["drain_errors"] = float64(cerrs.Load())
	if acked.Load() < n {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" drain stopped with %d of %d acked", acked.Load(), n))
	}
	if firstErr != nil {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" (%d drain errors, the first: %v)", cerrs.Load(), firstErr))
	}
}

// firstReceive receives (and acks) until one message arrives, retrying errors.
func firstReceive(ctx context.Context, q Queue, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		cons, err := q.NewConsumer(ctx, ConsumerOptions{Prefetch: 1})
		if err != nil {
			last = err
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			ds, err := cons.Receive(ctx, 1)
			if err != nil {
				last = err
				time.Sleep(5 * time.Millisecond)
				break
			}
			if len(ds) > 0 {
				err := cons.Ack(ctx, ds)
				cons.Close()
				if err != nil {
					return 0, nil
				}
				return len(ds), nil
			}
		}
		cons.Close()
	}
	return 0, fmt.Errorf("nothing received within %v (last error: %v)", limit, last)
}

// lease is scenario 6: c.Count messages are published, then c.Consumers drain them
// without acking the first delivery of every tenth; those must come back exactly
// once after the visibility timeout.
func (r *Runner) lease(ctx context.Context, sys System, q Queue, c Cell, res *Result) {
	var series []Point
	n, _, err := r.fill(ctx, sys, q, c, r.Cfg.BacklogPhaseCap, &series, nil)
	if err != nil || n == 0 {
		res.FirstError = fmt.Sprintf("fill: %v (%d published)", err, n)
		return
	}
	deliveries := make([]uint8, c.Count+1)
	var mu sync.Mutex
	var acked, unacked, firstPass atomic.Int64
	expected := n / 10 // seqs 10, 20, … are left unacked once
	start := time.Now()
	var firstPassAt time.Duration
	limit := r.Cfg.Visibility*3 + r.Cfg.BacklogPhaseCap
	dctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	w := r.openWindow(ctx, sys)
	for i := 0; i < c.Consumers; i++ {
		cons, err := q.NewConsumer(dctx, ConsumerOptions{Prefetch: c.Prefetch})
		if err != nil {
			res.FirstError = "new consumer: " + err.Error()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			for dctx.Err() == nil && acked.Load() < n {
				ds, err := cons.Receive(dctx, c.Prefetch)
				if err != nil {
					continue
				}
				var ack []Delivery
				mu.Lock()
				for _, d := range ds {
					_, seq, ok := ReadStamp(d.Body)
					if !ok || seq == 0 || seq > uint64(c.Count) {
						continue
					}
					deliveries[seq]++
					if seq%10 == 0 && deliveries[seq] == 1 {
						unacked.Add(1)
						continue // never acked: must come back after the lease
					}
					ack = append(ack, d)
				}
				mu.Unlock()
				if len(ack) > 0 {
					if err := cons.Ack(dctx, ack); err == nil {
						if a := acked.Add(int64(len(ack))); a == n-expected {
							mu.Lock()
							firstPassAt = time.Since(start)
							mu.Unlock()
							firstPass.Add(a)
						}
						if acked.Load() >= n {
							cancel()
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	w.close(ctx, r, res, acked.Load())
	var redelivered, dup, missing int64
	for i := int64(1); i <= n; i++ {
		d := int64(deliveries[i])
		want := int64(1)
		if i%10 == 0 {
			want = 2
		}
		switch {
		case d == 0:
			missing++
		case d > want:
			dup += d - want
		}
		if d > 1 {
			redelivered += d - 1
		}
	}
	res.Extra = map[string]float64{
		"published": float64(n), "acked": float64(acked.Load()), "not_acked_first_time": float64(unacked.Load()),
		"redeliveries": float64(redelivered), "redeliveries_expected": float64(expected),
		"extra_deliveries": float64(dup), "never_delivered": float64(missing), "total_seconds": total.Seconds(),
	}
	if firstPassAt > 0 {
		res.Rate = float64(firstPass.Load()+unacked.Load()) / firstPassAt.Seconds()
		res.Extra["first_pass_seconds"] = firstPassAt.Seconds()
	}
	res.ConsumeRate = float64(acked.Load()) / total.Seconds()
	if redelivered != expected || dup != 0 || missing != 0 {
		res.Note = fmt.Sprintf("redeliveries %d, expected exactly %d (extra %d, never delivered %d)", redelivered, expected, dup, missing)
	}
}
