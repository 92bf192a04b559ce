package console

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/okiba/okiba/client"
)

// Lesson 1: call or leave it in a queue. A producer makes one request every 1/λ
// seconds and hands it to the receiver twice: by a synchronous call, which fails when
// the receiver is down or busy (it serves μ calls a second, with no room to wait), and
// through a queue, which takes it whatever the receiver's state. One consumer takes the
// queue's messages one at a time, each taking 1/μ. With the receiver down, calls fail
// and the queue grows; back up, the queue drains. With λ > μ the queue grows for good,
// and Little's law, L = λW, tells how long a message waits.
type absorbLesson struct {
	mu        sync.Mutex
	rate      float64 // λ, requests a second
	service   float64 // μ, the receiver's capacity
	up        bool
	changed   chan struct{} // closed and replaced when up or rates change
	work      string
	seq       int
	tokens    float64 // the receiver's free capacity for calls (at most 1)
	lastToken time.Time

	rpcOK, rpcFailed int
	rpcRecent        []absorbEvent
	sent, processed  int
	queueRecent      []absorbEvent
	arrivals         []time.Time // sends in the last 5 s (λ measured)
	sojourns         []float64   // seconds from send to ack, the last 20
	depth            int64
	t0               time.Time
	seriesT          []float64
	seriesDepth      []int64
	seriesFailed     []int
}

type absorbEvent struct {
	N      int    `json:"n"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

func newAbsorbLesson(p map[string]float64) (lesson, error) {
	rate, err := param(p, "rate", 5, 0.5, 50)
	if err != nil {
		return nil, err
	}
	service, err := param(p, "service", 8, 0.5, 50)
	if err != nil {
		return nil, err
	}
	return &absorbLesson{rate: rate, service: service, up: true, changed: make(chan struct{}), tokens: 1}, nil
}

func (l *absorbLesson) start(r *run) error {
	var err error
	if l.work, err = r.queue("work"); err != nil {
		return err
	}
	l.t0 = time.Now()
	l.lastToken = l.t0
	r.spawn(l.produce(r))
	r.spawn(l.consume(r))
	r.spawn(l.sample(r))
	return nil
}

// notifyLocked wakes the loops that wait for a change.
func (l *absorbLesson) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *absorbLesson) control(r *run, req controlRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch req.Action {
	case "":
	case "receiver_down":
		l.up = false
	case "receiver_up":
		l.up = true
	default:
		return fmt.Errorf("unknown action %q: receiver_down or receiver_up", req.Action)
	}
	if len(req.Params) > 0 {
		rate, err := param(req.Params, "rate", l.rate, 0.5, 50)
		if err != nil {
			return err
		}
		service, err := param(req.Params, "service", l.service, 0.5, 50)
		if err != nil {
			return err
		}
		l.rate, l.service = rate, service
	}
	l.notifyLocked()
	return nil
}

// produce makes a request every 1/λ: a call, and a message in the queue.
func (l *absorbLesson) produce(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for {
			l.mu.Lock()
			gap := rateGap(l.rate)
			changed := l.changed
			l.mu.Unlock()
			t := time.NewTimer(gap)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-changed: // a new rate takes effect at once
				t.Stop()
				continue
			case <-t.C:
			}
			now := time.Now()
			l.mu.Lock()
			l.seq++
			n := l.seq
			l.tokens = min(1, l.tokens+now.Sub(l.lastToken).Seconds()*l.service)
			l.lastToken = now
			ev := absorbEvent{N: n, OK: true}
			switch {
			case !l.up:
				ev.OK, ev.Reason = false, "receiver down"
			case l.tokens < 1:
				ev.OK, ev.Reason = false, "receiver busy"
			default:
				l.tokens--
			}
			if ev.OK {
				l.rpcOK++
			} else {
				l.rpcFailed++
			}
			l.rpcRecent = tail(append(l.rpcRecent, ev), 40)
			l.mu.Unlock()

			if _, err := r.c.Send(ctx, l.work, client.Message{Body: []byte(strconv.Itoa(n))}); err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			l.mu.Lock()
			l.sent++
			l.queueRecent = tail(append(l.queueRecent, absorbEvent{N: n}), 40)
			l.arrivals = append(l.arrivals, now)
			l.mu.Unlock()
		}
	}
}

// consume serves the queue one message at a time while the receiver is up.
func (l *absorbLesson) consume(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			l.mu.Lock()
			up, changed := l.up, l.changed
			l.mu.Unlock()
			if !up {
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
				continue
			}
			m, err := r.receiveOne(ctx, l.work, 30*time.Second)
			if err != nil || m == nil {
				continue
			}
			l.mu.Lock()
			up, service := l.up, l.service
			l.mu.Unlock()
			if !up { // went down while we waited: give it back
				r.c.Nack(ctx, l.work, ptr(time.Duration(0)), m.Receipt)
				continue
			}
			if !wait(ctx, rateGap(service)) {
				return
			}
			if r.c.AckOne(ctx, l.work, m.Receipt) != nil {
				continue
			}
			n, _ := strconv.Atoi(string(m.Body))
			l.mu.Lock()
			l.processed++
			l.sojourns = tail(append(l.sojourns, time.Since(m.EnqueuedAt).Seconds()), 20)
			for i := range l.queueRecent {
				if l.queueRecent[i].N == n {
					l.queueRecent[i].OK = true
				}
			}
			l.mu.Unlock()
		}
	}
}

// sample records the queue's depth four times a second for the chart.
func (l *absorbLesson) sample(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for wait(ctx, 250*time.Millisecond) {
			d := r.depth(ctx, l.work)
			l.mu.Lock()
			l.depth = d
			l.seriesT = tail(append(l.seriesT, time.Since(l.t0).Seconds()), 240)
			l.seriesDepth = tail(append(l.seriesDepth, d), 240)
			l.seriesFailed = tail(append(l.seriesFailed, l.rpcFailed), 240)
			l.mu.Unlock()
		}
	}
}

func (l *absorbLesson) state(r *run) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	cut := 0
	for cut < len(l.arrivals) && now.Sub(l.arrivals[cut]) > 5*time.Second {
		cut++
	}
	l.arrivals = l.arrivals[cut:]
	span := min(5, now.Sub(l.t0).Seconds())
	lambda := 0.0
	if span > 0.5 {
		lambda = float64(len(l.arrivals)) / span
	}
	w := 0.0
	if lambda > 0 {
		w = float64(l.depth) / lambda
	}
	measured := 0.0
	for _, s := range l.sojourns {
		measured += s
	}
	if len(l.sojourns) > 0 {
		measured /= float64(len(l.sojourns))
	}
	return map[string]any{
		"rate": l.rate, "service": l.service, "receiver_up": l.up,
		"rpc":    map[string]any{"ok": l.rpcOK, "failed": l.rpcFailed, "recent": append([]absorbEvent{}, l.rpcRecent...)},
		"queue":  map[string]any{"sent": l.sent, "processed": l.processed, "depth": l.depth, "recent": append([]absorbEvent{}, l.queueRecent...)},
		"little": map[string]any{"l": l.depth, "lambda": round2(lambda), "w_s": round2(w), "w_measured_s": round2(measured)},
		"series": map[string]any{"t": append([]float64{}, l.seriesT...), "depth": append([]int64{}, l.seriesDepth...),
			"rpc_failed": append([]int{}, l.seriesFailed...)},
		"queue_name": l.work,
	}
}
