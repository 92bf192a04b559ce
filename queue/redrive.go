package queue

import (
	"fmt"
	"slices"
	"strings"
)

// RedriveSpec asks to move messages out of Source.
type RedriveSpec struct {
	Source string
	// Target receives the messages; empty sends each back to the queue it was
	// dead-lettered from.
	Target string
	// From selects only dead letters from this source queue (empty: any).
	From   string
	Filter RedriveFilter
	// Rate caps messages per second; 0 moves as fast as batches commit.
	Rate int
}

// StartRedrive records a redrive task. Only messages in Source when the task starts are
// considered. The caller drives the task with RedriveStep until it reports done.
func (m *Machine) StartRedrive(now int64, sink Sink, spec RedriveSpec) (Task, error) {
	now = m.clock(now)
	src, err := m.queue(spec.Source)
	if err != nil {
		return Task{}, err
	}
	var target uint64
	if spec.Target != "" {
		dst, err := m.queue(spec.Target)
		if err != nil {
			return Task{}, err
		}
		if dst == src {
			return Task{}, &ConfigError{Field: "to", Reason: "a queue cannot be redriven into itself"}
		}
		if dst.cfg.OrderedGroups != src.cfg.OrderedGroups {
			return Task{}, &ConfigError{Field: "to", Reason: fmt.Sprintf("redrive moves messages between queues of the same kind: %q and %q are not both ordered or both unordered (ordered_groups)", src.name, dst.name)}
		}
		target = dst.id
	}
	if spec.From != "" {
		from, err := m.queue(spec.From)
		if err != nil {
			return Task{}, err
		}
		spec.Filter.From = from.id
	}
	if len(spec.Filter.Reason) > MaxReasonLen {
		return Task{}, &InvalidError{Field: "reason", Reason: fmt.Sprintf("at most %d characters", MaxReasonLen)}
	}
	if spec.Filter.Reason == ReasonCorrupt {
		return Task{}, fmt.Errorf("%w: dead letters of reason %s cannot be redriven (their bodies are unreadable); receive them for their ids and locations, and delete or ack them", ErrMessageCorrupt, ReasonCorrupt)
	}
	if spec.Filter.OlderThan < 0 {
		return Task{}, &ConfigError{Field: "older_than", Reason: "must not be negative"}
	}
	if spec.Rate < 0 {
		return Task{}, &ConfigError{Field: "rate", Reason: "must not be negative"}
	}
	m.advance(sink, src, now)
	f := newFilter(spec.Filter)
	var total int64
	var corrupt []string
	src.msgs.each(0, func(x *message) bool {
		if f.match(&m.ar, x, now) {
			total++
			if f.ids != nil && corruptDead(&m.ar, x) && len(corrupt) < 10 {
				corrupt = append(corrupt, FormatID(x.id))
			}
		}
		return true
	})
	if len(corrupt) > 0 {
		m.reschedule(src)
		return Task{}, fmt.Errorf("%w: %s in %q (reason %s): their bodies are unreadable, so a redrive would move nothing; leave them out",
			ErrMessageCorrupt, strings.Join(corrupt, ", "), src.name, ReasonCorrupt)
	}
	id := m.lastTID + 1
	m.emit(sink, &TaskCreateRecord{Now: now, TaskID: id, Source: src.id, Target: target, Filter: spec.Filter, MaxSeq: src.nextSeq, Total: total, Rate: spec.Rate})
	return m.Task(id)
}

// RedriveTargets returns the queues a redrive of spec would move messages into if it
// started now: spec.Target when it names one; else, as each dead letter goes back to the
// queue it came from, those of the dead letters spec selects, each once, sorted — the
// ones that still exist (RedriveStep skips the others). A front checks that its caller
// may send to each before it starts the task. It changes nothing, and checks no more
// than it must to find them: StartRedrive answers for the rest.
func (m *Machine) RedriveTargets(now int64, spec RedriveSpec) ([]string, error) {
	if spec.Target != "" {
		return []string{spec.Target}, nil
	}
	src, err := m.queue(spec.Source)
	if err != nil {
		return nil, err
	}
	if spec.From != "" {
		from, err := m.queue(spec.From)
		if err != nil {
			return nil, err
		}
		spec.Filter.From = from.id
	}
	now = m.clock(now)
	f := newFilter(spec.Filter)
	seen := map[uint64]bool{}
	src.msgs.each(0, func(x *message) bool {
		if d := m.ar.dead(x); d != nil && f.match(&m.ar, x, now) {
			seen[m.sourceOf(d)] = true
		}
		return true
	})
	var out []string
	for id := range seen {
		if q := m.byID[id]; q != nil && q != src {
			out = append(out, q.name)
		}
	}
	slices.Sort(out)
	return out, nil
}

type filter struct {
	RedriveFilter
	ids map[uint64]bool
}

func newFilter(f RedriveFilter) filter {
	c := filter{RedriveFilter: f}
	if len(f.IDs) > 0 {
		c.ids = make(map[uint64]bool, len(f.IDs))
		for _, id := range f.IDs {
			c.ids[id] = true
		}
	}
	return c
}

// corruptDead reports whether x is a dead letter the broker quarantined (ReasonCorrupt).
func corruptDead(a *arena, x *message) bool {
	d := a.dead(x)
	return d != nil && d.Reason == ReasonCorrupt
}

func (f *filter) match(a *arena, x *message, now int64) bool {
	if f.From != 0 && (a.dead(x) == nil || a.dead(x).Source != f.From) {
		return false
	}
	if f.Reason != "" && (a.dead(x) == nil || a.dead(x).Reason != f.Reason) {
		return false
	}
	if f.Group != "" && a.groupKey(x) != f.Group {
		return false
	}
	if f.OlderThan > 0 && now-x.enqueuedAt() < f.OlderThan {
		return false
	}
	if f.ids != nil && !f.ids[x.id] {
		return false
	}
	return true
}

// StepResult tells the driver of a redrive task what to do next.
type StepResult struct {
	Moved  int
	Done   bool // the task has ended
	Paused bool // a target queue is full: try again later
}

// RedriveStep moves up to max messages of a running task in one committed batch. Leased
// messages are skipped (their consumer holds them), as are messages whose recorded source
// no longer exists and dead letters of reason corrupt (their bodies are unreadable); all
// are counted. A full target pauses the task.
func (m *Machine) RedriveStep(now int64, sink Sink, id uint64, max int) (StepResult, error) {
	now = m.clock(now)
	t := m.tasks[id]
	if t == nil {
		return StepResult{}, fmt.Errorf("%w: %d", ErrTaskNotFound, id)
	}
	if t.State != TaskRunning {
		return StepResult{Done: true}, nil
	}
	src := m.byID[t.Source]
	if src == nil {
		m.emit(sink, &TaskEndRecord{Now: now, TaskID: id, State: TaskFailed, Message: "source queue was deleted"})
		return StepResult{Done: true}, nil
	}
	m.advance(sink, src, now)
	f := newFilter(t.Filter)
	var items []SeqTarget
	var skipped int64
	cursor := t.Cursor
	added := map[uint64]int64{}
	addedBytes := map[uint64]int64{}
	paused, end := false, true
	scanned := 0
	src.msgs.each(t.Cursor, func(x *message) bool {
		if x.seq > t.MaxSeq {
			return false
		}
		if len(items) >= max || scanned >= 16*max {
			end = false
			return false
		}
		scanned++
		if !f.match(&m.ar, x, now) {
			cursor = x.seq
			return true
		}
		target := t.Target
		if target == 0 && m.ar.dead(x) != nil {
			target = m.sourceOf(m.ar.dead(x))
		}
		dst := m.byID[target]
		if x.state() == StateInFlight || x.state() == statePending || dst == nil || dst == src || corruptDead(&m.ar, x) {
			skipped++
			cursor = x.seq
			return true
		}
		if (dst.cfg.MaxMessages > 0 && int64(dst.msgs.live)+added[target]+1 > dst.cfg.MaxMessages) ||
			(dst.cfg.MaxBytes > 0 && dst.bytes+addedBytes[target]+x.size() > dst.cfg.MaxBytes) {
			paused, end = true, false
			return false
		}
		added[target]++
		addedBytes[target] += x.size()
		items = append(items, SeqTarget{Seq: x.seq, Target: target})
		cursor = x.seq
		return true
	})
	if len(items) > 0 || skipped > 0 || cursor != t.Cursor {
		m.emit(sink, &TaskMoveRecord{Now: now, TaskID: id, Cursor: cursor, Skipped: skipped, Items: items})
	}
	targets := make([]uint64, 0, len(added))
	for target := range added {
		targets = append(targets, target)
	}
	slices.Sort(targets)
	for _, target := range targets {
		m.advance(sink, m.byID[target], now)
	}
	m.reschedule(src)
	if end {
		m.emit(sink, &TaskEndRecord{Now: now, TaskID: id, State: TaskCompleted})
	}
	return StepResult{Moved: len(items), Done: end, Paused: paused}, nil
}

// CancelRedrive stops a running task; messages already moved stay moved.
func (m *Machine) CancelRedrive(now int64, sink Sink, id uint64) (Task, error) {
	now = m.clock(now)
	t := m.tasks[id]
	if t == nil {
		return Task{}, fmt.Errorf("%w: %d", ErrTaskNotFound, id)
	}
	if t.State != TaskRunning {
		return Task{}, fmt.Errorf("%w: task %d is %s", ErrTaskFinished, id, t.State)
	}
	m.emit(sink, &TaskEndRecord{Now: now, TaskID: id, State: TaskCancelled})
	return m.Task(id)
}

// sourceOf is the queue a dead letter goes back to: the one it came from, or, when that
// one was deleted, the queue that has its name now (it was created again): redrive finds
// its source by name, as the operator who recreated it expects. 0 when neither exists.
func (m *Machine) sourceOf(d *DeadInfo) uint64 {
	if m.byID[d.Source] != nil {
		return d.Source
	}
	if q := m.queues[d.SourceName]; q != nil && d.SourceName != "" {
		return q.id
	}
	return 0
}
