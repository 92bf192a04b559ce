// Command backlogfill fills a broker in-process (no HTTP) with a deep backlog and reports
// the fill rate, the process's RSS and the collector's work every few seconds, so that the
// deep-backlog costs can be profiled apart from the network and the harness.
// docs/benchmarks.md ("The deep backlog") uses it.
//
//	go run ./cmd/backlogfill [--n 10000000] [--dir /tmp/backlogfill] [--debug]  # fill, then close
//	go run ./cmd/backlogfill --crash      # fill, then exit without closing (as kill -9)
//	go run ./cmd/backlogfill --reopen     # open what is there and report the recovery
//	go run ./cmd/backlogfill --raw        # the same appends to the bare log (wal), no broker
//
// With --debug the broker's debug log (checkpoints: size, duration, time the lock was
// held) goes to stderr. Producers: 4, each sending batches of 256 1 KiB bodies and
// waiting for each batch to be durable. The directory is removed at the end unless
// --crash.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

const (
	producers = 4
	batch     = 256
	bodySize  = 1024
)

func main() {
	n := flag.Int64("n", 10_000_000, "messages to send")
	dir := flag.String("dir", "/tmp/backlogfill", "data directory (removed first, unless --reopen)")
	crash := flag.Bool("crash", false, "exit after the fill without closing the broker")
	reopen := flag.Bool("reopen", false, "only open --dir and report the recovery")
	raw := flag.Bool("raw", false, "append to the bare log instead of the broker")
	debug := flag.Bool("debug", false, "the broker's debug log to stderr")
	flag.Parse()
	logger := slog.New(slog.DiscardHandler)
	if *debug {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var err error
	switch {
	case *reopen:
		err = reopenDir(*dir, logger)
	case *raw:
		err = fillRaw(*dir, *n)
	default:
		err = fillBroker(*dir, *n, *crash, logger)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "backlogfill:", err)
		os.Exit(1)
	}
}

func reopenDir(dir string, logger *slog.Logger) error {
	start := time.Now()
	br, err := broker.Open(broker.Config{Dir: dir, Logger: logger})
	if err != nil {
		return err
	}
	r := br.Recovery()
	fmt.Printf("reopened in %v: %d messages, %d records replayed, from a checkpoint: %v; rss %d MiB\n",
		time.Since(start).Round(time.Millisecond), r.Messages, r.Records, r.Checkpoint, rss()>>20)
	return br.Close()
}

func fillBroker(dir string, n int64, crash bool, logger *slog.Logger) error {
	os.RemoveAll(dir)
	ctx := context.Background()
	br, err := broker.Open(broker.Config{Dir: dir, Logger: logger})
	if err != nil {
		return err
	}
	if _, _, err := br.PutQueue(ctx, "backlog", nil); err != nil {
		return err
	}
	err = fill(n, func() func() error {
		in := make([]queue.SendInput, batch)
		for i := range in { // distinct bodies, as requests would bring
			in[i] = queue.SendInput{Payload: queue.Payload{Body: make([]byte, bodySize)}, Delay: -1}
		}
		return func() error {
			for i := range in {
				in[i].Payload.Body = make([]byte, bodySize)
			}
			_, err := br.Send(ctx, "backlog", in)
			return err
		}
	})
	if err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("live heap after a collection: %d MiB\n", ms.HeapAlloc>>20)
	if crash {
		os.Exit(0) // no Close, no final checkpoint: what kill -9 leaves
	}
	defer os.RemoveAll(dir)
	return br.Close()
}

func fillRaw(dir string, n int64) error {
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	l, err := wal.Open(wal.Options{Dir: dir}, 0, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		return err
	}
	defer l.Close()
	return fill(n, func() func() error {
		rec := make([]byte, bodySize+40) // about a send record's size
		return func() error {
			var t wal.Ticket
			for range batch {
				var err error
				if _, t, err = l.Append(rec); err != nil {
					return err
				}
			}
			return t.Wait(context.Background())
		}
	})
}

// fill runs producers calling their send (one batch each call) until n messages are
// sent, printing progress every 5 seconds.
func fill(n int64, newSend func() func() error) error {
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := time.Now()
	for range producers {
		send := newSend()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(batch) <= n {
				if err := send(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	last, lastT, peak := int64(0), start, int64(0)
	for {
		select {
		case err := <-errs:
			return err
		case <-done:
			fmt.Printf("%d messages in %v (%.0f/s), peak rss %d MiB\n", min(sent.Load(), n),
				time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds(), max(peak, rss())>>20)
			return nil
		case now := <-tick.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			c, r := min(sent.Load(), n), rss()
			peak = max(peak, r)
			fmt.Printf("%4.0fs %10d %8.0f/s  rss %5d MiB  heap %5d MiB  gc %3d cycles, pauses %v\n",
				now.Sub(start).Seconds(), c, float64(c-last)/now.Sub(lastT).Seconds(), r>>20,
				ms.HeapAlloc>>20, ms.NumGC, time.Duration(ms.PauseTotalNs).Round(time.Microsecond))
			last, lastT = c, now
		}
	}
}

// rss is the process's resident set from /proc (0 where there is none).
func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}
