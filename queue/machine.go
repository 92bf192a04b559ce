package queue

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// idTimeShift: a message id is (enqueue time in ms) << 22 | counter, so ids sort by time,
// stay unique across restarts (the last id is logged) and encode the enqueue time.
const idTimeShift = 22

// Limits bound what a machine holds. They are replicated configuration, not options of
// the node: a LimitsRecord sets them (SetLimits), they are part of the state and of its
// snapshot, and Apply reads them from there, so every replica and every replay bounds dedup
// entries and finished tasks alike. The zero value of a field means its default.
type Limits struct {
	// DedupCap bounds dedup entries per queue; the oldest are evicted early beyond it
	// (counted as DedupEvictedEarly). Defaults to 1,000,000.
	DedupCap int
	// DedupTotal bounds dedup entries across every queue (each costs about 240 bytes of
	// memory and of checkpoint): at the bound, a send with a dedup id evicts its own
	// queue's oldest entry, or, when its queue holds no other, is not remembered —
	// counted as DedupEvictedEarly either way. Defaults to 2,000,000.
	DedupTotal int
	// MaxTasks bounds finished redrive tasks kept for listing. Defaults to 100.
	MaxTasks int
	// MaxQueues bounds how many queues may be created. Dead-letter queues created when a
	// dead letter needs one are exempt (a dead letter is never refused). Defaults to 10,000.
	MaxQueues int
	// MaxInFlight bounds the leased messages of one queue; a receive beyond it is refused
	// with a *LimitError (SQS's limit is 120,000). Defaults to 120,000.
	MaxInFlight int
}

// Defaults of Limits.
const (
	DefaultDedupCap    = 1_000_000
	DefaultDedupTotal  = 2_000_000
	DefaultMaxTasks    = 100
	DefaultMaxQueues   = 10_000
	DefaultMaxInFlight = 120_000 // SQS's in-flight limit of a standard queue
	maxLimit           = 1 << 31 // what a LimitsRecord may carry
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.DedupCap == 0 {
		l.DedupCap = DefaultDedupCap
	}
	if l.DedupTotal == 0 {
		l.DedupTotal = DefaultDedupTotal
	}
	if l.MaxTasks == 0 {
		l.MaxTasks = DefaultMaxTasks
	}
	if l.MaxQueues == 0 {
		l.MaxQueues = DefaultMaxQueues
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	return l
}

func (l Limits) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"dedup_cap", l.DedupCap}, {"dedup_total", l.DedupTotal}, {"max_tasks", l.MaxTasks}, {"max_queues", l.MaxQueues}, {"max_in_flight", l.MaxInFlight}} {
		if f.v < 1 || f.v > maxLimit {
			return &ConfigError{Field: f.name, Reason: fmt.Sprintf("must be between 1 and %d, got %d", maxLimit, f.v)}
		}
	}
	return nil
}

// Bodies is told which messages carry a body on this node: the seam between the
// node-independent state and the node's payload store, which alone knows where bodies
// lie. Added is called when a send record is applied (the record being applied holds the
// body; p aliases it), Removed when a message leaves the machine for good. A message that
// moves between queues (dead letter, redrive) keeps its Ref and its body. Calls happen
// inside the machine's commands and Apply, so under whatever serialises the machine.
type Bodies interface {
	Added(ref Ref, p *Payload)
	Removed(ref Ref, size int64)
}

// Machine is the queue semantics of a whole broker: every queue, every message's state,
// dedup windows and redrive tasks. It does no I/O, starts no goroutines and takes no
// locks; the caller serialises calls. Commands take the current time and a Sink, emit the
// records that describe their outcome and apply them; Apply replays records. The state
// after replay equals the state built live.
type Machine struct {
	limits  Limits
	queues  map[string]*queueState
	byID    map[uint64]*queueState
	tasks   map[uint64]*Task
	events  heap        // every queue's timer slot, by the time of its next event
	dedup   dedupBudget // dedup entries of every queue, for Limits.DedupTotal
	now     int64
	lastID  uint64
	lastQID uint64
	lastTID uint64
	ar      arena  // every message, by ref
	bodies  Bodies // nil: nobody keeps bodies (tests of the semantics alone)
	// producers remember the answers of idempotent sends (producers.go); producersSwept
	// is when idle ones were last forgotten.
	producers      map[string]*producerState
	producersSwept int64
	// blockers: the dead letters parked groups wait for, by message id (park.go);
	// releaseLog hears of the groups released because their blocker left otherwise.
	blockers   map[uint64]blockerRef
	releaseLog func(Release)
}

type queueState struct {
	id        uint64
	name      string
	cfg       Config
	createdAt int64
	updatedAt int64
	msgs      seqIndex
	ready     heap      // ready messages, oldest arrival first (on an unordered queue, those without a group)
	fair      groupHeap // unordered queues: groups with ready messages, in fair delivery's order
	timers    heap      // delayed and leased messages, soonest visible first
	pending   []pendingDL
	groups    map[string]*group
	dedup     dedupTable
	nextSeq   uint64
	nReady    int64
	nDelayed  int64
	nInFlight int64
	nDeferred int64
	bytes     int64
	// deferred finds the messages a consumer deferred by id (StateDeferred, and those a
	// fetch by id leased): a fetch names them by id, and scanning the index for each
	// would cost a deep backlog's length.
	deferred  map[uint64]Ref
	stats     Counters
	timer     Ref               // this queue's slot in the machine's event heap
	retCursor uint64            // seqs at or below are known past retention (only in-flight ones remain)
	settled   settledRing       // the last messages that left, for explain (explain.go)
	parked    map[string]parked // parked groups by key (park.go)
}

type pendingDL struct {
	m      *message
	reason string
	desc   string // the dead letter's description ("" for none, see deadLetterAll)
}

// newQueueState returns an empty queue id whose index lives in m's arena, with its
// timer slot there (see heap).
func (m *Machine) newQueueState(id uint64) *queueState {
	t := m.ar.alloc()
	t.seq = id
	return &queueState{id: id, timer: t.self, msgs: seqIndex{a: &m.ar}, ready: newReadyHeap(&m.ar), timers: newHeap(&m.ar)}
}

// dropQueueState gives back what a deleted queue held in the arena besides its messages.
func (m *Machine) dropQueueState(q *queueState) {
	m.events.unschedule(q)
	m.ar.free(m.ar.get(q.timer))
}

// New returns an empty machine with the default limits.
func New() *Machine {
	m := &Machine{
		limits: Limits{}.WithDefaults(),
		queues: make(map[string]*queueState),
		byID:   make(map[uint64]*queueState),
		tasks:  make(map[uint64]*Task),
	}
	m.events = newHeap(&m.ar)
	return m
}

// SetBodies names the node's payload store; nil turns the calls off.
func (m *Machine) SetBodies(b Bodies) { m.bodies = b }

// Limits returns the limits in force.
func (m *Machine) Limits() Limits { return m.limits }

// SetLimits changes the limits (zero fields: defaults), with a LimitsRecord, unless they
// are in force already. It reports whether it emitted one.
func (m *Machine) SetLimits(now int64, sink Sink, l Limits) (bool, error) {
	now = m.clock(now)
	l = l.WithDefaults()
	if err := l.validate(); err != nil {
		return false, err
	}
	if l == m.limits {
		return false, nil
	}
	m.emit(sink, &LimitsRecord{Now: now, Limits: l})
	return true, nil
}

// Now is the latest logged time the machine has seen.
func (m *Machine) Now() int64 { return m.now }

func (m *Machine) clock(now int64) int64 {
	if now < m.now {
		return m.now
	}
	return now
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func (m *Machine) nextID(now int64) uint64 {
	id := uint64(now) << idTimeShift
	if id <= m.lastID {
		id = m.lastID + 1
	}
	return id
}

func (m *Machine) queue(name string) (*queueState, error) {
	q, ok := m.queues[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	return q, nil
}

// emit hands r to the sink and applies it. A failure to apply a record the machine just
// made is a bug, never an input error.
func (m *Machine) emit(sink Sink, r Record) {
	sink.Emit(r)
	if err := m.apply(r); err != nil {
		panic(fmt.Sprintf("queue: applying own %s record: %v", r.Kind(), err))
	}
}

// ---------------------------------------------------------------------------------------
// Time

// advance brings q to time now: the in-memory transitions (settle), then records for
// what time did that must be logged: leases that ended into a dead letter, retention.
func (m *Machine) advance(sink Sink, q *queueState, now int64) {
	m.settle(q, now)
	due := m.sweepRetention(q, now)
	if len(q.pending) > 0 || len(due) > 0 {
		due = append(due, q.pending...)
		m.deadLetterAll(sink, q, now, due)
		if len(q.pending) > 0 {
			panic("queue: dead-letter records did not clear pending")
		}
	}
	m.reschedule(q)
}

// settle applies the transitions that time alone causes and that replay reproduces
// without records: delayed messages becoming visible, and leases ending. A lease that
// ends into a dead letter (max_deliveries reached, or past retention) is set aside in
// q.pending; its dead-letter record follows.
func (m *Machine) settle(q *queueState, now int64) {
	for {
		x := q.timers.peek()
		if x == nil || x.at > now {
			return
		}
		q.timers.remove(x)
		switch x.state() {
		case StateDelayed:
			q.nDelayed--
			m.makeReady(q, x)
		case StateInFlight:
			q.nInFlight--
			if g := m.ar.group(x); g != nil {
				g.leased--
				q.refair(g)
			}
			if reason := q.mustDeadLetter(x, now); reason != "" {
				x.setState(statePending)
				q.pending = append(q.pending, pendingDL{m: x, reason: reason})
				m.maybeReadyGroup(q, m.ar.group(x))
				continue
			}
			if m.ar.isDeferred(x) {
				m.backToDeferred(q, x) // a fetched deferred message's lease ended
				continue
			}
			m.makeReady(q, x)
		}
	}
}

// mustDeadLetter says whether a lease that just ended (without an ack) sends its message
// to the dead letters, and why.
func (q *queueState) mustDeadLetter(x *message, now int64) string {
	if q.cfg.MaxDeliveries > 0 && x.deliv >= uint32(q.cfg.MaxDeliveries) {
		return ReasonMaxDeliveries
	}
	if r := ms(q.cfg.Retention); r > 0 && x.entered+r <= now {
		return ReasonExpired
	}
	return ""
}

// deadLetterAll dead-letters a set of messages of q in arrival (seq) order — so a group's
// messages keep their order in the dead-letter queue, and the outcome does not depend on
// when time was last applied — with one record per run of equal reasons and
// descriptions. A message dead-lettered for max_deliveries is described by the handler's
// last error: the one its final nack carried, else the last one a nack stored with it
// (docs/semantics.md "The handler's error").
func (m *Machine) deadLetterAll(sink Sink, q *queueState, now int64, dl []pendingDL) {
	sort.Slice(dl, func(i, j int) bool { return dl[i].m.seq < dl[j].m.seq })
	for i := range dl {
		if p := &dl[i]; p.desc == "" && p.reason == ReasonMaxDeliveries {
			if h := m.ar.hist(p.m); h != nil {
				p.desc = h.lastErr
			}
		}
	}
	for len(dl) > 0 {
		n := 1
		for n < len(dl) && dl[n].reason == dl[0].reason && dl[n].desc == dl[0].desc {
			n++
		}
		seqs := make([]uint64, n)
		for i := range seqs {
			seqs[i] = dl[i].m.seq
		}
		m.deadLetter(sink, q, now, seqs, dl[0].reason, dl[0].desc)
		dl = dl[n:]
	}
}

// sweepRetention returns messages that are not leased and have been in the queue longer
// than its retention. A leased message is left to its lease: retention never cuts a live
// lease short (docs/semantics.md "Retention and delay").
func (m *Machine) sweepRetention(q *queueState, now int64) []pendingDL {
	r := ms(q.cfg.Retention)
	if r <= 0 {
		return nil
	}
	var due []pendingDL
	q.msgs.each(q.retCursor, func(x *message) bool {
		if x.entered+r > now {
			return false
		}
		q.retCursor = x.seq
		if x.state() != StateInFlight && x.state() != statePending {
			due = append(due, pendingDL{m: x, reason: ReasonExpired})
		}
		return true
	})
	return due
}

// deadLetter moves seqs of q to q's dead-letter queue (creating it if it is missing), or
// removes them when q has none (only reachable for expiry).
func (m *Machine) deadLetter(sink Sink, q *queueState, now int64, seqs []uint64, reason, desc string) {
	target := uint64(0)
	if dlq := q.cfg.DeadLetterQueue; dlq != NoDeadLetterQueue {
		t := m.ensureDLQ(sink, q, now)
		target = t.id
	}
	m.emit(sink, &DeadLetterRecord{Now: now, QueueID: q.id, Target: target, Reason: reason, Description: desc, Seqs: seqs})
}

// ensureDLQ returns q's dead-letter queue, creating it with dead-letter defaults if it
// does not exist (it may have been deleted with force).
func (m *Machine) ensureDLQ(sink Sink, q *queueState, now int64) *queueState {
	name := q.cfg.DeadLetterQueue
	if t, ok := m.queues[name]; ok {
		return t
	}
	m.emit(sink, &QueuePutRecord{Now: now, QueueID: m.lastQID + 1, Name: name, Config: DeadLetterConfig(q.cfg)})
	return m.queues[name]
}

// NextEvent returns the earliest time at which some queue has time-driven work (a delay
// ending, a lease ending, retention), and false if there is none.
func (m *Machine) NextEvent() (int64, bool) {
	if x := m.events.peek(); x != nil {
		return x.at, true
	}
	return 0, false
}

// Tick advances every queue whose next event is due at now. It returns the names of
// queues that have deliverable messages after the tick, so the caller can wake waiting
// receivers.
//
// The due queues are advanced in the order of their ids, round after round (a dead
// letter makes its dead-letter queue due at once), never in the order of their
// scheduled times: those depend on when a node last advanced a queue — a leader at
// each command, a replica as records arrive — while the records a tick emits must
// depend on the state alone, so that a node rebuilt from the log emits what any other
// would.
func (m *Machine) Tick(now int64, sink Sink) []string {
	now = m.clock(now)
	var woke []string
	var rounds map[*queueState]int
	for {
		var due []*queueState
		for x := m.events.peek(); x != nil && x.at <= now; x = m.events.peek() {
			q := m.byID[x.seq]
			m.events.unschedule(q)
			due = append(due, q)
		}
		if len(due) == 0 {
			return woke
		}
		if rounds == nil {
			rounds = map[*queueState]int{}
		}
		slices.SortFunc(due, func(a, b *queueState) int { return cmp.Compare(a.id, b.id) })
		for _, q := range due {
			before := q.deliverable()
			m.advance(sink, q, now)
			if q.deliverable() > before {
				woke = append(woke, q.name)
			}
			// A queue due again round after round makes no progress (a chain of
			// dead-letter queues needs a few rounds, never this many): leave it to its
			// next command rather than loop.
			if rounds[q]++; rounds[q] >= maxTickRounds {
				if t, ok := q.nextEvent(); ok && t <= now {
					m.events.unschedule(q)
				}
			}
		}
	}
}

// maxTickRounds bounds how often one Tick advances one queue.
const maxTickRounds = 64

// nextEvent of one queue: the earliest timer, or the retention expiry of the oldest
// message not yet known to be past retention.
func (q *queueState) nextEvent() (int64, bool) {
	if len(q.pending) > 0 {
		return 0, true // dead letters waiting for their record: due at once
	}
	var t int64
	ok := false
	if x := q.timers.peek(); x != nil {
		t, ok = x.at, true
	}
	if r := ms(q.cfg.Retention); r > 0 {
		var first *message
		q.msgs.each(q.retCursor, func(x *message) bool { first = x; return false })
		if first != nil {
			if e := first.entered + r; !ok || e < t {
				t, ok = e, true
			}
		}
	}
	return t, ok
}

func (m *Machine) reschedule(q *queueState) {
	if t, ok := q.nextEvent(); ok {
		m.events.schedule(q, t)
	} else {
		m.events.unschedule(q)
	}
}

// ---------------------------------------------------------------------------------------
// State transitions shared by commands and replay

// makeReady marks x deliverable and, if it may be delivered now, puts it in the ready heap.
func (m *Machine) makeReady(q *queueState, x *message) {
	x.setState(StateReady)
	x.at = 0
	q.nReady++
	if m.ar.group(x) == nil || !q.cfg.OrderedGroups {
		m.pushReady(q, x)
		return
	}
	m.maybeReadyGroup(q, m.ar.group(x))
}

// pushReady puts a ready message where a receive selects from: the queue's ready heap,
// or, on an unordered queue, its group's, which fair delivery serves in turn.
func (m *Machine) pushReady(q *queueState, x *message) {
	if g := m.ar.group(x); g != nil && !q.cfg.OrderedGroups {
		g.ready.push(x)
		q.fair.put(g)
		return
	}
	q.ready.push(x)
}

// removeReady takes x out of where pushReady put it, if it is there.
func (m *Machine) removeReady(q *queueState, x *message) {
	if g := m.ar.group(x); g != nil && !q.cfg.OrderedGroups {
		if x.hidx >= 0 {
			g.ready.remove(x)
			q.fair.put(g)
		}
		return
	}
	q.ready.remove(x)
}

// refair re-places g among the groups fair delivery serves after its load changed (a
// lease began or ended); on an ordered queue it does nothing.
func (q *queueState) refair(g *group) {
	if g != nil && !q.cfg.OrderedGroups {
		q.fair.put(g)
	}
}

// popFair takes the message fair delivery serves next from an unordered queue: among the
// groups with a ready message the one with the fewest in flight, ties by the oldest
// ready message, where a message without a group is a group of its own (with none in
// flight). Two heap operations, whatever the backlog.
func (m *Machine) popFair(q *queueState) *message {
	u, g := q.ready.peek(), q.fair.peek()
	if g == nil || (u != nil && (g.load() > 0 || u.seq < g.ready.peek().seq)) {
		return q.ready.pop()
	}
	x := g.ready.pop()
	q.fair.put(g)
	return x
}

// deliverable is how many messages a receive could lease now.
func (q *queueState) deliverable() int {
	if q.cfg.OrderedGroups {
		return q.ready.len()
	}
	return int(q.nReady)
}

// maybeReadyGroup puts g's head in the ready heap if g may be delivered: nothing leased
// and its head ready.
func (m *Machine) maybeReadyGroup(q *queueState, g *group) {
	if g == nil || !q.cfg.OrderedGroups || g.leased > 0 || q.isParked(g) {
		return
	}
	if h := g.head(); h != nil && h.state() == StateReady && h.hidx < 0 {
		q.ready.push(h)
	}
}

// add puts a new arrival into q at the tail, visible at visibleAt.
func (m *Machine) add(q *queueState, x *message, visibleAt int64, now int64) {
	q.nextSeq++
	x.seq = q.nextSeq
	x.entered = now
	x.hidx = -1
	q.msgs.add(x)
	q.bytes += x.size()
	if g := m.ar.group(x); g != nil {
		g.msgs = append(g.msgs, x)
	}
	if visibleAt > now {
		x.setState(StateDelayed)
		x.at = visibleAt
		q.nDelayed++
		q.timers.push(x)
	} else {
		m.makeReady(q, x)
	}
}

func (m *Machine) attachGroup(q *queueState, x *message, key string) {
	if key == "" {
		return
	}
	if q.groups == nil {
		q.groups = make(map[string]*group)
	}
	g := q.groups[key]
	if g == nil {
		g = &group{key: key, ready: newReadyHeap(&m.ar), fidx: -1}
		q.groups[key] = g
	}
	m.ar.setGroup(x, g)
}

// detach removes x from q entirely (settled, dead-lettered away, deleted, purged).
func (m *Machine) detach(q *queueState, x *message) {
	if len(m.blockers) > 0 {
		defer m.blockerLeaves(q, x) // after x is out of q, so that its group's next is ready
	}
	switch x.state() {
	case StateReady:
		q.nReady--
		m.removeReady(q, x)
	case StateDelayed:
		q.nDelayed--
		q.timers.remove(x)
	case StateInFlight:
		q.nInFlight--
		q.timers.remove(x)
		if g := m.ar.group(x); g != nil {
			g.leased--
			q.refair(g)
		}
	case statePending:
		for i, p := range q.pending {
			if p.m == x {
				q.pending = append(q.pending[:i], q.pending[i+1:]...)
				break
			}
		}
	case StateDeferred:
		q.nDeferred--
	}
	if m.ar.isDeferred(x) {
		delete(q.deferred, x.id)
		m.ar.setDeferred(x, false, "", 0)
	}
	q.msgs.remove(x.seq)
	q.bytes -= x.size()
	if g := m.ar.group(x); g != nil {
		g.remove(x)
		if len(g.msgs) == 0 {
			q.dropGroup(g)
		} else {
			// The head may have changed, or the last lease of the group may have ended.
			m.maybeReadyGroup(q, g)
		}
	}
	m.ar.setGroup(x, nil)
}

// drop frees x, which has left every queue (settled, expired without a dead-letter
// queue, deleted, purged), and tells the node's payload store its body is no longer needed.
func (m *Machine) drop(x *message) {
	if m.bodies != nil {
		m.bodies.Removed(x.self, x.size())
	}
	m.ar.free(x)
}

// ---------------------------------------------------------------------------------------
// Queue commands

// PutQueue creates the queue name with cfg, or replaces its configuration. It creates the
// configured dead-letter queue if it does not exist. It reports whether the queue was created.
func (m *Machine) PutQueue(now int64, sink Sink, name string, cfg Config) (bool, error) {
	now = m.clock(now)
	if err := CheckName(name); err != nil {
		return false, err
	}
	cfg = cfg.Clone()
	if err := cfg.Validate(name); err != nil {
		return false, err
	}
	existing := m.queues[name]
	if existing != nil && existing.cfg.OrderedGroups != cfg.OrderedGroups {
		return false, &ConfigError{Field: "ordered_groups", Reason: "cannot change after the queue is created"}
	}
	if err := m.checkDeadLetterKind(existing, &cfg); err != nil {
		return false, err
	}
	if err := m.checkCycle(name, cfg.DeadLetterQueue); err != nil {
		return false, err
	}
	if existing != nil && existing.cfg.Equal(cfg) {
		return false, nil
	}
	if existing == nil {
		need := 1
		if dlq := cfg.DeadLetterQueue; dlq != NoDeadLetterQueue && m.queues[dlq] == nil {
			need++
		}
		if len(m.queues)+need > m.limits.MaxQueues {
			return false, &LimitError{Limit: "max_queues", Value: m.limits.MaxQueues, What: fmt.Sprintf("cannot create %q: the broker holds %d queues", name, len(m.queues))}
		}
	}
	if dlq := cfg.DeadLetterQueue; dlq != NoDeadLetterQueue && m.queues[dlq] == nil {
		m.emit(sink, &QueuePutRecord{Now: now, QueueID: m.lastQID + 1, Name: dlq, Config: DeadLetterConfig(cfg)})
	}
	id := m.lastQID + 1
	if existing != nil {
		id = existing.id
		m.advance(sink, existing, now)
	}
	m.emit(sink, &QueuePutRecord{Now: now, QueueID: id, Name: name, Config: cfg})
	return existing == nil, nil
}

// checkDeadLetterKind refuses to make an ordered queue dead-letter into an existing
// unordered one, where its groups' order would be lost. It is checked when the pairing
// is made: when the queue is created or its dead_letter_queue changes (a pairing made
// before this rule, or a dead-letter queue deleted and made again unordered since, does
// not stop other changes). A dead-letter queue that does not exist yet is created with
// the source's kind (DeadLetterConfig). An unordered queue may use an ordered one.
func (m *Machine) checkDeadLetterKind(existing *queueState, cfg *Config) error {
	if !cfg.OrderedGroups || cfg.DeadLetterQueue == NoDeadLetterQueue {
		return nil
	}
	if existing != nil && existing.cfg.DeadLetterQueue == cfg.DeadLetterQueue {
		return nil
	}
	if d := m.queues[cfg.DeadLetterQueue]; d != nil && !d.cfg.OrderedGroups {
		return &ConfigError{Field: "dead_letter_queue", Reason: fmt.Sprintf(
			"an ordered queue's dead-letter queue must be ordered too, and %q has ordered_groups false: name an ordered queue, or one that does not exist yet to create it", cfg.DeadLetterQueue)}
	}
	return nil
}

// checkCycle follows dead-letter links from dlq and fails if they lead back to name.
func (m *Machine) checkCycle(name, dlq string) error {
	chain := []string{name}
	seen := map[string]bool{name: true}
	for dlq != NoDeadLetterQueue && dlq != "" {
		chain = append(chain, dlq)
		if seen[dlq] {
			return &CycleError{Queue: name, Chain: chain}
		}
		seen[dlq] = true
		t := m.queues[dlq]
		if t == nil {
			return nil // will be created with no DLQ of its own
		}
		dlq = t.cfg.DeadLetterQueue
	}
	return nil
}

// DeleteQueue deletes a queue and its messages. A queue that others use as their
// dead-letter queue is refused unless force; with force their DLQ is recreated when next
// needed. Running redrive tasks that read from or write to the queue fail.
func (m *Machine) DeleteQueue(now int64, sink Sink, name string, force bool) error {
	now = m.clock(now)
	q, err := m.queue(name)
	if err != nil {
		return err
	}
	if by := m.deadLetterSources(name); len(by) > 0 && !force {
		return &InUseError{Queue: name, By: by}
	}
	m.emit(sink, &QueueDeleteRecord{Now: now, QueueID: q.id})
	return nil
}

func (m *Machine) deadLetterSources(name string) []string {
	var by []string
	for _, o := range m.queues {
		if o.name != name && o.cfg.DeadLetterQueue == name {
			by = append(by, o.name)
		}
	}
	sort.Strings(by)
	return by
}

// Purge removes every message of a queue (ready, delayed and in flight). Dedup entries
// stay (docs/semantics.md "Dedup").
func (m *Machine) Purge(now int64, sink Sink, name string) (int64, error) {
	now = m.clock(now)
	q, err := m.queue(name)
	if err != nil {
		return 0, err
	}
	m.advance(sink, q, now)
	n := int64(q.msgs.live)
	m.emit(sink, &PurgeRecord{Now: now, QueueID: q.id})
	return n, nil
}

// ---------------------------------------------------------------------------------------
// Message commands

// Send enqueues msgs into queue. Each message gets its own result; a rejected message
// records nothing. A duplicate (same dedup key within the window) returns the first
// message's id with Duplicate set and enqueues nothing.
func (m *Machine) Send(now int64, sink Sink, queue string, msgs []SendInput) ([]SendResult, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	m.advance(sink, q, now)
	out := make([]SendResult, len(msgs))
	for i := range msgs {
		out[i] = m.sendOne(now, sink, q, &msgs[i])
	}
	m.reschedule(q)
	return out, nil
}

// ValidatePayload checks a payload's fields and size against q's configuration.
func ValidatePayload(p *Payload, cfg *Config) error {
	if size := p.Size(); size > cfg.MaxMessageSize {
		return &TooLargeError{Size: size, Limit: cfg.MaxMessageSize}
	}
	if len(p.Group) > MaxGroupLen || !printable(p.Group) {
		return &InvalidError{Field: "group", Reason: fmt.Sprintf("must be at most %d printable ASCII characters", MaxGroupLen)}
	}
	if len(p.DedupID) > MaxDedupIDLen || !printable(p.DedupID) {
		return &InvalidError{Field: "dedup_id", Reason: fmt.Sprintf("must be at most %d printable ASCII characters", MaxDedupIDLen)}
	}
	if len(p.Attrs) > MaxAttrs {
		return &InvalidError{Field: "headers", Reason: fmt.Sprintf("at most %d attributes, got %d", MaxAttrs, len(p.Attrs))}
	}
	seen := make(map[string]bool, len(p.Attrs))
	for _, a := range p.Attrs {
		if a.Name == "" || len(a.Name) > MaxAttrNameLen || !printable(a.Name) {
			return &InvalidError{Field: "headers", Reason: fmt.Sprintf("attribute name %q must be 1..%d printable ASCII characters", a.Name, MaxAttrNameLen)}
		}
		if seen[a.Name] {
			return &InvalidError{Field: "headers", Reason: fmt.Sprintf("attribute %q appears twice", a.Name)}
		}
		seen[a.Name] = true
		base, _, _ := strings.Cut(a.Type, ".")
		if base != "String" && base != "Number" && base != "Binary" {
			return &InvalidError{Field: "headers", Reason: fmt.Sprintf("attribute %q has type %q; types are String, Number or Binary, optionally with a .suffix", a.Name, a.Type)}
		}
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (q *queueState) dedupKey(p *Payload) string {
	id := p.DedupID
	if id == "" && q.cfg.ContentDedup {
		sum := sha256.Sum256(p.Body)
		id = hex.EncodeToString(sum[:])
	}
	if id == "" || q.cfg.DedupWindow <= 0 {
		return ""
	}
	if q.cfg.DedupScope == DedupGroup {
		return p.Group + "\x00" + id
	}
	return id
}

func (m *Machine) sendOne(now int64, sink Sink, q *queueState, in *SendInput) SendResult {
	p := &in.Payload
	if err := ValidatePayload(p, &q.cfg); err != nil {
		return SendResult{Err: err}
	}
	delay := in.Delay
	if delay < 0 {
		delay = ms(q.cfg.Delay)
	}
	if delay > ms(MaxDelay) {
		return SendResult{Err: &DelayError{Reason: fmt.Sprintf("at most 168h (7 days), got %v", time.Duration(delay)*time.Millisecond)}}
	}
	if r := ms(q.cfg.Retention); r > 0 && delay >= r {
		return SendResult{Err: &DelayError{Reason: fmt.Sprintf("must be shorter than the queue's retention (%v)", q.cfg.Retention)}}
	}
	if key := q.dedupKey(p); key != "" {
		if e, ok := q.dedup.lookup(key, now); ok {
			return SendResult{ID: e.id, Seq: e.seq, Duplicate: true}
		}
	}
	size := p.Size()
	if q.cfg.MaxMessages > 0 && int64(q.msgs.live)+1 > q.cfg.MaxMessages {
		return SendResult{Err: &FullError{Queue: q.name, Limit: "max_messages", Value: q.cfg.MaxMessages}}
	}
	if q.cfg.MaxBytes > 0 && q.bytes+size > q.cfg.MaxBytes {
		return SendResult{Err: &FullError{Queue: q.name, Limit: "max_bytes", Value: q.cfg.MaxBytes}}
	}
	id := m.nextID(now)
	m.emit(sink, &SendRecord{Now: now, QueueID: q.id, MsgID: id, VisibleAt: now + delay, Payload: *p})
	return SendResult{ID: id, Seq: q.nextSeq}
}

// Receive leases up to max messages of queue for visibility milliseconds (negative: the
// queue's visibility timeout). maxBytes caps the payload bytes returned (0: no cap); at
// least one message is returned if any is deliverable. Messages of an ordered group are
// taken from its head, consecutively, and only when none of the group is leased. On an
// unordered queue each message comes from the group with the fewest in flight (what this
// receive selected counting), ties by the oldest ready message, a message without a group
// being a group of its own: fair delivery (docs/semantics.md), decided from the state
// alone, so replicas and replays agree.
func (m *Machine) Receive(now int64, sink Sink, queue string, max int, visibility int64, maxBytes int64) ([]Delivery, error) {
	ds, _, err := m.ReceiveWith(now, sink, queue, ReceiveSpec{Max: max, Visibility: visibility, MaxBytes: maxBytes})
	return ds, err
}

// ReceiveWith is Receive with an admission filter (ReceiveSpec.Admit): the caller leases
// only what it can hand over — the broker, only messages whose bodies it holds — and
// learns what it deferred, in selection order, to prepare it for another call. Deferred
// candidates are simply not leased: no record names them, so the log describes only what
// was leased, and a replay (or a replica applying the records) needs no filter.
//
// Selection is Receive's: a deferred candidate counts against Max and MaxBytes as if it
// were leased, and once one is deferred so is everything selected after it. So when the
// caller prepares what was deferred and calls again (Continued, with what remains), the
// two calls lease what one Receive would have, in the same order — whatever the caller's
// cache held — unless something changed the queue in between. Only Skip changes what is
// selected.
func (m *Machine) ReceiveWith(now int64, sink Sink, queue string, spec ReceiveSpec) ([]Delivery, []Candidate, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, nil, err
	}
	m.advance(sink, q, now)
	visibility, max, maxBytes := spec.Visibility, spec.Max, spec.MaxBytes
	if visibility < 0 {
		visibility = ms(q.cfg.VisibilityTimeout)
	}
	if room := int64(m.limits.MaxInFlight) - q.nInFlight; spec.Delete {
		// Nothing stays in flight: the in-flight limit does not apply.
	} else if room <= 0 {
		m.reschedule(q)
		return nil, nil, &LimitError{Limit: "max_in_flight", Value: m.limits.MaxInFlight, What: fmt.Sprintf("%q has %d messages in flight: ack or nack some first", q.name, q.nInFlight)}
	} else if int64(max) > room {
		max = int(room)
	}
	ask := func(x *message) Admission {
		if spec.Admit == nil {
			return Admit
		}
		return spec.Admit(m.candidate(x))
	}
	// fits says whether x may join a selection of n messages and b bytes.
	fits := func(x *message, n int, b int64) bool {
		return n < max && (maxBytes <= 0 || (n == 0 && !spec.Continued) || b+x.size() <= maxBytes)
	}
	var taken, held, run []*message // held: popped but not leased, back into the ready heap after
	var touched []*group            // unordered: groups whose picked count this receive raised
	var deferred []Candidate
	var n int // selected: taken and deferred
	var bytes int64
	// Once deferring, nothing more is leased: the rest of the selection of an ordered
	// queue walks the ready heap in its order instead of popping (and pushing back) each
	// candidate. An unordered queue's order (fair delivery) depends on what was selected
	// before, so it goes on popping, and counting what it selects (group.picked), as if
	// it leased it.
	ordered := q.cfg.OrderedGroups
	deferring := false
	var w walk
	for n < max {
		var x *message
		switch {
		case !ordered:
			x = m.popFair(q)
		case deferring:
			x = w.pop()
		default:
			x = q.ready.pop()
		}
		if x == nil {
			break
		}
		popped := !ordered || !deferring // x is out of its heap
		if !fits(x, n, bytes) {
			if popped {
				m.pushReady(q, x)
			}
			break
		}
		a := ask(x)
		if a == Skip {
			if popped {
				held = append(held, x)
			}
			continue
		}
		run = append(run[:0], x)
		runBytes := x.size()
		if g := m.ar.group(x); g != nil && q.cfg.OrderedGroups {
			for _, y := range g.msgs[1:] {
				if y.state() != StateReady || !fits(y, n+len(run), bytes+runBytes) {
					break
				}
				ay := ask(y)
				if ay == Skip {
					break
				}
				if ay == Defer {
					a = Defer
				}
				run = append(run, y)
				runBytes += y.size()
			}
		}
		n += len(run)
		bytes += runBytes
		if g := m.ar.group(x); g != nil && !ordered {
			if g.picked == 0 {
				touched = append(touched, g)
			}
			g.picked++
			q.fair.put(g)
		}
		if deferring || a == Defer {
			if popped {
				held = append(held, x)
			}
			if !deferring {
				deferring = true
				if ordered {
					w = q.ready.walk()
				}
			}
			for _, y := range run {
				deferred = append(deferred, m.candidate(y))
			}
			continue
		}
		taken = append(taken, run...)
	}
	for _, g := range touched {
		g.picked = 0
		q.fair.put(g)
	}
	for _, x := range held {
		m.pushReady(q, x)
	}
	if len(taken) == 0 {
		m.reschedule(q)
		return nil, deferred, nil
	}
	seqs := make([]uint64, len(taken))
	for i, x := range taken {
		seqs[i] = x.seq
	}
	if spec.Delete {
		// The deliveries are described before the record frees their messages.
		out := make([]Delivery, len(taken))
		for i, x := range taken {
			d := m.delivery(q, x)
			d.Epoch, d.Deadline = x.deliv+1, 0
			if d.FirstDelivered == 0 {
				d.FirstDelivered = now
			}
			out[i] = d
		}
		m.emit(sink, &DeliverDeleteRecord{Now: now, QueueID: q.id, Seqs: seqs})
		m.reschedule(q)
		return out, deferred, nil
	}
	deadline := now + visibility
	m.emit(sink, &DeliverRecord{Now: now, QueueID: q.id, Deadline: deadline, Seqs: seqs})
	out := make([]Delivery, len(taken))
	for i, x := range taken {
		out[i] = m.delivery(q, x)
	}
	m.reschedule(q)
	return out, deferred, nil
}

func (m *Machine) candidate(x *message) Candidate {
	return Candidate{Ref: x.self, Seq: x.seq, MsgID: x.id, Dead: m.ar.dead(x)}
}

func (m *Machine) delivery(q *queueState, x *message) Delivery {
	d := Delivery{
		Lease:          Lease{QueueID: q.id, Seq: x.seq, MsgID: x.id, Epoch: x.deliv},
		Ref:            x.self,
		Deadline:       x.at,
		EnqueuedAt:     x.enqueuedAt(),
		FirstDelivered: x.firstRecv,
		Dead:           m.ar.dead(x),
		Group:          m.ar.groupKey(x),
	}
	return d
}

// lease finds the in-flight message a lease names, or reports it stale, or, when the
// message is no longer in the queue at all (its sequence was issued and nothing holds it
// now: acked, dead-lettered, deleted, purged…), already settled — which a client that
// retries its own ack takes for the success it is.
func (q *queueState) lease(l Lease, now int64) (*message, error) {
	if l.QueueID != q.id {
		return nil, ErrReceiptStale
	}
	x := q.msgs.get(l.Seq)
	if x == nil && l.Seq > 0 && l.Seq <= q.nextSeq {
		return nil, ErrAlreadySettled
	}
	if x == nil || x.id != l.MsgID || x.state() != StateInFlight || x.deliv != l.Epoch || x.at <= now {
		return nil, ErrReceiptStale
	}
	return x, nil
}

// leasedSeqs resolves the leases of a settle (ack, defer, dead-letter) to the seqs of
// the messages they hold, in their order; each lease gets nil or why not (a lease named
// twice is stale the second time).
func (q *queueState) leasedSeqs(leases []Lease, now int64) ([]error, []uint64) {
	out := make([]error, len(leases))
	var seqs []uint64
	seen := make(map[uint64]bool, len(leases))
	for i, l := range leases {
		x, err := q.lease(l, now)
		if err == nil && seen[x.seq] {
			err = ErrReceiptStale
		}
		if err != nil {
			out[i] = err
			continue
		}
		seen[x.seq] = true
		seqs = append(seqs, x.seq)
	}
	return out, seqs
}

// Ack settles leased messages. Each lease gets its own result: nil or ErrReceiptStale.
func (m *Machine) Ack(now int64, sink Sink, queue string, leases []Lease) ([]error, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	return m.settleLeases(sink, q, now, leases, func(seqs []uint64) {
		m.emit(sink, &AckRecord{Now: now, QueueID: q.id, Seqs: seqs})
	}), nil
}

// settleLeases is what ending leases by receipt shares (Ack, Defer, DeadLetter): the
// queue brought up to now, each lease resolved (nil or ErrReceiptStale, leasedSeqs),
// settle given the seqs of the valid ones when there are any, then the next event
// rescheduled.
func (m *Machine) settleLeases(sink Sink, q *queueState, now int64, leases []Lease, settle func(seqs []uint64)) []error {
	m.advance(sink, q, now)
	out, seqs := q.leasedSeqs(leases, now)
	if len(seqs) > 0 {
		settle(seqs)
	}
	m.reschedule(q)
	return out
}

// Backoff returns the retry delay for a message nacked after its deliveries-th delivery:
// full jitter over [0, min(max, base·2^(deliveries-1))], chosen by jitter.
func Backoff(cfg *Config, deliveries uint32, jitter uint64) int64 {
	base, max := ms(cfg.BackoffBase), ms(cfg.BackoffMax)
	if base <= 0 || max <= 0 {
		return 0
	}
	ceil := base
	for i := uint32(1); i < deliveries && ceil < max; i++ {
		ceil *= 2
	}
	if ceil > max {
		ceil = max
	}
	return int64(jitter % uint64(ceil+1))
}

// Nack ends leases early. A message whose delivery count has reached max_deliveries, or
// that is past retention, is dead-lettered instead (eagerly, docs/semantics.md "Dead letters").
func (m *Machine) Nack(now int64, sink Sink, queue string, items []NackInput) ([]error, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if err := CheckHandlerError(it.Error); err != nil {
			return nil, err
		}
	}
	m.advance(sink, q, now)
	out := make([]error, len(items))
	var nacks []SeqTime
	var errTexts []string
	withErrors := false
	var dead []pendingDL
	seen := make(map[uint64]bool, len(items))
	for i, it := range items {
		x, err := q.lease(it.Lease, now)
		if err == nil && seen[x.seq] {
			err = ErrReceiptStale
		}
		if err == nil && it.Delay > ms(MaxDelay) {
			err = &DelayError{Reason: "at most 168h (7 days)"}
		}
		if r := ms(q.cfg.Retention); err == nil && r > 0 && it.Delay >= r {
			err = &DelayError{Reason: fmt.Sprintf("must be shorter than the queue's retention (%v)", q.cfg.Retention)}
		}
		if err != nil {
			out[i] = err
			continue
		}
		seen[x.seq] = true
		if reason := q.mustDeadLetter(x, now); reason != "" {
			desc := ""
			if reason == ReasonMaxDeliveries {
				desc = it.Error
			}
			dead = append(dead, pendingDL{m: x, reason: reason, desc: desc})
			continue
		}
		delay := it.Delay
		if m.ar.isDeferred(x) {
			delay = 0 // it goes back to deferred, where only a fetch by id takes it
		} else if delay < 0 {
			delay = Backoff(&q.cfg, x.deliv, it.Jitter)
		}
		nacks = append(nacks, SeqTime{Seq: x.seq, Time: now + delay})
		errTexts = append(errTexts, it.Error)
		withErrors = withErrors || it.Error != ""
	}
	if len(nacks) > 0 {
		r := &NackRecord{Now: now, QueueID: q.id, Items: nacks}
		if withErrors {
			r.Errors = errTexts
		}
		m.emit(sink, r)
	}
	m.deadLetterAll(sink, q, now, dead)
	m.reschedule(q)
	return out, nil
}

// Extend sets leases' deadlines to now + visibility. Visibility 0 ends the lease now.
func (m *Machine) Extend(now int64, sink Sink, queue string, items []ExtendInput) ([]error, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	m.advance(sink, q, now)
	out := make([]error, len(items))
	var ext []SeqTime
	seen := make(map[uint64]bool, len(items))
	for i, it := range items {
		x, err := q.lease(it.Lease, now)
		if err == nil && seen[x.seq] {
			err = ErrReceiptStale
		}
		if err == nil && (it.Visibility < 0 || it.Visibility > ms(MaxVisibilityTimeout)) {
			err = &ConfigError{Field: "visibility", Reason: "must be between 0 and 12h"}
		}
		if err != nil {
			out[i] = err
			continue
		}
		seen[x.seq] = true
		ext = append(ext, SeqTime{Seq: x.seq, Time: now + it.Visibility})
	}
	if len(ext) > 0 {
		m.emit(sink, &ExtendRecord{Now: now, QueueID: q.id, Items: ext})
	}
	m.reschedule(q)
	return out, nil
}

// DeadLetter moves leased messages to the queue's dead-letter queue with a reason.
func (m *Machine) DeadLetter(now int64, sink Sink, queue string, leases []Lease, reason, desc string) ([]error, error) {
	now = m.clock(now)
	if err := m.CheckDeadLetter(queue, reason, desc); err != nil {
		return nil, err
	}
	q := m.queues[queue]
	return m.settleLeases(sink, q, now, leases, func(seqs []uint64) {
		slices.Sort(seqs)
		m.deadLetter(sink, q, now, seqs, reason, desc)
	}), nil
}

// CheckDeadLetter validates a dead-letter request's queue, reason and description,
// before any receipt is looked at.
func (m *Machine) CheckDeadLetter(queue, reason, desc string) error {
	q, err := m.queue(queue)
	if err != nil {
		return err
	}
	if reason == "" || len(reason) > MaxReasonLen || !printable(reason) {
		return &InvalidError{Field: "reason", Reason: fmt.Sprintf("must be 1..%d printable ASCII characters", MaxReasonLen)}
	}
	if reason == ReasonCorrupt {
		return &InvalidError{Field: "reason", Reason: fmt.Sprintf("%q is okiba's own reason, for messages whose body fails its checksum; choose another", ReasonCorrupt)}
	}
	if len(desc) > MaxDescriptionLen {
		return &InvalidError{Field: "description", Reason: fmt.Sprintf("at most %d bytes", MaxDescriptionLen)}
	}
	if q.cfg.DeadLetterQueue == NoDeadLetterQueue {
		return fmt.Errorf("%w: %q has dead_letter_queue none; ack, nack, or configure a dead-letter queue", ErrNoDeadLetter, q.name)
	}
	return nil
}

// Quarantine dead-letters one message that no consumer holds, named by its sequence and
// id, with reason ReasonCorrupt and desc (which says where the unreadable body lies): how
// the broker takes a message whose body fails its checksum out of the way of the healthy
// ones instead of leasing what it cannot return. It reports false, emitting nothing, when
// the message is gone, is now another message, or is leased. A queue with
// dead_letter_queue none answers ErrNoDeadLetter: the machine never removes a message
// for its body (the broker then delivers it marked as corrupt).
//
// Like every command it decides from its inputs alone and logs a DeadLetterRecord, which
// every replica applies alike; which message to quarantine is the caller's finding on
// its own node.
func (m *Machine) Quarantine(now int64, sink Sink, queue string, seq, id uint64, desc string) (bool, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return false, err
	}
	if q.cfg.DeadLetterQueue == NoDeadLetterQueue {
		return false, fmt.Errorf("%w: %q has dead_letter_queue none", ErrNoDeadLetter, q.name)
	}
	if len(desc) > MaxDescriptionLen {
		desc = desc[:MaxDescriptionLen]
	}
	m.advance(sink, q, now)
	x := q.msgs.get(seq)
	if x == nil || x.id != id || x.state() == StateInFlight || x.state() == statePending {
		m.reschedule(q)
		return false, nil
	}
	m.deadLetter(sink, q, now, []uint64{seq}, ReasonCorrupt, desc)
	m.reschedule(q)
	return true, nil
}

// DeleteMessage removes one message by id, in whatever state. Its receipts become stale.
func (m *Machine) DeleteMessage(now int64, sink Sink, queue string, id uint64) error {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return err
	}
	m.advance(sink, q, now)
	x := q.find(id)
	if x == nil {
		return fmt.Errorf("%w: %s in %q", ErrMessageNotFound, FormatID(id), q.name)
	}
	m.emit(sink, &RemoveRecord{Now: now, QueueID: q.id, Seqs: []uint64{x.seq}})
	m.reschedule(q)
	return nil
}

func (q *queueState) find(id uint64) *message {
	var found *message
	q.msgs.each(0, func(x *message) bool {
		if x.id == id {
			found = x
			return false
		}
		return true
	})
	return found
}

// FormatID prints a message id as 16 lower-case hex digits, so ids sort as strings.
func FormatID(id uint64) string { return fmt.Sprintf("%016x", id) }

// MessageRef returns the Ref of a live message named by queue id, sequence and id: how
// the broker finds the message a relocate record of an older okiba names.
func (m *Machine) MessageRef(queueID, seq, msgID uint64) (Ref, bool) {
	q := m.byID[queueID]
	if q == nil {
		return 0, false
	}
	x := q.msgs.get(seq)
	if x == nil || x.id != msgID {
		return 0, false
	}
	return x.self, true
}

// EachMessage calls fn for every message with its size, in the canonical order (queues by
// id, messages by sequence) that snapshots use, until fn returns false. The payload
// store's checkpoint section lists bodies in this order, so that it needs no key of its
// own: a restored machine gives its messages new Refs, in the same order.
func (m *Machine) EachMessage(fn func(ref Ref, size int64) bool) {
	for _, id := range m.queueIDs() {
		ok := true
		m.byID[id].msgs.each(0, func(x *message) bool {
			ok = fn(x.self, x.size())
			return ok
		})
		if !ok {
			return
		}
	}
}

func (m *Machine) queueIDs() []uint64 {
	ids := make([]uint64, 0, len(m.byID))
	for id := range m.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// AdvanceAll brings every queue to now, emitting what time made due. The broker calls it
// once after recovery, before serving.
func (m *Machine) AdvanceAll(now int64, sink Sink) {
	now = m.clock(now)
	for _, id := range m.queueIDs() {
		if q := m.byID[id]; q != nil {
			m.advance(sink, q, now)
		}
	}
}
