package harness

import (
	"context"
	"sync"
	"testing"
	"time"
)

// asyncProducer confirms each publish from another goroutine, as the peers' clients
// do, and checks that no message was stamped before the confirm of the one before it
// when the window is 1: such a stamp would count the wait for the window slot as the
// message's own ack latency.
type asyncProducer struct {
	t        *testing.T
	mu       sync.Mutex
	lastDone time.Time
	early    int
	n        int
	wg       sync.WaitGroup
}

func (p *asyncProducer) Publish(m Msg, done func(error)) {
	stamp, _, ok := ReadStamp(m.Body)
	if !ok {
		p.t.Errorf("body without a stamp")
	}
	p.mu.Lock()
	if stamp.Before(p.lastDone) {
		p.early++
	}
	p.n++
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		time.Sleep(100 * time.Microsecond)
		p.mu.Lock()
		p.lastDone = time.Now()
		p.mu.Unlock()
		done(nil)
	}()
}

func (p *asyncProducer) Close() error { p.wg.Wait(); return nil }

func TestClosedLoopStampsWhenASlotIsFree(t *testing.T) {
	pr := &asyncProducer{t: t}
	now := time.Now()
	m := &meter{from: now, to: now.Add(100 * time.Millisecond)}
	l := load{size: 64, producers: 1, window: 1}
	if err := produce(context.Background(), pr, 0, l, 0, m); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	if pr.n < 10 {
		t.Fatalf("only %d publishes in 100ms", pr.n)
	}
	if pr.early > 0 {
		t.Errorf("%d of %d messages were stamped before the previous one was confirmed", pr.early, pr.n)
	}
	if got := m.ack.Count(); got == 0 || got > uint64(pr.n) {
		t.Errorf("ack latencies recorded: %d for %d publishes", got, pr.n)
	}
}
