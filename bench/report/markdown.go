package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/okiba/okiba/bench/harness"
)

// Markdown writes the report of a run. svgName, when set, is the chart's file name
// (beside the report).
func Markdown(w io.Writer, run *harness.Run, svgName string) {
	t := Aggregate(run)
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# okiba side by side — %s (%s)\n\n", run.Started.Format("2006-01-02 15:04 MST"), run.Mode)
	p("Command: `%s`  \n", run.Command)
	p("Run time: %s. Warm-up %v, measured %v, %d repeats per cell interleaved across systems (medians; the spread is min–max over the repeats).\n\n",
		run.Finished.Sub(run.Started).Round(1e9), run.Config.Warmup, run.Config.Duration, run.Config.Repeats)
	m := run.Machine
	p("## Machine\n\n%s: %d CPUs (%s), %.0f GiB RAM, kernel %s, %s; data on %s (%s). Load average %.2f at the start, %.2f at the end.\n\n",
		m.Host, m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.Go, m.Disk, m.Filesystem, m.Load1, m.Load1End)
	if len(run.Fsync) > 0 {
		p("The disk's own cost, measured by the harness (one record in okiba's framing written at the end of a preallocated file, then fdatasync, repeated):\n\n")
		p("| record | syncs/s | p50 | p99 | p99.9 |\n|---|---|---|---|---|\n")
		for _, f := range run.Fsync {
			p("| %s | %.0f | %s | %s | %s |\n", harness.SizeName(f.RecordBytes), f.PerSec, ms(f.Latency.P50), ms(f.Latency.P99), ms(f.Latency.P999))
		}
		p("\n")
	}
	for _, n := range run.Notes {
		p("> %s\n\n", n)
	}
	p("## Systems\n\n| system | durability | version | settings |\n|---|---|---|---|\n")
	for _, s := range run.Systems {
		p("| `%s` %s | %s | %s | %s |\n", s.Name, s.Label, s.Durability, s.Version, s.Settings)
	}
	p("\n")
	if len(run.Failures) > 0 {
		p("Could not run:\n\n")
		for _, f := range run.Failures {
			p("- %s\n", f)
		}
		p("\n")
	}
	if svgName != "" {
		p("![throughput per system per cell](%s)\n\n", svgName)
	}

	okiba := okibaSystems(t)
	for _, s := range []string{"s1", "s2", "s3", "s4", "s5", "s7", "s6", "s8"} {
		cells := t.Cells[s]
		if len(cells) == 0 {
			continue
		}
		p("## %s — %s\n\n", strings.ToUpper(s), harness.ScenarioTitle(s))
		switch s {
		case "s1":
			latencyTable(w, t, s, cells, false)
		case "s2":
			rateTables(w, t, s, cells)
			ratioTable(w, t, s, cells, okiba)
			latencyTable(w, t, s, cells, false)
		case "s3", "s8":
			rateTables(w, t, s, cells)
			ratioTable(w, t, s, cells, okiba)
			latencyTable(w, t, s, cells, true)
		case "s4":
			openLoopTable(w, t, s, cells)
		case "s5", "s7":
			backlogTable(w, t, s, cells)
		case "s6":
			leaseTable(w, t, s, cells)
		}
		resourceTable(w, t, s, cells)
		skipped(w, t, s, cells)
	}
	for _, s := range []string{"t1", "t2", "t3", "t4"} {
		cells := t.Cells[s]
		if len(cells) == 0 {
			continue
		}
		p("## %s — %s\n\n", strings.ToUpper(s), harness.ScenarioTitle(s))
		topicTable(w, t, s, cells)
		resourceTable(w, t, s, cells)
		skipped(w, t, s, cells)
	}
}

// topicTable: one row per cell and system, the medians (min–max) of the headline rate
// and of the other figures the topic scenarios record.
func topicTable(w io.Writer, t *Table, s string, cells []harness.Cell) {
	mm := func(a *Agg, f func(harness.Result) float64) string {
		lo, hi := 0.0, 0.0
		for i, r := range a.Runs {
			v := f(r)
			if i == 0 || v < lo {
				lo = v
			}
			if i == 0 || v > hi {
				hi = v
			}
		}
		num := func(v float64) string {
			if v >= 100 || v <= -100 {
				return fmt.Sprintf("%.0f", v)
			}
			return fmt.Sprintf("%.3g", v)
		}
		m := a.Med(f)
		if len(a.Runs) < 2 {
			return num(m)
		}
		return fmt.Sprintf("%s (%s–%s)", num(m), num(lo), num(hi))
	}
	extra := func(k string) func(harness.Result) float64 {
		return func(r harness.Result) float64 { return r.Extra[k] }
	}
	cols := map[string][]string{
		"t1": {},
		"t2": {"filled", "drained", "deliveries", "drain_seconds"},
		"t3": {"published", "write_bytes_per_publish_settled", "disk_growth_per_publish", "drained", "drain_expected"},
		"t4": {"segment_bytes", "dd_mb_s", "read_mb_s", "payload_mb_s", "read_vs_dd", "rss_anon_start", "rss_anon_min", "rss_anon_max"},
	}[s]
	fmt.Fprintf(w, "| cell | system | runs | rate (msg/s) | publish msg/s | consume msg/s | write B/msg (window) |")
	for _, k := range cols {
		fmt.Fprintf(w, " %s |", k)
	}
	fmt.Fprintf(w, " note |\n|%s\n", strings.Repeat("---|", 8+len(cols)))
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		fmt.Fprintf(w, "| %s | `%s` | %d | %s | %s | %s | %s |", c.Name, sys.Name, len(a.Runs),
			mm(a, func(r harness.Result) float64 { return r.Rate }),
			mm(a, func(r harness.Result) float64 { return r.PublishRate }),
			mm(a, func(r harness.Result) float64 { return r.ConsumeRate }),
			mm(a, func(r harness.Result) float64 { return r.WriteBytesPerMsg }))
		for _, k := range cols {
			fmt.Fprintf(w, " %s |", mm(a, extra(k)))
		}
		note := a.Runs[0].Note
		if a.Runs[0].FirstError != "" {
			note = strings.TrimSpace(note + " error: " + a.Runs[0].FirstError)
		}
		fmt.Fprintf(w, " %s |\n", note)
	})
	fmt.Fprintln(w)
}

func ms(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 100:
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func rate(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func okibaSystems(t *Table) []string {
	var out []string
	for _, s := range t.Systems {
		if s.Peer == "okiba" {
			out = append(out, s.Name)
		}
	}
	return out
}

// eachRun calls f for every system that ran each cell (skipped ones left out): the
// rows of the per-system tables, cells in order, systems in run order.
func eachRun(t *Table, s string, cells []harness.Cell, f func(c harness.Cell, sys harness.Info, a *Agg)) {
	for _, c := range cells {
		for _, sys := range t.Systems {
			if a := t.Get(s, c.Name, sys.Name); a != nil && len(a.Runs) > 0 {
				f(c, sys, a)
			}
		}
	}
}

// Latency percentiles, for Agg.MedLat.
func latP50(l *harness.Latency) float64  { return l.P50 }
func latP90(l *harness.Latency) float64  { return l.P90 }
func latP99(l *harness.Latency) float64  { return l.P99 }
func latP999(l *harness.Latency) float64 { return l.P999 }
func latMax(l *harness.Latency) float64  { return l.Max }

func cellText(a *Agg) string {
	switch {
	case a == nil:
		return ""
	case a.Skipped != "":
		return "n/a"
	case a.Failed != "":
		return "failed"
	case len(a.Runs) > 1 && a.Max > a.Min:
		return fmt.Sprintf("%s (%s–%s)", rate(a.Rate), rate(a.Min), rate(a.Max))
	}
	return rate(a.Rate)
}

// rateTables writes one table for durable systems (okiba and the limit included) and
// one for relaxed systems: cells as rows, systems as columns, msg/s.
func rateTables(w io.Writer, t *Table, s string, cells []harness.Cell) {
	durable := append(t.SystemsOf(harness.Durable), t.SystemsOf(harness.Limit)...)
	relaxed := t.SystemsOf(harness.Relaxed)
	table := func(title string, systems []harness.Info) {
		if len(systems) == 0 {
			return
		}
		fmt.Fprintf(w, "%s, msg/s (median, min–max):\n\n| cell |", title)
		for _, sys := range systems {
			fmt.Fprintf(w, " `%s` |", sys.Name)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(systems)))
		for _, c := range cells {
			fmt.Fprintf(w, "| %s |", c.Name)
			for _, sys := range systems {
				fmt.Fprintf(w, " %s |", cellText(t.Get(s, c.Name, sys.Name)))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
	table("Durable (confirmed after fsync)", durable)
	table("**Relaxed — confirmed before fsync, not comparable with the durable figures**", relaxed)
}

// ratioTable: okiba / peer for every durable peer, and okiba as a share of the limit.
func ratioTable(w io.Writer, t *Table, s string, cells []harness.Cell, okiba []string) {
	var cols []harness.Info
	for _, p := range append(t.SystemsOf(harness.Durable), t.SystemsOf(harness.Limit)...) {
		if p.Peer != "okiba" {
			cols = append(cols, p)
		}
	}
	if len(cols) == 0 {
		return
	}
	for _, o := range okiba {
		some := false
		var b strings.Builder
		fmt.Fprintf(&b, "Ratio `%s` / peer (same session, medians; > 1 means okiba is faster):\n\n| cell |", o)
		for _, c := range cols {
			fmt.Fprintf(&b, " `%s` |", c.Name)
		}
		fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(cols)))
		for _, c := range cells {
			fmt.Fprintf(&b, "| %s |", c.Name)
			for _, p := range cols {
				r := t.Ratio(s, c.Name, o, p.Name)
				if r == 0 {
					fmt.Fprintf(&b, " – |")
				} else {
					some = true
					fmt.Fprintf(&b, " %.2f |", r)
				}
			}
			fmt.Fprintln(&b)
		}
		if some {
			fmt.Fprintf(w, "%s\n", b.String())
		}
	}
}

func latencyTable(w io.Writer, t *Table, s string, cells []harness.Cell, e2e bool) {
	kind := "publish → confirm"
	if e2e {
		kind = "end to end (publish → receive)"
		fmt.Fprintf(w, "Closed loop: producers keep their window full whatever the consumers do, so where producers outrun consumers the queue grows during the cell and end-to-end latency measures that backlog (compare publish and consume rates); S4 measures latency at a fixed rate.\n\n")
	}
	fmt.Fprintf(w, "Latency, %s (medians over repeats):\n\n| cell | system | msg/s | published msg/s | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|---|\n", kind)
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		if a.Rate == 0 {
			return
		}
		f := func(g func(*harness.Latency) float64) string { return ms(a.MedLat(e2e, g)) }
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", c.Name, sys.Name, rate(a.Rate),
			rate(a.Med(func(r harness.Result) float64 { return r.PublishRate })),
			f(latP50), f(latP90), f(latP99), f(latP999), f(latMax))
	})
	fmt.Fprintln(w)
}

func openLoopTable(w io.Writer, t *Table, s string, cells []harness.Cell) {
	fmt.Fprintf(w, "Open-loop schedule at a fraction of each system's own s3 4/4 batched rate; latency from the *intended* send time (no coordinated omission):\n\n")
	fmt.Fprintf(w, "| cell | system | target msg/s | achieved | e2e p50 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|\n")
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		f := func(g func(*harness.Latency) float64) string { return ms(a.MedLat(true, g)) }
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s | %s | %s |\n", c.Name, sys.Name,
			rate(a.Med(func(r harness.Result) float64 { return r.TargetRate })), rate(a.Rate),
			f(latP50), f(latP99), f(latP999), f(latMax))
	})
	fmt.Fprintln(w)
}

func gib(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", v/(1<<20))
}

func backlogTable(w io.Writer, t *Table, s string, cells []harness.Cell) {
	fmt.Fprintf(w, "| cell | system | filled | fill msg/s | RSS after fill | disk after fill | restart: accepting | restart: first receive | drain msg/s | drain CPU µs/msg, broker + client | note |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		sec := func(k string) string {
			if v, ok := a.Extra(k); ok {
				return fmt.Sprintf("%.2f s", v)
			}
			return "–"
		}
		note := a.Runs[0].Note
		if a.Runs[0].FirstError != "" {
			note = strings.TrimSpace(note + " error: " + a.Runs[0].FirstError)
		}
		// The drain's own CPU window: on a shared machine the drain is bound by CPU per
		// message, client included, more than by the disk.
		dcpu := "–"
		if v, ok := a.Extra("drain_broker_cpu_us_per_msg"); ok {
			dcpu = fmt.Sprintf("%.1f + %.1f", v, a.extra("drain_client_cpu_us_per_msg"))
		}
		fmt.Fprintf(w, "| %s | `%s` | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Name, sys.Name, a.extra("filled"), rate(a.Rate),
			gib(a.extra("rss_after_fill")), gib(a.extra("disk_after_fill")), sec("restart_accepting_s"), sec("restart_first_receive_s"),
			rate(a.Med(func(r harness.Result) float64 { return r.ConsumeRate })), dcpu, note)
	})
	fmt.Fprintln(w)
}

func leaseTable(w io.Writer, t *Table, s string, cells []harness.Cell) {
	fmt.Fprintf(w, "| cell | system | first pass msg/s | total s | redeliveries | expected | extra deliveries | never delivered |\n|---|---|---|---|---|---|---|---|\n")
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		fmt.Fprintf(w, "| %s | `%s` | %s | %.1f | %.0f | %.0f | %.0f | %.0f |\n", c.Name, sys.Name, rate(a.Rate), a.extra("total_seconds"),
			a.extra("redeliveries"), a.extra("redeliveries_expected"), a.extra("extra_deliveries"), a.extra("never_delivered"))
	})
	fmt.Fprintln(w)
}

func resourceTable(w io.Writer, t *Table, s string, cells []harness.Cell) {
	type row struct {
		cell, sys string
		a         *Agg
	}
	var rows []row
	eachRun(t, s, cells, func(c harness.Cell, sys harness.Info, a *Agg) {
		if a.Rate > 0 || s == "s5" || s == "s7" {
			rows = append(rows, row{c.Name, sys.Name, a})
		}
	})
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "<details><summary>Resources per cell (broker CPU from /proc of its process tree; client = the harness process)</summary>\n\n")
	fmt.Fprintf(w, "| cell | system | broker CPU µs/msg | client CPU µs/msg | broker PSS peak | broker write_bytes/msg | device B/msg | device flushes/s | system fsyncs/s |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		f := func(g func(harness.Result) float64, format string) string {
			v := r.a.Med(g)
			if v == 0 || math.IsNaN(v) {
				return "–"
			}
			return fmt.Sprintf(format, v)
		}
		fs := "–"
		var xs []float64
		for _, run := range r.a.Runs {
			if run.FsyncsPerSec != nil {
				xs = append(xs, *run.FsyncsPerSec)
			}
		}
		if len(xs) > 0 {
			fs = fmt.Sprintf("%.0f", harness.Median(xs))
		}
		info, _ := t.Info(r.sys)
		cpu := f(func(x harness.Result) float64 { return x.BrokerCPUPerMsg }, "%.1f")
		pss := gib(r.a.Med(func(x harness.Result) float64 { return float64(x.RSS) }))
		if info.InProcess {
			cpu, pss = "(in client)", "(harness) "+pss
		}
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.cell, r.sys, cpu,
			f(func(x harness.Result) float64 { return x.ClientCPUPerMsg }, "%.1f"), pss,
			f(func(x harness.Result) float64 { return x.WriteBytesPerMsg }, "%.0f"),
			f(func(x harness.Result) float64 { return x.DeviceBytesPerMsg }, "%.0f"),
			f(func(x harness.Result) float64 { return x.DiskFlushesPerSec }, "%.0f"), fs)
	}
	fmt.Fprintf(w, "\nbroker write_bytes is /proc/<pid>/io of the broker's processes: bytes handed to the page cache for writing, counted when pages are dirtied, so a page rewritten by every commit counts every time (PostgreSQL's WAL writes show this most). Device B/msg and device flushes count what the block device wrote and flushed: the whole machine's, other work on it included. System fsyncs: okiba from `okiba_wal_syncs_total` on its /metrics endpoint (blank when the build serves none), the log ceiling from its wal stats, PostgreSQL from pg_stat_wal.wal_sync; the other peers expose no fsync counter, so they are blank. For in-process systems (SQLite, goqite, the ceiling) CPU, PSS and writes are the harness process's own, load generator included.\n\n</details>\n\n")
}

func skipped(w io.Writer, t *Table, s string, cells []harness.Cell) {
	reasons := map[string][]string{}
	var failed []string
	for _, c := range cells {
		for _, sys := range t.Systems {
			a := t.Get(s, c.Name, sys.Name)
			if a == nil {
				continue
			}
			if a.Skipped != "" && !slices.Contains(reasons[a.Skipped], sys.Name) {
				reasons[a.Skipped] = append(reasons[a.Skipped], sys.Name)
			}
			if a.Failed != "" {
				failed = append(failed, fmt.Sprintf("`%s` on %s: %s", sys.Name, c.Name, a.Failed))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(w, "Not run on %s: %s.\n\n", "`"+strings.Join(reasons[k], "`, `")+"`", k)
	}
	for _, f := range failed {
		fmt.Fprintf(w, "Failed: %s\n\n", f)
	}
}
