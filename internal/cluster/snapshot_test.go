package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/topic"
)

// publishN publishes n records to a topic, one call each.
func publishN(t *testing.T, b *broker.Broker, name string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		res, err := b.Publish(context.Background(), name, []topic.PublishInput{{Partition: topic.AnyPartition, Body: fmt.Appendf(nil, "r%04d", i)}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// records returns the bodies a node's topic retains, in offset order.
func records(t *testing.T, b *broker.Broker, name string) []string {
	t.Helper()
	rd, err := b.ReadTopic(context.Background(), name, broker.ReadOptions{Max: 10000})
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rd.Records {
		out = append(out, string(r.Body))
	}
	return out
}

// checkpointAll has every running node checkpoint, so that its raft log may drop what
// the checkpoint holds.
func (c *testCluster) checkpointAll() {
	c.t.Helper()
	for _, m := range c.nodes {
		if m.srv != nil {
			if err := m.b.Checkpoint(context.Background()); err != nil {
				c.t.Fatalf("%s: checkpoint: %v", m.name, err)
			}
		}
	}
}

// compactLeader checkpoints every node and waits for the leader l's raft log to drop
// what its checkpoint holds, which must be past the first 40 entries; it returns the
// checkpoint's applied index. Concurrent sends share entries: the log is as long as the
// leader made it.
func (c *testCluster) compactLeader(l *member) uint64 {
	c.t.Helper()
	c.checkpointAll()
	hi := l.b.CheckpointedApplied()
	if hi < 2+40 {
		c.t.Fatalf("the leader's checkpoint holds entries up to %d only", hi)
	}
	testkit.Eventually(c.t, 10*time.Second, func() bool {
		st := l.raft.Status()
		return st.Compactions > 0 && st.Snapshot >= hi
	}, "the leader's raft log to be compacted to %d: %+v", hi, l.raft.Status())
	return hi
}

// The raft logs drop what the brokers' checkpoints hold; a follower that was down while
// they did, and a member that joins after, install another node's state (messages,
// receipts' leases, topic records) from a snapshot, carry on from the log after it, and
// restart from what they installed; an installed follower can lead with everything.
func TestCompactedLogsInstallSnapshots(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, 3, 40, 5)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	if _, _, err := l.b.PutTopic(context.Background(), "events", func(*topic.Config, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f := c.follower(l)
	c.stop(f)
	sendN(t, l.b, "jobs", 0, 150)
	publishN(t, l.b, "events", 0, 60)
	// A lease taken before the install: its receipt must settle on the installed node
	// once it leads.
	got, err := l.b.Receive(context.Background(), "jobs", broker.ReceiveOptions{Max: 1, Visibility: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %d", err, len(got))
	}
	hi := c.compactLeader(l)
	first, _ := l.raft.storage.FirstIndex()
	if first <= 2 {
		t.Fatalf("the leader's log starts at %d after compaction", first)
	}

	c.start(f)
	testkit.Eventually(t, 15*time.Second, func() bool { return ready(f.b, "jobs") == 150 && f.raft.Status().Installs > 0 },
		"the follower to install the state")
	if st := f.raft.Status(); st.Installs != 1 || st.Snapshot < hi {
		t.Fatalf("the follower installed %d snapshots, want 1: %+v", st.Installs, st)
	}
	sendN(t, l.b, "jobs", 150, 10)
	publishN(t, l.b, "events", 60, 5)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 160 && len(records(t, f.b, "events")) == 65 },
		"the follower to carry on from the log after the snapshot")

	// Restarted, the follower opens what it installed and what it applied since.
	c.stop(f)
	c.start(f)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 160 }, "the follower to reopen its installed state")

	// A member joining now starts from a snapshot too.
	n4 := c.join("n4", l)
	testkit.Eventually(t, 15*time.Second, func() bool { return ready(n4.b, "jobs") == 160 && n4.raft.Status().Installs > 0 },
		"the new member to install the state")
	if st := n4.raft.Status(); st.Installs != 1 {
		t.Fatalf("n4 installed %d snapshots, want 1", st.Installs)
	}

	// The leader goes; whoever leads next has every message, every record, the lease.
	c.stop(l)
	nl := c.leader()
	if ready(nl.b, "jobs") != 160 {
		t.Fatalf("the new leader %s holds %d messages, want 160", nl.name, ready(nl.b, "jobs"))
	}
	want := make([]string, 65)
	for i := range want {
		want[i] = fmt.Sprintf("r%04d", i)
	}
	if got := records(t, nl.b, "events"); !slices.Equal(got, want) {
		t.Fatalf("the new leader's topic holds %v", got)
	}
	res, err := nl.b.Ack(context.Background(), "jobs", []string{got[0].Receipt})
	if err != nil || res[0] != nil {
		t.Fatalf("the old receipt on the new leader: %v %v", err, res)
	}
}

// A member whose data directory is lost must not bootstrap again on an empty one (it
// would vote without the entries it acknowledged): its peers say it has run, and Open
// refuses, naming the way out; a founder that never ran is not refused (the others
// started before it in every test here).
func TestLostDataDirectoryIsNotBootstrappedAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, m := range l.raft.Members() {
			if !m.Started {
				return false
			}
		}
		return true
	}, "every member to be recorded as started: %+v", l.raft.Members())
	f := c.follower(l)
	c.stop(f)
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if err := PrepareDataDir(nil, f.dir, testSecret); err != nil {
		t.Fatal(err)
	}
	r, err := Open(Config{Name: f.name, Peers: c.peers, Dir: f.dir, Secret: testSecret, Logger: testLogger(t, f.name)})
	if err == nil {
		r.Close()
		t.Fatal("a member whose data directory was lost bootstrapped again")
	}
	if !errors.Is(err, ErrLostLog) || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("Open: %v", err)
	}
}

// A node of another okiba version is refused when it asks to join: every member runs the
// same version (a newer one's records, an older one could not apply).
func TestJoinOfAnotherVersionIsRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "n4")
	if err := PrepareDataDir(nil, dir, testSecret); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{Name: "n4", Peers: []Peer{{Name: "n4", URL: "http://" + ln.Addr().String()}}, Join: c.peers[slices.Index(c.nodes, l)].URL,
		Dir: dir, Secret: testSecret, Version: "v99.0.0", Logger: testLogger(t, "n4")})
	if err == nil || !strings.Contains(err.Error(), "same okiba version") || !strings.Contains(err.Error(), "v99.0.0") {
		t.Fatalf("a join of another version: %v", err)
	}
	if n := len(l.raft.Members()); n != 3 {
		t.Fatalf("the refused join changed the members: %d", n)
	}
}

// The paced writer holds a state's stream to its rate: after each write it sleeps until
// the bytes so far are due, on a clock of the test's.
func TestPacedWriterHoldsItsRate(t *testing.T) {
	now := time.Unix(0, 0)
	var slept time.Duration
	var sink strings.Builder
	p := newPacedWriter(&sink, 1000) // 1,000 bytes a second
	p.now = func() time.Time { return now }
	p.sleep = func(d time.Duration) { slept += d; now = now.Add(d) }
	for range 10 {
		if _, err := p.Write(make([]byte, 250)); err != nil {
			t.Fatal(err)
		}
	}
	if sink.Len() != 2500 || slept != 2500*time.Millisecond {
		t.Fatalf("wrote %d bytes and slept %v, want 2500 and 2.5s", sink.Len(), slept)
	}
	now = now.Add(10 * time.Second) // the writer was idle: what is due has passed
	slept = 0
	p.Write(make([]byte, 500))
	if slept != 0 {
		t.Fatalf("slept %v after an idle stretch that covers the write", slept)
	}
}
