package queue

import "fmt"

// Deferral (docs/semantics.md "Defer"): a consumer holding a lease sets its message aside.
// The message leaves the ready set — no receive returns it — and keeps its id, its
// delivery count and its retention clock; only a fetch by id takes it again, under a new
// lease that counts a delivery. A nack or an ended lease of a fetched deferred message
// returns it to deferred, not to the ready set; max_deliveries and retention apply as to
// any message, so a deferred message ends in the dead-letter queue rather than nowhere.
// In an ordered group, deferring the head takes it out of the group, which moves on: a
// deferred message neither holds its group nor waits behind it (its key is kept, in its
// extension, for peek and for the dead-letter queue).

// isDeferred reports whether a consumer deferred x (msgExt.deferred).
func (a *arena) isDeferred(x *message) bool {
	e := a.ext(x)
	return e != nil && e.deferred
}

// setDeferred marks x deferred at since with its group's key, or clears the mark.
func (a *arena) setDeferred(x *message, on bool, key string, since int64) {
	e := a.extValue(x)
	e.deferred, e.group, e.since = on, "", 0
	if on {
		e.group, e.since = key, since
	}
	a.setExt(x, &e)
}

// deferredSince is when x was deferred, 0 if it is not.
func (a *arena) deferredSince(x *message) int64 {
	if e := a.ext(x); e != nil && e.deferred {
		return e.since
	}
	return 0
}

// groupKey is x's group key: its group's, or, for a deferred message, the one it left.
func (a *arena) groupKey(x *message) string {
	if g := a.group(x); g != nil {
		return g.key
	}
	if e := a.ext(x); e != nil {
		return e.group
	}
	return ""
}

// dropGroup forgets an empty group, unless a newer group of the same key took its place.
func (q *queueState) dropGroup(g *group) {
	if q.groups[g.key] == g {
		delete(q.groups, g.key)
	}
}

// backToDeferred returns a fetched deferred message whose lease ended (nack, expiry) to
// StateDeferred. Its lease is already out of the timers and of nInFlight.
func (m *Machine) backToDeferred(q *queueState, x *message) {
	x.setState(StateDeferred)
	x.at = 0
	q.nDeferred++
}

// Defer sets leased messages aside (StateDeferred): each lease gets nil or
// ErrReceiptStale, as Ack does. The lease ends; an ordered group moves on.
func (m *Machine) Defer(now int64, sink Sink, queue string, leases []Lease) ([]error, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	return m.settleLeases(sink, q, now, leases, func(seqs []uint64) {
		m.emit(sink, &DeferRecord{Now: now, QueueID: q.id, Seqs: seqs})
	}), nil
}

// deferredMsg returns the deferred message id of q, nil if it has none in StateDeferred.
func (q *queueState) deferredMsg(id uint64) *message {
	r, ok := q.deferred[id]
	if !ok {
		return nil
	}
	x := q.msgs.a.get(r)
	if x.id != id || x.state() != StateDeferred {
		return nil
	}
	return x
}

// DeferredRefs returns, for each id, the Ref of the deferred message it names in queue,
// or 0 when it names none: what the broker reads before it fetches them
// (ReceiveDeferred), so that a body it cannot read costs no delivery.
func (m *Machine) DeferredRefs(queue string, ids []uint64) ([]Ref, error) {
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	out := make([]Ref, len(ids))
	for i, id := range ids {
		if x := q.deferredMsg(id); x != nil {
			out[i] = x.self
		}
	}
	return out, nil
}

// ReceiveDeferred fetches deferred messages by id, leasing each for visibility
// milliseconds (negative: the queue's visibility timeout); the lease counts a delivery.
// The results follow ids: a Delivery, or an error — ErrNotDeferred for an id that names
// no deferred message of the queue (or names one twice), a *LimitError beyond the
// queue's in-flight room. Messages past retention were dead-lettered by the time the
// call looks (they are not deferred any more).
func (m *Machine) ReceiveDeferred(now int64, sink Sink, queue string, ids []uint64, visibility int64) ([]Delivery, []error, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return nil, nil, err
	}
	if visibility > ms(MaxVisibilityTimeout) {
		return nil, nil, &ParamError{Field: "visibility", Reason: "must be between 0 and 12h"}
	}
	m.advance(sink, q, now)
	if visibility < 0 {
		visibility = ms(q.cfg.VisibilityTimeout)
	}
	room := int64(m.limits.MaxInFlight) - q.nInFlight
	ds := make([]Delivery, len(ids))
	errs := make([]error, len(ids))
	var seqs []uint64
	var taken []int
	seen := make(map[uint64]bool, len(ids))
	for i, id := range ids {
		x := q.deferredMsg(id)
		switch {
		case x == nil || seen[id]:
			errs[i] = fmt.Errorf("%w: %s in %q", ErrNotDeferred, FormatID(id), q.name)
		case int64(len(seqs)) >= room:
			errs[i] = &LimitError{Limit: "max_in_flight", Value: m.limits.MaxInFlight, What: fmt.Sprintf("%q has %d messages in flight: ack or nack some first", q.name, q.nInFlight)}
		default:
			seen[id] = true
			seqs = append(seqs, x.seq)
			taken = append(taken, i)
		}
	}
	if len(seqs) > 0 {
		m.emit(sink, &ReceiveDeferredRecord{Now: now, QueueID: q.id, Deadline: now + visibility, Seqs: seqs})
		for j, i := range taken {
			ds[i] = m.delivery(q, q.msgs.get(seqs[j]))
		}
	}
	m.reschedule(q)
	return ds, errs, nil
}

// DeferRecord sets leased messages aside: their leases end, they enter StateDeferred, and
// each leaves its group (which moves on when it was the head).
type DeferRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

func (r *DeferRecord) Kind() Kind  { return KindDefer }
func (r *DeferRecord) Time() int64 { return r.Now }

func (r *DeferRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDefer, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *DeferRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Seqs = d.seqs()
}

func (r *DeferRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("defer: %w", err)
		}
		q.timers.remove(x)
		q.nInFlight--
		key := m.ar.groupKey(x)
		if g := m.ar.group(x); g != nil {
			g.leased--
			g.remove(x)
			m.ar.setGroup(x, nil)
			if len(g.msgs) == 0 {
				q.refair(g)
				q.dropGroup(g)
			} else {
				q.refair(g)
				m.maybeReadyGroup(q, g) // the group moves on
			}
		}
		m.ar.setDeferred(x, true, key, r.Now)
		if q.deferred == nil {
			q.deferred = make(map[uint64]Ref)
		}
		q.deferred[x.id] = x.self
		m.backToDeferred(q, x)
		q.stats.Deferrals++
		if q.retCursor >= x.seq {
			// The retention sweep passed it while it was leased (it is past retention): the
			// cursor goes back so that the next sweep expires it, as a lease that ends does.
			q.retCursor = x.seq - 1
		}
	}
	m.reschedule(q)
	return nil
}

// ReceiveDeferredRecord leases deferred messages, fetched by id, until Deadline; each
// delivery count grows by one. They stay deferred: a lease that ends without an ack
// returns them to StateDeferred.
type ReceiveDeferredRecord struct {
	Now      int64
	QueueID  uint64
	Deadline int64
	Seqs     []uint64
}

func (r *ReceiveDeferredRecord) Kind() Kind  { return KindReceiveDeferred }
func (r *ReceiveDeferredRecord) Time() int64 { return r.Now }

func (r *ReceiveDeferredRecord) AppendTo(b []byte) []byte {
	b = header(b, KindReceiveDeferred, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendVarint(b, r.Deadline-r.Now)
	return appendSeqs(b, r.Seqs)
}

func (r *ReceiveDeferredRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Deadline = now + d.varint()
	r.Seqs = d.seqs()
}

func (r *ReceiveDeferredRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateDeferred)
		if err != nil {
			return fmt.Errorf("receive deferred: %w", err)
		}
		q.nDeferred--
		x.setState(StateInFlight)
		x.deliv++
		x.at = r.Deadline
		q.timers.push(x)
		q.nInFlight++
		q.stats.Delivered++
		if x.deliv > 1 {
			q.stats.Redelivered++
			m.ar.editHist(x).lastRecv = r.Now
		}
		if x.firstRecv == 0 {
			x.firstRecv = r.Now
			q.stats.WaitSum += uint64(max(r.Now-x.entered, 0))
			q.stats.WaitCount++
		}
	}
	m.reschedule(q)
	return nil
}
