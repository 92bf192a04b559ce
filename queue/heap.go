package queue

// heap is the machine's one binary min-heap. It holds the ready messages of a queue (by
// sequence), its delayed and leased messages (by the time they become visible, then by
// sequence), and the queues with time-driven work (by the time of their next event). Each
// element knows its own position (order.place), so that it can be removed or re-sorted in
// O(log n) wherever it is.
type heap[E any, O order[E]] struct {
	h   []E
	ord O
}

// order is how a heap compares its elements and tells each where it now is.
type order[E any] interface {
	less(a, b E) bool
	place(e E, i int)
}

func (h *heap[E, O]) len() int { return len(h.h) }

func (h *heap[E, O]) push(e E) {
	h.h = append(h.h, e)
	h.ord.place(e, len(h.h)-1)
	h.up(len(h.h) - 1)
}

// removeAt removes the element at position i, which must exist, and tells it it is
// nowhere (position -1).
func (h *heap[E, O]) removeAt(i int) E {
	n := len(h.h) - 1
	e := h.h[i]
	if i != n {
		h.h[i] = h.h[n]
		h.ord.place(h.h[i], i)
	}
	var zero E
	h.h[n] = zero
	h.h = h.h[:n]
	if i != n {
		h.fix(i)
	}
	h.ord.place(e, -1)
	return e
}

// fix restores the order after the element at position i changed its key.
func (h *heap[E, O]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *heap[E, O]) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.ord.place(h.h[i], i)
	h.ord.place(h.h[j], j)
}

func (h *heap[E, O]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.ord.less(h.h[j], h.h[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *heap[E, O]) down(i0 int) bool {
	i, n := i0, len(h.h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && h.ord.less(h.h[j2], h.h[j]) {
			j = j2
		}
		if !h.ord.less(h.h[j], h.h[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// bySeq orders messages by arrival (the ready heap: oldest first).
type bySeq struct{ a *arena }

func (o bySeq) less(x, y Ref) bool { return o.a.get(x).seq < o.a.get(y).seq }
func (o bySeq) place(x Ref, i int) { o.a.get(x).hidx = int32(i) }

// byTime orders messages by when they become visible (delayed: visible-at; in flight:
// the lease deadline), then by arrival.
type byTime struct{ a *arena }

func (o byTime) less(x, y Ref) bool {
	mx, my := o.a.get(x), o.a.get(y)
	if mx.at != my.at {
		return mx.at < my.at
	}
	return mx.seq < my.seq
}
func (o byTime) place(x Ref, i int) { o.a.get(x).hidx = int32(i) }

// msgHeap is a heap of one queue's messages; a message is in at most one (hidx says
// where). Its methods take messages; the embedded heap works on their Refs.
type msgHeap[O order[Ref]] struct {
	heap[Ref, O]
	a *arena
}

// readyHeap holds a queue's deliverable messages, oldest arrival first.
type readyHeap = msgHeap[bySeq]

// timerHeap holds a queue's delayed and leased messages, soonest visible first.
type timerHeap = msgHeap[byTime]

func newReadyHeap(a *arena) readyHeap { return readyHeap{heap[Ref, bySeq]{ord: bySeq{a}}, a} }
func newTimerHeap(a *arena) timerHeap { return timerHeap{heap[Ref, byTime]{ord: byTime{a}}, a} }

func (h *msgHeap[O]) push(x *message) { h.heap.push(x.self) }

// peek returns the first message, or nil.
func (h *msgHeap[O]) peek() *message {
	if len(h.h) == 0 {
		return nil
	}
	return h.a.get(h.h[0])
}

// pop removes and returns the first message, or nil.
func (h *msgHeap[O]) pop() *message {
	if len(h.h) == 0 {
		return nil
	}
	return h.a.get(h.removeAt(0))
}

// remove takes x out if it is in the heap.
func (h *msgHeap[O]) remove(x *message) {
	if x.hidx >= 0 {
		h.removeAt(int(x.hidx))
	}
}

// fix re-sorts x after its time changed.
func (h *msgHeap[O]) fix(x *message) { h.heap.fix(int(x.hidx)) }

// eventHeap orders queues by the time of their next time-driven event, so that a tick
// touches only queues with due work.
type eventHeap struct{ heap[eventEntry, byEvent] }

type eventEntry struct {
	key int64
	q   *queueState
}

type byEvent struct{}

func (byEvent) less(a, b eventEntry) bool { return a.key < b.key }
func (byEvent) place(e eventEntry, i int) { e.q.evIdx = i }

// first returns the soonest event.
func (h *eventHeap) first() (eventEntry, bool) {
	if len(h.h) == 0 {
		return eventEntry{}, false
	}
	return h.h[0], true
}

// set schedules q's next event at key.
func (h *eventHeap) set(q *queueState, key int64) {
	if h.has(q) {
		h.h[q.evIdx].key = key
		h.heap.fix(q.evIdx)
		return
	}
	h.push(eventEntry{key, q})
}

// remove unschedules q.
func (h *eventHeap) remove(q *queueState) {
	if h.has(q) {
		h.removeAt(q.evIdx)
	}
	q.evIdx = -1
}

func (h *eventHeap) has(q *queueState) bool {
	return q.evIdx >= 0 && q.evIdx < len(h.h) && h.h[q.evIdx].q == q
}
