// Package report turns a run's results into the Markdown report and the SVG chart:
// medians and spread over the repeats, okiba/peer ratios computed from the same
// session's interleaved runs, and the durable and relaxed systems in separate tables.
package report

import (
	"slices"

	"github.com/okiba/okiba/bench/harness"
)

// Agg is one system on one cell, over its repeats.
type Agg struct {
	Runs     []harness.Result
	Rate     float64 // median
	Min, Max float64
	Skipped  string
	Failed   string // the first error, when no repeat produced a rate
}

func med(rs []harness.Result, f func(harness.Result) float64) float64 {
	var xs []float64
	for _, r := range rs {
		if v := f(r); v != 0 {
			xs = append(xs, v)
		}
	}
	return harness.Median(xs)
}

// Med is the median over the repeats of a figure (zeros, meaning "not measured", are
// left out).
func (a *Agg) Med(f func(harness.Result) float64) float64 { return med(a.Runs, f) }

// MedLat is the median over the repeats of one latency percentile.
func (a *Agg) MedLat(e2e bool, f func(*harness.Latency) float64) float64 {
	return a.Med(func(r harness.Result) float64 {
		l := r.Ack
		if e2e {
			l = r.E2E
		}
		if l == nil {
			return 0
		}
		return f(l)
	})
}

// Extra is the median of an extra figure.
func (a *Agg) Extra(k string) (float64, bool) {
	var xs []float64
	for _, r := range a.Runs {
		if v, ok := r.Extra[k]; ok {
			xs = append(xs, v)
		}
	}
	return harness.Median(xs), len(xs) > 0
}

// extra is the median of an extra figure, 0 when no repeat has it.
func (a *Agg) extra(k string) float64 {
	v, _ := a.Extra(k)
	return v
}

// Table is every aggregate of a run, by scenario, cell and system.
type Table struct {
	Cells   map[string][]harness.Cell // by scenario, in run order
	aggs    map[[3]string]*Agg
	Systems []harness.Info
}

// Aggregate groups a run's results.
func Aggregate(run *harness.Run) *Table {
	t := &Table{Cells: map[string][]harness.Cell{}, aggs: map[[3]string]*Agg{}, Systems: run.Systems}
	for _, r := range run.Results {
		k := [3]string{r.Cell.Scenario, r.Cell.Name, r.System}
		a := t.aggs[k]
		if a == nil {
			a = &Agg{}
			t.aggs[k] = a
			if !slices.ContainsFunc(t.Cells[r.Cell.Scenario], func(c harness.Cell) bool { return c.Name == r.Cell.Name }) {
				t.Cells[r.Cell.Scenario] = append(t.Cells[r.Cell.Scenario], r.Cell)
			}
		}
		if r.Skipped != "" {
			a.Skipped = r.Skipped
			continue
		}
		a.Runs = append(a.Runs, r)
	}
	for _, a := range t.aggs {
		var xs []float64
		for _, r := range a.Runs {
			if r.Rate > 0 {
				xs = append(xs, r.Rate)
			}
		}
		if len(xs) > 0 {
			a.Rate = harness.Median(xs)
			a.Min, a.Max = slices.Min(xs), slices.Max(xs)
		} else if len(a.Runs) > 0 {
			a.Failed = a.Runs[0].FirstError
			if a.Failed == "" {
				a.Failed = "no message confirmed"
			}
		}
	}
	return t
}

// Get returns the aggregate of a system on a cell, or nil.
func (t *Table) Get(scenario, cell, system string) *Agg {
	return t.aggs[[3]string{scenario, cell, system}]
}

// Info returns a system's description.
func (t *Table) Info(name string) (harness.Info, bool) {
	for _, s := range t.Systems {
		if s.Name == name {
			return s, true
		}
	}
	return harness.Info{}, false
}

// SystemsOf returns the systems of the run with the given durability, in run order.
func (t *Table) SystemsOf(d harness.Durability) []harness.Info {
	var out []harness.Info
	for _, s := range t.Systems {
		if s.Durability == d {
			out = append(out, s)
		}
	}
	return out
}

// Ratio is okiba's median over a peer's on one cell, from the same session's runs,
// or 0 when either is missing.
func (t *Table) Ratio(scenario, cell, okiba, peer string) float64 {
	a, b := t.Get(scenario, cell, okiba), t.Get(scenario, cell, peer)
	if a == nil || b == nil || a.Rate == 0 || b.Rate == 0 {
		return 0
	}
	return a.Rate / b.Rate
}
