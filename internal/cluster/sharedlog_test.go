package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// walSegments lists the segment files of a node's log.
func walSegments(t *testing.T, m *member) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(m.dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			out = append(out, e.Name())
		}
	}
	return out
}

// A node keeps one log: raft's records go into the broker's, so that one commit cycle
// (one fsync) makes both durable, and a segment goes once neither the broker (its
// bodies, its checkpoint) nor raft (its entries, its snapshot marker) needs it. A node
// restarted after segments went opens the log again, raft's state and the broker's.
func TestOneLogPerNode(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, 3, 4, 2)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	// A message kept throughout: the broker moves its body out of the first segment
	// (compaction) so that the segment can go; a node reopened from where raft's records
	// begin still reads it.
	mustQueue(t, l.b, "keep")
	if res, err := l.b.Send(context.Background(), "keep", []queue.SendInput{{Payload: queue.Payload{Body: []byte("kept")}, Delay: -1}}); err != nil || res[0].Err != nil {
		t.Fatalf("send to keep: %v %v", err, res)
	}
	body := make([]byte, 8<<10)
	// One send of ten at a time: a burst of megabytes would hold the followers' raft
	// loops for longer than an election timeout under the race detector.
	in := make([]queue.SendInput, 10)
	for i := range in {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: body}, Delay: -1}
	}
	for range 60 {
		res, err := l.b.Send(context.Background(), "jobs", in)
		for i := 0; err == nil && i < len(res); i++ {
			err = res[i].Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool { return ready(m.b, "jobs") == 600 }, "%s to hold the 600 messages", m.name)
		if _, err := os.Stat(filepath.Join(m.dir, "raft", "wal")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s has a raft log of its own (raft/wal): %v", m.name, err)
		}
		// One log object: the raft storage's log is the broker's.
		if got, want := m.raft.storage.Log().Stats(), m.b.LogStats(); got != want {
			t.Fatalf("%s: the raft log's counters %+v are not the broker's log's %+v", m.name, got, want)
		}
	}
	before := map[string][]string{}
	for _, m := range c.nodes {
		if before[m.name] = walSegments(t, m); len(before[m.name]) < 4 {
			t.Fatalf("%s holds %d segments after 4.8 MiB of bodies, twice (entries and records): %v", m.name, len(before[m.name]), before[m.name])
		}
	}

	// Every body goes; the checkpoints hold none, raft's snapshot covers the entries.
	if _, err := l.b.Purge(context.Background(), "jobs"); err != nil {
		t.Fatal(err)
	}
	sendN(t, l.b, "jobs", 0, 3)
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool { return ready(m.b, "jobs") == 3 }, "%s to purge", m.name)
	}
	mustQueue(t, l.b, "pad")
	for round := range 2 { // the broker releases at its checkpoint, raft once it compacted after it
		for i := range 5 { // entries enough beyond the last snapshot for raft to compact again
			sendN(t, l.b, "pad", round*5+i, 1)
		}
		c.checkpointAll()
		for _, m := range c.nodes {
			hi := m.b.CheckpointedApplied()
			testkit.Eventually(t, 10*time.Second, func() bool { return m.raft.Status().Snapshot >= hi },
				"%s's raft log to be compacted to %d: %+v", m.name, hi, m.raft.Status())
		}
	}
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool {
			segs := walSegments(t, m)
			return len(segs) <= 3 && segs[0] != before[m.name][0]
		}, "%s's old segments to go (before %v, now %v)", m.name, before[m.name], walSegments(t, m))
		if from := replica.ReadStart(vfs.OS, filepath.Join(m.dir, "wal")); from.Segment() <= 1 {
			t.Fatalf("%s: raft's records begin at %v by its start file, want past the first segment", m.name, from)
		}
	}

	// A follower restarted opens the log from the run of segments left; it catches up.
	f := c.follower(l)
	c.stop(f)
	sendN(t, l.b, "jobs", 3, 5)
	c.start(f)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 8 }, "the restarted follower to catch up")
	if n := ready(f.b, "keep"); n != 1 {
		t.Fatalf("the restarted follower holds %d kept messages, want 1", n)
	}
	// The other follower restarts too; then the leader goes, and whichever of the two
	// restarted nodes leads reads the kept body from its reopened log.
	for _, m := range c.nodes {
		if m != l && m != f {
			c.stop(m)
			c.start(m)
			testkit.Eventually(t, 10*time.Second, func() bool { return ready(m.b, "jobs") == 8 }, "%s to catch up", m.name)
		}
	}
	c.stop(l)
	nl := c.leader()
	if got, err := nl.b.Peek(context.Background(), "keep", 0, 10); err != nil || len(got) != 1 || string(got[0].Payload.Body) != "kept" {
		t.Fatalf("%s, leading after its restart: the kept message %+v, %v", nl.name, got, err)
	}
	if st := f.raft.Status(); st.Installs != 0 {
		t.Fatalf("the restarted follower installed a snapshot, want it to catch up from the log: %+v", st)
	}
	msgs, err := nl.b.Receive(context.Background(), "jobs", broker.ReceiveOptions{Max: 10, Visibility: time.Minute})
	if err != nil || len(msgs) != 8 {
		t.Fatalf("receive on the leader: %d, %v", len(msgs), err)
	}
}

// A data directory with a raft log of its own (an okiba from before the one log) is
// refused, with what to do, rather than opened without raft's state.
func TestOpenRefusesARaftLogOfItsOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raft", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{Name: "n1", Peers: []Peer{{Name: "n1", URL: "http://127.0.0.1:1"}}, Dir: dir, Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "raft log of its own") || !strings.Contains(err.Error(), "empty data directory") {
		t.Fatalf("Open of a directory with raft/wal = %v", err)
	}
}
