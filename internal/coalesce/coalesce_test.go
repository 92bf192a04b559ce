package coalesce

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// slowBuffer records writes, holding each until released, so that writes from other
// goroutines pile up behind a running one.
type slowBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	hold   chan struct{}
}

func (s *slowBuffer) Write(p []byte) (int, error) {
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.buf.Write(p)
}

func TestConcurrentWritesArriveWholeAndCoalesce(t *testing.T) {
	sb := &slowBuffer{hold: make(chan struct{})}
	w := New(sb)
	const n = 50
	var wg sync.WaitGroup
	first := make(chan struct{})
	wg.Go(func() { // the first write is held, so the others queue behind it
		close(first)
		if err := w.Write(func(b []byte) []byte { return append(b, "<first>"...) }); err != nil {
			t.Error(err)
		}
	})
	<-first
	for i := range n {
		wg.Go(func() {
			if err := w.Write(func(b []byte) []byte { return fmt.Appendf(b, "<%d>", i) }); err != nil {
				t.Error(err)
			}
		})
	}
	// Release writes until everything is out.
	go func() {
		for {
			sb.mu.Lock()
			done := bytes.Count(sb.buf.Bytes(), []byte("<")) == n+1
			sb.mu.Unlock()
			if done {
				close(sb.hold)
				return
			}
			sb.hold <- struct{}{}
		}
	}()
	wg.Wait()
	out := sb.buf.String()
	for i := range n {
		if bytes.Count([]byte(out), fmt.Appendf(nil, "<%d>", i)) != 1 {
			t.Fatalf("write %d missing or repeated in %q", i, out)
		}
	}
	if sb.writes >= n+1 {
		t.Errorf("%d writes for %d pieces: nothing was coalesced", sb.writes, n+1)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("broken pipe")
}

func TestAnErrorSticks(t *testing.T) {
	f := &failing{}
	w := New(f)
	for range 3 {
		if err := w.Write(func(b []byte) []byte { return append(b, 'x') }); err == nil || err.Error() != "broken pipe" {
			t.Fatalf("Write: %v, want the first error", err)
		}
	}
	if f.n != 1 {
		t.Fatalf("%d writes reached a broken writer, want 1", f.n)
	}
}
