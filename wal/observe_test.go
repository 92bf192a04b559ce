package wal_test

import (
	"sync"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// observer collects commits; the flusher calls it, so it locks.
type observer struct {
	mu      sync.Mutex
	commits []wal.Commit
}

func (o *observer) Committed(c wal.Commit) {
	o.mu.Lock()
	o.commits = append(o.commits, c)
	o.mu.Unlock()
}

// TestObserverSeesEveryCommit: every record is in exactly one observed commit, and
// each commit reports its size and timings, including across segment rolls.
func TestObserverSeesEveryCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var o observer
	opts := memOpts(vfs.NewMemFS())
	opts.Observer = &o
	l, _ := openLog(t, opts, 0)
	const n = 200 // several 4 KiB segments
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			_, tk, err := l.Append(payload(g))
			if err != nil {
				t.Error(err)
				return
			}
			if err := tk.Wait(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// The flusher reports a commit after waking its waiters: Close waits for it.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	o.mu.Lock()
	defer o.mu.Unlock()
	records, bytes := 0, 0
	for _, c := range o.commits {
		if c.Records <= 0 || c.Bytes <= 0 || c.Wait <= 0 || c.Wait < c.Sync {
			t.Fatalf("commit %+v", c)
		}
		records += c.Records
		bytes += c.Bytes
	}
	if records != n || uint64(records) != st.Records || uint64(bytes) != st.Bytes || uint64(len(o.commits)) != st.Batches {
		t.Fatalf("observed %d commits, %d records, %d bytes; stats %+v", len(o.commits), records, bytes, st)
	}
}
