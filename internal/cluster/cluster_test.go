package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
)

const testSecret = "cluster-test-secret-cluster-test-secret"

// member is one node of a test cluster: a real broker on a real data directory, its
// Raft, and an HTTP server on loopback for the other nodes' messages. cut drops every
// message to and from it, as a partition would.
type member struct {
	name string
	dir  string
	ln   net.Listener
	srv  *http.Server
	raft *Raft
	b    *broker.Broker
	cut  atomic.Bool
	// noStream makes the member's server answer the raft stream 404, as a node from
	// before it does (transport_test.go).
	noStream atomic.Bool
	// streams counts the raft streams the member's server has taken.
	streams atomic.Int64
	// replayed is what the broker applied from its own log when it opened.
	replayed uint64
	join     string // the URL of a member to join through, for a node added later
}

type testCluster struct {
	mu    sync.Mutex // guards nodes and peers against the transports' reads
	t     testing.TB
	peers []Peer
	nodes []*member
	// snapEntries and catchUp are the nodes' Config.SnapshotEntries and CatchUpEntries.
	snapEntries, catchUp int
	// config, if set, changes a node's Config before it opens (transfer_test.go).
	config func(m *member, cfg *Config)
}

// cutTransport drops requests while its member is cut off, or its target is.
type cutTransport struct {
	from *member
	c    *testCluster
	rt   http.RoundTripper
}

func (c cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.isCut(req.URL.Host) {
		return nil, errors.New("cut off")
	}
	if req.Body != nil {
		// A stream opened before the cut carries nothing across it: it fails at its
		// first bytes after.
		req = req.Clone(req.Context())
		req.Body = cutBody{ReadCloser: req.Body, c: c, host: req.URL.Host}
	}
	return c.rt.RoundTrip(req)
}

// isCut says whether a request from c's member to host is cut off.
func (c cutTransport) isCut(host string) bool {
	if c.from.cut.Load() {
		return true
	}
	c.c.mu.Lock()
	nodes, peers := slices.Clone(c.c.nodes), slices.Clone(c.c.peers)
	c.c.mu.Unlock()
	for i, n := range nodes {
		if peers[i].URL == "http://"+host && n.cut.Load() {
			return true
		}
	}
	return false
}

type cutBody struct {
	io.ReadCloser
	c    cutTransport
	host string
}

func (b cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.c.isCut(b.host) {
		return 0, errors.New("cut off")
	}
	return n, err
}

func newCluster(t *testing.T, n int) *testCluster { return newClusterTB(t, n) }

func newClusterTB(t testing.TB, n int) *testCluster { return newClusterWith(t, n, 0, 0) }

func newClusterWith(t testing.TB, n, snapEntries, catchUp int) *testCluster {
	t.Helper()
	return (&testCluster{t: t, snapEntries: snapEntries, catchUp: catchUp}).boot(n)
}

// boot starts a new cluster of n nodes with c's settings.
func (c *testCluster) boot(n int) *testCluster {
	t := c.t
	t.Helper()
	base := t.TempDir()
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := &member{name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(base, fmt.Sprintf("n%d", i+1)), ln: ln}
		c.nodes = append(c.nodes, m)
		c.peers = append(c.peers, Peer{Name: m.name, URL: "http://" + ln.Addr().String()})
	}
	for _, m := range c.nodes {
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.nodes {
			c.stop(m)
		}
	})
	return c
}

func (c *testCluster) start(m *member) {
	t := c.t
	t.Helper()
	if m.ln == nil {
		ln, err := net.Listen("tcp", c.peers[slices.IndexFunc(c.nodes, func(x *member) bool { return x == m })].URL[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		m.ln = ln
	}
	if err := PrepareDataDir(nil, m.dir, testSecret); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: m.name, Peers: c.peers, Join: m.join, Dir: m.dir, Secret: testSecret, Tick: 20 * time.Millisecond, Logger: testLogger(t, m.name),
		SnapshotEntries: c.snapEntries, CatchUpEntries: c.catchUp,
		Client: &http.Client{Timeout: 2 * time.Second, Transport: cutTransport{from: m, c: c, rt: http.DefaultTransport}}}
	if c.config != nil {
		c.config(m, &cfg)
	}
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(broker.Config{Dir: m.dir, Replication: r, SegmentSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m.replayed = b.Applied()
	if err := r.Start(b); err != nil {
		t.Fatal(err)
	}
	m.raft, m.b = r, b
	h, st, jh, sh, ph := r.Handler(), r.StreamHandler(), r.JoinHandler(), r.SnapshotHandler(), r.PeersHandler()
	m.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if m.cut.Load() {
			http.Error(w, "cut off", http.StatusServiceUnavailable)
			return
		}
		if req.URL.Path == JoinPath {
			jh.ServeHTTP(w, req)
			return
		}
		if req.URL.Path == SnapshotPath {
			sh.ServeHTTP(w, req)
			return
		}
		if req.URL.Path == PeersPath {
			ph.ServeHTTP(w, req)
			return
		}
		if req.URL.Path == RaftStreamPath {
			if m.noStream.Load() {
				http.NotFound(w, req)
				return
			}
			m.streams.Add(1)
			st.ServeHTTP(w, req)
			return
		}
		h.ServeHTTP(w, req)
	})}
	go m.srv.Serve(m.ln)
}

func (c *testCluster) stop(m *member) {
	if m.srv == nil {
		return
	}
	m.srv.Close()
	m.raft.Close()
	m.b.Close()
	m.srv, m.ln = nil, nil
}

// leader waits for one of the running nodes to lead and take commands.
func (c *testCluster) leader() *member {
	c.t.Helper()
	var l *member
	testkit.Eventually(c.t, 10*time.Second, func() bool {
		for _, m := range c.nodes {
			if m.srv != nil && !m.cut.Load() && m.raft.Term() != 0 {
				l = m
				return true
			}
		}
		return false
	}, "a leader")
	return l
}

// join starts a new member, name, that joins the cluster through via.
func (c *testCluster) join(name string, via *member) *member {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	m := &member{name: name, dir: filepath.Join(c.t.TempDir(), name), ln: ln, join: c.peers[slices.Index(c.nodes, via)].URL}
	c.mu.Lock()
	c.nodes = append(c.nodes, m)
	c.peers = append(c.peers, Peer{Name: name, URL: "http://" + ln.Addr().String()})
	c.mu.Unlock()
	c.start(m)
	return m
}

func mustQueue(t *testing.T, b *broker.Broker, name string) {
	t.Helper()
	if _, _, err := b.PutQueue(context.Background(), name, func(*queue.Config, bool) error { return nil }); err != nil {
		t.Fatalf("PutQueue: %v", err)
	}
}

func sendN(t *testing.T, b *broker.Broker, q string, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := from; i < from+n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.Send(context.Background(), q, []queue.SendInput{{Payload: queue.Payload{Body: fmt.Appendf(nil, "m%04d", i)}, Delay: -1}})
			if err == nil {
				err = res[0].Err
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}
}

// follower returns a running member other than l.
func (c *testCluster) follower(l *member) *member {
	c.t.Helper()
	for _, m := range c.nodes {
		if m != l && m.srv != nil {
			return m
		}
	}
	c.t.Fatal("no follower")
	return nil
}

func ready(b *broker.Broker, q string) int64 {
	qi, err := b.Queue(q)
	if err != nil {
		return -1
	}
	return qi.Stats.Ready + qi.Stats.InFlight
}

// Three nodes elect a leader; what it acknowledges is on the followers; when it stops,
// another leads with every acknowledged message, and a receipt the old leader handed
// out settles its lease on the new one; the old one, restarted, catches up.
func TestClusterFailsOverWithEveryAcknowledgedMessage(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 100)
	for _, m := range c.nodes {
		testkit.Eventually(t, 10*time.Second, func() bool { return ready(m.b, "jobs") == 100 }, "%s to hold the 100 messages", m.name)
	}
	if _, err := c.nodes[slices.IndexFunc(c.nodes, func(m *member) bool { return m != l })].b.Send(context.Background(), "jobs",
		[]queue.SendInput{{Payload: queue.Payload{Body: []byte("x")}, Delay: -1}}); !errors.Is(err, broker.ErrNotLeader) {
		t.Fatalf("a send to a follower: %v, want ErrNotLeader", err)
	}
	leased, err := l.b.Receive(context.Background(), "jobs", broker.ReceiveOptions{Max: 10, Visibility: time.Minute})
	if err != nil || len(leased) != 10 {
		t.Fatalf("receive: %d, %v", len(leased), err)
	}

	ran := l.b.Applied() // the receive's entry: the 100 sends may share fewer
	c.stop(l)
	l2 := c.leader()
	if l2 == l {
		t.Fatal("the stopped node leads")
	}
	var receipts []string
	for _, m := range leased {
		receipts = append(receipts, m.Receipt)
	}
	errs, err := l2.b.Ack(context.Background(), "jobs", receipts)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("ack %d of a receipt from the old leader: %v", i, e)
		}
	}
	got := map[string]bool{}
	for len(got) < 90 {
		ms, err := l2.b.Receive(context.Background(), "jobs", broker.ReceiveOptions{Max: 10, Visibility: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			t.Fatalf("the new leader delivers %d of the 90 not acked", len(got))
		}
		for _, m := range ms {
			got[string(m.Payload.Body)] = true
		}
	}
	for _, m := range leased {
		if got[string(m.Payload.Body)] {
			t.Fatalf("%s was acked through the old leader's receipt and delivered again", m.Payload.Body)
		}
	}

	before := l2.b.Applied()
	c.start(l) // restarts from its own log and catches up
	if l.replayed < ran || l.replayed > before {
		t.Fatalf("the restarted node applied entries up to %d from its own log; it had run up to %d and taken part in %d", l.replayed, ran, before)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return l.b.Applied() == l2.b.Applied() && l.b.Applied() > 0 }, "the restarted node to catch up")
	qi, _ := l.b.Queue("jobs")
	if qi.Stats.Ready != 0 || qi.Stats.InFlight != 90 {
		t.Fatalf("the restarted node holds %+v, want 90 in flight", qi.Stats)
	}
}

// A leader cut off from the others with a command pending loses its lead: the command
// fails as lost, the broker rebuilds from the committed state (the command's effect is
// gone), and once healed the node follows the new leader.
func TestDeposedLeaderRebuildsWithoutItsUncommittedCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 5)
	l.cut.Store(true)
	res, err := l.b.Send(context.Background(), "jobs", []queue.SendInput{{Payload: queue.Payload{Body: []byte("lost")}, Delay: -1}})
	if err == nil {
		err = res[0].Err
	}
	if !errors.Is(err, ErrLost) {
		t.Fatalf("a send on a cut-off leader: %v, want ErrLost", err)
	}
	l2 := c.leader()
	sendN(t, l2.b, "jobs", 5, 5)
	l.cut.Store(false)
	testkit.Eventually(t, 10*time.Second, func() bool { return l.b.Applied() == l2.b.Applied() }, "the deposed leader to catch up")
	ms, err := l2.b.Peek(context.Background(), "jobs", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if string(m.Payload.Body) == "lost" {
			t.Fatal("the deposed leader's uncommitted send is in the log")
		}
	}
	if len(ms) != 10 || ready(l.b, "jobs") != 10 {
		t.Fatalf("%d messages on the leader, %d on the deposed one; want 10", len(ms), ready(l.b, "jobs"))
	}
}

func testLogger(t testing.TB, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// A leader that hands its lead over (a graceful shutdown) makes the follower furthest
// along lead, without an election timeout and without dropping what it ran: nothing is
// rebuilt, and the new leader holds every acknowledged message.
func TestHandoffMovesTheLeadWithoutLoss(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.raft.Handoff(ctx)
	if ctx.Err() != nil {
		t.Fatal("the lead was not handed over")
	}
	if _, err := l.b.Send(context.Background(), "jobs", []queue.SendInput{{Payload: queue.Payload{Body: []byte("x")}, Delay: -1}}); !errors.Is(err, broker.ErrNotLeader) {
		t.Fatalf("a send on the node that handed its lead over: %v", err)
	}
	var l2 *member
	testkit.Eventually(t, 5*time.Second, func() bool {
		for _, m := range c.nodes {
			if m != l && m.raft.Term() != 0 {
				l2 = m
				return true
			}
		}
		return false
	}, "another node to lead")
	if got := ready(l2.b, "jobs"); got != 20 {
		t.Fatalf("the new leader holds %d of the 20 messages", got)
	}
	sendN(t, l2.b, "jobs", 20, 5)
	testkit.Eventually(t, 5*time.Second, func() bool { return ready(l.b, "jobs") == 25 }, "the old leader to follow")
	if st := l.raft.Status(); st.Rebuilds != 0 {
		t.Fatalf("the old leader rebuilt %d times", st.Rebuilds)
	}
}

// A read barrier passes on a leader a quorum follows, and never on one cut off from it
// (which still believes it leads, until its quorum check) nor on a follower.
func TestReadBarrierConfirmsTheLead(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if err := l.raft.ReadBarrier(ctx); err != nil {
			t.Fatalf("a read barrier on the leader: %v", err)
		}
	}
	for _, m := range c.nodes {
		if m != l {
			if err := m.raft.ReadBarrier(ctx); !errors.Is(err, ErrNoLeader) {
				t.Fatalf("a read barrier on follower %s: %v", m.name, err)
			}
		}
	}
	l.cut.Store(true)
	done := make(chan error, 1)
	go func() { done <- l.raft.ReadBarrier(ctx) }()
	if err := testkit.Recv(t, done, 5*time.Second, "the cut-off leader's read barrier to end"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("a read barrier on a cut-off leader: %v", err)
	}
}

// A node joins a running cluster as a learner, receives the whole log (the bootstrap
// snapshot, then every entry), is promoted to a voter once it has caught up, counts in
// the majority (one founder down, the cluster of four goes on), and is removed again.
func TestMemberJoinsCatchesUpAndIsRemoved(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 30)
	n4 := c.join("n4", l)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(n4.b, "jobs") == 30 }, "the new member to hold the log")
	voter := func(name string) bool {
		for _, m := range l.raft.Members() {
			if m.Name == name {
				return !m.Learner
			}
		}
		return false
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return voter("n4") }, "n4 to be promoted")
	// Four voters: a majority is three, so one founder may be down.
	var f *member
	for _, m := range c.nodes[:3] {
		if m != l {
			f = m
			break
		}
	}
	c.stop(f)
	sendN(t, c.leader().b, "jobs", 30, 5)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(n4.b, "jobs") == 35 }, "n4 to follow")
	c.start(f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var members []Member
	var err error
	testkit.Eventually(t, 10*time.Second, func() bool {
		members, err = c.leader().raft.RemoveMember(ctx, "n4")
		return err == nil
	}, "n4 to be removed: %v", err)
	if len(members) != 3 || slices.ContainsFunc(members, func(m Member) bool { return m.Name == "n4" }) {
		t.Fatalf("members after the removal: %+v", members)
	}
	if _, err := c.leader().raft.AddMember(ctx, "n1", "http://elsewhere:1"); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("adding a name taken at another URL: %v", err)
	}
}
