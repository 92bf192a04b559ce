package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
)

// sendHeld sends bodies to q on m, each in a send of its own and all at once, while m's
// Raft holds its proposals, so that one round of run finds every one of them queued.
// It returns each send's result and error, in the order of bodies.
func sendHeld(t *testing.T, m *member, q string, bodies [][]byte, beforeRelease func()) ([]queue.SendResult, []error) {
	t.Helper()
	m.raft.holdProposals.Store(true)
	res := make([]queue.SendResult, len(bodies))
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := m.b.Send(context.Background(), q, []queue.SendInput{{Payload: queue.Payload{Body: body}, Delay: -1}})
			if err == nil {
				res[i], err = r[0], r[0].Err
			}
			errs[i] = err
		}()
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		m.raft.mu.Lock()
		defer m.raft.mu.Unlock()
		return len(m.raft.queued) == len(bodies)
	}, "%d sends to be queued on %s", len(bodies), m.name)
	if beforeRelease != nil {
		beforeRelease()
	}
	m.raft.holdProposals.Store(false)
	select {
	case m.raft.wake <- struct{}{}:
	default:
	}
	wg.Wait()
	return res, errs
}

// statusOnceRun returns m's status once it counts at least cmds more commands proposed
// than before did and has noted what the broker applied — with committed, only once
// the broker applied an entry after before's: a command's answer comes a moment before
// the broker hears of its entry, and run notes its status at the end of the round.
func statusOnceRun(t *testing.T, m *member, before Status, cmds uint64, committed bool) Status {
	t.Helper()
	var st Status
	testkit.Eventually(t, 10*time.Second, func() bool {
		st = m.raft.Status()
		applied := m.b.Applied()
		return st.Commands-before.Commands >= cmds && st.Applied >= applied && (!committed || applied > before.Applied)
	}, "%s to note %d commands proposed", m.name, cmds)
	return st
}

// settled returns m's status once it has noted everything its broker applied, so that
// counts taken from it before a step do not lag the steps before.
func settled(t *testing.T, m *member) Status {
	t.Helper()
	return statusOnceRun(t, m, m.raft.Status(), 0, false)
}

func peekAll(t *testing.T, m *member, q string) []broker.PeekedMessage {
	t.Helper()
	ms, err := m.b.Peek(context.Background(), q, 0, 1000)
	if err != nil {
		t.Fatalf("%s: peek: %v", m.name, err)
	}
	return ms
}

func samePeeked(a, b []broker.PeekedMessage) bool {
	return slices.EqualFunc(a, b, func(x, y broker.PeekedMessage) bool {
		return x.Seq == y.Seq && x.ID == y.ID && bytes.Equal(x.Payload.Body, y.Payload.Body)
	})
}

// Sends that run while the leader's driver is busy share one raft entry (a bound of
// bytes splits larger ones): each is answered with its own message, every node holds
// the same messages, and so does a follower after a restart. (The leader's replay of
// its own groups of a shared entry: TestLostBatchFailsEveryCommand's rebuild.)
func TestConcurrentSendsShareEntries(t *testing.T) {
	t.Parallel()
	// Entries of 8 KiB at most: 64 small sends fit one, sends of 3000 bytes two each.
	c := (&testCluster{t: t, config: func(_ *member, cfg *Config) { cfg.entryBytes = 8 << 10 }}).boot(3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")

	const n = 64
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "m%04d", i)
	}
	before := settled(t, l)
	res, errs := sendHeld(t, l, "jobs", bodies, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	after := statusOnceRun(t, l, before, n, true)
	if p, cmds := after.Proposed-before.Proposed, after.Commands-before.Commands; p != 1 || cmds != n {
		t.Fatalf("%d sends made %d entries of %d commands, want 1 of %d", n, p, cmds, n)
	}
	if got := after.Commit - before.Commit; got != 1 {
		t.Fatalf("%d sends took %d raft entries, want 1", n, got)
	}
	// Larger sends: an entry takes what fits in its bound, 2 of these.
	big := make([][]byte, 8)
	for i := range big {
		big[i] = bytes.Repeat([]byte{byte('a' + i)}, 3000)
	}
	before = settled(t, l)
	bigRes, errs := sendHeld(t, l, "jobs", big, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("large send %d: %v", i, err)
		}
	}
	after = statusOnceRun(t, l, before, 8, true)
	if p, cmds := after.Proposed-before.Proposed, after.Commands-before.Commands; p != 4 || cmds != 8 {
		t.Fatalf("8 sends of 3000 bytes made %d entries of %d commands, want 4 of 8", p, cmds)
	}
	res, bodies = append(res, bigRes...), append(bodies, big...)

	// Each send's answer names its own message.
	want := peekAll(t, l, "jobs")
	if len(want) != len(bodies) {
		t.Fatalf("the leader holds %d messages, want %d", len(want), len(bodies))
	}
	bySeq := map[uint64]broker.PeekedMessage{}
	for _, m := range want {
		bySeq[m.Seq] = m
	}
	for i, r := range res {
		m, ok := bySeq[r.Seq]
		if !ok || m.ID != r.ID || !bytes.Equal(m.Payload.Body, bodies[i]) {
			t.Fatalf("send %d was answered with message %d (seq %d), which holds %.8q, not %.8q", i, r.ID, r.Seq, m.Payload.Body, bodies[i])
		}
	}

	idx := l.b.Applied()
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool { return m.b.Applied() >= idx }, "%s to apply entry %d", m.name, idx)
		if got := ready(m.b, "jobs"); got != int64(len(want)) {
			t.Fatalf("%s holds %d messages, the leader %d", m.name, got, len(want))
		}
	}
	// Restarted, a follower opens the same state; leading, it answers a peek alike.
	var f *member
	for _, m := range c.nodes {
		if m != l {
			f = m
		}
	}
	c.stop(f)
	c.start(f)
	if f.replayed < idx {
		t.Fatalf("the restarted follower %s applied entries up to %d from its data directory, want %d", f.name, f.replayed, idx)
	}
	c.stop(l)
	l2 := c.leader()
	if got := peekAll(t, l2, "jobs"); !samePeeked(got, want) {
		t.Fatalf("the follower %s, leading, holds %d messages unlike the old leader's %d", l2.name, len(got), len(want))
	}
}

// A leader cut off with an entry of several commands pending loses its lead: every
// command of it fails as lost, none takes effect on any node, and the node rebuilds
// once and follows the new leader. Then a checkpoint on the new leader seals its entry
// (checkpointSeals).
func TestLostBatchFailsEveryCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	// Five sends committed in one entry: the rebuild replays them from the groups of the
	// leader's own log, all five.
	first := make([][]byte, 5)
	for i := range first {
		first[i] = fmt.Appendf(nil, "m%04d", i)
	}
	before := settled(t, l)
	if _, errs := sendHeld(t, l, "jobs", first, nil); errors.Join(errs...) != nil {
		t.Fatalf("sends: %v", errors.Join(errs...))
	}
	if st := statusOnceRun(t, l, before, 5, true); st.Proposed-before.Proposed != 1 {
		t.Fatalf("5 sends made %d entries, want 1", st.Proposed-before.Proposed)
	}
	const n = 16
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "lost%02d", i)
	}
	before = settled(t, l)
	_, errs := sendHeld(t, l, "jobs", bodies, func() { l.cut.Store(true) })
	for i, err := range errs {
		if !errors.Is(err, ErrLost) {
			t.Fatalf("send %d of the batch on a cut-off leader: %v, want ErrLost", i, err)
		}
	}
	after := statusOnceRun(t, l, before, n, false)
	if p, cmds := after.Proposed-before.Proposed, after.Commands-before.Commands; p != 1 || cmds != n {
		t.Fatalf("the cut-off leader proposed %d entries of %d commands, want 1 of %d", p, cmds, n)
	}
	l2 := c.leader()
	sendN(t, l2.b, "jobs", 5, 5)
	l.cut.Store(false)
	testkit.Eventually(t, 10*time.Second, func() bool { return l.b.Applied() == l2.b.Applied() }, "the deposed leader to catch up")
	if r := l.raft.Status().Rebuilds - before.Rebuilds; r != 1 {
		t.Fatalf("the deposed leader rebuilt %d times, want 1", r)
	}
	want := peekAll(t, l2, "jobs")
	if len(want) != 10 {
		t.Fatalf("the new leader holds %d messages, want 10", len(want))
	}
	for _, m := range want {
		if bytes.HasPrefix(m.Payload.Body, []byte("lost")) {
			t.Fatalf("%s, of the lost batch, is in the log", m.Payload.Body)
		}
	}
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool { return m.b.Applied() >= l2.b.Applied() }, "%s to catch up", m.name)
		if got := ready(m.b, "jobs"); got != 10 {
			t.Fatalf("%s holds %d messages, want 10", m.name, got)
		}
	}
	checkpointSeals(t, l2)
}

// checkpointSeals checks, on the leader l, that a checkpoint of its state seals the
// entry of its last proposal: the commands that run after it go into another entry, so
// that the checkpoint's applied index (the entry of its last proposal) covers exactly
// the commands it holds.
func checkpointSeals(t *testing.T, l *member) {
	t.Helper()
	queuedN := func(n int) func() bool {
		return func() bool {
			l.raft.mu.Lock()
			defer l.raft.mu.Unlock()
			return len(l.raft.queued) == n
		}
	}
	send := func(body string, errs chan<- error) {
		_, err := l.b.Send(context.Background(), "jobs", []queue.SendInput{{Payload: queue.Payload{Body: []byte(body)}, Delay: -1}})
		errs <- err
	}
	before := settled(t, l)
	l.raft.holdProposals.Store(true)
	errs := make(chan error, 3)
	go send("a", errs)
	go send("b", errs)
	testkit.Eventually(t, 10*time.Second, queuedN(2), "two sends to be queued")
	ckpt := make(chan error, 1)
	go func() { ckpt <- l.b.Checkpoint(context.Background()) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		l.raft.mu.Lock()
		defer l.raft.mu.Unlock()
		return l.raft.queued[1].seal
	}, "the checkpoint to seal the second send's entry")
	go send("c", errs)
	testkit.Eventually(t, 10*time.Second, queuedN(3), "the third send to be queued")
	l.raft.holdProposals.Store(false)
	select {
	case l.raft.wake <- struct{}{}:
	default:
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if err := <-ckpt; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	st := statusOnceRun(t, l, before, 3, true)
	if p := st.Proposed - before.Proposed; p != 2 {
		t.Fatalf("three sends, a checkpoint after the second, made %d entries; want 2", p)
	}
	// The third send's entry follows the checkpoint's (its answer may come a moment
	// before the broker hears of the entry).
	testkit.Eventually(t, 10*time.Second, func() bool { return l.b.Applied() == l.b.CheckpointedApplied()+1 },
		"the checkpoint to hold the entries before the third send's: it holds up to %d", l.b.CheckpointedApplied())
}
