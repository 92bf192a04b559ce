package gcpace

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	t.Parallel()
	c := Config{MinHeadroom: 256 << 20, Percent: 50}
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, maxPercent},
		{1 << 20, maxPercent}, // 256 MiB over 1 MiB: capped
		{64 << 20, 400},       // small heap: the fixed headroom
		{256 << 20, 100},      // the same as Go's default
		{512 << 20, 50},       // from here on, the fraction
		{4 << 30, 50},         // a deep backlog: 1.5× what is live
		{300 << 20, 86},       // 256/300 rounded up
	} {
		if got := c.PercentFor(tc.live); got != tc.want {
			t.Errorf("PercentFor(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
	if got := (Config{}).PercentFor(1 << 30); got != 50 {
		t.Errorf("defaults: PercentFor(1 GiB) = %d, want 50", got)
	}
}

// run follows the live heap, changes the setting only for moves of more than a tenth, and
// gives back what it found when it ends.
func TestRunFollowsTheLiveHeap(t *testing.T) {
	t.Parallel()
	var live atomic.Uint64
	live.Store(64 << 20)
	var sets []int
	setting := 100
	set := func(p int) int { sets = append(sets, p); old := setting; setting = p; return old }
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		run(ctx, Config{MinHeadroom: 256 << 20, Percent: 50}, live.Load, set, tick)
		close(done)
	}()
	tick <- time.Time{} // run has read the first live heap once it takes a tick
	step := func(l uint64) {
		live.Store(l)
		tick <- time.Time{}
		tick <- time.Time{} // the first tick's work is done once the second is taken
	}
	step(66 << 20)   // 388%: within a tenth of 400, left alone
	step(1 << 30)    // 50%
	step(1100 << 20) // still 50
	step(128 << 20)  // 200%
	cancel()
	<-done
	want := []int{400, 50, 200, 100}
	if len(sets) != len(want) {
		t.Fatalf("settings %v, want %v", sets, want)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("settings %v, want %v", sets, want)
		}
	}
}

// On the real runtime, through what Run uses: the live heap from runtime/metrics and
// debug.SetGCPercent. The setting is read back from runtime/metrics once run has made it,
// and the one found is back after run ends.
func TestRunSetsTheRuntime(t *testing.T) {
	// Not parallel: the collector's setting is the process's, and this test sets it and
	// reads it back.
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	runtime.GC() // a live heap to read
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan int, 2)
	set := func(p int) int { old := debug.SetGCPercent(p); sets <- p; return old }
	done := make(chan struct{})
	go func() {
		// With a terabyte of headroom, any real heap gets the cap.
		run(ctx, Config{MinHeadroom: 1 << 40}.withDefaults(), liveHeap, set, nil)
		close(done)
	}()
	if p := <-sets; p != maxPercent || gogc() != maxPercent {
		t.Fatalf("set %d, runtime at %d; want %d", p, gogc(), maxPercent)
	}
	cancel()
	<-done
	if p := gogc(); p != 100 {
		t.Fatalf("after run, GC percent %d, want the 100 it found", p)
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
