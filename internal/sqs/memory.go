package sqs

import (
	"container/list"
	"sync"
	"time"
)

// Two pieces of SQS behaviour need state that okiba's core does not keep: the answers to
// FIFO receives by ReceiveRequestAttemptId, and the time of each queue's last purge. Both
// live here, in memory, bounded, and do not survive a restart (docs/sqs.md says so): after
// a restart a retried receive is answered as a new receive, and a purge is allowed at once.

const (
	attemptTTL      = 5 * time.Minute
	purgeInterval   = 60 * time.Second
	maxAttempts     = 10_000
	maxAttemptBytes = 64 << 20
	maxPurges       = 100_000
)

// queueKey names one incarnation of a queue: a queue deleted and created again under the
// same name is another queue.
type queueKey struct {
	name    string
	created int64
}

// attempt is a remembered FIFO receive.
type attempt struct {
	key     queueKey
	id      string
	at      time.Time
	vis     time.Duration // the visibility the receive asked for (negative: the queue's)
	msgs    []wireMessage
	checks  []leaseCheck // checks[i] is about msgs[i]
	bytes   int64
	element *list.Element
}

// leaseCheck is what a remembered message must still be for the answer to be replayed:
// in flight with this delivery count. Its receipt is not kept here: the remembered
// wireMessage at the same index already holds it.
type leaseCheck struct {
	id         uint64
	deliveries uint32
}

// attempts remembers receives by (queue, ReceiveRequestAttemptId) for attemptTTL, at
// most maxAttempts of them and maxAttemptBytes of message bodies; the oldest go first.
type attempts struct {
	mu    sync.Mutex
	byKey map[attemptKey]*attempt
	order list.List // of *attempt, oldest at the front
	bytes int64
}

type attemptKey struct {
	q  queueKey
	id string
}

func newAttempts() *attempts {
	return &attempts{byKey: make(map[attemptKey]*attempt)}
}

func (a *attempts) get(q queueKey, id string, now time.Time) *attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(now)
	return a.byKey[attemptKey{q, id}]
}

func (a *attempts) put(at *attempt, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(now)
	k := attemptKey{at.key, at.id}
	if old := a.byKey[k]; old != nil {
		a.removeLocked(old)
	}
	if at.bytes > maxAttemptBytes {
		return
	}
	at.element = a.order.PushBack(at)
	a.byKey[k] = at
	a.bytes += at.bytes
	for a.order.Len() > maxAttempts || a.bytes > maxAttemptBytes {
		a.removeLocked(a.order.Front().Value.(*attempt))
	}
}

func (a *attempts) forget(q queueKey, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.byKey[attemptKey{q, id}]; old != nil {
		a.removeLocked(old)
	}
}

func (a *attempts) expireLocked(now time.Time) {
	for e := a.order.Front(); e != nil; e = a.order.Front() {
		at := e.Value.(*attempt)
		if now.Sub(at.at) < attemptTTL {
			return
		}
		a.removeLocked(at)
	}
}

func (a *attempts) removeLocked(at *attempt) {
	a.order.Remove(at.element)
	delete(a.byKey, attemptKey{at.key, at.id})
	a.bytes -= at.bytes
}

// purges remembers when each queue was last purged through the SQS front.
type purges struct {
	mu   sync.Mutex
	last map[queueKey]time.Time
}

func newPurges() *purges { return &purges{last: make(map[queueKey]time.Time)} }

// allow reports whether q may be purged at now and, if so, records the purge. When it
// may not, it returns how long ago the last purge was.
func (p *purges) allow(q queueKey, now time.Time) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.last[q]; ok {
		if ago := now.Sub(t); ago < purgeInterval && ago >= 0 {
			return false, ago
		}
	}
	if len(p.last) >= maxPurges {
		for k, t := range p.last {
			if now.Sub(t) >= purgeInterval {
				delete(p.last, k)
			}
		}
	}
	if len(p.last) < maxPurges {
		p.last[q] = now
	}
	return true, 0
}

// undo forgets a purge that was allowed but did not happen.
func (p *purges) undo(q queueKey, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last[q].Equal(at) {
		delete(p.last, q)
	}
}
