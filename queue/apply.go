package queue

import (
	"fmt"
	"sort"
)

// Apply replays one logged record. Replay must present records in log order, and only
// records this machine's commands produced; an inconsistency (a record naming a message
// or queue that does not exist, or a message in the wrong state) is reported as an error
// rather than guessed around, so that corruption never goes unnoticed.
//
// Apply is a pure function of the machine's state and the record: it reads no option of
// the node it runs on (limits are state, set by LimitsRecord), so every replica that
// applies the same records holds the same state. The only thing it tells the outside is
// the node's Bodies (SetBodies): which messages came and went.
func (m *Machine) Apply(r Record) error {
	return m.apply(r)
}

func (m *Machine) apply(r Record) error {
	if now := r.Time(); now > m.now {
		m.now = now
	}
	return r.apply(m)
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

// pruneTasks keeps at most Limits.MaxTasks finished tasks, dropping the oldest.
func (m *Machine) pruneTasks() {
	var done []uint64
	for id, t := range m.tasks {
		if t.State != TaskRunning {
			done = append(done, id)
		}
	}
	if len(done) <= m.limits.MaxTasks {
		return
	}
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	for _, id := range done[:len(done)-m.limits.MaxTasks] {
		delete(m.tasks, id)
	}
}
