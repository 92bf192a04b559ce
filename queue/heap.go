package queue

// heap is the machine's one binary min-heap, of arena slots ordered by (at, seq), each
// slot knowing its own position (hidx), so that it can be removed or re-sorted in
// O(log n) wherever it is. It serves three orders with one order:
//
//   - a queue's ready messages, oldest arrival first: a ready message's at is 0, so they
//     compare by seq;
//   - a queue's delayed and leased messages, soonest visible first: at is the visible-at
//     time or the lease deadline, then seq;
//   - the queues with time-driven work, soonest first (the machine's event heap): each
//     queue has a slot of its own in the arena (queueState.timer) whose at is the time of
//     its next event and whose seq is the queue's id.
//
// It is concrete, not generic: its comparisons are inlined, which a deep backlog's heap
// of millions of messages (twenty levels per pop) pays for on every receive.
type heap struct {
	a *arena
	h []Ref
	// bySeq: every slot's at is the same (ready messages: 0), so the comparison of at
	// is skipped; the ready heap is the deepest, and the one a receive pops from.
	bySeq bool
}

func newHeap(a *arena) heap      { return heap{a: a} }
func newReadyHeap(a *arena) heap { return heap{a: a, bySeq: true} }

func (h *heap) len() int { return len(h.h) }

func (h *heap) at(i int) *message { return h.a.get(h.h[i]) }

func (h *heap) less(i, j int) bool {
	x, y := h.at(i), h.at(j)
	if !h.bySeq && x.at != y.at {
		return x.at < y.at
	}
	return x.seq < y.seq
}

func (h *heap) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.at(i).hidx = int32(i)
	h.at(j).hidx = int32(j)
}

func (h *heap) push(x *message) {
	x.hidx = int32(len(h.h))
	h.h = append(h.h, x.self)
	h.up(len(h.h) - 1)
}

// peek returns the first slot, or nil.
func (h *heap) peek() *message {
	if len(h.h) == 0 {
		return nil
	}
	return h.at(0)
}

// pop removes and returns the first slot, or nil.
func (h *heap) pop() *message {
	if len(h.h) == 0 {
		return nil
	}
	x := h.at(0)
	h.removeAt(0)
	return x
}

// remove takes x out if it is in the heap.
func (h *heap) remove(x *message) {
	if x.hidx >= 0 {
		h.removeAt(int(x.hidx))
	}
}

func (h *heap) removeAt(i int) {
	n := len(h.h) - 1
	x := h.at(i)
	if i != n {
		h.h[i] = h.h[n]
		h.at(i).hidx = int32(i)
	}
	h.h = h.h[:n]
	if i != n && !h.down(i) {
		h.up(i)
	}
	x.hidx = -1
}

// fix re-sorts x after its at changed.
func (h *heap) fix(x *message) {
	if !h.down(int(x.hidx)) {
		h.up(int(x.hidx))
	}
}

func (h *heap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *heap) down(i0 int) bool {
	i, n := i0, len(h.h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && h.less(j2, j) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// schedule puts q's timer slot in the event heap at t, or moves it there.
func (h *heap) schedule(q *queueState, t int64) {
	x := h.a.get(q.timer)
	x.at = t
	if x.hidx >= 0 {
		h.fix(x)
		return
	}
	h.push(x)
}

// unschedule takes q's timer slot out of the event heap.
func (h *heap) unschedule(q *queueState) { h.remove(h.a.get(q.timer)) }
