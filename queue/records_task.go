package queue

import "fmt"

// Records of redrive tasks: create, move a committed batch, end.

// TaskCreateRecord starts a redrive task.
type TaskCreateRecord struct {
	Now    int64
	TaskID uint64
	Source uint64
	Target uint64 // 0: each message back to its recorded source queue
	Filter RedriveFilter
	MaxSeq uint64 // messages that entered Source after the task started are not moved
	Total  int64  // matching messages when the task started
	Rate   int    // messages per second, 0 = as fast as possible
}

func (r *TaskCreateRecord) Kind() Kind  { return KindTaskCreate }
func (r *TaskCreateRecord) Time() int64 { return r.Now }

func (r *TaskCreateRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskCreate, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = appendUvarint(b, r.Source)
	b = appendUvarint(b, r.Target)
	b = appendFilter(b, &r.Filter)
	b = appendUvarint(b, r.MaxSeq)
	b = appendVarint(b, r.Total)
	return appendVarint(b, int64(r.Rate))
}

func (r *TaskCreateRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.TaskID = d.uvarint()
	r.Source = d.uvarint()
	r.Target = d.uvarint()
	r.Filter = d.filter()
	r.MaxSeq = d.uvarint()
	r.Total = d.varint()
	r.Rate = d.int()
}

func (r *TaskCreateRecord) apply(m *Machine) error {
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

func appendFilter(b []byte, f *RedriveFilter) []byte {
	b = appendUvarint(b, f.From)
	b = appendString(b, f.Reason)
	b = appendString(b, f.Group)
	b = appendVarint(b, f.OlderThan)
	b = appendUvarint(b, uint64(len(f.IDs)))
	for _, id := range f.IDs {
		b = appendUvarint(b, id)
	}
	return b
}

func (d *decoder) filter() RedriveFilter {
	var f RedriveFilter
	f.From = d.uvarint()
	f.Reason = d.string()
	f.Group = d.string()
	f.OlderThan = d.varint()
	if n := d.count(); n > 0 {
		f.IDs = make([]uint64, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			f.IDs = append(f.IDs, d.uvarint())
		}
	}
	return f
}

// TaskMoveRecord moves one committed batch of a redrive task and advances its cursor.
type TaskMoveRecord struct {
	Now     int64
	TaskID  uint64
	Cursor  uint64
	Skipped int64
	Items   []SeqTarget
}

// SeqTarget names a message of the task's source and the queue it moves to.
type SeqTarget struct {
	Seq    uint64
	Target uint64
}

func (r *TaskMoveRecord) Kind() Kind  { return KindTaskMove }
func (r *TaskMoveRecord) Time() int64 { return r.Now }

func (r *TaskMoveRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskMove, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = appendUvarint(b, r.Cursor)
	b = appendVarint(b, r.Skipped)
	b = appendUvarint(b, uint64(len(r.Items)))
	prev := uint64(0)
	for _, it := range r.Items {
		b = appendVarint(b, int64(it.Seq-prev))
		prev = it.Seq
		b = appendUvarint(b, it.Target)
	}
	return b
}

func (r *TaskMoveRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.TaskID = d.uvarint()
	r.Cursor = d.uvarint()
	r.Skipped = d.varint()
	n := d.count()
	r.Items = make([]SeqTarget, 0, n)
	prev := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		prev += uint64(d.varint())
		r.Items = append(r.Items, SeqTarget{Seq: prev, Target: d.uvarint()})
	}
}

func (r *TaskMoveRecord) apply(m *Machine) error {
	t := m.tasks[r.TaskID]
	if t == nil || t.State != TaskRunning {
		return fmt.Errorf("task move: task %d is not running", r.TaskID)
	}
	src, err := m.touch(t.Source, r.Now)
	if err != nil {
		return err
	}
	// front: for a group this record released by redriving its blocker back, where the
	// next of its dead letters goes (after the blocker and those before it), so that they
	// keep their order ahead of what waited behind them.
	var front map[blockerRef]int
	for _, it := range r.Items {
		x, err := src.msg(it.Seq, 0)
		if err != nil {
			return fmt.Errorf("task move: %w", err)
		}
		dst, err := m.touch(it.Target, r.Now)
		if err != nil {
			return err
		}
		key := m.ar.groupKey(x)
		src.noteSettled(x.id, r.Now, GoneRedriven, dst.id)
		at := blockerRef{queue: dst.id, key: key}
		pos, toFront := front[at]
		if b, ok := m.blockers[x.id]; ok && b == at && dst.parked[key].dlq == src.id {
			// The blocker comes back to its group: it goes first, and the group is free.
			delete(m.blockers, x.id)
			delete(dst.parked, key)
			if front == nil {
				front = make(map[blockerRef]int)
			}
			pos, toFront = 0, true
		}
		m.detach(src, x)
		m.ar.setDead(x, nil)
		m.ar.setHist(x, nil)
		x.deliv = 0
		x.firstRecv = 0
		m.attachGroup(dst, x, key)
		m.add(dst, x, r.Now, r.Now)
		if toFront && key != "" {
			m.moveToFront(dst, x, pos)
			front[at] = pos + 1
		}
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

// TaskEndRecord finishes a redrive task.
type TaskEndRecord struct {
	Now     int64
	TaskID  uint64
	State   TaskState
	Message string
}

func (r *TaskEndRecord) Kind() Kind  { return KindTaskEnd }
func (r *TaskEndRecord) Time() int64 { return r.Now }

func (r *TaskEndRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskEnd, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = append(b, byte(r.State))
	return appendString(b, r.Message)
}

func (r *TaskEndRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.TaskID = d.uvarint()
	r.State = TaskState(d.byte())
	r.Message = d.string()
}

func (r *TaskEndRecord) apply(m *Machine) error {
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
