package wal_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/okiba/okiba/wal"
)

// BenchmarkAppendSync measures durable appends on the real file system:
// every operation is an Append followed by a Wait for its fsync. With
// writers=serial one goroutine does this, so each op pays a whole fsync;
// with writers=64xCPU many goroutines do it at once, as broker requests
// would, and group commit shares each fsync. msgs/s is the durable
// throughput, fsyncs/op how many fsyncs each record cost.
func BenchmarkAppendSync(b *testing.B) {
	for _, size := range []int{128, 1024} {
		for _, parallel := range []bool{false, true} {
			writers := "serial"
			if parallel {
				writers = "64xCPU"
			}
			b.Run(fmt.Sprintf("size=%d/writers=%s", size, writers), func(b *testing.B) {
				benchmarkAppendSync(b, size, parallel)
			})
		}
	}
}

func benchmarkAppendSync(b *testing.B, size int, parallel bool) {
	l, err := wal.Open(wal.Options{Dir: b.TempDir()}, 0, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	appendSync := func(p []byte) error {
		_, tk, err := l.Append(p)
		if err == nil {
			err = tk.Wait(ctx)
		}
		return err
	}
	var lat []time.Duration
	before := l.Stats()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	if parallel {
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			p := make([]byte, size)
			for pb.Next() {
				if err := appendSync(p); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		p := make([]byte, size)
		lat = make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			if err := appendSync(p); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) > 0 { // serial: each op is one durable append's latency
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	after := l.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(after.Syncs-before.Syncs)/float64(b.N), "fsyncs/op")
}
