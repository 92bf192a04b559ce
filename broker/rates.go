package broker

import (
	"sync"
	"time"

	"github.com/okiba/okiba/queue"
)

// rateWindow is how far back rates and measured waiting times look.
const rateWindow = 60 * time.Second

// Rates are per-second rates over the last minute, and mean times measured over it.
type Rates struct {
	Window       time.Duration // the span actually covered (shorter just after start)
	Sent         float64
	Acked        float64
	Nacked       float64
	Delivered    float64
	DeadLettered float64
	Expired      float64
	// WaitMean is the mean enqueue → first delivery time of messages first delivered
	// in the window; SojournMean the mean enqueue → ack time of messages acked in it.
	WaitMean    time.Duration
	SojournMean time.Duration
}

type sample struct {
	at int64
	c  queue.Counters
}

// rates keeps a minute of once-a-second counter samples per queue. It has its own lock
// so that stats queries do not hold the broker's.
type rates struct {
	mu sync.Mutex
	q  map[string][]sample
}

func newRates() *rates { return &rates{q: make(map[string][]sample)} }

func (r *rates) record(cs map[string]queue.Counters, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.q {
		if _, ok := cs[name]; !ok {
			delete(r.q, name)
		}
	}
	cutoff := now - rateWindow.Milliseconds()
	for name, c := range cs {
		s := append(r.q[name], sample{at: now, c: c})
		i := 0
		for i < len(s)-1 && s[i+1].at <= cutoff {
			i++
		}
		if i > 0 {
			s = append(s[:0], s[i:]...)
		}
		r.q[name] = s
	}
}

// get computes rates from the oldest sample in the window to the current counters.
func (r *rates) get(name string, cur queue.Counters, now int64) Rates {
	r.mu.Lock()
	s := r.q[name]
	var first sample
	ok := len(s) > 0
	if ok {
		first = s[0]
	}
	r.mu.Unlock()
	if !ok || now <= first.at {
		return Rates{}
	}
	span := float64(now-first.at) / 1000
	per := func(a, b uint64) float64 {
		if b < a {
			return 0
		}
		return float64(b-a) / span
	}
	mean := func(sumA, sumB, nA, nB uint64) time.Duration {
		if nB <= nA || sumB < sumA {
			return 0
		}
		return time.Duration(float64(sumB-sumA)/float64(nB-nA)) * time.Millisecond
	}
	c0 := first.c
	return Rates{
		Window:       time.Duration(now-first.at) * time.Millisecond,
		Sent:         per(c0.Sent, cur.Sent),
		Acked:        per(c0.Acked, cur.Acked),
		Nacked:       per(c0.Nacked, cur.Nacked),
		Delivered:    per(c0.Delivered, cur.Delivered),
		DeadLettered: per(c0.DeadLettered, cur.DeadLettered),
		Expired:      per(c0.Expired, cur.Expired),
		WaitMean:     mean(c0.WaitSum, cur.WaitSum, c0.WaitCount, cur.WaitCount),
		SojournMean:  mean(c0.SojournSum, cur.SojournSum, c0.SojournCount, cur.SojournCount),
	}
}
