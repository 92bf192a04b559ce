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

// walk visits a heap's slots in its order without taking them out, for a receive to
// report what it defers without popping and pushing back each (two sifts through a deep
// heap): the first k slots cost O(k log k) whatever the heap's size. The heap must not
// change while it is walked.
type walk struct {
	h    *heap
	next []int32 // positions whose parent was visited: a small heap by h's order
}

func (h *heap) walk() walk {
	w := walk{h: h}
	if len(h.h) > 0 {
		w.next = append(w.next, 0)
	}
	return w
}

// pop returns the next slot in the heap's order, or nil when every one was visited.
func (w *walk) pop() *message {
	if len(w.next) == 0 {
		return nil
	}
	i := w.next[0]
	last := len(w.next) - 1
	w.next[0] = w.next[last]
	w.next = w.next[:last]
	w.down(0)
	for _, c := range [2]int32{2*i + 1, 2*i + 2} {
		if int(c) < len(w.h.h) {
			w.next = append(w.next, c)
			w.up(len(w.next) - 1)
		}
	}
	return w.h.at(int(i))
}

func (w *walk) less(a, b int) bool { return w.h.less(int(w.next[a]), int(w.next[b])) }

func (w *walk) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !w.less(j, i) {
			return
		}
		w.next[i], w.next[j] = w.next[j], w.next[i]
		j = i
	}
}

func (w *walk) down(i int) {
	for {
		j := 2*i + 1
		if j >= len(w.next) {
			return
		}
		if j2 := j + 1; j2 < len(w.next) && w.less(j2, j) {
			j = j2
		}
		if !w.less(j, i) {
			return
		}
		w.next[i], w.next[j] = w.next[j], w.next[i]
		i = j
	}
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

// groupHeap is an unordered queue's heap of the groups that have a ready message, in the
// order fair delivery serves them (docs/semantics.md "Fair delivery"): fewest messages in
// flight first (counting those the receive being decided has selected), then the oldest
// ready message. Groups are few next to messages, so it holds pointers; each group knows
// its position (group.fidx).
type groupHeap struct {
	h []*group
}

func (h *groupHeap) len() int { return len(h.h) }

func (h *groupHeap) less(i, j int) bool {
	x, y := h.h[i], h.h[j]
	if lx, ly := x.load(), y.load(); lx != ly {
		return lx < ly
	}
	return x.ready.peek().seq < y.ready.peek().seq
}

func (h *groupHeap) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.h[i].fidx = int32(i)
	h.h[j].fidx = int32(j)
}

// peek returns the group to serve next, or nil.
func (h *groupHeap) peek() *group {
	if len(h.h) == 0 {
		return nil
	}
	return h.h[0]
}

// put places g: in the heap, at its place, when it has a ready message; out otherwise.
func (h *groupHeap) put(g *group) {
	switch {
	case g.ready.len() == 0:
		if g.fidx >= 0 {
			h.removeAt(int(g.fidx))
		}
	case g.fidx < 0:
		g.fidx = int32(len(h.h))
		h.h = append(h.h, g)
		h.up(len(h.h) - 1)
	default:
		if i := int(g.fidx); !h.down(i) {
			h.up(i)
		}
	}
}

func (h *groupHeap) removeAt(i int) {
	n := len(h.h) - 1
	g := h.h[i]
	if i != n {
		h.h[i] = h.h[n]
		h.h[i].fidx = int32(i)
	}
	h.h[n] = nil
	h.h = h.h[:n]
	if i != n && !h.down(i) {
		h.up(i)
	}
	g.fidx = -1
	if n == 0 {
		h.h = nil
	}
}

func (h *groupHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *groupHeap) down(i0 int) bool {
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
