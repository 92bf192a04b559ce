package queue

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Snapshot format: a versioned, deterministic binary image of the machine's semantic
// state — equal states give equal bytes, on every node: the tests compare live, replayed
// and other brokers' machines by it, and a replicated broker will ship it. Bodies are not
// included (the node's payload store keeps them, and its own checkpoint section says where
// they lie); dedup entries are (a restart never forgets them, docs/semantics.md "Dedup").
//
//	"OKQS" | uvarint version | varint now | uvarint last message id, queue id, task id |
//	limits (v4: five uvarints; v3: four, before DedupTotal) | uvarint queue count | queues by id | uvarint task count | tasks by id | producers (v6)
//
// A queue is its id, name, config, times, next sequence and counters, then its messages
// in sequence order and its dedup entries oldest first. Each message is encoded against
// the one before it in the queue (ids, sequences and enqueue times grow together) behind
// one flag byte, about 10 bytes a message: a deep backlog's checkpoint is built while the
// broker's lock is held and lives in memory until it is written (docs/benchmarks.md "The
// deep backlog").
//
// Version 8 (this one) is version 7 with deferred messages (state codes 5 to 7, see
// snapDeferred; such an entry ends with varint deferred-at minus entered), one more
// counter per queue, Deferrals, after ReceivedAndDeleted, a byte after each queue's
// configuration (OnDeadLetter), and two more lists at the end of each queue for parked
// groups (park.go): the parked groups (uvarint count | (string key | uvarint blocker id |
// uvarint dead-letter queue id | varint since)*, by key), and the groups whose order is
// not their sequence order (a blocker redriven to their front: uvarint count | (string
// key | uvarint n | uvarint seq*)*, by key).
// Version 7 is version 6 with two more lists at the end of each queue, after
// its dedup entries, for explain (explain.go): the history of the messages that have one
// (uvarint count | (uvarint seq delta | varint last delivery | uvarint nacks | varint last
// nack delay | string last error)*, in sequence order), and the ring of the last settled
// messages (uvarint count | (uvarint id | varint at | uvarint to | u8 how)*, oldest first).
// Version 6 is version 5 with the producers of idempotent sends after the
// tasks: varint last sweep | uvarint count | (string id | varint last used | uvarint
// answers | (uvarint seq | uvarint queue id | results)*)* (producers.go).
// Version 5 is version 4 with one more counter per queue, ReceivedAndDeleted,
// after DedupEvictedEarly. Version 4 is version 3 with DedupTotal among the limits. Version 3 holds
// nothing of the node: no log positions, no limits taken from options. Versions 1 and 2 (okiba before the payload store) carried each message's log
// position; Restore still reads them and hands the positions to the caller's legacy
// function, for the payload store.
const (
	snapshotMagic   = "OKQS"
	snapshotVersion = 8
)

// State codes of a message entry (its flag byte's low three bits) beyond the states
// themselves, from version 8: a message a consumer deferred, by where it is. A deferred
// message's key (snapKey) is the group it left.
const (
	snapDeferred         = 5 // StateDeferred
	snapDeferredInFlight = 6 // fetched by id and leased
	snapDeferredPending  = 7 // its fetched lease ended into a dead letter, not yet recorded
)

// Flag bits of a version-2 message entry; the low three bits hold the state.
const (
	snapDead      = 1 << 3
	snapKey       = 1 << 4
	snapAt        = 1 << 5
	snapFirstRecv = 1 << 6
	snapDeliv     = 1 << 7
	snapStateMask = 7
)

// snapshotChunk is the size of the pieces Snapshot returns: a large index is never one
// allocation, nor copied again when a buffer grows.
const snapshotChunk = 1 << 20

// snapWriter collects a snapshot in chunks.
type snapWriter struct {
	done  [][]byte
	b     []byte
	visit func(Ref, int64)
}

// spill starts a new chunk once the current one is nearly full. It is called between
// entries, so an entry never straddles two chunks (the decoder does not care; it only
// keeps the chunks near their size).
func (w *snapWriter) spill() {
	if len(w.b) >= snapshotChunk-256 {
		w.done = append(w.done, w.b)
		w.b = make([]byte, 0, snapshotChunk)
	}
}

// ErrSnapshotVersion is returned for a snapshot written by a newer okiba.
var ErrSnapshotVersion = errors.New("snapshot was written by a newer okiba")

// AppendSnapshot appends the machine's state to b.
func (m *Machine) AppendSnapshot(b []byte) []byte {
	for _, c := range m.Snapshot(nil) {
		b = append(b, c...)
	}
	return b
}

// Snapshot returns the machine's state as consecutive pieces of about a megabyte each,
// to be written one after the other (wal.SaveCheckpoint takes them as they are). visit,
// if not nil, is called for every message in the order the snapshot lists them (the
// canonical order of EachMessage), so that the node's payload store can write its own
// section in the same pass.
func (m *Machine) Snapshot(visit func(ref Ref, size int64)) [][]byte {
	// The first piece grows as it fills (to snapshotChunk, then spill starts the next),
	// so that the snapshot of a small machine costs what it holds, not a megabyte.
	w := &snapWriter{b: make([]byte, 0, 4096), visit: visit}
	m.writeSnapshot(w)
	if len(w.b) > 0 {
		w.done = append(w.done, w.b)
	}
	return w.done
}

func (m *Machine) writeSnapshot(w *snapWriter) {
	b := w.b
	b = append(b, snapshotMagic...)
	b = appendUvarint(b, snapshotVersion)
	b = appendVarint(b, m.now)
	b = appendUvarint(b, m.lastID)
	b = appendUvarint(b, m.lastQID)
	b = appendUvarint(b, m.lastTID)
	b = appendLimits(b, &m.limits)

	ids := m.queueIDs()
	b = appendUvarint(b, uint64(len(ids)))
	w.b = b
	for _, id := range ids {
		m.byID[id].writeSnapshot(w, m.now)
	}
	b = w.b

	tids := make([]uint64, 0, len(m.tasks))
	for id := range m.tasks {
		tids = append(tids, id)
	}
	slices.Sort(tids)
	b = appendUvarint(b, uint64(len(tids)))
	for _, id := range tids {
		t := m.tasks[id]
		b = appendUvarint(b, t.ID)
		b = appendUvarint(b, t.Source)
		b = appendUvarint(b, t.Target)
		b = appendFilter(b, &t.Filter)
		b = appendUvarint(b, t.MaxSeq)
		b = appendUvarint(b, t.Cursor)
		b = append(b, byte(t.State))
		b = appendVarint(b, t.Total)
		b = appendVarint(b, t.Moved)
		b = appendVarint(b, t.Skipped)
		b = appendVarint(b, int64(t.Rate))
		b = appendVarint(b, t.CreatedAt)
		b = appendVarint(b, t.UpdatedAt)
		b = appendString(b, t.Message)
	}
	w.b = m.appendProducers(b)
}

func appendCounters(b []byte, c *Counters) []byte {
	for _, v := range []uint64{c.Sent, c.Acked, c.Nacked, c.Delivered, c.Redelivered, c.Extended,
		c.DeadLettered, c.Expired, c.DeadLetteredIn, c.Overflow, c.RedrivenIn, c.RedrivenOut,
		c.Purged, c.Deleted, c.WaitSum, c.WaitCount, c.SojournSum, c.SojournCount, c.DedupEvictedEarly,
		c.ReceivedAndDeleted, c.Deferrals} {
		b = appendUvarint(b, v)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range c.ByReason {
			if !yield(k) {
				return
			}
		}
	})
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendUvarint(b, c.ByReason[k])
	}
	return b
}

// counters decodes a queue's counters; a snapshot before version 5 has no
// ReceivedAndDeleted (there was no receive-and-delete).
func (d *decoder) counters(version uint64) Counters {
	var c Counters
	ps := []*uint64{&c.Sent, &c.Acked, &c.Nacked, &c.Delivered, &c.Redelivered, &c.Extended,
		&c.DeadLettered, &c.Expired, &c.DeadLetteredIn, &c.Overflow, &c.RedrivenIn, &c.RedrivenOut,
		&c.Purged, &c.Deleted, &c.WaitSum, &c.WaitCount, &c.SojournSum, &c.SojournCount, &c.DedupEvictedEarly}
	if version >= 5 {
		ps = append(ps, &c.ReceivedAndDeleted)
	}
	if version >= 8 {
		ps = append(ps, &c.Deferrals)
	}
	for _, p := range ps {
		*p = d.uvarint()
	}
	if n := d.count(); n > 0 {
		c.ByReason = make(map[string]uint64, n)
		for i := 0; i < n && d.err == nil; i++ {
			k := d.string()
			c.ByReason[k] = d.uvarint()
		}
	}
	return c
}

func (q *queueState) writeSnapshot(w *snapWriter, now int64) {
	b := w.b
	b = appendUvarint(b, q.id)
	b = appendString(b, q.name)
	b = appendConfig(b, &q.cfg)
	b = append(b, byte(q.cfg.OnDeadLetter))
	b = appendVarint(b, q.createdAt)
	b = appendVarint(b, q.updatedAt)
	b = appendUvarint(b, q.nextSeq)
	b = appendCounters(b, &q.stats)

	pendingReason := make(map[*message]string, len(q.pending))
	for _, p := range q.pending {
		pendingReason[p.m] = p.reason
	}
	b = appendUvarint(b, uint64(q.msgs.live))
	var prev message
	q.msgs.each(0, func(x *message) bool {
		flags := byte(x.state()) & snapStateMask
		if q.msgs.a.isDeferred(x) {
			switch x.state() {
			case StateInFlight:
				flags = snapDeferredInFlight
			case statePending:
				flags = snapDeferredPending
			}
		}
		dead := q.msgs.a.dead(x)
		if dead != nil {
			flags |= snapDead
		}
		key := q.msgs.a.groupKey(x)
		if key != "" {
			flags |= snapKey
		}
		if x.at != 0 {
			flags |= snapAt
		}
		if x.firstRecv != 0 {
			flags |= snapFirstRecv
		}
		if x.deliv != 0 {
			flags |= snapDeliv
		}
		b = append(b, flags)
		// Differences wrap: decoding adds them back modulo 2^64, so any order round-trips.
		b = appendVarint(b, int64(x.id-prev.id))
		b = appendUvarint(b, x.seq-prev.seq)
		b = appendVarint(b, x.entered-prev.entered)
		if x.at != 0 {
			b = appendVarint(b, x.at-x.entered)
		}
		if x.firstRecv != 0 {
			b = appendVarint(b, x.firstRecv-x.entered)
		}
		b = appendUvarint(b, uint64(x.size()))
		if x.deliv != 0 {
			b = appendUvarint(b, uint64(x.deliv))
		}
		if x.state() == statePending {
			b = appendString(b, pendingReason[x])
		}
		if key != "" {
			b = appendString(b, key)
		}
		if dead != nil {
			b = appendUvarint(b, dead.Source)
			b = appendString(b, dead.SourceName)
			b = appendString(b, dead.Reason)
			b = appendString(b, dead.Description)
			b = appendVarint(b, dead.At)
			b = appendUvarint(b, uint64(dead.Deliveries))
		}
		if code := flags & snapStateMask; code >= snapDeferred && code <= snapDeferredPending {
			b = appendVarint(b, q.msgs.a.deferredSince(x)-x.entered)
		}
		prev.id, prev.seq, prev.entered = x.id, x.seq, x.entered
		if w.visit != nil {
			w.visit(x.self, x.size())
		}
		w.b = b
		w.spill()
		b = w.b
		return true
	})

	// Dedup entries still inside their window, oldest first.
	var keys []string
	seen := map[string]bool{}
	for _, k := range q.dedup.order[q.dedup.head:] {
		if e, ok := q.dedup.m[k]; ok && e.expires > now && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		e := q.dedup.m[k]
		b = appendString(b, k)
		b = appendUvarint(b, e.id)
		b = appendUvarint(b, e.seq)
		b = appendVarint(b, e.expires)
	}

	// v7: histories, then the settled ring.
	nh := 0
	q.msgs.each(0, func(x *message) bool {
		if q.msgs.a.hist(x) != nil {
			nh++
		}
		return true
	})
	b = appendUvarint(b, uint64(nh))
	prevSeq := uint64(0)
	q.msgs.each(0, func(x *message) bool {
		h := q.msgs.a.hist(x)
		if h == nil {
			return true
		}
		b = appendUvarint(b, x.seq-prevSeq)
		prevSeq = x.seq
		b = appendVarint(b, h.lastRecv)
		b = appendUvarint(b, uint64(h.nacks))
		b = appendVarint(b, h.nackDelay)
		b = appendString(b, h.lastErr)
		return true
	})
	b = appendUvarint(b, uint64(len(q.settled.e)))
	q.settled.each(func(e settledEntry) {
		b = appendUvarint(b, e.id)
		b = appendVarint(b, e.at)
		b = appendUvarint(b, e.to)
		b = append(b, byte(e.how))
	})

	// v8: parked groups, then groups out of sequence order.
	keys = slices.Sorted(func(yield func(string) bool) {
		for k := range q.parked {
			if !yield(k) {
				return
			}
		}
	})
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		p := q.parked[k]
		b = appendString(b, k)
		b = appendUvarint(b, p.blocker)
		b = appendUvarint(b, p.dlq)
		b = appendVarint(b, p.since)
	}
	keys = keys[:0]
	for k, g := range q.groups {
		if !slices.IsSortedFunc(g.msgs, func(x, y *message) int { return cmp.Compare(x.seq, y.seq) }) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		g := q.groups[k]
		b = appendString(b, k)
		b = appendUvarint(b, uint64(len(g.msgs)))
		for _, x := range g.msgs {
			b = appendUvarint(b, x.seq)
		}
	}
	w.b = b
}

// Restore rebuilds a machine from a snapshot made by AppendSnapshot. For a snapshot of an
// older okiba (versions 1 and 2), which held each message's log position, it calls legacy
// (if not nil) with every message's Ref, size and that position, in the canonical order.
func Restore(b []byte, legacy func(ref Ref, size int64, pos uint64)) (*Machine, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("restore: not a queue snapshot (bad magic)")
	}
	d := &decoder{b: b[len(snapshotMagic):]}
	version := d.uvarint()
	if d.err == nil && (version < 1 || version > snapshotVersion) {
		if version > snapshotVersion {
			return nil, fmt.Errorf("restore: %w (format v%d; this binary reads v1 to v%d)", ErrSnapshotVersion, version, snapshotVersion)
		}
		return nil, fmt.Errorf("restore: unknown snapshot version %d", version)
	}
	m := New()
	m.now = d.varint()
	m.lastID = d.uvarint()
	m.lastQID = d.uvarint()
	m.lastTID = d.uvarint()
	if version >= 3 {
		m.limits = d.limits(version >= 4)
		if version < 4 {
			m.limits.DedupTotal = DefaultDedupTotal
		}
		if d.err == nil {
			if err := m.limits.validate(); err != nil {
				return nil, fmt.Errorf("restore: %w", err)
			}
		}
	}
	nq := d.count()
	for i := 0; i < nq && d.err == nil; i++ {
		q := m.restoreQueue(d, version, legacy)
		if d.err != nil {
			break
		}
		if m.byID[q.id] != nil || m.queues[q.name] != nil {
			return nil, fmt.Errorf("restore: duplicate queue %q", q.name)
		}
		if q.id == 0 || q.id > m.lastQID {
			return nil, fmt.Errorf("restore: queue %q has id %d beyond the last issued %d", q.name, q.id, m.lastQID)
		}
		if err := CheckName(q.name); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if err := q.cfg.Validate(q.name); err != nil {
			return nil, fmt.Errorf("restore: queue %q: %w", q.name, err)
		}
		m.byID[q.id] = q
		m.queues[q.name] = q
		for _, e := range q.dedup.m {
			m.dedup.add(e.expires)
		}
	}
	m.dedup.expire(m.now) // a snapshot holds no expired entry: this pops none
	nt := d.count()
	for i := 0; i < nt && d.err == nil; i++ {
		t := &Task{}
		t.ID = d.uvarint()
		t.Source = d.uvarint()
		t.Target = d.uvarint()
		t.Filter = d.filter()
		t.MaxSeq = d.uvarint()
		t.Cursor = d.uvarint()
		t.State = TaskState(d.byte())
		t.Total = d.varint()
		t.Moved = d.varint()
		t.Skipped = d.varint()
		t.Rate = d.int()
		t.CreatedAt = d.varint()
		t.UpdatedAt = d.varint()
		t.Message = d.string()
		if q := m.byID[t.Source]; q != nil {
			t.SourceName = q.name
		}
		if q := m.byID[t.Target]; q != nil {
			t.TargetName = q.name
		}
		if t.ID == 0 || t.ID > m.lastTID || m.tasks[t.ID] != nil || t.State < TaskRunning || t.State > TaskFailed ||
			(t.State == TaskRunning && m.byID[t.Source] == nil) {
			return nil, fmt.Errorf("restore: task %d is inconsistent", t.ID)
		}
		m.tasks[t.ID] = t
	}
	if version >= 6 {
		if err := m.restoreProducers(d); err != nil {
			return nil, err
		}
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	for _, q := range m.byID {
		m.reschedule(q)
	}
	return m, nil
}

func (m *Machine) restoreQueue(d *decoder, version uint64, legacy func(Ref, int64, uint64)) *queueState {
	q := m.newQueueState(d.uvarint())
	q.name = d.string()
	q.cfg = d.config()
	if version >= 8 {
		q.cfg.OnDeadLetter = DeadLetterAction(d.byte())
	}
	q.createdAt = d.varint()
	q.updatedAt = d.varint()
	q.nextSeq = d.uvarint()
	q.stats = d.counters(version)
	n := d.count()
	if n > 0 {
		// Room for the backlog and some more: growing a deep backlog's index by
		// doubling copied and cleared most of it several times over.
		c := n + n/8
		q.msgs.slots = make([]Ref, 0, c)
		q.ready.h = make([]Ref, 0, c)
	}
	lastSeq := uint64(0)
	var prev message
	var prevPos uint64
	for i := 0; i < n && d.err == nil; i++ {
		x := m.ar.alloc()
		var reason, key string
		var di *DeadInfo
		var pos uint64
		var since int64
		if version == 1 {
			reason, key, di, pos = d.messageV1(x)
		} else {
			reason, key, di, pos, since = d.messageV2(x, &prev, version, &prevPos)
		}
		m.ar.setDead(x, di)
		if d.err != nil {
			break
		}
		if version < 3 && legacy != nil {
			legacy(x.self, x.size(), pos)
		}
		if x.seq <= lastSeq || x.seq > q.nextSeq {
			d.fail(fmt.Errorf("queue %q: message seq %d out of order", q.name, x.seq))
			break
		}
		if x.id > m.lastID {
			d.fail(fmt.Errorf("queue %q: message seq %d is inconsistent", q.name, x.seq))
			break
		}
		lastSeq = x.seq
		q.msgs.add(x)
		q.bytes += x.size()
		if code := byte(x.state()); code >= snapDeferred && code <= snapDeferredPending {
			if version < 8 {
				d.fail(fmt.Errorf("queue %q: message seq %d has unknown state %d", q.name, x.seq, code))
				break
			}
			m.restoreDeferred(q, x, code, key, reason, since)
			continue
		}
		m.attachGroup(q, x, key)
		if g := m.ar.group(x); g != nil {
			g.msgs = append(g.msgs, x)
		}
		switch x.state() {
		case StateReady:
			q.nReady++
			if m.ar.group(x) == nil || !q.cfg.OrderedGroups {
				m.pushReady(q, x)
			}
		case StateDelayed:
			q.nDelayed++
			q.timers.push(x)
		case StateInFlight:
			q.nInFlight++
			q.timers.push(x)
			if g := m.ar.group(x); g != nil {
				g.leased++
				q.refair(g)
			}
		case statePending:
			q.pending = append(q.pending, pendingDL{m: x, reason: reason})
		default:
			d.fail(fmt.Errorf("queue %q: message seq %d has unknown state %d", q.name, x.seq, x.state()))
		}
	}
	for _, g := range q.groups {
		m.maybeReadyGroup(q, g)
	}
	nd := d.count()
	for i := 0; i < nd && d.err == nil; i++ {
		k := d.string()
		id := d.uvarint()
		seq := d.uvarint()
		exp := d.varint()
		if q.dedup.m == nil {
			q.dedup.m = make(map[string]dedupEntry, nd)
		}
		q.dedup.m[k] = dedupEntry{id: id, seq: seq, expires: exp}
		q.dedup.order = append(q.dedup.order, k)
	}
	if version >= 7 {
		d.restoreExplain(q)
	}
	if version >= 8 {
		m.restoreParked(d, q)
	}
	return q
}

// restoreParked reads a version-8 queue's parked groups and the order of its groups
// that are not in sequence order, and takes the parked groups' heads out of reach.
func (m *Machine) restoreParked(d *decoder, q *queueState) {
	np := d.count()
	for i := 0; i < np && d.err == nil; i++ {
		k := d.string()
		p := parked{blocker: d.uvarint(), dlq: d.uvarint(), since: d.varint()}
		if d.err == nil {
			m.park(q, k, p.blocker, p.dlq, p.since)
		}
	}
	no := d.count()
	for i := 0; i < no && d.err == nil; i++ {
		k := d.string()
		n := d.count()
		g := q.groups[k]
		if d.err == nil && (g == nil || len(g.msgs) != n) {
			d.fail(fmt.Errorf("queue %q: the order of group %q names %d messages, not its own", q.name, k, n))
			return
		}
		if h := g.head(); h != nil && h.hidx >= 0 && h.state() == StateReady {
			q.ready.remove(h) // (a delayed or leased head's index is the timers' heap's)
		}
		for j := 0; j < n && d.err == nil; j++ {
			x := q.msgs.get(d.uvarint())
			if x == nil || m.ar.group(x) != g {
				d.fail(fmt.Errorf("queue %q: the order of group %q names a message not in it", q.name, k))
				return
			}
			g.msgs[j] = x
		}
		m.maybeReadyGroup(q, g)
	}
}

// restoreDeferred places a deferred message of a snapshot (state code code, see
// snapDeferred): out of any group, with the key of the one it left.
func (m *Machine) restoreDeferred(q *queueState, x *message, code byte, key, reason string, since int64) {
	m.ar.setDeferred(x, true, key, since)
	if q.deferred == nil {
		q.deferred = make(map[uint64]Ref)
	}
	q.deferred[x.id] = x.self
	switch code {
	case snapDeferred:
		x.setState(StateDeferred)
		q.nDeferred++
	case snapDeferredInFlight:
		x.setState(StateInFlight)
		q.nInFlight++
		q.timers.push(x)
	case snapDeferredPending:
		x.setState(statePending)
		q.pending = append(q.pending, pendingDL{m: x, reason: reason})
	}
}

// restoreExplain reads what a version-7 queue holds for explain: message histories and
// the ring of settled messages.
func (d *decoder) restoreExplain(q *queueState) {
	nh := d.count()
	seq := uint64(0)
	for i := 0; i < nh && d.err == nil; i++ {
		seq += d.uvarint()
		h := &msgHist{lastRecv: d.varint(), nacks: uint32(d.uvarint()), nackDelay: d.varint(), lastErr: d.string()}
		x := q.msgs.get(seq)
		if d.err == nil && x == nil {
			d.fail(fmt.Errorf("queue %q: history of a message seq %d it does not hold", q.name, seq))
			return
		}
		if d.err == nil {
			q.msgs.a.setHist(x, h)
		}
	}
	ns := d.count()
	if ns > SettledRingSize {
		d.fail(fmt.Errorf("queue %q: %d settled messages, more than %d", q.name, ns, SettledRingSize))
		return
	}
	for i := 0; i < ns && d.err == nil; i++ {
		e := settledEntry{id: d.uvarint(), at: d.varint(), to: d.uvarint(), how: GoneHow(d.byte())}
		q.settled.e = append(q.settled.e, e)
	}
}

// messageV1 decodes a message entry of a version-1 snapshot, and its log position.
func (d *decoder) messageV1(x *message) (reason, key string, dead *DeadInfo, pos uint64) {
	x.id = d.uvarint()
	x.seq = d.uvarint()
	x.entered = d.varint()
	x.at = d.varint()
	x.firstRecv = d.varint()
	d.size(x, d.varint())
	pos = d.uvarint()
	x.deliv = uint32(d.uvarint())
	x.setState(State(d.byte()))
	if x.state() == statePending {
		reason = d.string()
	}
	key = d.string()
	if d.bool() {
		dead = d.deadInfo()
	}
	return reason, key, dead, pos
}

// messageV2 decodes a message entry of a version-2 or -3 snapshot, whose numbers are
// relative to prev, the entry before it in the same queue; it leaves x's in prev. Version
// 2 entries also hold a log position, relative to the previous entry's (prevPos, which it
// advances), returned in pos.
func (d *decoder) messageV2(x, prev *message, version uint64, prevPos *uint64) (reason, key string, dead *DeadInfo, pos uint64, since int64) {
	flags := d.byte()
	x.setState(State(flags & snapStateMask))
	x.id = prev.id + uint64(d.varint())
	x.seq = prev.seq + d.uvarint()
	x.entered = prev.entered + d.varint()
	if flags&snapAt != 0 {
		x.at = x.entered + d.varint()
	}
	if flags&snapFirstRecv != 0 {
		x.firstRecv = x.entered + d.varint()
	}
	d.size(x, int64(d.uvarint()))
	if version == 2 {
		pos = *prevPos + uint64(d.varint())
		*prevPos = pos
	}
	if flags&snapDeliv != 0 {
		x.deliv = uint32(d.uvarint())
	}
	if x.state() == statePending || x.state() == snapDeferredPending {
		reason = d.string()
	}
	if flags&snapKey != 0 {
		key = d.string()
	}
	if flags&snapDead != 0 {
		dead = d.deadInfo()
	}
	if code := flags & snapStateMask; version >= 8 && code >= snapDeferred && code <= snapDeferredPending {
		since = x.entered + d.varint()
	}
	prev.id, prev.seq, prev.entered = x.id, x.seq, x.entered
	return reason, key, dead, pos, since
}

// size sets x's size, which must be one a message can have.
func (d *decoder) size(x *message, n int64) {
	if n < 0 || n > maxIndexedSize {
		d.fail(fmt.Errorf("message size %d out of range", n))
		return
	}
	x.setSize(n)
}

func (d *decoder) deadInfo() *DeadInfo {
	di := &DeadInfo{}
	di.Source = d.uvarint()
	di.SourceName = d.string()
	di.Reason = d.string()
	di.Description = d.string()
	di.At = d.varint()
	di.Deliveries = uint32(d.uvarint())
	return di
}
