package queue

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Queue describes one queue with its stats.
func (m *Machine) Queue(name string) (QueueInfo, error) {
	q, err := m.queue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	return m.info(q), nil
}

// QueueMeta describes one queue without computing its statistics: cheap, for front ends
// that resolve a queue on every request.
func (m *Machine) QueueMeta(name string) (QueueInfo, error) {
	q, err := m.queue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	return QueueInfo{ID: q.id, Name: q.name, Config: q.cfg.Clone(), CreatedAt: q.createdAt, UpdatedAt: q.updatedAt}, nil
}

// QueueByID returns the name of a queue id, if it exists.
func (m *Machine) QueueByID(id uint64) (string, bool) {
	q := m.byID[id]
	if q == nil {
		return "", false
	}
	return q.name, true
}

// Queues lists queues whose name starts with prefix, sorted by name.
func (m *Machine) Queues(prefix string) []QueueInfo {
	names := make([]string, 0, len(m.queues))
	for n := range m.queues {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	// Who uses which queue as its DLQ, once for the whole listing (not once per queue).
	sources := map[string][]string{}
	for _, n := range slices.Sorted(maps.Keys(m.queues)) {
		if dlq := m.queues[n].cfg.DeadLetterQueue; dlq != NoDeadLetterQueue && dlq != n {
			sources[dlq] = append(sources[dlq], n)
		}
	}
	out := make([]QueueInfo, len(names))
	for i, n := range names {
		out[i] = m.infoWith(m.queues[n], sources[n])
	}
	return out
}

// Depth is the number of messages (ready, delayed, in flight) of a queue, 0 if unknown.
func (m *Machine) Depth(name string) int64 {
	q := m.queues[name]
	if q == nil {
		return 0
	}
	return int64(q.msgs.live)
}

// MessageCount is the number of messages in every queue: the size of the index, which is
// what a snapshot's cost follows.
func (m *Machine) MessageCount() int64 {
	n := int64(0)
	for _, q := range m.queues {
		n += int64(q.msgs.live)
	}
	return n
}

// QueueCount is the number of queues.
func (m *Machine) QueueCount() int { return len(m.queues) }

func (m *Machine) info(q *queueState) QueueInfo {
	return m.infoWith(q, m.deadLetterSources(q.name))
}

func (m *Machine) infoWith(q *queueState, dlqSources []string) QueueInfo {
	return QueueInfo{
		ID: q.id, Name: q.name, Config: q.cfg.Clone(), CreatedAt: q.createdAt,
		UpdatedAt: q.updatedAt, Stats: q.snapshotStats(m.now), DeadLetterSources: dlqSources,
	}
}

func (q *queueState) snapshotStats(now int64) Stats {
	s := Stats{
		Counters: q.stats, Ready: q.nReady, Delayed: q.nDelayed, InFlight: q.nInFlight, Deferred: q.nDeferred,
		Bytes: q.bytes, Groups: len(q.groups), DedupIDs: q.dedup.len(), ParkedGroups: len(q.parked),
	}
	if len(q.stats.ByReason) > 0 {
		s.ByReason = make(map[string]uint64, len(q.stats.ByReason))
		for k, v := range q.stats.ByReason {
			s.ByReason[k] = v
		}
	}
	// The oldest ready message: scan from the oldest arrival, bounded so that stats stay
	// cheap when the head of a queue is all in flight.
	n := 0
	q.msgs.each(0, func(x *message) bool {
		n++
		if q.effectiveState(x, now) == StateReady {
			s.OldestReady = x.entered
			return false
		}
		return n < 10000
	})
	return s
}

// ReadyCount is the number of deliverable messages of a queue right now (0 if unknown):
// what a long-polling receiver waits for.
func (m *Machine) ReadyCount(name string) int {
	q := m.queues[name]
	if q == nil {
		return 0
	}
	return q.deliverable()
}

// Peek lists up to limit messages of queue with seq > after, in arrival order, without
// leasing them. States are as of now: a delay or lease that has ended shows as ready even
// if no command has settled it yet. states filters by state (empty: all).
func (m *Machine) Peek(now int64, queue string, after uint64, limit int, states ...State) ([]MessageInfo, error) {
	q, err := m.queue(queue)
	if err != nil {
		return nil, err
	}
	now = m.clock(now)
	var out []MessageInfo
	q.msgs.each(after, func(x *message) bool {
		st := q.effectiveState(x, now)
		if len(states) > 0 && !containsState(states, st) {
			return true
		}
		out = append(out, q.messageInfo(x, st))
		return len(out) < limit
	})
	return out, nil
}

func (q *queueState) effectiveState(x *message, now int64) State {
	switch {
	case x.state() == statePending:
		return StateReady
	case x.state() == StateInFlight && x.at <= now && q.msgs.a.isDeferred(x):
		return StateDeferred // a fetched deferred message whose lease ended
	case (x.state() == StateInFlight || x.state() == StateDelayed) && x.at <= now:
		return StateReady
	}
	return x.state()
}

func containsState(states []State, s State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func (q *queueState) messageInfo(x *message, st State) MessageInfo {
	mi := MessageInfo{
		ID: x.id, Seq: x.seq, State: st, Deliveries: x.deliv, EnqueuedAt: x.enqueuedAt(),
		EnteredAt: x.entered, FirstDelivered: x.firstRecv, Size: x.size(), Ref: x.self,
		Dead: q.msgs.a.dead(x),
	}
	if st == StateDelayed || st == StateInFlight {
		mi.VisibleAt = x.at
	}
	mi.Group = q.msgs.a.groupKey(x)
	return mi
}

// Message returns one message by id, its state as of now.
func (m *Machine) Message(now int64, queue string, id uint64) (MessageInfo, error) {
	q, err := m.queue(queue)
	if err != nil {
		return MessageInfo{}, err
	}
	x := q.find(id)
	if x == nil {
		return MessageInfo{}, fmt.Errorf("%w: %s in %q", ErrMessageNotFound, FormatID(id), q.name)
	}
	return q.messageInfo(x, q.effectiveState(x, m.clock(now))), nil
}

// Tasks lists redrive tasks, newest first.
func (m *Machine) Tasks() []Task {
	out := make([]Task, 0, len(m.tasks))
	for _, t := range m.tasks {
		out = append(out, m.taskCopy(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out
}

// Task returns one redrive task.
func (m *Machine) Task(id uint64) (Task, error) {
	t := m.tasks[id]
	if t == nil {
		return Task{}, fmt.Errorf("%w: %d", ErrTaskNotFound, id)
	}
	return m.taskCopy(t), nil
}

// RunningTasks lists the ids of running redrive tasks in creation order.
func (m *Machine) RunningTasks() []uint64 {
	var ids []uint64
	for id, t := range m.tasks {
		if t.State == TaskRunning {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (m *Machine) taskCopy(t *Task) Task {
	c := *t
	c.Filter.IDs = append([]uint64(nil), t.Filter.IDs...)
	// Names may have changed meaning if a queue was deleted; report current names.
	if q := m.byID[t.Source]; q != nil {
		c.SourceName = q.name
	}
	if q := m.byID[t.Target]; q != nil {
		c.TargetName = q.name
	}
	if q := m.byID[t.Filter.From]; q != nil {
		c.FromName = q.name
	}
	return c
}

// AllCounters returns every queue's durable counters by name (cheap: for samplers).
func (m *Machine) AllCounters() map[string]Counters {
	out := make(map[string]Counters, len(m.queues))
	for name, q := range m.queues {
		out[name] = q.stats // ByReason is shared: callers must not modify it
	}
	return out
}

// DedupIDs is how many dedup ids every queue remembers (those not expired as of the last
// send) and the server's bound on them (Limits.DedupTotal).
func (m *Machine) DedupIDs() (live, limit int) { return m.dedup.live, m.limits.DedupTotal }
