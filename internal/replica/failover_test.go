package replica_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/queue"
)

// Targeted failovers, on the simulation's cluster with a quiet network: the test
// decides who is cut off and when. Each ends with the simulation's full check.

// until steps the quiet world until cond holds.
func (s *sim) until(what string, cond func() bool) {
	s.t.Helper()
	for limit := s.round + 2000; !cond(); {
		if s.round >= limit || s.t.Failed() {
			s.fatalf("gave up waiting until %s", what)
		}
		s.step()
	}
}

// readyLeader waits for a leader that takes commands, other than the excluded nodes.
func (s *sim) readyLeader(not ...uint64) *node {
	s.t.Helper()
	var l *node
	s.until("a leader takes commands", func() bool {
		for _, n := range s.nodes {
			if n.r != nil && n.r.Status().Leader && !containsID(not, n.id) {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// do proposes o to n and waits for its answer, which must be an acknowledgement.
func (s *sim) do(n *node, o op) result {
	s.t.Helper()
	c := s.propose(n, o)
	if c.failed != nil {
		s.fatalf("%s on node %d refused: %v", o, n.id, c.failed)
	}
	s.until(o.String()+" answered", func() bool { return c.acked || c.failed != nil })
	if c.failed != nil {
		s.fatalf("%s on node %d failed: %v", o, n.id, c.failed)
	}
	return c.res
}

// isolate cuts the nodes off from the rest; heal joins everyone again.
func (s *sim) isolate(ids ...uint64) {
	s.parted = true
	for _, n := range s.nodes {
		s.side[n.id] = 0
		if containsID(ids, n.id) {
			s.side[n.id] = 1
		}
	}
}

func (s *sim) finish() {
	s.t.Helper()
	s.quiesce()
	if !s.t.Failed() {
		s.check()
	}
}

// A leader cut off from its followers keeps taking commands for a while: it evaluates
// them on its machines and proposes them, but they cannot commit. When it learns it is
// deposed, it answers none of them, and its machines hold the committed state alone —
// not the sends it evaluated — and equal the new leader's.
func TestDeposedLeaderShowsNothingUncommitted(t *testing.T) {
	s := newSim(t, simConfig{nodes: 3, seed: 11})
	old := s.readyLeader()
	s.do(old, opPutQueue{name: "orders"})
	s.do(old, opSend{queue: "orders", msgs: []queue.SendInput{{Payload: queue.Payload{Body: []byte("committed")}}}})

	s.isolate(old.id)
	var spec []*call
	for i := range 3 {
		spec = append(spec, s.propose(old, opSend{queue: "orders", msgs: []queue.SendInput{{Payload: queue.Payload{Body: []byte{'x', byte('0' + i)}}}}}))
	}
	spec = append(spec, s.propose(old, opReceive{queue: "orders", max: 10, visibility: 30_000}))
	for _, c := range spec {
		if c.failed != nil {
			t.Fatalf("the cut-off leader refused %s at once: %v", c.op, c.failed)
		}
	}
	s.step()
	if st := old.r.Status(); st.Pending != len(spec) {
		t.Fatalf("the cut-off leader has %d proposals pending, want %d", st.Pending, len(spec))
	}
	if _, _, ok := old.r.Committed(); ok {
		t.Fatalf("the cut-off leader's machines are said to be committed state while it speculates")
	}

	fresh := s.readyLeader(old.id)
	if got := s.do(fresh, opSend{queue: "orders", msgs: []queue.SendInput{{Payload: queue.Payload{Body: []byte("new")}}}}); strings.Contains(got.text, "error") {
		t.Fatalf("send on the new leader: %s", got.text)
	}
	s.until("the old leader steps down", func() bool { return old.r.Status().Lead != old.id })
	for _, c := range spec {
		if c.acked || !errors.Is(c.failed, replica.ErrUnavailable) {
			t.Fatalf("%s on the deposed leader: acked %v, failed %v; want ErrUnavailable", c.op, c.acked, c.failed)
		}
	}
	idx, snap, ok := old.r.Committed()
	if !ok {
		t.Fatalf("the deposed leader still speculates")
	}
	m, err := replica.RestoreMachines(snap)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Queues().Depth("orders"); d != 1 {
		t.Fatalf("the deposed leader's machines at %d hold %d messages in orders, want the 1 committed", idx, d)
	}
	if st := old.r.Status(); st.Rebuilds == 0 {
		t.Fatalf("the deposed leader did not rebuild its machines")
	}
	s.sample(old, idx, snap) // compared with the reference at idx by check

	s.heal()
	if got := s.do(s.readyLeader(), opReceive{queue: "orders", max: 10, visibility: 30_000}); !strings.HasPrefix(got.text, "2:") {
		t.Fatalf("receive after the failover: %s; want the 2 committed messages", got.text)
	}
	s.finish()
}

// A receipt is a lease, and a lease is committed state: the one an old leader handed
// out settles on the new leader; the one it handed out before the new leader
// redelivered the message is stale there (its epoch, the delivery count, is older).
func TestReceiptsSurviveFailover(t *testing.T) {
	s := newSim(t, simConfig{nodes: 3, seed: 12})
	first := s.readyLeader()
	s.do(first, opPutQueue{name: "orders"})
	s.do(first, opSend{queue: "orders", msgs: []queue.SendInput{
		{Payload: queue.Payload{Body: []byte("long")}},
		{Payload: queue.Payload{Body: []byte("short"), Group: "g"}},
	}})
	got := s.do(first, opReceive{queue: "orders", max: 2, visibility: 60_000})
	if len(got.leases) != 2 {
		t.Fatalf("receive: %s", got.text)
	}
	keep := got.leases[0]
	// Extended to end soon, the second lease will run out before the next leader
	// delivers its message again.
	if r := s.do(first, opExtend{queue: "orders", items: []queue.ExtendInput{{Lease: got.leases[1], Visibility: 500}}}); r.text != "ok" {
		t.Fatalf("extend: %s", r.text)
	}
	old := got.leases[1]

	s.down(first, 1<<30) // back when the test quiesces
	second := s.readyLeader(first.id)
	if r := s.do(second, opAck{queue: "orders", leases: []queue.Lease{keep}}); r.text != "ok" {
		t.Fatalf("the new leader refused the old leader's receipt: %s", r.text)
	}
	s.clock += 2_000 // the short lease ends
	again := s.do(second, opReceive{queue: "orders", max: 1, visibility: 60_000})
	if len(again.leases) != 1 || again.leases[0].Seq != old.Seq || again.leases[0].Epoch != old.Epoch+1 {
		t.Fatalf("redelivery on the new leader: %s; want seq %d at epoch %d", again.text, old.Seq, old.Epoch+1)
	}
	r := s.do(second, opAck{queue: "orders", leases: []queue.Lease{old, again.leases[0]}})
	if want := "error: " + queue.ErrReceiptStale.Error() + "; ok"; r.text != want {
		t.Fatalf("acking the stale and the fresh receipt: %s; want %s", r.text, want)
	}
	s.finish()
}

// Commands proposed between two Process calls of a coalescing leader share one entry:
// each is answered with its own result at that entry's index. Cut off with such an
// entry pending, the leader fails every command of it, and none is in the log.
func TestCoalescedCommandsShareAnEntryAndFailTogether(t *testing.T) {
	s := newSim(t, simConfig{nodes: 3, seed: 31, coalesce: true})
	l := s.readyLeader()
	s.do(l, opPutQueue{name: "orders"})
	send := func(body string) op {
		return opSend{queue: "orders", msgs: []queue.SendInput{{Payload: queue.Payload{Body: []byte(body)}}}}
	}
	var calls []*call
	for i := range 4 {
		calls = append(calls, s.propose(l, send(fmt.Sprintf("m%d", i))))
	}
	s.until("the four sends answered", func() bool {
		return !slices.ContainsFunc(calls, func(c *call) bool { return !c.acked && c.failed == nil })
	})
	idx := calls[0].index
	for i, c := range calls {
		if !c.acked || c.index != idx {
			t.Fatalf("send %d: acked %v at %d, failed %v; want acked at %d with the others", i, c.acked, c.index, c.failed, idx)
		}
		if want := fmt.Sprintf("/%d dup=false ok", i+1); !strings.HasSuffix(c.res.text, want) {
			t.Fatalf("send %d answered %q, want its own seq %s", i, c.res.text, want)
		}
	}
	ents, err := replica.DecodeEntries(s.log[idx].data)
	if err != nil || len(ents) != 4 {
		t.Fatalf("entry %d: %d commands, %v; want the four sends", idx, len(ents), err)
	}

	s.isolate(l.id)
	var lost []*call
	for i := range 3 {
		lost = append(lost, s.propose(l, send(fmt.Sprintf("x%d", i))))
	}
	s.step()
	if st := l.r.Status(); st.Pending != 3 {
		t.Fatalf("the cut-off leader has %d proposals pending, want 3", st.Pending)
	}
	s.readyLeader(l.id)
	s.until("the old leader steps down", func() bool { return l.r.Status().Lead != l.id })
	for _, c := range lost {
		if c.acked || !errors.Is(c.failed, replica.ErrUnavailable) {
			t.Fatalf("%s on the deposed leader: acked %v, failed %v; want ErrUnavailable", c.op, c.acked, c.failed)
		}
	}
	s.heal()
	s.finish() // every entry replayed on the reference: none of the lost sends is in the log
}
