package queue

import "fmt"

// Records that move messages: send, lease, settle, dead-letter, remove, purge.

// SendRecord enqueues one message. It holds the payload: the node's payload store reads
// a message's body back from where this record lies (or from where it moved it since).
type SendRecord struct {
	Now       int64
	QueueID   uint64
	MsgID     uint64
	VisibleAt int64
	Payload   Payload
}

func (r *SendRecord) Kind() Kind  { return KindSend }
func (r *SendRecord) Time() int64 { return r.Now }

func (r *SendRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSend, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.MsgID)
	b = appendVarint(b, r.VisibleAt-r.Now)
	return appendPayload(b, &r.Payload)
}

func (r *SendRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.MsgID = d.uvarint()
	r.VisibleAt = now + d.varint()
	r.Payload = d.payload()
}

func (r *SendRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	if r.MsgID > m.lastID {
		m.lastID = r.MsgID
	}
	p := &r.Payload
	x := m.ar.alloc()
	x.id = r.MsgID
	x.setSize(p.Size())
	m.attachGroup(q, x, p.Group)
	m.add(q, x, r.VisibleAt, r.Now)
	if key := q.dedupKey(p); key != "" {
		m.dedup.expire(r.Now)
		evicted := q.dedup.insert(key, r.MsgID, x.seq, r.Now+ms(q.cfg.DedupWindow), r.Now, m.limits.DedupCap, m.dedup.drop)
		m.dedup.add(r.Now + ms(q.cfg.DedupWindow))
		// The server's bound: the queue that sends pays, with its oldest entry, or with
		// this one when it holds no other.
		for m.dedup.live > m.limits.DedupTotal {
			evicted = true
			if !q.dedup.evictOldest(key, m.dedup.drop) {
				q.dedup.remove(key)
				m.dedup.drop(r.Now + ms(q.cfg.DedupWindow))
				break
			}
		}
		if evicted {
			q.stats.DedupEvictedEarly++
		}
	}
	if m.bodies != nil {
		m.bodies.Added(x.self, p)
	}
	q.stats.Sent++
	m.reschedule(q)
	return nil
}

// RelocateRecord was written by okiba before its payload store existed, when compaction
// rewrote a live message's body at the head of the log through the machine. It changes no
// semantic state; the broker, replaying an old log, points the message's body at it. New
// logs record relocations as the payload store's own frames.
type RelocateRecord struct {
	Now     int64
	QueueID uint64
	Seq     uint64
	MsgID   uint64
	Payload Payload
}

func (r *RelocateRecord) Kind() Kind  { return KindRelocate }
func (r *RelocateRecord) Time() int64 { return r.Now }

func (r *RelocateRecord) AppendTo(b []byte) []byte {
	b = header(b, KindRelocate, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.Seq)
	b = appendUvarint(b, r.MsgID)
	return appendPayload(b, &r.Payload)
}

func (r *RelocateRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Seq = d.uvarint()
	r.MsgID = d.uvarint()
	r.Payload = d.payload()
}

func (r *RelocateRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	x, err := q.msg(r.Seq, 0)
	if err != nil {
		return err
	}
	if x.id != r.MsgID {
		return fmt.Errorf("relocate: seq %d of %q is message %d, not %d", r.Seq, q.name, x.id, r.MsgID)
	}
	return nil
}

// DeliverRecord leases messages of one queue until Deadline; each delivery count grows by one.
type DeliverRecord struct {
	Now      int64
	QueueID  uint64
	Deadline int64
	Seqs     []uint64
}

func (r *DeliverRecord) Kind() Kind  { return KindDeliver }
func (r *DeliverRecord) Time() int64 { return r.Now }

func (r *DeliverRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDeliver, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendVarint(b, r.Deadline-r.Now)
	return appendSeqs(b, r.Seqs)
}

func (r *DeliverRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Deadline = now + d.varint()
	r.Seqs = d.seqs()
}

func (r *DeliverRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateReady)
		if err != nil {
			return fmt.Errorf("deliver: %w", err)
		}
		m.removeReady(q, x)
		q.nReady--
		x.setState(StateInFlight)
		x.deliv++
		x.at = r.Deadline
		q.timers.push(x)
		q.nInFlight++
		if g := m.ar.group(x); g != nil {
			g.leased++
			q.refair(g)
		}
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

// DeliverDeleteRecord is a receive-and-delete: ready messages of one queue delivered and
// settled at once, in one record, so that no crash can leave one delivered but not
// settled (or settled but not delivered). Each counts as a delivery and as
// received_and_deleted; an ordered group moves on at once.
type DeliverDeleteRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

func (r *DeliverDeleteRecord) Kind() Kind  { return KindDeliverDelete }
func (r *DeliverDeleteRecord) Time() int64 { return r.Now }

func (r *DeliverDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDeliverDelete, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *DeliverDeleteRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Seqs = d.seqs()
}

func (r *DeliverDeleteRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateReady)
		if err != nil {
			return fmt.Errorf("deliver and delete: %w", err)
		}
		x.deliv++
		q.stats.Delivered++
		if x.deliv > 1 {
			q.stats.Redelivered++
		}
		if x.firstRecv == 0 {
			q.stats.WaitSum += uint64(max(r.Now-x.entered, 0))
			q.stats.WaitCount++
		}
		q.noteSettled(x.id, r.Now, GoneReceivedAndDeleted, 0)
		m.detach(q, x)
		q.stats.ReceivedAndDeleted++
		q.stats.SojournSum += uint64(max(r.Now-x.entered, 0))
		q.stats.SojournCount++
		m.drop(x)
	}
	m.reschedule(q)
	return nil
}

// SeqTime pairs a message (by its queue sequence) with a time.
type SeqTime struct {
	Seq  uint64
	Time int64
}

// ExtendRecord moves lease deadlines.
type ExtendRecord struct {
	Now     int64
	QueueID uint64
	Items   []SeqTime
}

func (r *ExtendRecord) Kind() Kind  { return KindExtend }
func (r *ExtendRecord) Time() int64 { return r.Now }

func (r *ExtendRecord) AppendTo(b []byte) []byte {
	b = header(b, KindExtend, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqTimes(b, r.Items, r.Now)
}

func (r *ExtendRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Items = d.seqTimes(now)
}

func (r *ExtendRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, it := range r.Items {
		x, err := q.msg(it.Seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("extend: %w", err)
		}
		x.at = it.Time
		q.timers.fix(x)
		q.stats.Extended++
	}
	m.reschedule(q)
	return nil
}

// AckRecord settles leased messages: they leave the queue.
type AckRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

func (r *AckRecord) Kind() Kind  { return KindAck }
func (r *AckRecord) Time() int64 { return r.Now }

func (r *AckRecord) AppendTo(b []byte) []byte {
	b = header(b, KindAck, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *AckRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Seqs = d.seqs()
}

func (r *AckRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		q.noteSettled(x.id, r.Now, GoneAcked, 0)
		m.detach(q, x)
		q.stats.Acked++
		q.stats.SojournSum += uint64(max(r.Now-x.entered, 0))
		q.stats.SojournCount++
		m.drop(x)
	}
	m.reschedule(q)
	return nil
}

// NackRecord ends leases early; each message becomes visible at its time. Errors, when
// not nil, holds the handler's error text each nack carried ("" for none), item by item:
// such a record is written as KindNackError (a nack of an older okiba, or one without
// errors, is KindNack, which has no such field).
type NackRecord struct {
	Now     int64
	QueueID uint64
	Items   []SeqTime
	Errors  []string
}

func (r *NackRecord) Kind() Kind {
	if r.Errors != nil {
		return KindNackError
	}
	return KindNack
}

func (r *NackRecord) Time() int64 { return r.Now }

func (r *NackRecord) AppendTo(b []byte) []byte {
	b = header(b, r.Kind(), r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendSeqTimes(b, r.Items, r.Now)
	if r.Errors != nil {
		for i := range r.Items {
			b = appendString(b, r.Errors[i])
		}
	}
	return b
}

func (r *NackRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Items = d.seqTimes(now)
	if r.Errors != nil { // made by kinds[KindNackError]
		r.Errors = make([]string, 0, len(r.Items))
		for range r.Items {
			r.Errors = append(r.Errors, d.string())
		}
	}
}

func (r *NackRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	if r.Errors != nil && len(r.Errors) != len(r.Items) {
		return fmt.Errorf("nack: %d errors for %d items", len(r.Errors), len(r.Items))
	}
	for i, it := range r.Items {
		x, err := q.msg(it.Seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("nack: %w", err)
		}
		h := m.ar.editHist(x)
		h.nacks++
		h.nackDelay = max(it.Time-r.Now, 0)
		if r.Errors != nil && r.Errors[i] != "" {
			h.lastErr = r.Errors[i]
		}
		q.timers.remove(x)
		q.nInFlight--
		if g := m.ar.group(x); g != nil {
			g.leased--
			q.refair(g)
		}
		if m.ar.isDeferred(x) {
			m.backToDeferred(q, x) // a fetched deferred message goes back to deferred
		} else if it.Time > r.Now {
			x.setState(StateDelayed)
			x.at = it.Time
			q.nDelayed++
			q.timers.push(x)
			m.maybeReadyGroup(q, m.ar.group(x))
		} else {
			m.makeReady(q, x)
		}
		q.stats.Nacked++
	}
	m.reschedule(q)
	return nil
}

// DeadLetterRecord moves messages from a queue into its dead-letter queue, or, with
// Target 0 (a queue without DLQ, only for reason expired), removes them with this record
// as the durable trace.
type DeadLetterRecord struct {
	Now         int64
	QueueID     uint64
	Target      uint64
	Reason      string
	Description string
	Seqs        []uint64
}

func (r *DeadLetterRecord) Kind() Kind  { return KindDeadLetter }
func (r *DeadLetterRecord) Time() int64 { return r.Now }

func (r *DeadLetterRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDeadLetter, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.Target)
	b = appendString(b, r.Reason)
	b = appendString(b, r.Description)
	return appendSeqs(b, r.Seqs)
}

func (r *DeadLetterRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Target = d.uvarint()
	r.Reason = d.string()
	r.Description = d.string()
	r.Seqs = d.seqs()
}

func (r *DeadLetterRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	var t *queueState
	if r.Target != 0 {
		if t, err = m.touch(r.Target, r.Now); err != nil {
			return err
		}
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, 0)
		if err != nil {
			return fmt.Errorf("dead letter: %w", err)
		}
		key := m.ar.groupKey(x)
		deliv := x.deliv
		if t == nil {
			q.noteSettled(x.id, r.Now, GoneExpired, 0)
		} else {
			q.noteSettled(x.id, r.Now, GoneDeadLettered, t.id)
			if _, park := m.parkable(q, x); park {
				m.park(q, key, x.id, t.id, r.Now) // before detach: the next head stays out of reach
			}
		}
		m.detach(q, x)
		if r.Reason == ReasonExpired {
			q.stats.Expired++
		}
		if t == nil { // no DLQ: expiry removes the message, with this record as its trace
			m.drop(x)
			continue
		}
		q.stats.DeadLettered++
		if q.stats.ByReason == nil {
			q.stats.ByReason = make(map[string]uint64)
		}
		q.stats.ByReason[r.Reason]++
		if (t.cfg.MaxMessages > 0 && int64(t.msgs.live) >= t.cfg.MaxMessages) || (t.cfg.MaxBytes > 0 && t.bytes+x.size() > t.cfg.MaxBytes) {
			t.stats.Overflow++
		}
		m.ar.setDead(x, &DeadInfo{Source: q.id, SourceName: q.name, Reason: r.Reason, Description: r.Description, At: r.Now, Deliveries: deliv})
		x.deliv = 0
		x.firstRecv = 0
		m.ar.setHist(x, nil)
		m.attachGroup(t, x, key)
		m.add(t, x, r.Now, r.Now)
		t.stats.DeadLetteredIn++
	}
	m.reschedule(q)
	if t != nil {
		m.reschedule(t)
	}
	return nil
}

// RemoveRecord removes messages without dead-lettering them: delete by id by an operator.
type RemoveRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

func (r *RemoveRecord) Kind() Kind  { return KindRemove }
func (r *RemoveRecord) Time() int64 { return r.Now }

func (r *RemoveRecord) AppendTo(b []byte) []byte {
	b = header(b, KindRemove, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *RemoveRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Seqs = d.seqs()
}

func (r *RemoveRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, 0)
		if err != nil {
			return fmt.Errorf("remove: %w", err)
		}
		q.noteSettled(x.id, r.Now, GoneDeleted, 0)
		m.detach(q, x)
		m.drop(x)
		q.stats.Deleted++
	}
	m.reschedule(q)
	return nil
}

// PurgeRecord removes every message of a queue.
type PurgeRecord struct {
	Now     int64
	QueueID uint64
}

func (r *PurgeRecord) Kind() Kind  { return KindPurge }
func (r *PurgeRecord) Time() int64 { return r.Now }

func (r *PurgeRecord) AppendTo(b []byte) []byte {
	b = header(b, KindPurge, r.Now)
	return appendUvarint(b, r.QueueID)
}

func (r *PurgeRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
}

func (r *PurgeRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	q.msgs.each(0, func(x *message) bool {
		q.noteSettled(x.id, r.Now, GonePurged, 0)
		if len(m.blockers) > 0 {
			m.blockerLeaves(q, x)
		}
		m.drop(x)
		return true
	})
	q.stats.Purged += uint64(q.msgs.live)
	q.msgs = seqIndex{a: &m.ar}
	q.ready = newReadyHeap(&m.ar)
	q.fair = groupHeap{}
	q.timers = newHeap(&m.ar)
	q.pending = nil
	q.groups = nil
	q.deferred = nil
	q.nReady, q.nDelayed, q.nInFlight, q.nDeferred, q.bytes = 0, 0, 0, 0, 0
	q.retCursor = 0
	m.reschedule(q)
	return nil
}
