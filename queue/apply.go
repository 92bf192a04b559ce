package queue

import (
	"fmt"
	"sort"
)

// Apply replays one logged record at loc. Replay must present records in log order, and
// only records this machine's commands produced; an inconsistency (a record naming a
// message or queue that does not exist, or a message in the wrong state) is reported as
// an error rather than guessed around, so that corruption never goes unnoticed.
func (m *Machine) Apply(r Record, loc Loc) error {
	return m.apply(r, loc)
}

// ApplyShared is Apply for a record from DecodeRecordShared, whose payload lies in a
// buffer the caller reuses: the machine copies what it keeps of it (a body it caches).
func (m *Machine) ApplyShared(r Record, loc Loc) error {
	m.sharedPayload = true
	defer func() { m.sharedPayload = false }()
	return m.apply(r, loc)
}

func (m *Machine) apply(r Record, loc Loc) error {
	now := r.Time()
	if now > m.now {
		m.now = now
	}
	switch x := r.(type) {
	case *QueuePutRecord:
		return m.applyQueuePut(x)
	case *QueueDeleteRecord:
		return m.applyQueueDelete(x)
	case *SendRecord:
		return m.applySend(x, loc)
	case *RelocateRecord:
		return m.applyRelocate(x, loc)
	case *DeliverRecord:
		return m.applyDeliver(x)
	case *ExtendRecord:
		return m.applyExtend(x)
	case *AckRecord:
		return m.applyAck(x)
	case *NackRecord:
		return m.applyNack(x)
	case *DeadLetterRecord:
		return m.applyDeadLetter(x)
	case *RemoveRecord:
		return m.applyRemove(x)
	case *PurgeRecord:
		return m.applyPurge(x)
	case *TaskCreateRecord:
		return m.applyTaskCreate(x)
	case *TaskMoveRecord:
		return m.applyTaskMove(x)
	case *TaskEndRecord:
		return m.applyTaskEnd(x)
	}
	return fmt.Errorf("unknown record %T", r)
}

// touch returns queue id brought to time now (see settle), or an error if it is unknown.
func (m *Machine) touch(id uint64, now int64) (*queueState, error) {
	q := m.byID[id]
	if q == nil {
		return nil, fmt.Errorf("record names unknown queue id %d", id)
	}
	m.settle(q, now)
	return q, nil
}

func (q *queueState) msg(seq uint64, want State) (*message, error) {
	x := q.msgs.get(seq)
	if x == nil {
		return nil, fmt.Errorf("queue %q has no message with seq %d", q.name, seq)
	}
	if want != 0 && x.state() != want {
		return nil, fmt.Errorf("queue %q message seq %d is %s, want %s", q.name, seq, x.state(), want)
	}
	return x, nil
}

func (m *Machine) applyQueuePut(r *QueuePutRecord) error {
	if r.QueueID > m.lastQID {
		m.lastQID = r.QueueID
	}
	if q := m.byID[r.QueueID]; q != nil {
		if q.name != r.Name {
			return fmt.Errorf("queue id %d is %q, record says %q", r.QueueID, q.name, r.Name)
		}
		m.settle(q, r.Now)
		q.cfg = r.Config.Clone()
		q.updatedAt = r.Now
		q.retCursor = 0
		m.reschedule(q)
		return nil
	}
	if m.queues[r.Name] != nil {
		return fmt.Errorf("queue %q exists with another id", r.Name)
	}
	q := m.newQueueState()
	q.id, q.name, q.cfg, q.createdAt, q.updatedAt = r.QueueID, r.Name, r.Config.Clone(), r.Now, r.Now
	m.queues[r.Name] = q
	m.byID[r.QueueID] = q
	return nil
}

func (m *Machine) applyQueueDelete(r *QueueDeleteRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	q.msgs.each(0, func(x *message) bool {
		m.segRemove(x.loc, x.size())
		m.drop(x)
		return true
	})
	delete(m.queues, q.name)
	delete(m.byID, q.id)
	m.events.remove(q)
	for _, t := range m.tasks {
		if t.State == TaskRunning && (t.Source == q.id || t.Target == q.id) {
			t.State = TaskFailed
			t.Message = fmt.Sprintf("queue %q was deleted", q.name)
			t.UpdatedAt = r.Now
		}
	}
	m.pruneTasks()
	return nil
}

func (m *Machine) applySend(r *SendRecord, loc Loc) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	if r.MsgID > m.lastID {
		m.lastID = r.MsgID
	}
	p := r.Payload
	x := m.ar.alloc()
	x.id, x.loc = r.MsgID, loc
	x.setSize(p.Size())
	m.attachGroup(q, x, p.Group)
	m.add(q, x, r.VisibleAt, r.Now)
	if key := q.dedupKey(&p); key != "" {
		if q.dedup.insert(key, r.MsgID, x.seq, r.Now+ms(q.cfg.DedupWindow), r.Now, m.opts.DedupCap) {
			q.stats.DedupEvictedEarly++
		}
	}
	m.maybeCache(x, &p)
	q.stats.Sent++
	m.reschedule(q)
	return nil
}

func (m *Machine) applyRelocate(r *RelocateRecord, loc Loc) error {
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
	m.segRemove(x.loc, x.size())
	x.loc = loc
	m.segAdd(loc, x.size())
	return nil
}

func (m *Machine) applyDeliver(r *DeliverRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateReady)
		if err != nil {
			return fmt.Errorf("deliver: %w", err)
		}
		q.ready.remove(x)
		q.nReady--
		x.setState(StateInFlight)
		x.deliv++
		x.at = r.Deadline
		q.timers.push(x)
		q.nInFlight++
		if g := m.ar.group(x); g != nil {
			g.leased++
		}
		q.stats.Delivered++
		if x.deliv > 1 {
			q.stats.Redelivered++
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

func (m *Machine) applyExtend(r *ExtendRecord) error {
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

func (m *Machine) applyAck(r *AckRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		m.detach(q, x)
		q.stats.Acked++
		q.stats.SojournSum += uint64(max(r.Now-x.entered, 0))
		q.stats.SojournCount++
		m.drop(x)
	}
	m.reschedule(q)
	return nil
}

func (m *Machine) applyNack(r *NackRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, it := range r.Items {
		x, err := q.msg(it.Seq, StateInFlight)
		if err != nil {
			return fmt.Errorf("nack: %w", err)
		}
		q.timers.remove(x)
		q.nInFlight--
		if g := m.ar.group(x); g != nil {
			g.leased--
		}
		if it.Time > r.Now {
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

func (m *Machine) applyDeadLetter(r *DeadLetterRecord) error {
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
		key := ""
		if g := m.ar.group(x); g != nil {
			key = g.key
		}
		deliv := x.deliv
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

func (m *Machine) applyRemove(r *RemoveRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	for _, seq := range r.Seqs {
		x, err := q.msg(seq, 0)
		if err != nil {
			return fmt.Errorf("remove: %w", err)
		}
		m.detach(q, x)
		m.drop(x)
		q.stats.Deleted++
	}
	m.reschedule(q)
	return nil
}

func (m *Machine) applyPurge(r *PurgeRecord) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	q.msgs.each(0, func(x *message) bool {
		m.segRemove(x.loc, x.size())
		m.drop(x)
		return true
	})
	q.stats.Purged += uint64(q.msgs.live)
	q.msgs = seqIndex{a: &m.ar}
	q.ready = readyHeap{a: &m.ar}
	q.timers = timerHeap{a: &m.ar}
	q.pending = nil
	q.groups = nil
	q.nReady, q.nDelayed, q.nInFlight, q.bytes = 0, 0, 0, 0
	q.retCursor = 0
	m.reschedule(q)
	return nil
}

func (m *Machine) applyTaskCreate(r *TaskCreateRecord) error {
	src := m.byID[r.Source]
	if src == nil {
		return fmt.Errorf("task %d: unknown source queue id %d", r.TaskID, r.Source)
	}
	t := &Task{
		ID: r.TaskID, Source: r.Source, SourceName: src.name, Target: r.Target,
		Filter: r.Filter, MaxSeq: r.MaxSeq, State: TaskRunning, Total: r.Total,
		Rate: r.Rate, CreatedAt: r.Now, UpdatedAt: r.Now,
	}
	if r.Target != 0 {
		dst := m.byID[r.Target]
		if dst == nil {
			return fmt.Errorf("task %d: unknown target queue id %d", r.TaskID, r.Target)
		}
		t.TargetName = dst.name
	}
	if r.TaskID > m.lastTID {
		m.lastTID = r.TaskID
	}
	m.tasks[r.TaskID] = t
	return nil
}

func (m *Machine) applyTaskMove(r *TaskMoveRecord) error {
	t := m.tasks[r.TaskID]
	if t == nil || t.State != TaskRunning {
		return fmt.Errorf("task move: task %d is not running", r.TaskID)
	}
	src, err := m.touch(t.Source, r.Now)
	if err != nil {
		return err
	}
	for _, it := range r.Items {
		x, err := src.msg(it.Seq, 0)
		if err != nil {
			return fmt.Errorf("task move: %w", err)
		}
		dst, err := m.touch(it.Target, r.Now)
		if err != nil {
			return err
		}
		key := ""
		if g := m.ar.group(x); g != nil {
			key = g.key
		}
		m.detach(src, x)
		m.ar.setDead(x, nil)
		x.deliv = 0
		x.firstRecv = 0
		m.attachGroup(dst, x, key)
		m.add(dst, x, r.Now, r.Now)
		src.stats.RedrivenOut++
		dst.stats.RedrivenIn++
		m.reschedule(dst)
	}
	m.reschedule(src)
	t.Cursor = r.Cursor
	t.Moved += int64(len(r.Items))
	t.Skipped += r.Skipped
	t.UpdatedAt = r.Now
	return nil
}

func (m *Machine) applyTaskEnd(r *TaskEndRecord) error {
	t := m.tasks[r.TaskID]
	if t == nil {
		return fmt.Errorf("task end: unknown task %d", r.TaskID)
	}
	t.State = r.State
	t.Message = r.Message
	t.UpdatedAt = r.Now
	m.pruneTasks()
	return nil
}

// pruneTasks keeps at most MaxTasks finished tasks, dropping the oldest.
func (m *Machine) pruneTasks() {
	var done []uint64
	for id, t := range m.tasks {
		if t.State != TaskRunning {
			done = append(done, id)
		}
	}
	if len(done) <= m.opts.MaxTasks {
		return
	}
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	for _, id := range done[:len(done)-m.opts.MaxTasks] {
		delete(m.tasks, id)
	}
}
