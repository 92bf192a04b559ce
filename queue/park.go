package queue

import (
	"errors"
	"fmt"
	"slices"
)

// Parked groups (docs/semantics.md "Park group"). On an ordered queue whose configuration
// says OnDeadLetter: ParkGroup, dead-lettering a group's head parks the rest of the
// group: no receive gets its messages until the blocking dead letter is redriven back
// (it then goes first, before the rest), an operator releases the group, or the blocker
// leaves the dead-letter queue some other way (deleted, purged, received and settled
// there, redriven elsewhere, expired) — then the group is released, with a note for
// the node's log, never parked behind nothing. Parking needs no record of its own: the
// dead-letter record and the queue's configuration decide it, so a replay parks the same
// groups. A release by hand is a GroupReleaseRecord.
//
// While parked, sends join the group's tail and retention still dead-letters its
// messages; a parked group may be empty (its head was its only message) and stays parked,
// so that what is sent next still waits behind the dead letter.

// DeadLetterAction is what a queue does to an ordered group whose head it dead-letters.
type DeadLetterAction uint8

const (
	MoveOn    DeadLetterAction = 0 // the group moves on (the default)
	ParkGroup DeadLetterAction = 1 // the rest of the group waits for the dead letter
)

func (a DeadLetterAction) String() string {
	switch a {
	case MoveOn:
		return "move_on"
	case ParkGroup:
		return "park_group"
	}
	return fmt.Sprintf("on_dead_letter(%d)", uint8(a))
}

// ParseDeadLetterAction reads move_on or park_group ("" is move_on).
func ParseDeadLetterAction(s string) (DeadLetterAction, error) {
	switch s {
	case "", "move_on":
		return MoveOn, nil
	case "park_group":
		return ParkGroup, nil
	}
	return 0, &ConfigError{Field: "on_dead_letter", Reason: fmt.Sprintf("must be move_on or park_group, got %q", s)}
}

// ErrNotParked: a release named a group that is not parked in the queue.
var ErrNotParked = errors.New("group is not parked in this queue")

// parked is one parked group of a queue: the dead letter it waits for (its id, the
// dead-letter queue it went to) and when it was parked.
type parked struct {
	blocker uint64
	dlq     uint64
	since   int64
}

// blockerRef names the parked group a dead letter blocks.
type blockerRef struct {
	queue uint64
	key   string
}

// ParkedGroup describes a parked group, for listings and explain.
type ParkedGroup struct {
	Group    string
	Blocker  uint64 // the blocking dead letter's id
	DLQ      string // the dead-letter queue that holds it
	Since    int64
	Messages int // the group's messages still in the queue
}

// Release says why a parked group was released other than by hand or by its blocker's
// redrive back: for the node's log.
type Release struct {
	Queue, Group string
	Blocker      uint64
	Why          string
}

// SetReleaseLog names a function told of every group released because its blocker left
// the dead-letter queue other than back to the group (nil: nobody is told). It is called
// as records apply, under the caller's serialisation.
func (m *Machine) SetReleaseLog(f func(Release)) { m.releaseLog = f }

// parkable says whether dead-lettering x, which is in q, parks its group.
func (m *Machine) parkable(q *queueState, x *message) (*group, bool) {
	if q.cfg.OnDeadLetter != ParkGroup || !q.cfg.OrderedGroups {
		return nil, false
	}
	g := m.ar.group(x)
	if g == nil || g.head() != x {
		return nil, false
	}
	_, already := q.parked[g.key]
	return g, !already
}

// park parks q's group key behind the dead letter id, which went to dlq.
func (m *Machine) park(q *queueState, key string, id, dlq uint64, now int64) {
	if q.parked == nil {
		q.parked = make(map[string]parked)
	}
	q.parked[key] = parked{blocker: id, dlq: dlq, since: now}
	if m.blockers == nil {
		m.blockers = make(map[uint64]blockerRef)
	}
	m.blockers[id] = blockerRef{queue: q.id, key: key}
	if g := q.groups[key]; g != nil {
		if h := g.head(); h != nil && h.hidx >= 0 && h.state() == StateReady {
			q.ready.remove(h)
		}
	}
}

// isParked says whether g waits for a dead letter.
func (q *queueState) isParked(g *group) bool {
	if len(q.parked) == 0 || g == nil {
		return false
	}
	_, ok := q.parked[g.key]
	return ok
}

// release unparks q's group key: its head becomes deliverable again.
func (m *Machine) release(q *queueState, key string) {
	p, ok := q.parked[key]
	if !ok {
		return
	}
	delete(q.parked, key)
	if b, ok := m.blockers[p.blocker]; ok && b.queue == q.id && b.key == key {
		delete(m.blockers, p.blocker)
	}
	m.maybeReadyGroup(q, q.groups[key])
}

// blockerLeaves releases the group x blocks, if x is a blocking dead letter leaving its
// dead-letter queue dlq, and tells the log why (how it left, from the settled ring).
func (m *Machine) blockerLeaves(dlq *queueState, x *message) {
	b, ok := m.blockers[x.id]
	if !ok {
		return
	}
	q := m.byID[b.queue]
	if q == nil {
		delete(m.blockers, x.id)
		return
	}
	if p := q.parked[b.key]; p.dlq != dlq.id {
		return
	}
	m.release(q, b.key)
	if m.releaseLog != nil {
		why := "it left " + dlq.name
		if e, ok := dlq.settled.find(x.id); ok {
			why = fmt.Sprintf("it was %s from %s", e.how, dlq.name)
			if t := m.byID[e.to]; t != nil {
				why += " into " + t.name
			}
		}
		m.releaseLog(Release{Queue: q.name, Group: b.key, Blocker: x.id, Why: why})
	}
}

// forgetParked drops what q holds of parked groups (q is being deleted), and releases
// the groups its dead letters block elsewhere.
func (m *Machine) forgetParked(q *queueState) {
	for _, p := range q.parked {
		delete(m.blockers, p.blocker)
	}
	q.parked = nil
	for id, b := range m.blockers {
		if o := m.byID[b.queue]; o != nil && o != q && o.parked[b.key].dlq == q.id && o.parked[b.key].blocker == id {
			m.release(o, b.key)
			if m.releaseLog != nil {
				m.releaseLog(Release{Queue: o.name, Group: b.key, Blocker: id, Why: "its dead-letter queue " + q.name + " was deleted"})
			}
		}
	}
}

// releaseAll releases every parked group of q (its configuration no longer parks).
func (m *Machine) releaseAll(q *queueState) {
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range q.parked {
			if !yield(k) {
				return
			}
		}
	}) {
		p := q.parked[key]
		m.release(q, key)
		if m.releaseLog != nil {
			m.releaseLog(Release{Queue: q.name, Group: key, Blocker: p.blocker, Why: "on_dead_letter is no longer park_group"})
		}
	}
}

// moveToFront puts x, just added at its group's tail, at position pos of the group.
func (m *Machine) moveToFront(q *queueState, x *message, pos int) {
	g := m.ar.group(x)
	if g == nil || len(g.msgs) == 0 || g.msgs[len(g.msgs)-1] != x || pos >= len(g.msgs)-1 {
		return
	}
	if h := g.head(); pos == 0 && h.hidx >= 0 && h.state() == StateReady {
		q.ready.remove(h)
	}
	copy(g.msgs[pos+1:], g.msgs[pos:len(g.msgs)-1])
	g.msgs[pos] = x
	if x.hidx >= 0 && pos != 0 {
		q.ready.remove(x)
	}
	m.maybeReadyGroup(q, g)
}

// Parked lists queue's parked groups, by group key.
func (m *Machine) Parked(queue string) ([]ParkedGroup, error) {
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	out := make([]ParkedGroup, 0, len(q.parked))
	for key, p := range q.parked {
		pg := ParkedGroup{Group: key, Blocker: p.blocker, Since: p.since}
		if d := m.byID[p.dlq]; d != nil {
			pg.DLQ = d.name
		}
		if g := q.groups[key]; g != nil {
			pg.Messages = len(g.msgs)
		}
		out = append(out, pg)
	}
	slices.SortFunc(out, func(a, b ParkedGroup) int {
		if a.Group < b.Group {
			return -1
		}
		if a.Group > b.Group {
			return 1
		}
		return 0
	})
	return out, nil
}

// ReleaseGroup releases queue's parked group by hand: its messages become deliverable
// in order; the dead letter stays where it is (a later redrive of it joins the tail).
// ErrNotParked if the group is not parked.
func (m *Machine) ReleaseGroup(now int64, sink Sink, queue, group string) error {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return err
	}
	m.advance(sink, q, now)
	if _, ok := q.parked[group]; !ok {
		m.reschedule(q)
		return fmt.Errorf("%w: %q has no parked group %q", ErrNotParked, q.name, group)
	}
	m.emit(sink, &GroupReleaseRecord{Now: now, QueueID: q.id, Group: group})
	return nil
}

// GroupReleaseRecord releases a parked group by hand.
type GroupReleaseRecord struct {
	Now     int64
	QueueID uint64
	Group   string
}

func (r *GroupReleaseRecord) Kind() Kind  { return KindGroupRelease }
func (r *GroupReleaseRecord) Time() int64 { return r.Now }

func (r *GroupReleaseRecord) AppendTo(b []byte) []byte {
	b = header(b, KindGroupRelease, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendString(b, r.Group)
}

func (r *GroupReleaseRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Group = d.string()
}

func (r *GroupReleaseRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	if _, ok := q.parked[r.Group]; !ok {
		return fmt.Errorf("group release: %q has no parked group %q", q.name, r.Group)
	}
	m.release(q, r.Group)
	m.reschedule(q)
	return nil
}
