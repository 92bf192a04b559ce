package console

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/okiba/okiba/client"
)

// Lesson 2: at-most-once or at-least-once. The same numbered messages go to two queues.
// The at-most-once consumer receives with receive-and-delete — the broker settles each
// message in the record that hands it over — then processes it: an injected failure
// after the receive loses the message, and nobody notices. The
// at-least-once consumer processes first and acks after: an injected failure loses the
// ack, the lease ends, the broker delivers the message again, and it is processed twice.
type deliveryLesson struct {
	mu        sync.Mutex
	loss      float64
	rate      float64
	total     int
	forceAMO  int // injected failures still to happen
	forceALO  int
	amo, alo  string
	sent      int
	amoLog    []deliveryEntry
	amoDone   int
	amoLost   int
	aloLog    []deliveryEntry
	aloSeen   map[int]int
	aloDup    int
	acksLost  int
	drained   bool
	rng       *rand.Rand
	leaseTime time.Duration
}

type deliveryEntry struct {
	N        int  `json:"n"`
	Lost     bool `json:"lost,omitempty"`
	Dup      bool `json:"dup,omitempty"`
	Delivery int  `json:"delivery,omitempty"`
}

func newDeliveryLesson(p map[string]float64) (lesson, error) {
	loss, err := param(p, "loss", 0.2, 0, 0.9)
	if err != nil {
		return nil, err
	}
	rate, err := param(p, "rate", 4, 0.5, 20)
	if err != nil {
		return nil, err
	}
	total, err := param(p, "total", 16, 1, 100)
	if err != nil {
		return nil, err
	}
	return &deliveryLesson{loss: loss, rate: rate, total: int(total), aloSeen: map[int]int{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), leaseTime: 800 * time.Millisecond}, nil
}

func (l *deliveryLesson) start(r *run) error {
	var err error
	if l.amo, err = r.queue("at-most-once"); err != nil {
		return err
	}
	if l.alo, err = r.queue("at-least-once"); err != nil {
		return err
	}
	r.spawn(l.produce(r))
	r.spawn(l.consumeAtMostOnce(r))
	r.spawn(l.consumeAtLeastOnce(r))
	r.spawn(l.watch(r))
	return nil
}

func (l *deliveryLesson) control(r *run, req controlRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch req.Action {
	case "":
	case "lose_next":
		l.forceAMO++
		l.forceALO++
	default:
		return fmt.Errorf("unknown action %q: lose_next", req.Action)
	}
	if len(req.Params) > 0 {
		loss, err := param(req.Params, "loss", l.loss, 0, 0.9)
		if err != nil {
			return err
		}
		l.loss = loss
	}
	return nil
}

// fails decides whether the next step on one side is hit by a failure.
func (l *deliveryLesson) failsLocked(force *int) bool {
	if *force > 0 {
		*force--
		return true
	}
	return l.rng.Float64() < l.loss
}

func (l *deliveryLesson) produce(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for n := 1; n <= l.total; n++ {
			l.mu.Lock()
			gap := rateGap(l.rate)
			l.mu.Unlock()
			if !wait(ctx, gap) {
				return
			}
			m := client.Message{Body: []byte(strconv.Itoa(n))}
			if _, err := r.c.Send(ctx, l.amo, m); err != nil {
				return
			}
			if _, err := r.c.Send(ctx, l.alo, m); err != nil {
				return
			}
			l.mu.Lock()
			l.sent = n
			l.mu.Unlock()
		}
	}
}

// consumeAtMostOnce receives with receive-and-delete (the broker settles as it hands
// over), then processes: a failure after the receive loses the message.
func (l *deliveryLesson) consumeAtMostOnce(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			ds, err := r.c.Receive(ctx, l.amo, client.ReceiveOptions{Max: 1, Wait: ptr(time.Second), Delete: true})
			if err != nil || len(ds) == 0 {
				continue
			}
			m := &ds[0]
			n, _ := strconv.Atoi(string(m.Body))
			l.mu.Lock()
			if l.failsLocked(&l.forceAMO) {
				l.amoLost++
				l.amoLog = append(l.amoLog, deliveryEntry{N: n, Lost: true})
			} else {
				l.amoDone++
				l.amoLog = append(l.amoLog, deliveryEntry{N: n})
			}
			l.mu.Unlock()
		}
	}
}

// consumeAtLeastOnce processes first, then acks: a failure loses the ack, and the
// message comes back when its lease ends.
func (l *deliveryLesson) consumeAtLeastOnce(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			m, err := r.receiveOne(ctx, l.alo, l.leaseTime)
			if err != nil || m == nil {
				continue
			}
			n, _ := strconv.Atoi(string(m.Body))
			l.mu.Lock()
			l.aloSeen[n]++
			dup := l.aloSeen[n] > 1
			if dup {
				l.aloDup++
			}
			l.aloLog = append(l.aloLog, deliveryEntry{N: n, Dup: dup, Delivery: int(m.Deliveries)})
			lose := l.failsLocked(&l.forceALO)
			if lose {
				l.acksLost++
			}
			l.mu.Unlock()
			if !lose {
				r.c.AckOne(ctx, l.alo, m.Receipt)
			}
		}
	}
}

// watch notices when everything is sent and both queues are empty.
func (l *deliveryLesson) watch(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for wait(ctx, 100*time.Millisecond) {
			l.mu.Lock()
			sent := l.sent
			l.mu.Unlock()
			drained := sent == l.total && r.depth(ctx, l.amo) == 0 && r.depth(ctx, l.alo) == 0
			l.mu.Lock()
			l.drained = drained
			l.mu.Unlock()
		}
	}
}

func (l *deliveryLesson) state(r *run) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	if l.drained {
		missing = l.total - len(l.aloSeen)
	}
	return map[string]any{
		"loss": l.loss, "rate": l.rate, "total": l.total, "sent": l.sent, "done": l.drained,
		"at_most_once":  map[string]any{"log": append([]deliveryEntry{}, tail(l.amoLog, 80)...), "processed": l.amoDone, "lost": l.amoLost, "duplicates": 0},
		"at_least_once": map[string]any{"log": append([]deliveryEntry{}, tail(l.aloLog, 80)...), "processed": len(l.aloSeen), "duplicates": l.aloDup, "acks_lost": l.acksLost, "lost": missing},
	}
}
