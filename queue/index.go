package queue

// message is the in-memory index entry of one message. Only metadata lives here; the
// payload is cached within a budget and otherwise read back from the log at loc.
type message struct {
	id        uint64
	seq       uint64 // arrival order within the queue; also the retention order
	entered   int64  // when it entered this queue (send, dead-letter, redrive)
	at        int64  // delayed: visible-at; in flight: lease deadline
	firstRecv int64  // first delivery in this queue, 0 if never
	loc       Loc
	grp       *group
	ext       *msgExt // nil for most messages of a deep backlog
	sz        uint32  // see size
	deliv     uint32
	// hidx is the message's index in the heap its state puts it in: the ready heap for
	// StateReady (or -1: a group's non-head), the timer heap for StateDelayed and
	// StateInFlight; -1 when in none. One field serves both: a message is never in both.
	hidx  int32
	state State
}

// msgExt holds what only some messages have, to keep the common index entry small
// (DESIGN.md §4: deep backlogs).
type msgExt struct {
	payload *Payload  // cached payload, within the cache budget
	dead    *DeadInfo // set when this message was dead-lettered into this queue
}

// size is what the message counts against max_message_size and max_bytes.
func (m *message) size() int64 { return int64(m.sz) }

func (m *message) payload() *Payload {
	if m.ext == nil {
		return nil
	}
	return m.ext.payload
}

func (m *message) dead() *DeadInfo {
	if m.ext == nil {
		return nil
	}
	return m.ext.dead
}

func (m *message) setPayload(p *Payload) {
	if m.ext == nil {
		if p == nil {
			return
		}
		m.ext = &msgExt{}
	}
	m.ext.payload = p
	m.trimExt()
}

func (m *message) setDead(d *DeadInfo) {
	if m.ext == nil {
		if d == nil {
			return
		}
		m.ext = &msgExt{}
	}
	m.ext.dead = d
	m.trimExt()
}

func (m *message) trimExt() {
	if m.ext.payload == nil && m.ext.dead == nil {
		m.ext = nil
	}
}

// enqueuedAt is the original enqueue time, which the id encodes (see nextID).
func (m *message) enqueuedAt() int64 { return int64(m.id >> idTimeShift) }

// group holds the unsettled messages of one group key in arrival order. It exists only
// while it has messages, so idle keys cost nothing.
type group struct {
	key    string
	msgs   []*message
	leased int
}

func (g *group) head() *message {
	if len(g.msgs) == 0 {
		return nil
	}
	return g.msgs[0]
}

func (g *group) remove(m *message) {
	for i, x := range g.msgs {
		if x == m {
			if i == 0 {
				g.msgs[0] = nil
				g.msgs = g.msgs[1:]
			} else {
				copy(g.msgs[i:], g.msgs[i+1:])
				g.msgs[len(g.msgs)-1] = nil
				g.msgs = g.msgs[:len(g.msgs)-1]
			}
			return
		}
	}
}

// seqIndex maps a queue's sequence numbers to messages. Sequences are assigned in
// arrival order, so this is a slice with a moving base: appends at the tail, removals
// leave holes that are trimmed when they reach the head.
type seqIndex struct {
	base  uint64 // seq of slots[0]
	slots []*message
	live  int
}

func (s *seqIndex) get(seq uint64) *message {
	if seq < s.base || seq-s.base >= uint64(len(s.slots)) {
		return nil
	}
	return s.slots[seq-s.base]
}

func (s *seqIndex) add(m *message) {
	if len(s.slots) == 0 {
		s.base = m.seq
	}
	// Sequences are dense and increasing; pad holes if a sequence was skipped.
	for s.base+uint64(len(s.slots)) < m.seq {
		s.slots = append(s.slots, nil)
	}
	s.slots = append(s.slots, m)
	s.live++
}

func (s *seqIndex) remove(seq uint64) {
	i := seq - s.base
	if seq < s.base || i >= uint64(len(s.slots)) || s.slots[i] == nil {
		return
	}
	s.slots[i] = nil
	s.live--
	for len(s.slots) > 0 && s.slots[0] == nil {
		s.slots = s.slots[1:]
		s.base++
	}
	if len(s.slots) == 0 {
		s.slots = nil
	}
}

// each calls fn for live messages with seq > after, in seq order, until fn returns false.
func (s *seqIndex) each(after uint64, fn func(*message) bool) {
	start := uint64(0)
	if after >= s.base {
		start = after - s.base + 1
	}
	for i := start; i < uint64(len(s.slots)); i++ {
		if m := s.slots[i]; m != nil && !fn(m) {
			return
		}
	}
}

func (s *seqIndex) first() *message {
	if len(s.slots) == 0 {
		return nil
	}
	return s.slots[0]
}

// readyHeap is a min-heap of deliverable messages by seq (oldest arrival first), with
// each message's position kept in hidx for O(log n) removal.
type readyHeap []*message

func (h *readyHeap) push(m *message) {
	m.hidx = int32(len(*h))
	*h = append(*h, m)
	h.up(len(*h) - 1)
}

func (h *readyHeap) pop() *message {
	old := *h
	if len(old) == 0 {
		return nil
	}
	m := old[0]
	h.removeAt(0)
	return m
}

func (h *readyHeap) remove(m *message) {
	if m.hidx >= 0 {
		h.removeAt(int(m.hidx))
	}
}

func (h *readyHeap) removeAt(i int) {
	old := *h
	n := len(old) - 1
	m := old[i]
	if i != n {
		old[i] = old[n]
		old[i].hidx = int32(i)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	m.hidx = -1
}

func (h readyHeap) less(i, j int) bool { return h[i].seq < h[j].seq }

func (h readyHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = int32(i)
	h[j].hidx = int32(j)
}

func (h readyHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h readyHeap) down(i0 int) bool {
	i, n := i0, len(h)
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

// timerHeap orders delayed and in-flight messages by the time they become visible
// (visible-at or lease deadline), then by seq.
type timerHeap []*message

func (h *timerHeap) push(m *message) {
	m.hidx = int32(len(*h))
	*h = append(*h, m)
	h.up(len(*h) - 1)
}

func (h timerHeap) peek() *message {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

func (h *timerHeap) remove(m *message) {
	if m.hidx < 0 {
		return
	}
	old := *h
	i := int(m.hidx)
	n := len(old) - 1
	if i != n {
		old[i] = old[n]
		old[i].hidx = int32(i)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	m.hidx = -1
}

// fix restores the heap after m.at changed.
func (h timerHeap) fix(m *message) {
	if !h.down(int(m.hidx)) {
		h.up(int(m.hidx))
	}
}

func (h timerHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = int32(i)
	h[j].hidx = int32(j)
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0 int) bool {
	i, n := i0, len(h)
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

// dedupTable remembers dedup keys for a fixed window from the first accepted send.
type dedupTable struct {
	m     map[string]dedupEntry
	order []string // insertion order, for pruning and early eviction
	head  int
}

type dedupEntry struct {
	id      uint64
	seq     uint64 // the original's sequence in its queue, for SQS's SequenceNumber
	expires int64
}

func (d *dedupTable) lookup(key string, now int64) (dedupEntry, bool) {
	e, ok := d.m[key]
	if !ok || e.expires <= now {
		return dedupEntry{}, false
	}
	return e, true
}

// insert records key; it returns true if an unexpired entry had to be evicted to respect cap.
func (d *dedupTable) insert(key string, id, seq uint64, expires int64, now int64, cap int) (evicted bool) {
	d.prune(now)
	if d.m == nil {
		d.m = make(map[string]dedupEntry)
	}
	if _, ok := d.m[key]; !ok {
		d.order = append(d.order, key)
	}
	d.m[key] = dedupEntry{id: id, seq: seq, expires: expires}
	for cap > 0 && len(d.m) > cap && d.head < len(d.order) {
		k := d.order[d.head]
		d.order[d.head] = ""
		d.head++
		if e, ok := d.m[k]; ok {
			delete(d.m, k)
			if e.expires > now {
				evicted = true
			}
		}
	}
	d.compact()
	return evicted
}

// prune drops expired entries from the oldest end.
func (d *dedupTable) prune(now int64) {
	for d.head < len(d.order) {
		k := d.order[d.head]
		e, ok := d.m[k]
		if ok && e.expires > now {
			break
		}
		if ok {
			delete(d.m, k)
		}
		d.order[d.head] = ""
		d.head++
	}
	d.compact()
}

func (d *dedupTable) compact() {
	if d.head > 1024 && d.head > len(d.order)/2 {
		d.order = append([]string(nil), d.order[d.head:]...)
		d.head = 0
	}
	if len(d.m) == 0 {
		d.order, d.head = nil, 0
		d.m = nil
	}
}

func (d *dedupTable) len() int { return len(d.m) }

// eventHeap orders queues by the time of their next time-driven event, so that a tick
// touches only queues with due work.
type eventHeap []eventEntry

type eventEntry struct {
	key int64
	q   *queueState
}

func (h *eventHeap) set(q *queueState, key int64) {
	if q.evIdx >= 0 && q.evIdx < len(*h) && (*h)[q.evIdx].q == q {
		(*h)[q.evIdx].key = key
		if !h.down(q.evIdx) {
			h.up(q.evIdx)
		}
		return
	}
	q.evIdx = len(*h)
	*h = append(*h, eventEntry{key, q})
	h.up(q.evIdx)
}

func (h *eventHeap) remove(q *queueState) {
	i := q.evIdx
	if i < 0 || i >= len(*h) || (*h)[i].q != q {
		q.evIdx = -1
		return
	}
	old := *h
	n := len(old) - 1
	if i != n {
		old[i] = old[n]
		old[i].q.evIdx = i
	}
	old[n] = eventEntry{}
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	q.evIdx = -1
}

func (h eventHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].q.evIdx = i
	h[j].q.evIdx = j
}

func (h eventHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[j].key >= h[i].key {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h eventHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && h[j2].key < h[j].key {
			j = j2
		}
		if h[j].key >= h[i].key {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
