package queue

import "fmt"

// Imports: messages that a record of another machine puts into a queue — a consumer
// group's dead-lettered record, a subscription's fan-out — so that the record holding the
// body and everything it changes is one durable outcome. The other machine prepares an
// import when it decides (PrepareImport: which queue, which message id), writes both into
// its own record, and applies the import as it applies that record (ApplyImport). The
// payload store hears of the body as for a send: the record being applied holds it.

// Import is one message an import puts into a queue.
type Import struct {
	QueueID   uint64
	MsgID     uint64
	VisibleAt int64
	// Dead, for a dead letter from elsewhere: where it came from and why. Nil for a plain
	// message.
	Dead *DeadInfo
}

// PrepareImport checks that queue exists and has room for payload p, and returns an
// import of it with the next message id. before are the imports of the same payload
// prepared in the same decision and not applied yet (a record fanned out to several
// queues): each gets its own id, and those into this queue count against its room, so
// that two subscriptions feeding one queue cannot take it past its limits. The
// payload is not checked against the queue's limits on size and headers: the other
// machine checked what it took in, and a message okiba adds its own headers to must not
// be refused for them. A dead letter is never refused for a full queue (it is counted in
// overflow); a plain message is, with a *FullError.
func (m *Machine) PrepareImport(now int64, queue string, p *Payload, dead bool, before []Import) (Import, error) {
	now = m.clock(now)
	q, err := m.queue(queue)
	if err != nil {
		return Import{}, err
	}
	if !dead {
		pending := int64(0)
		for i := range before {
			if before[i].QueueID == q.id {
				pending++
			}
		}
		if q.cfg.MaxMessages > 0 && int64(q.msgs.live)+pending >= q.cfg.MaxMessages {
			return Import{}, &FullError{Queue: q.name, Limit: "max_messages", Value: q.cfg.MaxMessages}
		}
		if q.cfg.MaxBytes > 0 && q.bytes+(pending+1)*p.Size() > q.cfg.MaxBytes {
			return Import{}, &FullError{Queue: q.name, Limit: "max_bytes", Value: q.cfg.MaxBytes}
		}
	}
	id := m.nextID(now) + uint64(len(before))
	visible := now + ms(q.cfg.Delay)
	if dead {
		visible = now // a dead letter is there to be looked at at once
	}
	return Import{QueueID: q.id, MsgID: id, VisibleAt: visible}, nil
}

// ApplyImport applies an import, with its payload (which aliases the record being
// applied), as part of applying another machine's record at time now. It is Apply's
// counterpart for those records: replay calls it exactly as the live machine did.
func (m *Machine) ApplyImport(now int64, imp Import, p *Payload) error {
	if now > m.now {
		m.now = now
	}
	q, err := m.touch(imp.QueueID, now)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if imp.MsgID <= m.lastID {
		return fmt.Errorf("import of message %d into %q: ids must grow (last %d)", imp.MsgID, q.name, m.lastID)
	}
	m.lastID = imp.MsgID
	x := m.ar.alloc()
	x.id = imp.MsgID
	x.setSize(p.Size())
	m.attachGroup(q, x, p.Group)
	if imp.Dead != nil {
		d := *imp.Dead
		m.ar.setDead(x, &d)
		if (q.cfg.MaxMessages > 0 && int64(q.msgs.live) >= q.cfg.MaxMessages) || (q.cfg.MaxBytes > 0 && q.bytes+x.size() > q.cfg.MaxBytes) {
			q.stats.Overflow++
		}
		q.stats.DeadLetteredIn++
	} else {
		q.stats.Sent++
	}
	m.add(q, x, max(imp.VisibleAt, now), now)
	if m.bodies != nil {
		m.bodies.Added(x.self, p)
	}
	m.reschedule(q)
	return nil
}

// Ordered reports whether the queue with this id orders its groups: a record's key is
// then the message's group.
func (m *Machine) Ordered(id uint64) bool {
	q := m.byID[id]
	return q != nil && q.cfg.OrderedGroups
}

// QueueID returns the id of the named queue.
func (m *Machine) QueueID(name string) (uint64, bool) {
	if q := m.queues[name]; q != nil {
		return q.id, true
	}
	return 0, false
}
