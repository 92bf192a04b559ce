package wal_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// TestGroupCommit holds the first commit's fsync until every appender has
// appended. Appends must not wait for that I/O, and all the records that
// arrived meanwhile must then share one more fsync: a committer that synced
// per record would need one fsync each.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	const n = 100
	ctx := testCtx(t)
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	opts := memOpts(f)
	opts.SegmentSize = 64 << 10
	l, _ := openLog(t, opts, 0)

	allAppended := make(chan struct{})
	var syncs atomic.Int64
	var holdFirst sync.Once
	f.SetHook(func(e vfs.Event) error {
		if e.Op == vfs.OpSync && filepath.Base(e.Name) == "00000001.wal" {
			syncs.Add(1)
			holdFirst.Do(func() {
				select {
				case <-allAppended:
				case <-ctx.Done():
				}
			})
		}
		return nil
	})

	var (
		wg       sync.WaitGroup
		appended atomic.Int64
		mu       sync.Mutex
		want     []rec
	)
	for g := range n {
		wg.Go(func() {
			pos, tk, err := l.Append(payload(g))
			if err != nil {
				t.Error(err)
			}
			if appended.Add(1) == n {
				close(allAppended)
			}
			if err := tk.Wait(ctx); err != nil {
				t.Error(err)
			}
			mu.Lock()
			want = append(want, rec{pos, string(payload(g))})
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if s := syncs.Load(); s > 2 {
		t.Fatalf("%d fsyncs for %d concurrent records, want at most 2", s, n)
	}
	if st := l.Stats(); st.Batches > 2 || st.Records != n || st.Syncs != uint64(syncs.Load()) {
		t.Fatalf("Stats = %+v", st)
	}
	if l.Durable() != l.End() {
		t.Fatalf("Durable %v, End %v", l.Durable(), l.End())
	}
	l.Close()
	_, got := openLog(t, memOpts(m.Crash()), 0)
	if len(got) != n {
		t.Fatalf("%d records survived a crash, want %d", len(got), n)
	}
	byPos := map[wal.Pos]string{}
	for _, r := range want {
		byPos[r.pos] = r.data
	}
	for _, r := range got {
		if byPos[r.pos] != r.data {
			t.Fatalf("record at %v = %.20q, appended %.20q", r.pos, r.data, byPos[r.pos])
		}
	}
}

// TestGroupCommitOnDisk checks batching with real fsyncs, where the
// flusher's sync time is what lets the batches grow.
func TestGroupCommitOnDisk(t *testing.T) {
	// On a real disk, with real fsyncs. How many records one fsync carries depends on how
	// the appenders are scheduled against the flusher (a loaded machine gave 3 a fsync,
	// for the 4 checked): each segment fsync is held until every appender still running
	// has appended its next record, so that what is checked is the log's batching, not
	// the scheduler's luck. Held at most a second, so a log that does not batch fails on
	// the count rather than hangs.
	const goroutines, each = 32, 20
	var pending, active atomic.Int64
	active.Store(goroutines)
	changed := make(chan struct{}, 1) // a signal each time pending or active moves
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	f := vfs.NewFaulty(vfs.OS, nil)
	f.SetHook(func(e vfs.Event) error {
		if e.Op == vfs.OpSync && filepath.Ext(e.Name) == ".wal" {
			deadline := time.NewTimer(time.Second)
			defer deadline.Stop()
			for pending.Load() < active.Load() {
				select {
				case <-changed:
				case <-deadline.C:
					return nil
				}
			}
		}
		return nil
	})
	l, _ := openLog(t, wal.Options{FS: f, Dir: t.TempDir(), SegmentSize: 1 << 20}, 0)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			defer signal()
			defer active.Add(-1)
			for i := range each {
				_, tk, err := l.Append(payload(g*each + i))
				pending.Add(1)
				signal()
				if err == nil {
					err = tk.Wait(ctx)
				}
				pending.Add(-1)
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("%d records in %d batches with %d fsyncs", st.Records, st.Batches, st.Syncs)
	if st.Records != goroutines*each || st.Syncs*4 > st.Records {
		t.Fatalf("Stats = %+v: fewer than 4 records per fsync with %d concurrent appenders", st, goroutines)
	}
}

func TestWaitContext(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	release := make(chan struct{})
	syncing := make(chan struct{}, 1)
	f.SetHook(vfs.Match(vfs.IsOp(vfs.OpSync), func(vfs.Event) error {
		select {
		case syncing <- struct{}{}:
		default:
		}
		<-release
		return nil
	}))
	pos, tk, err := l.Append([]byte("slow"))
	if err != nil {
		t.Fatal(err)
	}
	l.Commit()
	// The flusher commits the record (nobody waits for it yet) and is held in
	// its fsync; a waiter that finds its batch being committed honours ctx. (A
	// waiter that commits its batch itself, when no commit runs, returns when
	// its one write and fsync are done.)
	<-syncing
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := tk.Wait(ctx); err == nil {
		t.Fatal("Wait returned nil while the fsync was held")
	}
	if err := l.WaitDurable(ctx, pos); err == nil {
		t.Fatal("WaitDurable returned nil while the fsync was held")
	}
	close(release)
	if err := l.WaitDurable(testCtx(t), pos); err != nil {
		t.Fatal(err)
	}
	if err := (wal.Ticket{}).Wait(ctx); err != nil {
		t.Fatalf("zero Ticket: %v", err)
	}
}

// TestBatchSpansSegments holds the flusher in its first fsync while many
// records pile up, so that the next batch crosses several segment rolls,
// and checks that all of it is durable once its last ticket completes.
func TestBatchSpansSegments(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	opts := memOpts(f)
	opts.NoPrecreate = false
	l, _ := openLog(t, opts, 0)
	release := make(chan struct{})
	var once sync.Once
	firstSegmentSync := func(e vfs.Event) bool { return e.Op == vfs.OpSync && vfs.OnFile("00000001.wal")(e) }
	f.SetHook(vfs.Match(firstSegmentSync, func(vfs.Event) error {
		once.Do(func() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return nil
	}))
	var want []rec
	var last wal.Ticket
	for i := 0; len(want) == 0 || want[len(want)-1].pos.Segment() < 5; i++ {
		pos, tk, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rec{pos, string(payload(i))})
		last = tk
	}
	close(release)
	if err := last.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Batches > 2 || st.Syncs < 5 {
		t.Fatalf("Stats = %+v: want at most 2 batches, and a sync per segment finished", st)
	}
	_, got := openLog(t, memOpts(m.Crash()), 0)
	sameRecords(t, got, want)
}
