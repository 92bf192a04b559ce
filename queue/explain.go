package queue

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Explain: why a message is, or is not, being delivered now, in words and in fields.
//
// Everything here is a read of the state as of now (effective states, as Peek shows
// them), bounded so that a question about a deep backlog never stalls the broker's lock:
// a message's place in line is counted exactly up to ExplainExact others, by a scan of
// at most explainScan index slots. What the machine keeps of a message's past is the
// index entry's O(1) fields (deliveries, first delivery) and its history (msgHist: the
// last delivery, nacks, the last nack's delay, the handler's last error); of messages
// that left, a ring of the last SettledRingSize settled per queue, and dedup entries.

// ExplainExact is how many messages ahead of one explain counts exactly; beyond, it says
// "more than ExplainExact".
const ExplainExact = 10_000

// explainScan bounds the index slots one explain visits counting what is ahead.
const explainScan = 100_000

// SettledRingSize is how many settled messages each queue remembers (id, how, when and,
// for a move, where to), for explain's "gone" — about 32 bytes each, allocated as a queue
// settles its first messages.
const SettledRingSize = 256

// GoneHow says how a message left its queue.
type GoneHow uint8

const (
	GoneAcked              GoneHow = 1
	GoneReceivedAndDeleted GoneHow = 2
	GoneDeadLettered       GoneHow = 3 // moved to the queue's dead-letter queue
	GoneExpired            GoneHow = 4 // past retention, removed (a queue without dead-letter queue)
	GoneDeleted            GoneHow = 5 // deleted by id
	GonePurged             GoneHow = 6
	GoneRedriven           GoneHow = 7 // moved to another queue by a redrive
)

var goneNames = [...]string{GoneAcked: "acked", GoneReceivedAndDeleted: "received_and_deleted", GoneDeadLettered: "dead_lettered",
	GoneExpired: "expired", GoneDeleted: "deleted", GonePurged: "purged", GoneRedriven: "redriven"}

func (h GoneHow) String() string {
	if int(h) < len(goneNames) && goneNames[h] != "" {
		return goneNames[h]
	}
	return fmt.Sprintf("gone(%d)", uint8(h))
}

// settledEntry is one message that left a queue.
type settledEntry struct {
	id  uint64
	at  int64
	to  uint64 // the queue it moved to (dead-lettered, redriven), 0 if none
	how GoneHow
}

// settledRing holds a queue's last SettledRingSize settled messages: appended to until
// full, then overwritten oldest first (next is the oldest once full).
type settledRing struct {
	e    []settledEntry
	next int
}

// noteSettled remembers that id left q at at, and how. Records call it as they apply, so
// replay rebuilds the ring exactly.
func (q *queueState) noteSettled(id uint64, at int64, how GoneHow, to uint64) {
	r := &q.settled
	e := settledEntry{id: id, at: at, to: to, how: how}
	if len(r.e) < SettledRingSize {
		r.e = append(r.e, e)
		return
	}
	r.e[r.next] = e
	r.next = (r.next + 1) % SettledRingSize
}

// find returns the latest entry of id.
func (r *settledRing) find(id uint64) (settledEntry, bool) {
	for i := len(r.e) - 1; i >= 0; i-- {
		e := r.e[(r.next+i)%len(r.e)]
		if e.id == id {
			return e, true
		}
	}
	return settledEntry{}, false
}

// each calls fn with the entries oldest first.
func (r *settledRing) each(fn func(settledEntry)) {
	for i := range r.e {
		fn(r.e[(r.next+i)%len(r.e)])
	}
}

// Status is what explain says of a message: one word, each with its own fields of
// Explanation. A new state of the machine is one more Status and one more case in
// explainIn.
type Status uint8

const (
	StatusReady        Status = 1  // ready: Ahead others are served before it
	StatusDelayed      Status = 2  // delayed until Until
	StatusLeased       Status = 3  // leased until Until by delivery Delivery
	StatusGroupWait    Status = 4  // waiting behind Blocker, a message of its ordered group
	StatusDeadLettered Status = 5  // moved to the dead-letter queue To at At (Dead, if still there)
	StatusGone         Status = 6  // left the queue at At, How (acked, purged, …)
	StatusDeduplicated Status = 7  // asked by dedup id: a send with it was a duplicate of Into
	StatusUnknown      Status = 8  // not here, and nothing remembered of it
	StatusDeferred     Status = 9  // set aside by a consumer at At: only a fetch by id takes it
	StatusParked       Status = 10 // its ordered group is parked behind Blocker, a dead letter in To, since At
)

var statusNames = [...]string{StatusReady: "ready", StatusDelayed: "delayed", StatusLeased: "leased", StatusGroupWait: "waiting_for_group",
	StatusDeadLettered: "dead_lettered", StatusGone: "gone", StatusDeduplicated: "deduplicated", StatusUnknown: "unknown",
	StatusDeferred: "deferred", StatusParked: "parked"}

func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Explanation answers "why is this message (not) being delivered now?".
type Explanation struct {
	Queue   string
	ID      uint64
	Status  Status
	Summary string // the answer in words, one or two sentences
	Seq     uint64 // 0 when the message is not in the queue
	Group   string

	// StatusReady: how many others a receive serves first. AheadMore: more than Ahead
	// (= ExplainExact); AheadAtLeast: at least Ahead (the scan stopped at its bound).
	Ahead        int
	AheadMore    bool
	AheadAtLeast bool
	// FairGroups: on an unordered queue, the groups fair delivery serves in turn (with a
	// ready message), 0 when the message has no group or the queue is ordered.
	FairGroups int
	// StatusDelayed, StatusLeased: until when. StatusLeased: the lease's delivery number,
	// and LastDelivery: whether max_deliveries makes it the last one.
	Until        int64
	Delivery     uint32
	LastDelivery bool
	// StatusGroupWait: the message of its group it waits for. StatusParked: the dead
	// letter its group waits for (Status dead_lettered), in To, parked since At.
	Blocker *Blocker
	// StatusGone, StatusDeadLettered: when and how it left, and where to (a queue name,
	// "" if none or no longer there). StatusDeferred: when it was deferred.
	At  int64
	How GoneHow
	To  string
	// Dead: why it was dead-lettered, if it is a dead letter here, or (StatusDeadLettered)
	// in To, where it still is.
	Dead *DeadInfo
	// StatusDeduplicated: the dedup id asked about, the message it names, and that
	// message's own explanation.
	DedupID string
	Into    uint64
	Target  *Explanation

	History History
}

// Blocker is the message of an ordered group that another waits for.
type Blocker struct {
	ID     uint64
	Status Status // ready, delayed or leased
	Until  int64  // delayed, leased: until when
}

// History is what the broker keeps of a message's past in this queue. Partial is always
// true: the log's records of the message are not searched (only the index's fields).
type History struct {
	EnqueuedAt     int64
	EnteredAt      int64
	Deliveries     uint32
	FirstDelivered int64
	LastDelivered  int64
	Nacks          uint32
	LastNackDelay  int64 // ms
	LastError      string
	Partial        bool
}

// CheckHandlerError refuses a handler's error text a nack may not carry.
func CheckHandlerError(s string) error {
	if len(s) > MaxHandlerErrorLen {
		return &ParamError{Field: "error", Reason: fmt.Sprintf("is %d bytes; a nack's handler error is at most %d bytes: send its first line or a summary", len(s), MaxHandlerErrorLen)}
	}
	if !utf8.ValidString(s) {
		return &ParamError{Field: "error", Reason: "must be UTF-8 text"}
	}
	return nil
}

// Explain says why the message id of queue is or is not being delivered as of now. An
// id the queue does not hold and does not remember is StatusUnknown, not an error.
func (m *Machine) Explain(now int64, queue string, id uint64) (Explanation, error) {
	q, err := m.queue(queue)
	if err != nil {
		return Explanation{}, err
	}
	return m.explainIn(q, m.clock(now), id), nil
}

// ExplainDedup explains by dedup id (with its group, on a queue whose dedup scope is the
// group): StatusDeduplicated naming the message the id's window belongs to, whose own
// explanation is Target, or StatusUnknown when no window of that id is open.
func (m *Machine) ExplainDedup(now int64, queue, dedupID, group string) (Explanation, error) {
	q, err := m.queue(queue)
	if err != nil {
		return Explanation{}, err
	}
	now = m.clock(now)
	key := dedupID
	if q.cfg.DedupScope == DedupGroup {
		key = group + "\x00" + dedupID
	}
	e, ok := q.dedup.lookup(key, now)
	if !ok || dedupID == "" {
		return Explanation{Queue: q.name, Status: StatusUnknown, DedupID: dedupID, Group: group,
			Summary: fmt.Sprintf("No send to %q with dedup id %q is remembered: none was accepted within the dedup window (%v), or it has ended.", q.name, dedupID, q.cfg.DedupWindow)}, nil
	}
	t := m.explainIn(q, now, e.id)
	return Explanation{Queue: q.name, ID: e.id, Status: StatusDeduplicated, DedupID: dedupID, Group: group, Into: e.id, Target: &t,
		Summary: fmt.Sprintf("A send with dedup id %q until %s is a duplicate of message %s, and is not enqueued again. %s",
			dedupID, stamp(e.expires, now), FormatID(e.id), t.Summary)}, nil
}

func (m *Machine) explainIn(q *queueState, now int64, id uint64) Explanation {
	ex := Explanation{Queue: q.name, ID: id}
	x := q.find(id)
	if x == nil {
		m.explainAbsent(q, now, &ex)
		return ex
	}
	ex.Seq = x.seq
	ex.Group = m.ar.groupKey(x) // a deferred message's: the group it left
	ex.Dead = m.ar.dead(x)
	ex.History = m.history(x)
	var words string
	switch st := q.effectiveState(x, now); st {
	case StateDelayed:
		ex.Status, ex.Until = StatusDelayed, x.at
		words = fmt.Sprintf("Delayed until %s; then ready.", stamp(x.at, now))
	case StateInFlight:
		ex.Status, ex.Until, ex.Delivery = StatusLeased, x.at, x.deliv
		ex.LastDelivery = q.cfg.MaxDeliveries > 0 && x.deliv >= uint32(q.cfg.MaxDeliveries)
		words = fmt.Sprintf("Leased until %s by delivery #%d; a consumer holds it.", stamp(x.at, now), x.deliv)
		if m.ar.isDeferred(x) {
			words += " It is a deferred message fetched by id: unless acked it goes back to deferred."
		}
		if ex.LastDelivery {
			words += fmt.Sprintf(" It is its last delivery (max_deliveries %d): unless acked it will be dead-lettered.", q.cfg.MaxDeliveries)
		}
	case StateDeferred:
		// Out of the ready set and of its group: no receive returns it, however long the
		// queue is, so it has no place in line and blocks nothing.
		ex.Status, ex.At = StatusDeferred, m.ar.deferredSince(x)
		words = fmt.Sprintf("Deferred since %s: a consumer set it aside, and no receive returns it; fetch it by id (POST /v1/queues/%s/deferred/receive, okiba fetch %s %s).",
			stamp(ex.At, now), q.name, q.name, FormatID(x.id))
		if ex.Group != "" {
			words += fmt.Sprintf(" It left its group %q: it neither holds nor follows it.", ex.Group)
		}
	default:
		if g := m.ar.group(x); q.isParked(g) {
			p := q.parked[g.key]
			ex.Status, ex.At = StatusParked, p.since
			ex.Blocker = &Blocker{ID: p.blocker, Status: StatusDeadLettered}
			if d := m.byID[p.dlq]; d != nil {
				ex.To = d.name
			}
			words = fmt.Sprintf("Parked behind dead letter %s in %q since %s: its ordered group %q waits until that dead letter is redriven back (it then goes first) or the group is released (okiba release %s %s).",
				FormatID(p.blocker), ex.To, stamp(p.since, now), g.key, q.name, g.key)
			break
		}
		if b := m.groupBlocker(q, x, now); b != nil {
			ex.Status, ex.Blocker = StatusGroupWait, b
			words = fmt.Sprintf("Ready, but waiting for its ordered group %q: message %s, %s, comes first.", ex.Group, FormatID(b.ID), blockerWords(b, now))
			break
		}
		ex.Status = StatusReady
		m.ahead(q, x, now, &ex)
		words = aheadWords(&ex)
	}
	if d := ex.Dead; d != nil {
		words = fmt.Sprintf("A dead letter from %q (reason %s%s, %s, after %d deliveries). ", d.SourceName, d.Reason, descWords(d.Description), stamp(d.At, now), d.Deliveries) + words
	}
	if h := ex.History; h.LastError != "" {
		words += fmt.Sprintf(" The handler's last error: %q.", h.LastError)
	}
	ex.Summary = words
	return ex
}

// explainAbsent explains an id q does not hold: from the ring of settled messages, else
// as unknown.
func (m *Machine) explainAbsent(q *queueState, now int64, ex *Explanation) {
	ex.History.Partial = true
	e, ok := q.settled.find(ex.ID)
	if !ok {
		ex.Status = StatusUnknown
		if ex.ID > m.lastID {
			ex.Summary = fmt.Sprintf("No message with id %s has been sent yet.", FormatID(ex.ID))
		} else {
			ex.Summary = fmt.Sprintf("%q does not hold message %s, and it is not among the last %d messages the queue settled: it was settled earlier, or sent to another queue.", q.name, FormatID(ex.ID), SettledRingSize)
		}
		return
	}
	ex.At, ex.How = e.at, e.how
	if t := m.byID[e.to]; t != nil {
		ex.To = t.name
	}
	switch e.how {
	case GoneDeadLettered:
		ex.Status = StatusDeadLettered
		where := fmt.Sprintf("%q", ex.To)
		if t := m.byID[e.to]; t != nil {
			if y := t.find(ex.ID); y != nil {
				ex.Dead = m.ar.dead(y)
			}
		}
		if ex.To == "" {
			where = "a dead-letter queue that no longer exists"
		}
		ex.Summary = fmt.Sprintf("Dead-lettered into %s %s.", where, stamp(e.at, now))
		if d := ex.Dead; d != nil {
			ex.Summary += fmt.Sprintf(" Reason %s%s, after %d deliveries; it is there now.", d.Reason, descWords(d.Description), d.Deliveries)
		} else if ex.To != "" {
			ex.Summary += " It has left that queue since."
		}
	case GoneRedriven:
		ex.Status = StatusGone
		ex.Summary = fmt.Sprintf("Redriven into %q %s.", ex.To, stamp(e.at, now))
	default:
		ex.Status = StatusGone
		ex.Summary = fmt.Sprintf("Gone: %s %s.", goneWords[e.how], stamp(e.at, now))
	}
}

var goneWords = map[GoneHow]string{GoneAcked: "acked", GoneReceivedAndDeleted: "received and deleted (receive-and-delete)",
	GoneExpired: "expired (past retention; the queue has no dead-letter queue)", GoneDeleted: "deleted by id", GonePurged: "purged"}

func (m *Machine) history(x *message) History {
	h := History{EnqueuedAt: x.enqueuedAt(), EnteredAt: x.entered, Deliveries: x.deliv, FirstDelivered: x.firstRecv, Partial: true}
	h.LastDelivered = x.firstRecv
	if xh := m.ar.hist(x); xh != nil {
		if xh.lastRecv != 0 {
			h.LastDelivered = xh.lastRecv
		}
		h.Nacks, h.LastNackDelay, h.LastError = xh.nacks, xh.nackDelay, xh.lastErr
	}
	return h
}

// groupBlocker returns what holds x, which is ready, back in its ordered group: an
// earlier message of the group, or a later one leased (a run leased together, of which
// x was given back), nil if x is deliverable.
func (m *Machine) groupBlocker(q *queueState, x *message, now int64) *Blocker {
	g := m.ar.group(x)
	if g == nil || !q.cfg.OrderedGroups {
		return nil
	}
	if h := g.head(); h != x {
		return m.blocker(q, h, now)
	}
	for i, y := range g.msgs[1:] {
		if i >= ExplainExact {
			break
		}
		if q.effectiveState(y, now) == StateInFlight {
			return m.blocker(q, y, now)
		}
	}
	return nil
}

func (m *Machine) blocker(q *queueState, y *message, now int64) *Blocker {
	b := &Blocker{ID: y.id, Status: StatusReady}
	switch q.effectiveState(y, now) {
	case StateDelayed:
		b.Status, b.Until = StatusDelayed, y.at
	case StateInFlight:
		b.Status, b.Until = StatusLeased, y.at
	}
	return b
}

func blockerWords(b *Blocker, now int64) string {
	switch b.Status {
	case StatusDelayed:
		return "delayed until " + stamp(b.Until, now)
	case StatusLeased:
		return "leased until " + stamp(b.Until, now)
	}
	return "ready (the group's head: a receive takes it first)"
}

// ahead counts the ready messages a receive serves before x: on an ordered queue, or
// for a message without group, those that arrived before it and are deliverable (a
// group's non-head waits for its head); on an unordered queue, for a message of a group,
// the ready messages of its own group before it, fair delivery serving the groups in
// turn.
func (m *Machine) ahead(q *queueState, x *message, now int64, ex *Explanation) {
	n, steps := 0, 0
	count := func(y *message) bool {
		if n > ExplainExact {
			ex.AheadMore = true
			return false
		}
		if steps++; steps > explainScan {
			ex.AheadAtLeast = true
			return false
		}
		return true
	}
	if g := m.ar.group(x); g != nil && !q.cfg.OrderedGroups {
		ex.FairGroups = q.fair.len()
		for _, y := range g.msgs {
			if y == x || !count(y) {
				break
			}
			if q.effectiveState(y, now) == StateReady {
				n++
			}
		}
	} else {
		q.msgs.each(0, func(y *message) bool {
			if y.seq >= x.seq || !count(y) {
				return false
			}
			if q.effectiveState(y, now) != StateReady {
				return true
			}
			if q.cfg.OrderedGroups && m.ar.group(y) != nil && (q.isParked(m.ar.group(y)) || m.groupBlocker(q, y, now) != nil) {
				return true
			}
			n++
			return true
		})
	}
	ex.Ahead = min(n, ExplainExact)
}

func aheadWords(ex *Explanation) string {
	var s string
	switch {
	case ex.AheadMore:
		s = fmt.Sprintf("Ready, behind more than %d others", ExplainExact)
	case ex.AheadAtLeast:
		s = fmt.Sprintf("Ready, behind at least %d others", ex.Ahead)
	case ex.Ahead == 0:
		s = "Ready and next in line"
	case ex.Ahead == 1:
		s = "Ready, behind 1 other"
	default:
		s = fmt.Sprintf("Ready, behind %d others", ex.Ahead)
	}
	if ex.FairGroups > 0 {
		return s + fmt.Sprintf(" of its group %q; fair delivery serves the %d groups with ready messages in turn.", ex.Group, ex.FairGroups)
	}
	if ex.Ahead == 0 && !ex.AheadMore && !ex.AheadAtLeast {
		return s + ": the next receive takes it."
	}
	return s + " that a receive serves first."
}

func descWords(d string) string {
	if d == "" {
		return ""
	}
	return fmt.Sprintf(": %q", d)
}

// stamp prints a time and how far it is from now: "2025-01-02T03:04:05.678Z (in 12s)".
func stamp(t, now int64) string {
	s := time.UnixMilli(t).UTC().Format("2006-01-02T15:04:05.000Z")
	d := time.Duration(t-now) * time.Millisecond
	switch {
	case d > 0:
		return s + " (in " + roundDur(d) + ")"
	case d < 0:
		return s + " (" + roundDur(-d) + " ago)"
	}
	return s + " (now)"
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	return s
}
