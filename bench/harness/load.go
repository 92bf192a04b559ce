package harness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// load is what one steady cell runs: producers (closed loop with a window, or an
// open-loop schedule) and consumers, measured over [from, to).
type load struct {
	size      int
	producers int
	window    int
	openRate  float64 // > 0: open loop at this total rate (msg/s); window then only bounds memory
	consumers int
	prefetch  int
	ackEach   bool
	keys      int // > 0: messages carry group keys; order per key is checked
}

// meter counts what happened inside the measured window.
type meter struct {
	from, to time.Time

	pubOK, pubErr atomic.Int64
	acked         atomic.Int64
	consErr       atomic.Int64
	ack, e2e      Hist

	errMu    sync.Mutex
	firstErr string

	orderMu    sync.Mutex
	lastSeq    map[string]uint64
	violations atomic.Int64
}

func (m *meter) in(t time.Time) bool { return !t.Before(m.from) && t.Before(m.to) }

func (m *meter) fail(err error) {
	m.errMu.Lock()
	if m.firstErr == "" {
		m.firstErr = err.Error()
	}
	m.errMu.Unlock()
}

// groupKey is the key of message seq of producer p: each producer owns its keys, so
// that per-key send order is the producer's own order.
func groupKey(p int, local uint64, keysPerProducer int) string {
	return fmt.Sprintf("k%d-%d", p, local%uint64(keysPerProducer))
}

// runLoad runs l against q until m.to and returns once producers and consumers have
// stopped (outstanding publishes are waited for, up to 30s).
func runLoad(ctx context.Context, q Queue, l load, m *meter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var setupErr error
	var setupMu sync.Mutex
	setFail := func(err error) {
		setupMu.Lock()
		if setupErr == nil {
			setupErr = err
		}
		setupMu.Unlock()
		cancel()
	}
	if m.lastSeq == nil {
		m.lastSeq = map[string]uint64{}
	}
	keysPer := 0
	if l.keys > 0 {
		// Each producer owns its keys, so that a key's send order is its producer's.
		keysPer = max(l.keys/max(l.producers, 1), 1)
		l.window = min(l.window, keysPer)
	}
	for c := 0; c < l.consumers; c++ {
		cons, err := q.NewConsumer(ctx, ConsumerOptions{Prefetch: l.prefetch})
		if err != nil {
			return fmt.Errorf("new consumer: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			consume(ctx, cons, l, m)
		}()
	}
	prods := make([]Producer, l.producers)
	for p := range prods {
		pr, err := q.NewProducer(ctx, l.window)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("new producer: %w", err)
		}
		prods[p] = pr
	}
	var pwg sync.WaitGroup
	for p, pr := range prods {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := produce(ctx, pr, p, l, keysPer, m); err != nil {
				setFail(err)
			}
		}()
	}
	pwg.Wait()
	for _, pr := range prods {
		pr.Close()
	}
	// Consumers run to the end of the window even when producers stopped early.
	select {
	case <-time.After(time.Until(m.to)):
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	return setupErr
}

// produce publishes until m.to: closed loop with up to l.window outstanding, or on
// the open-loop schedule. It returns once every publish has its outcome, or with an
// error when they do not arrive within 30s of the end.
func produce(ctx context.Context, pr Producer, p int, l load, keysPer int, m *meter) error {
	window := max(l.window, 1)
	slots := make(chan struct{}, window)
	var local uint64
	// With group keys, a key's next message waits for its previous one's confirm:
	// confirms may come back out of order (a producer's requests race), and only a
	// confirmed message has a defined place in its group.
	var keyDone []chan struct{}
	if keysPer > 0 {
		keyDone = make([]chan struct{}, keysPer)
	}
	// publish sends one message stamped with intended, its scheduled time in an
	// open-loop run; a zero intended (closed loop) stamps the moment a window slot is
	// free, so that the latency is the publish's own and not also the wait for the
	// previous publish to be confirmed.
	publish := func(intended time.Time) bool {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		seq := uint64(p)<<30 | local&(1<<30-1)
		var msg Msg
		var confirmed chan struct{}
		if keysPer > 0 {
			msg.Group = groupKey(p, local, keysPer)
			k := local % uint64(keysPer)
			if prev := keyDone[k]; prev != nil {
				select {
				case <-prev:
				case <-ctx.Done():
					<-slots
					return false
				}
			}
			confirmed = make(chan struct{})
			keyDone[k] = confirmed
		}
		stamp := intended
		if stamp.IsZero() {
			stamp = time.Now()
		}
		msg.Body = NewBody(l.size, stamp, seq)
		local++
		pr.Publish(msg, func(err error) {
			if confirmed != nil {
				defer close(confirmed)
			}
			now := time.Now()
			if m.in(now) {
				if err != nil {
					m.pubErr.Add(1)
					m.fail(err)
				} else {
					m.pubOK.Add(1)
					m.ack.Record(now.Sub(stamp))
				}
			} else if err != nil {
				m.fail(err)
			}
			<-slots
		})
		return true
	}
	if l.openRate > 0 {
		interval := time.Duration(float64(time.Second) * float64(l.producers) / l.openRate)
		next := time.Now().Add(time.Duration(p) * interval / time.Duration(max(l.producers, 1)))
		for next.Before(m.to) && ctx.Err() == nil {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			// Publish everything due, stamped with its intended time: a late publish
			// counts its lateness (no coordinated omission).
			now := time.Now()
			for !next.After(now) && next.Before(m.to) {
				if !publish(next) {
					break
				}
				next = next.Add(interval)
			}
		}
	} else {
		for time.Now().Before(m.to) && ctx.Err() == nil {
			if !publish(time.Time{}) {
				break
			}
		}
	}
	deadline := time.After(30 * time.Second)
	for range window {
		select {
		case slots <- struct{}{}:
		case <-deadline:
			return fmt.Errorf("producer %d: publishes still unconfirmed 30s after the end", p)
		}
	}
	return nil
}

func consume(ctx context.Context, c Consumer, l load, m *meter) {
	prefetch := max(l.prefetch, 1)
	for ctx.Err() == nil {
		ds, err := c.Receive(ctx, prefetch)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.consErr.Add(1)
			m.fail(fmt.Errorf("receive: %w", err))
			time.Sleep(10 * time.Millisecond)
			continue
		}
		now := time.Now()
		for _, d := range ds {
			t, seq, ok := ReadStamp(d.Body)
			if ok && m.in(now) {
				m.e2e.Record(now.Sub(t))
			}
			if ok && l.keys > 0 {
				m.checkOrder(d.Group, seq)
			}
		}
		ackAt := func(n int, err error) {
			done := time.Now()
			if err != nil {
				if ctx.Err() == nil {
					m.consErr.Add(1)
					m.fail(fmt.Errorf("ack: %w", err))
				}
				return
			}
			if m.in(done) {
				m.acked.Add(int64(n))
			}
		}
		if l.ackEach {
			for i := range ds {
				ackAt(1, c.Ack(ctx, ds[i:i+1]))
			}
		} else if len(ds) > 0 {
			ackAt(len(ds), c.Ack(ctx, ds))
		}
	}
}

// checkOrder records a delivery of seq for key and counts a violation when a key's
// sequence goes backwards (a redelivery of the last message is not one).
func (m *meter) checkOrder(key string, seq uint64) {
	local := seq & (1<<30 - 1)
	m.orderMu.Lock()
	last, ok := m.lastSeq[key]
	if ok && local < last {
		m.violations.Add(1)
	}
	if !ok || local > last {
		m.lastSeq[key] = local
	}
	m.orderMu.Unlock()
}
