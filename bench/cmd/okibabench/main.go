// Command okibabench runs okiba and its peers side by side and writes the results as
// JSON, a Markdown report and an SVG chart (see docs/benchmarks.md, "Side by side").
//
//	okibabench [--mode quick|full|smoke] [--systems a,b] [--scenarios s1,s2] [flags]
//	okibabench report results/FILE.json     # re-render the report of a run
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/okiba/okiba/bench/harness"
	"github.com/okiba/okiba/bench/report"
	"github.com/okiba/okiba/bench/systems"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "okibabench:", err)
		os.Exit(1)
	}
}

// modes are the presets; flags override their fields.
func modeConfig(mode string) (harness.Config, string, error) {
	full := harness.Full()
	switch mode {
	case "full":
		return full, "all", nil
	case "quick":
		c := full
		c.Scenarios = []string{"s1", "s2", "s3"}
		c.Warmup, c.Duration, c.Repeats = 500*time.Millisecond, 1500*time.Millisecond, 3
		c.S1Sizes = []int{1024}
		c.S2Sizes, c.S2Producers, c.S2Windows = []int{1024}, []int{16}, []int{64}
		c.S3Sizes, c.S3Pairs, c.S3AckModes = []int{1024}, []int{4}, []string{"batched"}
		return c, "okiba-http,redis-always,postgres-queue,rabbitmq-quorum,log-ceiling", nil
	case "cluster":
		// Three-node clusters on this one machine beside one okiba (issue 15): publish
		// (s2) and fill + drain (s5) at 1 KiB, every cell three times, interleaved.
		c := full
		c.Scenarios = []string{"s2", "s5"}
		c.Warmup, c.Duration, c.Repeats = time.Second, 3*time.Second, 3
		c.Sizes, c.S2Sizes, c.S2Producers, c.S2Windows = []int{1024}, []int{1024}, []int{16}, []int{64}
		c.BacklogCount, c.BacklogSize, c.BacklogPhaseCap, c.BacklogRepeats = 50_000, 1024, 90*time.Second, 3
		return c, "okiba-http,okiba-cluster3,jetstream-r3,rabbitmq-quorum3", nil
	case "smoke":
		c := full
		// t4 (the cold read, with its page-cache drops) is for make bench only.
		c.Scenarios = []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "t1", "t2", "t3"}
		c.Warmup, c.Duration, c.Repeats = 200*time.Millisecond, 500*time.Millisecond, 1
		c.S1Sizes = []int{128}
		c.S2Sizes, c.S2Producers, c.S2Windows = []int{128}, []int{4}, []int{64}
		c.S3Sizes, c.S3Pairs, c.S3AckModes = []int{128}, []int{4}, []string{"batched"}
		c.S4Fracs, c.S4Size = []float64{0.5}, 128
		c.BacklogCount, c.BacklogSize, c.BacklogPhaseCap = 2000, 128, 20*time.Second
		c.LeaseCount, c.Visibility = 500, 2*time.Second
		c.GroupKeys = 2000
		c.TopicSize, c.TopicProducers, c.TopicCount, c.ColdCount, c.ColdDropCaches = 128, 4, 2000, 5000, false
		return c, "okiba-http,okiba-http-json,okiba-sqs,log-ceiling", nil
	}
	return harness.Config{}, "", fmt.Errorf("--mode must be quick, full, cluster or smoke, got %q", mode)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of numbers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "report" {
		return rerender(args[1:], stdout)
	}
	f := flag.NewFlagSet("okibabench", flag.ContinueOnError)
	f.SetOutput(stdout)
	mode := f.String("mode", "quick", "preset: quick (1–2 min), full (the whole matrix; hours), cluster (three-node clusters beside one okiba; a few minutes), smoke (seconds, okiba only)")
	sysList := f.String("systems", "", "systems to run, comma-separated (default: the mode's; \"all\" for every one)")
	scen := f.String("scenarios", "", "scenarios to run, e.g. s1,s2 (default: the mode's)")
	sizes := f.String("sizes", "", "body sizes in bytes for every scenario, e.g. 128,1024")
	warmup := f.Duration("warmup", 0, "warm-up per cell (default: the mode's)")
	dur := f.Duration("duration", 0, "measured time per cell (default: the mode's)")
	repeats := f.Int("repeats", 0, "repeats per cell (default: the mode's)")
	producers := f.String("producers", "", "s2 producer counts, e.g. 1,4,16,64")
	windows := f.String("windows", "", "s2 windows, e.g. 1,64,512")
	large := f.Bool("large", false, "s5: a backlog of 10M messages instead of 1M")
	backlog := f.Int("backlog", 0, "s5: backlog size in messages")
	backlogRepeats := f.Int("backlog-repeats", 0, "s5: runs per system, interleaved (default: the mode's; 1 but in cluster mode)")
	topicCount := f.Int("topic-count", 0, "t2, t3: records pre-filled (default: the mode's)")
	coldCount := f.Int("cold-count", 0, "t4: records retained and read cold (default: the mode's; 10M in full)")
	topicCons := f.Int("topic-consumers", 0, "t2: consumers and group members (default 4)")
	fanSubs := f.String("fanout-subs", "", "t3: subscription counts, e.g. 0,1,10")
	noDrop := f.Bool("no-drop-caches", false, "t4: do not drop the page cache before dd and the group's read")
	out := f.String("out", "results", "directory for the JSON, Markdown and SVG")
	dir := f.String("dir", "", "run directory for every server's data and logs (default: a new one under /var/tmp/okiba-bench)")
	keep := f.Bool("keep", false, "keep the run directory (data and logs) afterwards")
	tools := f.String("tools", ".tools/bin", "where make bench-setup installed nats-server")
	repo := f.String("repo", "..", "okiba's working tree (built with go build ./cmd/okiba)")
	fsyncFor := f.Duration("fsync-probe", 0, "how long to probe the disk's fdatasync per record size (default: 3s; 1s in quick and smoke)")
	quiet := f.Bool("quiet", false, "log less")
	perfSys := f.String("perf", "", "record perf profiles of these systems' servers (comma-separated) over each measured window")
	perfCells := f.String("perf-cells", "", "with --perf: only cells whose name contains one of these (comma-separated)")
	if err := f.Parse(args); err != nil {
		return err
	}
	cfg, defSystems, err := modeConfig(*mode)
	if err != nil {
		return err
	}
	if *sysList == "" {
		*sysList = defSystems
	}
	if *scen != "" {
		cfg.Scenarios = strings.Split(*scen, ",")
	}
	if *sizes != "" {
		s, err := ints(*sizes)
		if err != nil {
			return err
		}
		cfg.Sizes, cfg.S1Sizes, cfg.S2Sizes, cfg.S3Sizes = s, s, s, s
	}
	if *producers != "" {
		if cfg.S2Producers, err = ints(*producers); err != nil {
			return err
		}
	}
	if *windows != "" {
		if cfg.S2Windows, err = ints(*windows); err != nil {
			return err
		}
	}
	if *warmup > 0 {
		cfg.Warmup = *warmup
	}
	if *dur > 0 {
		cfg.Duration = *dur
	}
	if *repeats > 0 {
		cfg.Repeats = *repeats
	}
	if *large {
		cfg.BacklogCount = 10_000_000
	}
	if *backlog > 0 {
		cfg.BacklogCount = *backlog
	}
	if *backlogRepeats > 0 {
		cfg.BacklogRepeats = *backlogRepeats
	}
	if *topicCount > 0 {
		cfg.TopicCount = *topicCount
	}
	if *coldCount > 0 {
		cfg.ColdCount = *coldCount
	}
	if *topicCons > 0 {
		cfg.TopicConsumers = *topicCons
	}
	if *fanSubs != "" {
		if cfg.FanoutSubs, err = ints(*fanSubs); err != nil {
			return err
		}
	}
	if *noDrop {
		cfg.ColdDropCaches = false
	}
	if *sizes != "" {
		cfg.TopicSize = cfg.Sizes[len(cfg.Sizes)-1]
	}
	probe := 3 * time.Second
	if *mode != "full" {
		probe = time.Second
	}
	if *fsyncFor > 0 {
		probe = *fsyncFor
	}
	syss, err := systems.Select(*sysList)
	if err != nil {
		return err
	}

	logf := func(format string, a ...any) {
		fmt.Fprintf(stdout, time.Now().Format("15:04:05 ")+format+"\n", a...)
	}
	quietf := logf
	if *quiet {
		quietf = func(string, ...any) {}
	}
	absTools, _ := filepath.Abs(*tools)
	absRepo, _ := filepath.Abs(*repo)
	runDir := *dir
	if runDir == "" {
		if err := os.MkdirAll("/var/tmp/okiba-bench", 0o755); err != nil {
			return err
		}
		if runDir, err = os.MkdirTemp("/var/tmp/okiba-bench", time.Now().Format("20060102-150405-")); err != nil {
			return err
		}
	}
	_ = os.Chmod(runDir, 0o755) // servers run as their own users
	env, err := harness.NewEnv(runDir, absTools, absRepo, quietf)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(absTools, 0o755); err != nil {
		return err
	}

	// Every process the harness starts is stopped on the way out: on return, on
	// panic, on the first Ctrl-C (which ends the current cell) and, hard, on a second.
	defer func() {
		env.Cleanup()
		if !*keep {
			os.RemoveAll(runDir)
		} else {
			logf("kept the run directory %s", runDir)
		}
	}()
	hard := make(chan os.Signal, 2)
	signal.Notify(hard, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(hard)
	go func() {
		<-ctx.Done()
		select {
		case <-hard: // the first signal, also seen by ctx
		case <-time.After(100 * time.Millisecond):
		}
		select {
		case <-hard:
			logf("second interrupt: killing every server and exiting")
			env.KillAll()
			os.Exit(130)
		case <-time.After(24 * time.Hour):
		}
	}()

	r := &harness.Run{Started: time.Now(), Mode: *mode, Config: cfg, Command: "okibabench " + strings.Join(args, " ")}
	r.Machine = machine(runDir)
	logf("run directory %s; results to %s", runDir, *out)
	for _, size := range []int{128, 1024} {
		p, err := harness.ProbeFsync(runDir, size, probe)
		if err != nil {
			r.Notes = append(r.Notes, "fsync probe failed: "+err.Error())
			break
		}
		r.Fsync = append(r.Fsync, p)
		logf("disk: %s records + fdatasync: %.0f/s, p50 %.3f ms, p99 %.3f ms", harness.SizeName(size), p.PerSec, p.Latency.P50, p.Latency.P99)
	}
	var started []harness.System
	for _, s := range syss {
		name := s.Info().Name
		logf("starting %s", name)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := s.Start(sctx, env)
		cancel()
		if err != nil {
			r.Failures = append(r.Failures, fmt.Sprintf("`%s`: %v", name, err))
			logf("cannot run %s: %v", name, err)
			continue
		}
		started = append(started, s)
		defer s.Close()
	}
	for _, s := range started {
		r.Systems = append(r.Systems, s.Info())
	}
	if len(started) == 0 {
		return errors.New("no system could start")
	}
	if runtime.NumCPU() <= 2 {
		r.Notes = append(r.Notes, fmt.Sprintf("This machine has %d CPUs shared by the brokers, the load generator and anything else running: absolute figures move between runs; compare systems within one run (ratios).", runtime.NumCPU()))
	}
	runner := &harness.Runner{Cfg: cfg, Env: env, Systems: started, Logf: logf}
	if *perfSys != "" {
		runner.Profile = &harness.Profiler{Dir: filepath.Join(*out, "profiles"), Systems: strings.Split(*perfSys, ",")}
		if *perfCells != "" {
			runner.Profile.Cells = strings.Split(*perfCells, ",")
		}
	}
	runErr := runner.Run(ctx)
	r.Results = runner.Results()
	r.Finished = time.Now()
	r.Machine.Load1End = loadavg()
	if ctx.Err() != nil {
		r.Notes = append(r.Notes, "Interrupted: the results are partial.")
	}
	if runErr != nil {
		for _, e := range strings.Split(runErr.Error(), "\n") {
			r.Failures = append(r.Failures, e)
		}
	}
	paths, err := write(r, *out)
	if err != nil {
		return err
	}
	logf("wrote %s", strings.Join(paths, ", "))
	for _, res := range r.Results {
		if strings.HasPrefix(res.System, "okiba") && res.FirstError != "" && res.Rate == 0 {
			return fmt.Errorf("okiba failed a cell: %s on %s: %s", res.Cell.Name, res.System, res.FirstError)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// write stores the run as <out>/<date>-<host>.json (with -2, -3 … if that exists)
// and renders the report and chart beside it.
func write(r *harness.Run, out string) ([]string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	base := fmt.Sprintf("%s-%s", r.Started.Format("2006-01-02"), r.Machine.Host)
	if r.Mode != "full" {
		base += "-" + r.Mode
	}
	stem := filepath.Join(out, base)
	for i := 2; ; i++ {
		if _, err := os.Stat(stem + ".json"); errors.Is(err, os.ErrNotExist) {
			break
		}
		stem = filepath.Join(out, fmt.Sprintf("%s-%d", base, i))
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(stem+".json", b, 0o644); err != nil {
		return nil, err
	}
	paths := []string{stem + ".json"}
	more, err := render(r, stem)
	return append(paths, more...), err
}

func render(r *harness.Run, stem string) ([]string, error) {
	var svg bytes.Buffer
	report.SVG(&svg, r)
	if err := os.WriteFile(stem+".svg", svg.Bytes(), 0o644); err != nil {
		return nil, err
	}
	var md bytes.Buffer
	report.Markdown(&md, r, filepath.Base(stem)+".svg")
	if err := os.WriteFile(stem+".md", md.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return []string{stem + ".md", stem + ".svg"}, nil
}

func rerender(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: okibabench report results/FILE.json")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var r harness.Run
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	paths, err := render(&r, strings.TrimSuffix(args[0], ".json"))
	if err == nil {
		fmt.Fprintln(stdout, "wrote", strings.Join(paths, ", "))
	}
	return err
}
