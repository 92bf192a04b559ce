package queue

// message is one entry of the index: metadata only (the node's payload store keeps
// bodies, by the message's Ref). It holds no pointers and lives in the machine's
// arena, named by a ref: a deep backlog is a few thousand arena chunks that the garbage
// collector neither scans nor marks one by one, where separate objects cost it ten million
// marks a cycle (docs/benchmarks.md "The deep backlog").
type message struct {
	id        uint64
	seq       uint64 // arrival order within the queue; also the retention order
	entered   int64  // when it entered this queue (send, dead-letter, redrive)
	at        int64  // delayed: visible-at; in flight: lease deadline
	firstRecv int64  // first delivery in this queue, 0 if never
	self      Ref    // its own name in the arena
	grp       uint32 // the arena's group slot + 1; 0 if none
	ext       uint32 // the arena's ext slot + 1; 0 for most messages of a deep backlog
	// hidx is the message's index in the heap its state puts it in: for StateReady the
	// queue's ready heap (or -1: an ordered group's non-head), or its group's on an
	// unordered queue (group.ready); the timer heap for StateDelayed and StateInFlight;
	// -1 when in none. One field serves them all: a message is never in two.
	hidx  int32
	deliv uint32
	meta  uint32 // size << 8 | state
}

// msgExt holds what only some messages have, to keep the common index entry small.
type msgExt struct {
	dead *DeadInfo // set when this message was dead-lettered into this queue
	// deferred: a consumer deferred the message (Machine.Defer) and it has not left the
	// queue since: it is in StateDeferred, or leased by a fetch by id (and goes back to
	// StateDeferred when that lease ends without an ack). A deferred message is out of
	// its group (it neither holds nor follows it); group keeps the group's key, for
	// peek and for where it goes as a dead letter.
	deferred bool
	group    string
	since    int64    // deferred: when the consumer deferred it (the defer record's time)
	hist     *msgHist // set once it was delivered again or nacked in this queue (explain.go)
}

// msgHist is what explain tells of a message's past beyond the index entry's own fields
// (deliveries, first delivery): only a message delivered more than once or nacked has
// one, so a deep backlog of messages never delivered pays nothing for it. It is semantic
// state: records set it (DeliverRecord, NackRecord), snapshots hold it, and it starts
// afresh when the message moves to another queue (dead letter, redrive), as its delivery
// count does.
type msgHist struct {
	lastRecv  int64  // the latest delivery (when deliveries > 1)
	nacks     uint32 // nacks in this queue
	nackDelay int64  // the latest nack's delay, ms
	lastErr   string // the handler's error the latest nack carried, if any
}

// maxIndexedSize bounds what meta can hold of a size (max_message_size is at most 1 MiB).
const maxIndexedSize = 1<<24 - 1

// size is what the message counts against max_message_size and max_bytes.
func (x *message) size() int64 { return int64(x.meta >> 8) }

func (x *message) setSize(n int64) { x.meta = uint32(n)<<8 | x.meta&0xff }

func (x *message) state() State { return State(x.meta & 0xff) }

func (x *message) setState(s State) { x.meta = x.meta&^0xff | uint32(s) }

// Ref names a message in a machine's arena: chunk index << chunkShift | slot. 0 names
// none (chunk 0 is never used). A Ref is this machine's handle, not part of the semantic
// state: a freed slot is reused, and a restored or replayed machine gives the same message
// another Ref. The node's payload store indexes bodies by it (see Bodies, EachMessage).
type Ref uint32

// RefSlots is how many Refs a chunk index spans: Ref>>RefShift is the chunk index and
// Ref&(RefSlots-1) the slot, for stores that keep a dense table per chunk.
const (
	RefShift = chunkShift
	RefSlots = chunkSize
)

const (
	chunkShift = 12
	chunkSize  = 1 << chunkShift
)

// chunk is a block of message slots; freed slots form a list through their seq field.
type chunk struct {
	msgs     []message // never grown: pointers into it stay valid
	free     uint32    // first free slot + 1; 0: none
	bump     uint32    // slots from here on were never used
	live     uint32
	availIdx int32 // position in arena.avail; -1 when full
}

// arena owns every message of a machine, and the groups and extensions messages point
// to. A chunk with free slots is reused before a new one is made, and an empty chunk is
// given back (but one), so memory follows the live count rather than its history.
type arena struct {
	chunks    []*chunk // by index; nil when given back
	nchunks   int      // chunks not given back
	avail     []uint32 // indexes of chunks with free slots
	unused    []uint32 // indexes of given-back chunks, for reuse
	groups    []*group
	freeGroup []uint32
	exts      []msgExt
	freeExt   []uint32
}

// alloc returns a zeroed message and its ref.
func (a *arena) alloc() *message {
	for len(a.avail) > 0 {
		ci := a.avail[len(a.avail)-1]
		c := a.chunks[ci]
		var slot uint32
		switch {
		case c.free != 0:
			slot = c.free - 1
			c.free = uint32(c.msgs[slot].seq)
		case c.bump < uint32(len(c.msgs)):
			slot = c.bump
			c.bump++
		default:
			a.unavail(c)
			continue
		}
		c.live++
		if c.free == 0 && c.bump == uint32(len(c.msgs)) {
			a.unavail(c)
		}
		x := &c.msgs[slot]
		*x = message{self: Ref(ci<<chunkShift | slot), hidx: -1}
		return x
	}
	var ci uint32
	if n := len(a.unused); n > 0 {
		ci = a.unused[n-1]
		a.unused = a.unused[:n-1]
	} else {
		if len(a.chunks) == 0 {
			a.chunks = append(a.chunks, nil) // chunk 0: ref 0 names none
		}
		if len(a.chunks) > 1<<(32-chunkShift)-1 {
			panic("queue: more than 4 billion messages in memory")
		}
		ci = uint32(len(a.chunks))
		a.chunks = append(a.chunks, nil)
	}
	// A machine's first chunks are small (a queue of a few messages costs a few
	// kilobytes), then they double up to chunkSize.
	n := min(chunkSize, 64<<min(a.nchunks, 6))
	a.nchunks++
	a.chunks[ci] = &chunk{msgs: make([]message, n), availIdx: -1}
	a.makeAvail(ci)
	return a.alloc()
}

// free returns x's slot; x must not be used afterwards.
func (a *arena) free(x *message) {
	r := x.self
	ci, slot := uint32(r>>chunkShift), uint32(r)&(chunkSize-1)
	c := a.chunks[ci]
	a.setExt(x, nil)
	a.setGroup(x, nil)
	*x = message{seq: uint64(c.free)}
	c.free = slot + 1
	c.live--
	if c.availIdx < 0 {
		a.makeAvail(ci)
	}
	if c.live == 0 && len(a.avail) > 1 {
		a.unavail(c)
		a.chunks[ci] = nil
		a.unused = append(a.unused, ci)
		a.nchunks--
	}
}

func (a *arena) makeAvail(ci uint32) {
	a.chunks[ci].availIdx = int32(len(a.avail))
	a.avail = append(a.avail, ci)
}

func (a *arena) unavail(c *chunk) {
	i := c.availIdx
	last := len(a.avail) - 1
	moved := a.avail[last]
	a.avail[i] = moved
	a.chunks[moved].availIdx = i
	a.avail = a.avail[:last]
	c.availIdx = -1
}

func (a *arena) get(r Ref) *message {
	return &a.chunks[r>>chunkShift].msgs[r&(chunkSize-1)]
}

// group returns x's group, nil if none.
func (a *arena) group(x *message) *group {
	if x.grp == 0 {
		return nil
	}
	return a.groups[x.grp-1]
}

// setGroup sets x's group. The group's slot is taken when its first message joins and
// given back when its last one leaves (group.refs counts them).
func (a *arena) setGroup(x *message, g *group) {
	if old := a.group(x); old != nil {
		if old.refs--; old.refs == 0 {
			a.groups[old.slot] = nil
			a.freeGroup = append(a.freeGroup, old.slot)
		}
		x.grp = 0
	}
	if g == nil {
		return
	}
	if g.refs == 0 {
		if n := len(a.freeGroup); n > 0 {
			g.slot = a.freeGroup[n-1]
			a.freeGroup = a.freeGroup[:n-1]
			a.groups[g.slot] = g
		} else {
			g.slot = uint32(len(a.groups))
			a.groups = append(a.groups, g)
		}
	}
	g.refs++
	x.grp = g.slot + 1
}

func (a *arena) ext(x *message) *msgExt {
	if x.ext == 0 {
		return nil
	}
	return &a.exts[x.ext-1]
}

// setExt sets x's extension; nil or an empty one gives its slot back.
func (a *arena) setExt(x *message, e *msgExt) {
	if e != nil && e.dead == nil && !e.deferred && e.hist == nil {
		e = nil
	}
	switch {
	case e == nil && x.ext != 0:
		a.exts[x.ext-1] = msgExt{}
		a.freeExt = append(a.freeExt, x.ext-1)
		x.ext = 0
	case e != nil && x.ext != 0:
		a.exts[x.ext-1] = *e
	case e != nil:
		if n := len(a.freeExt); n > 0 {
			x.ext = a.freeExt[n-1] + 1
			a.freeExt = a.freeExt[:n-1]
			a.exts[x.ext-1] = *e
		} else {
			a.exts = append(a.exts, *e)
			x.ext = uint32(len(a.exts))
		}
	}
}

func (a *arena) dead(x *message) *DeadInfo {
	if e := a.ext(x); e != nil {
		return e.dead
	}
	return nil
}

func (a *arena) setDead(x *message, d *DeadInfo) {
	e := a.extValue(x)
	e.dead = d
	a.setExt(x, &e)
}

func (a *arena) hist(x *message) *msgHist {
	if e := a.ext(x); e != nil {
		return e.hist
	}
	return nil
}

// editHist returns x's history, giving it one if it has none.
func (a *arena) editHist(x *message) *msgHist {
	if h := a.hist(x); h != nil {
		return h
	}
	e := a.extValue(x)
	e.hist = &msgHist{}
	a.setExt(x, &e)
	return e.hist
}

func (a *arena) setHist(x *message, h *msgHist) {
	if a.hist(x) == h {
		return
	}
	e := a.extValue(x)
	e.hist = h
	a.setExt(x, &e)
}

// extValue returns a copy of x's extension, empty if it has none.
func (a *arena) extValue(x *message) msgExt {
	if e := a.ext(x); e != nil {
		return *e
	}
	return msgExt{}
}

// enqueuedAt is the original enqueue time, which the id encodes (see nextID).
func (m *message) enqueuedAt() int64 { return int64(m.id >> idTimeShift) }

// group holds the unsettled messages of one group key in arrival order. It exists only
// while it has messages, so idle keys cost nothing.
type group struct {
	key    string
	msgs   []*message // pointers into the arena: groups are few next to messages
	leased int
	slot   uint32 // in arena.groups while refs > 0
	refs   int    // messages whose grp names it
	// On an unordered queue, fair delivery's state (queueState.fair): the group's ready
	// messages, oldest first; its place in the queue's heap of groups (-1: not there, it
	// has no ready message); and how many of its messages the receive being decided has
	// selected (0 between commands). Unused on an ordered queue, whose ready heap holds
	// each group's head.
	ready  heap
	fidx   int32
	picked int32
}

// load is what fair delivery serves the least of first: the group's messages in flight,
// and those the receive being decided has selected.
func (g *group) load() int { return g.leased + int(g.picked) }

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
	a     *arena
	base  uint64 // seq of slots[0]
	slots []Ref
	live  int
}

func (s *seqIndex) get(seq uint64) *message {
	if seq < s.base || seq-s.base >= uint64(len(s.slots)) {
		return nil
	}
	if r := s.slots[seq-s.base]; r != 0 {
		return s.a.get(r)
	}
	return nil
}

func (s *seqIndex) add(m *message) {
	if len(s.slots) == 0 {
		s.base = m.seq
	}
	// Sequences are dense and increasing; pad holes if a sequence was skipped.
	for s.base+uint64(len(s.slots)) < m.seq {
		s.slots = append(s.slots, 0)
	}
	s.slots = append(s.slots, m.self)
	s.live++
}

func (s *seqIndex) remove(seq uint64) {
	i := seq - s.base
	if seq < s.base || i >= uint64(len(s.slots)) || s.slots[i] == 0 {
		return
	}
	s.slots[i] = 0
	s.live--
	for len(s.slots) > 0 && s.slots[0] == 0 {
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
		if r := s.slots[i]; r != 0 && !fn(s.a.get(r)) {
			return
		}
	}
}

func (s *seqIndex) first() *message {
	if len(s.slots) == 0 {
		return nil
	}
	return s.a.get(s.slots[0])
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

// insert records key; it returns true if an unexpired entry had to be evicted to respect
// cap, and tells gone the expiry of each entry it evicted so.
func (d *dedupTable) insert(key string, id, seq uint64, expires int64, now int64, cap int, gone func(expires int64)) (evicted bool) {
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
				gone(e.expires)
			}
		}
	}
	d.compact()
	return evicted
}

// evictOldest removes the oldest entry other than keep, telling gone its expiry; false
// if there is none.
func (d *dedupTable) evictOldest(keep string, gone func(expires int64)) bool {
	for i := d.head; i < len(d.order); i++ {
		k := d.order[i]
		e, ok := d.m[k]
		if !ok || k == keep {
			continue
		}
		delete(d.m, k)
		if i == d.head {
			d.order[i] = ""
			d.head++
		}
		gone(e.expires)
		d.compact()
		return true
	}
	return false
}

// remove forgets key (its place in order is skipped later).
func (d *dedupTable) remove(key string) {
	delete(d.m, key)
	d.compact()
}

// dedupBudget counts the dedup entries of every queue that are not expired as of the
// last send applied, for Limits.DedupTotal. Each queue prunes its own entries only when
// it inserts, so the maps' sizes are no measure (a quiet queue keeps its expired entries)
// and would differ between a machine that lived and one restored from a snapshot, which
// holds no expired entry; this count is a function of the records alone: each entry's
// expiry sits in a heap until a send at or after it pops it, and an entry removed before
// its expiry (evicted, its queue deleted) is marked so that its pop does not count twice.
type dedupBudget struct {
	exp     []int64 // a min-heap of expiries
	removed map[int64]int
	live    int
	at      int64 // every expiry up to here is popped
}

func (b *dedupBudget) add(expires int64) {
	b.exp = append(b.exp, expires)
	for i := len(b.exp) - 1; i > 0; {
		p := (i - 1) / 2
		if b.exp[p] <= b.exp[i] {
			break
		}
		b.exp[p], b.exp[i] = b.exp[i], b.exp[p]
		i = p
	}
	b.live++
}

// expire pops the expiries up to now.
func (b *dedupBudget) expire(now int64) {
	if now > b.at {
		b.at = now
	}
	for len(b.exp) > 0 && b.exp[0] <= b.at {
		e := b.exp[0]
		n := len(b.exp) - 1
		b.exp[0] = b.exp[n]
		b.exp = b.exp[:n]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < n && b.exp[l] < b.exp[m] {
				m = l
			}
			if r < n && b.exp[r] < b.exp[m] {
				m = r
			}
			if m == i {
				break
			}
			b.exp[i], b.exp[m] = b.exp[m], b.exp[i]
			i = m
		}
		if b.removed[e] > 0 {
			if b.removed[e]--; b.removed[e] == 0 {
				delete(b.removed, e)
			}
			continue
		}
		b.live--
	}
	if len(b.exp) == 0 {
		b.exp = nil
	}
}

// drop counts out an entry removed before its expiry was popped.
func (b *dedupBudget) drop(expires int64) {
	if expires <= b.at {
		return // popped already
	}
	if b.removed == nil {
		b.removed = map[int64]int{}
	}
	b.removed[expires]++
	b.live--
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
