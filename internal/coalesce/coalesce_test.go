package coalesce

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowBuffer records writes, holding each until released, so that writes from other
// goroutines pile up behind a running one; entered, if set, hears of each write begun.
type slowBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	hold    chan struct{}
	entered chan struct{}
}

func (s *slowBuffer) Write(p []byte) (int, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.buf.Write(p)
}

func TestConcurrentWritesArriveWholeAndCoalesce(t *testing.T) {
	t.Parallel()
	const n = 50
	sb := &slowBuffer{hold: make(chan struct{}), entered: make(chan struct{}, n+1)}
	w := New(sb)
	var first sync.WaitGroup
	first.Go(func() { // the first write is held, so the others queue behind it
		if err := w.Write(func(b []byte) []byte { return append(b, "<first>"...) }); err != nil {
			t.Error(err)
		}
	})
	<-sb.entered // the first write is under way, held in the connection
	var others sync.WaitGroup
	for i := range n {
		others.Go(func() {
			// A write that finds one running adds its bytes and returns at once.
			if err := w.Write(func(b []byte) []byte { return fmt.Appendf(b, "<%d>", i) }); err != nil {
				t.Error(err)
			}
		})
	}
	queued := make(chan struct{})
	go func() { others.Wait(); close(queued) }()
	select {
	case <-queued:
	case <-time.After(10 * time.Second):
		close(sb.hold)
		t.Fatal("writes waited for the connection instead of handing their bytes to the running write")
	}
	close(sb.hold)
	first.Wait()
	out := sb.buf.String()
	for i := range n {
		if bytes.Count([]byte(out), fmt.Appendf(nil, "<%d>", i)) != 1 {
			t.Fatalf("write %d missing or repeated in %q", i, out)
		}
	}
	if sb.writes != 2 {
		t.Errorf("%d writes for %d pieces, want 2: the first, and all the others together", sb.writes, n+1)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("broken pipe")
}

func TestAnErrorSticks(t *testing.T) {
	t.Parallel()
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

// vectored records each WriteBuffers call as one write.
type vectored struct {
	slowBuffer
	vectors int
}

func (v *vectored) WriteBuffers(bufs *net.Buffers) (int64, error) {
	v.mu.Lock()
	v.vectors++
	v.mu.Unlock()
	var n int64
	for _, b := range *bufs {
		m, err := v.slowBuffer.Write(b)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestLargeBodiesKeepTheirPlaceAndAreNotCopied(t *testing.T) {
	t.Parallel()
	for _, vec := range []bool{false, true} {
		sb := &vectored{slowBuffer: slowBuffer{hold: make(chan struct{}), entered: make(chan struct{}, 8)}}
		var w *Writer
		if vec {
			w = New(sb)
		} else {
			w = New(&sb.slowBuffer)
		}
		large := bytes.Repeat([]byte("L"), LargeBody)
		var first sync.WaitGroup
		first.Go(func() {
			if err := w.Write(func(b []byte) []byte { return append(b, "<first>"...) }); err != nil {
				t.Error(err)
			}
		})
		<-sb.entered // held: what follows queues behind the running write
		if err := w.WriteBody(func(b []byte) []byte { return append(b, "<head>"...) }, large); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteBody(func(b []byte) []byte { return append(b, "<small>"...) }, []byte("s")); err != nil {
			t.Fatal(err)
		}
		large[0] = 'X' // handed over: the writer sends what it holds, which is this slice
		go func() {
			for range sb.entered {
			}
		}()
		close(sb.hold)
		first.Wait()
		close(sb.entered)
		want := "<first><head>X" + strings.Repeat("L", LargeBody-1) + "<small>s"
		if got := sb.buf.String(); got != want {
			t.Fatalf("vectored %v: output of %d bytes is not the pieces in order (%d bytes)", vec, len(got), len(want))
		}
		if vec && sb.vectors != 1 {
			t.Errorf("%d vectored writes after the first, want 1", sb.vectors)
		}
	}
}
