// Package gcpace paces Go's garbage collector for a process whose live heap is mostly a
// long-lived index that grows with its backlog, as a broker's is.
//
// Go's default (GOGC=100) lets the heap grow by as much as is live before collecting
// again: with a small index that is a few megabytes and the collector runs very often; with
// a 10-million-message backlog (about a gigabyte of index) the process holds two. Neither
// suits a broker. gcpace allows a fixed headroom while the live heap is small (fewer
// collections than GOGC=100, so less CPU per message) and a fraction of it once it is
// large (memory that follows the backlog at 1.5× instead of 2×, docs/benchmarks.md "The deep backlog").
package gcpace

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Config says how much the heap may grow between collections:
// max(MinHeadroom, live × Percent / 100).
type Config struct {
	// MinHeadroom is the growth allowed however small the live heap. Defaults to
	// DefaultMinHeadroom, 256 MiB.
	MinHeadroom int64
	// Percent is the growth allowed, as a percentage of the live heap, once that is
	// larger than MinHeadroom. Defaults to 50 (Go's default is 100).
	Percent int
	// Interval is how often the live heap is looked at. Defaults to 1 s; the collector's
	// pace is changed only when it should move by more than a tenth.
	Interval time.Duration
}

// DefaultMinHeadroom is the default of Config.MinHeadroom.
const DefaultMinHeadroom = 256 << 20

func (c Config) withDefaults() Config {
	if c.MinHeadroom <= 0 {
		c.MinHeadroom = DefaultMinHeadroom
	}
	if c.Percent <= 0 {
		c.Percent = 50
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	return c
}

// maxPercent bounds the GOGC value given for a nearly empty heap, where MinHeadroom over
// a few megabytes would be thousands of percent.
const maxPercent = 10_000

// PercentFor returns the GOGC value that gives a heap of live bytes the growth Config
// allows.
func (c Config) PercentFor(live uint64) int {
	c = c.withDefaults()
	if live == 0 {
		return maxPercent
	}
	headroom := max(uint64(c.MinHeadroom), live*uint64(c.Percent)/100)
	p := (headroom*100 + live - 1) / live
	return int(min(p, maxPercent))
}

// Run paces the collector until ctx ends, then gives back the setting it found.
func Run(ctx context.Context, c Config) {
	c = c.withDefaults()
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	run(ctx, c, liveHeap, debug.SetGCPercent, t.C)
}

// run is Run with the live heap, the setting and the clock passed in, for the tests.
func run(ctx context.Context, c Config, live func() uint64, set func(int) int, tick <-chan time.Time) {
	cur := c.PercentFor(live())
	prev := set(cur)
	defer set(prev)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		p := c.PercentFor(live())
		if d := p - cur; d*10 > cur || -d*10 > cur {
			set(p)
			cur = p
		}
	}
}

// liveHeap is the heap the last collection found live (0 before the first).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
