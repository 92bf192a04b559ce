package replica_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// The simulation: three or five replicas in one goroutine, a network that drops,
// delays, duplicates and reorders messages, partitions and heals, nodes that crash (the
// storage kept, the machines lost) and restart, clocks that disagree and step back,
// and clients sending random commands to whoever leads (and to whoever does not, who
// must refuse). Everything random comes from the seed, so a seed replays a run.
//
// raft draws its followers' election timeouts from crypto/rand. To keep a run a function
// of its seed, the simulation ticks only leaders (heartbeats and the quorum check are
// deterministic) and keeps the followers' election timers itself: a node that has heard
// from no leader for its timeout (drawn from the seed, between ElectionTick and twice
// it) forgets its leader and stands (Replica.ForgetLeader, Replica.Campaign), which is
// what raft's own timer would do.
//
// The check, at the end of a run: the committed log is the same on every replica (as
// each applied it and as each stores it); replayed into one reference Machines — each
// entry's command run again at the entry's time — every entry's records are the ones
// the leader proposed, byte for byte, and every acknowledged answer is the reference's;
// every acknowledged command's entry was committed (durable on a majority) after the
// command was submitted and before it was answered; nothing answered is missing from
// the log, and every entry in it comes from a proposal Propose accepted (a refused
// command has no id, so it cannot be there); entries' times never go back; and every
// machine snapshot a replica held or stored at an index is the reference's at that
// index.

const electionTick = 10

// simConfig shapes one run.
type simConfig struct {
	nodes  int
	rounds int
	seed   uint64
	// wal is how many replicas (the first ones) keep their log in a WALStorage on a
	// MemFS, where a crash is a power loss (MemFS.Crash) and a reopen; the others use
	// Memory.
	wal int
	// coalesce makes every replica coalesce (Config.Coalesce), whatever the seed says.
	coalesce bool
}

// TestSimulation runs the default seeds: three and five replicas. OKIBA_REPLICA_SEED
// replays one seed; OKIBA_REPLICA_SEEDS=N runs N more seeds of each size from a random
// base (the torture run).
func TestSimulation(t *testing.T) {
	sizes := []struct {
		nodes, rounds int
		seeds         []uint64
	}{
		{3, 1500, []uint64{1, 2, 3}},
		{5, 1200, []uint64{4, 5}},
	}
	if s := os.Getenv("OKIBA_REPLICA_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("OKIBA_REPLICA_SEED=%q: %v", s, err)
		}
		for i := range sizes {
			sizes[i].seeds = []uint64{seed}
		}
	} else if s := os.Getenv("OKIBA_REPLICA_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("OKIBA_REPLICA_SEEDS=%q: %v", s, err)
		}
		base := uint64(time.Now().UnixNano())
		t.Logf("OKIBA_REPLICA_SEEDS=%d from seed %d", n, base)
		for i := range sizes {
			for k := range n {
				sizes[i].seeds = append(sizes[i].seeds, base+uint64(k))
			}
		}
	}
	defaults := os.Getenv("OKIBA_REPLICA_SEED") == "" && os.Getenv("OKIBA_REPLICA_SEEDS") == ""
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("%d-nodes", sz.nodes), func(t *testing.T) {
			t.Parallel()
			var total simStats
			for _, seed := range sz.seeds {
				s := runSim(t, simConfig{nodes: sz.nodes, rounds: sz.rounds, seed: seed, wal: 1})
				if t.Failed() {
					return
				}
				t.Logf("seed %d: %s", seed, s.summary())
				total.add(s.stats)
			}
			if defaults {
				total.covers(t)
			}
		})
	}
}

// covers fails unless the default seeds took every path the check is there for: a run
// that changes the simulation must not quietly stop exercising one.
func (st simStats) covers(t *testing.T) {
	t.Helper()
	for what, n := range map[string]int{
		"acknowledged commands": st.acked, "indeterminate outcomes": st.indeterminate,
		"not-leader refusals": st.refusedNotLeader, "proposals raft dropped": st.dropped,
		"crashes": st.crashes, "partitions": st.partitions, "snapshots installed": st.installed,
		"rebuilds": st.rebuilds, "power losses under a WALStorage": st.powerLosses,
		"committed entries of several commands": st.coalesced,
	} {
		if n == 0 {
			t.Errorf("the default seeds had no %s: the simulation no longer exercises them", what)
		}
	}
}

func (st *simStats) add(o simStats) {
	st.refusedNotLeader += o.refusedNotLeader
	st.refusedUnavailable += o.refusedUnavailable
	st.acked += o.acked
	st.indeterminate += o.indeterminate
	st.lost += o.lost
	st.crashes += o.crashes
	st.partitions += o.partitions
	st.snapshotsSent += o.snapshotsSent
	st.installed += o.installed
	st.rebuilds += o.rebuilds
	st.dropped += o.dropped
	st.powerLosses += o.powerLosses
	st.coalesced += o.coalesced
}

// TestSimulationIsDeterministic runs one seed twice: a run is a function of its seed,
// or a failing seed would not replay.
func TestSimulationIsDeterministic(t *testing.T) {
	t.Parallel()
	cfg := simConfig{nodes: 3, rounds: 400, seed: 99, wal: 1}
	a, b := runSim(t, cfg), runSim(t, cfg)
	if a.digest() != b.digest() {
		t.Fatalf("seed %d ran differently twice:\n%s\n%s", cfg.seed, a.summary(), b.summary())
	}
}

type sim struct {
	t     testing.TB
	cfg   simConfig
	rng   *rand.Rand
	nodes []*node
	net   []*envelope
	round int
	clock int64 // the true time, Unix ms
	event int64 // a count of what happened, to order submissions, commits and answers

	rates   rates
	parted  bool
	side    map[uint64]int // the side of the partition each node is on
	maxUnc  uint64         // raft's bound on a leader's uncommitted bytes, per run
	snapEvr uint64
	// coalesce: the replicas coalesce the commands proposed between two Process calls
	// into entries (Config.Coalesce), as a cluster node's driver does; half the runs.
	coalesce bool

	clients  *clients
	calls    []*call
	byID     map[replica.ProposalID]*call
	log      map[uint64]logged // the committed log, as replicas applied it
	commitAt map[uint64]int64  // the event at which each index was first persisted as committed
	commit   uint64            // the highest index seen committed
	samples  map[uint64][]byte // a machine snapshot some replica held or stored at an index

	stats simStats
}

type simStats struct {
	refusedNotLeader, refusedUnavailable, acked, indeterminate, lost int
	crashes, partitions, snapshotsSent, installed, rebuilds, dropped int
	powerLosses                                                      int // crashes of a WALStorage's replica
	coalesced                                                        int // committed entries of several commands
}

type node struct {
	id      uint64
	store   replica.Storage
	fs      *vfs.MemFS // a WALStorage's, or nil
	walOpts replica.WALOptions
	r       *replica.Replica // nil while down
	skew    int64            // its clock minus the true time
	quiet   int              // rounds without a leader's message
	timeout int              // rounds of quiet before it stands
	upAt    int              // the round a downed node restarts
}

type envelope struct {
	at       int // the round it arrives
	from, to uint64
	data     []byte
}

type logged struct {
	term uint64
	data []byte
}

// call is one client command and what became of it.
type call struct {
	op        op
	node      uint64
	submitted int64
	id        replica.ProposalID
	acked     bool
	answered  int64
	index     uint64
	res       result
	failed    error // Propose refused, or an Outcome's ErrUnavailable
	lost      bool  // its node crashed before answering
	replayed  bool
}

// rates are the network's faults, changed now and then during a run.
type rates struct {
	drop, dup, reorder, late float64
}

func runSim(t testing.TB, cfg simConfig) *sim {
	t.Helper()
	s := newSim(t, cfg)
	defer func() {
		if t.Failed() {
			t.Logf("seed %d (%d nodes, %d rounds) failed in round %d: replay with OKIBA_REPLICA_SEED=%d go test -run 'TestSimulation$' ./internal/replica",
				cfg.seed, cfg.nodes, cfg.rounds, s.round, cfg.seed)
		}
	}()
	for s.round = 0; s.round < cfg.rounds && !t.Failed(); s.round++ {
		s.clock += int64(s.rng.IntN(40))
		s.faults()
		s.deliver()
		s.timers()
		for range s.rng.IntN(3) {
			s.submit()
		}
		s.processAll()
	}
	if !t.Failed() {
		s.quiesce()
	}
	if !t.Failed() {
		s.check()
	}
	return s
}

// newSim bootstraps the cluster and starts every node, on a quiet network.
func newSim(t testing.TB, cfg simConfig) *sim {
	t.Helper()
	s := &sim{
		t:        t,
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.seed, 0x5eed)),
		clock:    1_700_000_000_000,
		byID:     map[replica.ProposalID]*call{},
		log:      map[uint64]logged{},
		commitAt: map[uint64]int64{},
		samples:  map[uint64][]byte{},
		side:     map[uint64]int{},
	}
	s.clients = &clients{rng: rand.New(rand.NewPCG(cfg.seed, 0xc11e)), leases: map[string][]queue.Lease{}}
	s.maxUnc = []uint64{0, 600}[s.rng.IntN(2)]
	s.snapEvr = 10 + s.rng.Uint64N(40)
	// From a source of its own, so that every other draw of a seed stays what it was.
	s.coalesce = cfg.coalesce || rand.New(rand.NewPCG(cfg.seed, 0xc0a1)).IntN(2) == 1
	var ids []uint64
	for i := range cfg.nodes {
		ids = append(ids, uint64(i+1))
	}
	for _, id := range ids {
		n := &node{id: id}
		keep := s.rng.Uint64N(8)
		if int(id) <= cfg.wal {
			n.fs = vfs.NewMemFS()
			n.walOpts = replica.WALOptions{FS: n.fs, Dir: "/node", Keep: keep, SegmentSize: 32 << 10, CacheBytes: 16 << 10}
			st, err := replica.OpenWAL(n.walOpts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.store.(*replica.WALStorage).Close() })
			n.store = st
		} else {
			st := replica.NewMemory()
			st.Keep = keep
			n.store = st
		}
		if err := replica.Bootstrap(n.store, ids); err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, n)
		s.start(n)
	}
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("round %d: "+format, append([]any{s.round}, args...)...)
}

func (s *sim) node(id uint64) *node { return s.nodes[id-1] }

func (s *sim) start(n *node) {
	r, err := replica.New(replica.Config{ID: n.id, Storage: n.store, ElectionTick: electionTick,
		SnapshotEntries: s.snapEvr, MaxUncommittedBytes: s.maxUnc, MaxSizePerMsg: 4096, Coalesce: s.coalesce})
	if err != nil {
		s.fatalf("start node %d: %v", n.id, err)
	}
	n.r, n.quiet, n.timeout = r, 0, s.electionTimeout()
}

func (s *sim) electionTimeout() int { return electionTick + s.rng.IntN(electionTick) }

// faults changes the world now and then: partitions and heals, crashes and restarts,
// clocks, and the network's fault rates.
func (s *sim) faults() {
	r := s.rng
	for _, n := range s.nodes {
		if n.r == nil && s.round >= n.upAt {
			s.start(n)
		}
	}
	if r.IntN(100) == 0 {
		s.rates = rates{drop: []float64{0, 0.02, 0.1, 0.3}[r.IntN(4)], dup: []float64{0, 0.05}[r.IntN(2)],
			reorder: []float64{0, 0.3}[r.IntN(2)], late: []float64{0, 0.02, 0.1}[r.IntN(3)]}
	}
	switch {
	case !s.parted && r.IntN(80) == 0:
		s.partition()
	case s.parted && r.IntN(40) == 0:
		s.heal()
	}
	if r.IntN(150) == 0 {
		s.crash()
	}
	if r.IntN(60) == 0 {
		s.nodes[r.IntN(len(s.nodes))].skew = int64(r.IntN(6000)) - 3000 // a clock steps, back or forward
	}
	if r.IntN(80) == 0 {
		s.clock += int64(1+r.IntN(20)) * 1000 // leases and delays end
	}
}

func (s *sim) partition() {
	s.parted = true
	s.stats.partitions++
	ids := make([]uint64, len(s.nodes))
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	if l := s.leader(); l != 0 && s.rng.IntN(2) == 0 {
		i := slices.Index(ids, l)
		ids[0], ids[i] = ids[i], ids[0] // cut the leader off with a minority
	}
	minority := 1 + s.rng.IntN((len(ids)-1)/2)
	for i, id := range ids {
		s.side[id] = 0
		if i < minority {
			s.side[id] = 1
		}
	}
}

func (s *sim) heal() {
	s.parted = false
	for id := range s.side {
		s.side[id] = 0
	}
}

func (s *sim) crash() {
	var up []*node
	for _, n := range s.nodes {
		if n.r != nil {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return
	}
	n := up[s.rng.IntN(len(up))]
	if l := s.leader(); l != 0 && s.rng.IntN(2) == 0 {
		n = s.node(l)
	}
	s.down(n, s.round+5+s.rng.IntN(60))
}

// down crashes n until round upAt: the Replica and its machines are gone, the storage
// stays, and what n had not answered will never be answered.
func (s *sim) down(n *node, upAt int) {
	s.stats.rebuilds += n.r.Status().Rebuilds
	s.stats.crashes++
	n.r, n.upAt = nil, upAt
	if n.fs != nil { // a power loss: the storage is what its file system kept
		s.stats.powerLosses++
		n.fs = n.fs.Crash()
		n.store.(*replica.WALStorage).Close()
		n.walOpts.FS = n.fs
		st, err := replica.OpenWAL(n.walOpts)
		if err != nil {
			s.fatalf("node %d: reopen its storage after a power loss: %v", n.id, err)
		}
		n.store = st
	}
	for _, c := range s.calls {
		if c.node == n.id && c.id != (replica.ProposalID{}) && !c.acked && c.failed == nil {
			c.lost = true
		}
	}
}

// leader is a node that raft has made leader (of the highest term, if two think so).
func (s *sim) leader() uint64 {
	var best uint64
	var term uint64
	for _, n := range s.nodes {
		if n.r == nil {
			continue
		}
		if st := n.r.Status(); st.Lead == n.id && st.Term >= term {
			best, term = n.id, st.Term
		}
	}
	return best
}

func (s *sim) linked(a, b uint64) bool { return s.side[a] == s.side[b] }

// send puts a node's messages on the network, with the network's faults.
func (s *sim) send(from *node, msgs []*pb.Message) {
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			s.fatalf("marshal %v: %v", m.GetType(), err)
		}
		dropped := s.rng.Float64() < s.rates.drop
		if m.GetType() == pb.MsgSnap {
			s.stats.snapshotsSent++
			from.r.ReportSnapshot(m.GetTo(), !dropped)
		}
		if dropped {
			continue
		}
		copies := 1
		if s.rng.Float64() < s.rates.dup {
			copies = 2
		}
		for range copies {
			delay := 1 + s.rng.IntN(2)
			if s.rng.Float64() < s.rates.late {
				delay += 5 + s.rng.IntN(30)
			}
			s.net = append(s.net, &envelope{at: s.round + delay, from: from.id, to: m.GetTo(), data: data})
		}
	}
}

// deliver hands every message due this round to its node, in order or shuffled; a
// message to a node that is down or across the partition is lost.
func (s *sim) deliver() {
	var due, later []*envelope
	for _, e := range s.net {
		if e.at <= s.round {
			due = append(due, e)
		} else {
			later = append(later, e)
		}
	}
	s.net = later
	if s.rng.Float64() < s.rates.reorder {
		s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	}
	for _, e := range due {
		n := s.node(e.to)
		if n.r == nil || !s.linked(e.from, e.to) {
			continue
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(e.data, m); err != nil {
			s.fatalf("unmarshal: %v", err)
		}
		switch m.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
			if m.GetTerm() >= n.r.Status().Term {
				n.quiet = 0
			}
		}
		_ = n.r.Step(m) // an error is about the message: raft drops it
	}
}

// timers ticks leaders and runs the followers' election timers (see the top).
func (s *sim) timers() {
	for _, n := range s.nodes {
		if n.r == nil {
			continue
		}
		if st := n.r.Status(); st.Lead == n.id {
			n.r.Tick()
			n.quiet = 0
			continue
		}
		if n.quiet++; n.quiet >= n.timeout {
			_ = n.r.ForgetLeader()
			_ = n.r.Campaign()
			n.quiet, n.timeout = 0, s.electionTimeout()
		}
	}
}

// submit makes one client command and sends it to the leader, mostly, or to anyone.
func (s *sim) submit() {
	var target *node
	if l := s.leader(); l != 0 && s.rng.IntN(4) != 0 {
		target = s.node(l)
	} else {
		target = s.nodes[s.rng.IntN(len(s.nodes))]
	}
	if target.r != nil {
		s.propose(target, s.clients.next())
	}
}

// propose submits o to a node, as a client would, at the node's clock.
func (s *sim) propose(target *node, o op) *call {
	c := &call{op: o, node: target.id}
	s.event++
	c.submitted = s.event
	s.calls = append(s.calls, c)
	id, err := target.r.Propose(s.clock+target.skew, command(c.op))
	switch {
	case errors.Is(err, replica.ErrNotLeader):
		c.failed = err
		s.stats.refusedNotLeader++
		if target.r.Status().Leader {
			s.fatalf("node %d refused %s as not leader, but says it leads", target.id, c.op)
		}
	case errors.Is(err, replica.ErrUnavailable):
		c.failed = err
		s.stats.refusedUnavailable++
		if errors.Is(err, raft.ErrProposalDropped) {
			s.stats.dropped++
		}
	case err != nil:
		s.fatalf("node %d: propose %s: %v", target.id, c.op, err)
	default:
		if st := target.r.Status(); !st.Leader || id.Node != target.id || id.Term != st.Term {
			s.fatalf("node %d took %s as %v, but its status is %+v", target.id, c.op, id, st)
		}
		if s.byID[id] != nil {
			s.fatalf("proposal id %v given twice", id)
		}
		c.id = id
		s.byID[id] = c
	}
	return c
}

func (s *sim) processAll() {
	for _, n := range s.nodes {
		if n.r != nil {
			s.process(n)
		}
	}
}

// process runs one node's Process and takes in what it returns.
func (s *sim) process(n *node) {
	s.event++
	out, err := n.r.Process()
	if err != nil {
		s.fatalf("node %d: process: %v", n.id, err)
	}
	for _, e := range out.Applied {
		prev, ok := s.log[e.GetIndex()]
		cur := logged{term: e.GetTerm(), data: e.GetData()}
		if !ok {
			s.log[e.GetIndex()] = cur
		} else if prev.term != cur.term || !bytes.Equal(prev.data, cur.data) {
			s.fatalf("node %d applied entry %d of term %d, another replica applied one of term %d there", n.id, e.GetIndex(), cur.term, prev.term)
		}
	}
	s.observeCommit(n)
	for _, o := range out.Done {
		c := s.byID[o.ID]
		if c == nil || c.node != n.id {
			s.fatalf("node %d answered proposal %v, which it did not make", n.id, o.ID)
		}
		if c.acked || c.failed != nil {
			s.fatalf("proposal %v answered twice", o.ID)
		}
		if o.Err != nil {
			if !errors.Is(o.Err, replica.ErrUnavailable) {
				s.fatalf("proposal %v failed with %v, want ErrUnavailable", o.ID, o.Err)
			}
			c.failed = o.Err
			s.stats.indeterminate++
			if errors.Is(o.Err, raft.ErrProposalDropped) {
				s.stats.dropped++ // a coalesced entry raft refused in Process
			}
			continue
		}
		c.acked, c.answered, c.index = true, s.event, o.Index
		c.res = o.Answer.(result)
		s.clients.learned(c.res, c.op)
		s.stats.acked++
	}
	if out.Installed != 0 {
		s.stats.installed++
	}
	if out.Installed != 0 || out.Snapshot != 0 {
		snap, err := n.store.Snapshot()
		if err != nil {
			s.fatalf("node %d: snapshot: %v", n.id, err)
		}
		s.sample(n, snap.GetMetadata().GetIndex(), snap.GetData())
	}
	if s.rng.IntN(8) == 0 {
		if idx, data, ok := n.r.Committed(); ok {
			s.sample(n, idx, data)
		}
	}
	s.send(n, out.Messages)
}

func (s *sim) sample(n *node, idx uint64, data []byte) {
	data = settled(s.t, data)
	if prev, ok := s.samples[idx]; ok {
		if !bytes.Equal(prev, data) {
			s.fatalf("node %d's machines at %d differ from another replica's there: %s", n.id, idx, snapDiff(prev, data))
		}
		return
	}
	s.samples[idx] = data
}

// settled returns a snapshot of the machines with every queue brought to the latest
// entry's time. A leader's machines have made the transitions time alone causes
// (a delay ending, a lease ending) at each command's time, without records; a follower's
// make them when the next record comes. Both are the same state once settled to the
// same time, which is what every later command does first, and what the queue
// package's own replay test compares (queue/model_test.go, settledSnapshot).
func settled(t testing.TB, snap []byte) []byte {
	m, err := replica.RestoreMachines(snap)
	if err != nil {
		t.Fatalf("restore a sample: %v", err)
	}
	m.Queues().AdvanceAll(m.Now(), discard{})
	return m.AppendSnapshot(nil)
}

type discard struct{}

func (discard) Emit(queue.Record) {}

// observeCommit notes when each index is first persisted as committed, and checks
// that a majority's storage holds it then: raft's promise, which the answers rely on.
func (s *sim) observeCommit(n *node) {
	hs, _, err := n.store.InitialState()
	if err != nil {
		s.fatalf("node %d: %v", n.id, err)
	}
	for i := s.commit + 1; i <= hs.GetCommit(); i++ {
		term, err := n.store.Term(i)
		if l, ok := s.log[i]; errors.Is(err, raft.ErrCompacted) && ok {
			term, err = l.term, nil // applied and snapshotted in the same Process
		}
		if err != nil {
			s.fatalf("node %d committed %d but cannot read its term: %v", n.id, i, err)
		}
		holders := 0
		for _, m := range s.nodes {
			t, err := m.store.Term(i)
			if err == nil && t == term || errors.Is(err, raft.ErrCompacted) {
				holders++
			}
		}
		if holders <= len(s.nodes)/2 {
			s.fatalf("index %d committed by node %d but held by %d of %d storages", i, n.id, holders, len(s.nodes))
		}
		s.commitAt[i] = s.event
		s.commit = i
	}
}

// quiesce heals the world and runs until every replica holds the whole committed log
// and a leader is ready: everything proposed has then ended one way or the other.
func (s *sim) quiesce() {
	s.heal()
	s.rates = rates{}
	for _, n := range s.nodes {
		if n.r == nil {
			n.upAt = s.round
		}
	}
	for limit := s.round + 3000; s.round < limit && !s.t.Failed(); {
		s.step()
		if s.settled() {
			return
		}
	}
	var st []string
	for _, n := range s.nodes {
		st = append(st, fmt.Sprintf("%+v", n.r.Status()))
	}
	s.fatalf("no convergence after healing: %s", strings.Join(st, "; "))
}

// step is one round of a quiet world: time moves, downed nodes whose time has come
// restart, messages arrive, timers run, every node processes; nothing fails.
func (s *sim) step() {
	s.clock += 10
	for _, n := range s.nodes {
		if n.r == nil && s.round >= n.upAt {
			s.start(n)
		}
	}
	s.deliver()
	s.timers()
	s.processAll()
	s.round++
}

func (s *sim) settled() bool {
	l := s.leader()
	if l == 0 || !s.node(l).r.Status().Leader {
		return false
	}
	lead := s.node(l).r.Status()
	for _, n := range s.nodes {
		st := n.r.Status()
		if st.Applied != lead.Commit || st.Pending != 0 {
			return false
		}
	}
	return len(s.net) == 0 || lead.Commit == s.commit
}

// check replays the committed log into a reference and checks everything against it.
func (s *sim) check() {
	for _, n := range s.nodes {
		idx, data, ok := n.r.Committed()
		if !ok {
			s.fatalf("node %d still speculates after quiescing", n.id)
		}
		s.sample(n, idx, data)
		s.checkStored(n)
	}
	ref := replica.NewMachines()
	var last int64
	first := uint64(2) // after the bootstrap snapshot
	for i := first; i <= s.commit; i++ {
		e, ok := s.log[i]
		if !ok {
			s.fatalf("index %d is committed but no replica applied it", i)
		}
		if len(e.data) > 0 {
			s.replay(ref, i, e, &last)
			if s.t.Failed() {
				return
			}
		}
		if want, ok := s.samples[i]; ok {
			if got := settled(s.t, ref.AppendSnapshot(nil)); !bytes.Equal(got, want) {
				s.fatalf("a replica's machines at %d differ from the reference's: %s", i, snapDiff(want, got))
			}
		}
	}
	for _, c := range s.calls {
		switch {
		case c.acked && !c.replayed:
			s.fatalf("%s (%v) was answered at %d but is not in the committed log", c.op, c.id, c.index)
		case c.lost:
			s.stats.lost++
		}
	}
	for _, n := range s.nodes {
		s.stats.rebuilds += n.r.Status().Rebuilds
	}
	if s.stats.acked == 0 {
		s.fatalf("no command was acknowledged: the run checked nothing")
	}
}

// replay runs entry i's commands on the reference and compares.
func (s *sim) replay(ref *replica.Machines, i uint64, e logged, last *int64) {
	ents, err := replica.DecodeEntries(e.data)
	if err != nil {
		s.fatalf("entry %d: %v", i, err)
	}
	if len(ents) > 1 {
		s.stats.coalesced++
	}
	for _, ent := range ents {
		s.replayCommand(ref, i, ent, last)
	}
}

// replayCommand runs one command of entry i on the reference and compares.
func (s *sim) replayCommand(ref *replica.Machines, i uint64, ent *replica.Entry, last *int64) {
	if ent.Now < *last {
		s.fatalf("entry %d's time %d is before the previous command's %d", i, ent.Now, *last)
	}
	*last = ent.Now
	c := s.byID[ent.ID]
	if c == nil {
		s.fatalf("entry %d carries proposal %v, which no accepted Propose returned", i, ent.ID)
	}
	if c.replayed {
		s.fatalf("proposal %v is in the log twice (again at %d)", ent.ID, i)
	}
	c.replayed = true
	recs, ans := ref.Run(ent.Now, command(c.op))
	res := ans.(result)
	if !slices.EqualFunc(recs, ent.Records, bytes.Equal) {
		s.fatalf("entry %d (%s at %d): the leader's records differ from the reference's:\nleader: %s\nreference: %s",
			i, c.op, ent.Now, kinds(ent.Records), kinds(recs))
	}
	if !c.acked {
		return
	}
	if c.index != i {
		s.fatalf("%s was answered as entry %d but is entry %d", c.op, c.index, i)
	}
	if res.text != c.res.text {
		s.fatalf("entry %d (%s): answered %q, the reference answers %q", i, c.op, c.res.text, res.text)
	}
	if at := s.commitAt[i]; !(c.submitted < at && at <= c.answered) {
		s.fatalf("entry %d (%s): submitted at event %d, committed at %d, answered at %d", i, c.op, c.submitted, at, c.answered)
	}
}

func kinds(recs [][]byte) string {
	var s []string
	for _, r := range recs {
		s = append(s, fmt.Sprintf("%d:%dB", r[0], len(r)))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// checkStored compares a replica's stored entries up to its commit with the log.
func (s *sim) checkStored(n *node) {
	hs, _, _ := n.store.InitialState()
	first, _ := n.store.FirstIndex()
	if hs.GetCommit() < first {
		return
	}
	ents, err := n.store.Entries(first, hs.GetCommit()+1, 1<<62)
	if err != nil {
		s.fatalf("node %d: entries %d..%d: %v", n.id, first, hs.GetCommit(), err)
	}
	for _, e := range ents {
		if l, ok := s.log[e.GetIndex()]; !ok || l.term != e.GetTerm() || !bytes.Equal(l.data, e.GetData()) {
			s.fatalf("node %d stores entry %d (term %d) unlike the committed log", n.id, e.GetIndex(), e.GetTerm())
		}
	}
}

func (s *sim) summary() string {
	st := s.stats
	return fmt.Sprintf("%d rounds, %d entries committed, %d calls: %d acknowledged, %d indeterminate, %d lost in crashes, refused %d not-leader and %d unavailable (%d dropped by raft); %d crashes, %d partitions, %d snapshots sent, %d installed, %d rebuilds; %d entries of several commands (coalescing %v)",
		s.round, s.commit, len(s.calls), st.acked, st.indeterminate, st.lost, st.refusedNotLeader, st.refusedUnavailable, st.dropped, st.crashes, st.partitions, st.snapshotsSent, st.installed, st.rebuilds, st.coalesced, s.coalesce)
}

func (s *sim) digest() string {
	var b strings.Builder
	for i := uint64(2); i <= s.commit; i++ {
		fmt.Fprintf(&b, "%d:%d:%x;", i, s.log[i].term, s.log[i].data)
	}
	return fmt.Sprintf("%s|%s", s.summary(), b.String())
}

// snapDiff says which machine two snapshots disagree on.
func snapDiff(a, b []byte) string {
	ma, err := replica.RestoreMachines(a)
	if err != nil {
		return err.Error()
	}
	mb, err := replica.RestoreMachines(b)
	if err != nil {
		return err.Error()
	}
	var d []string
	if ma.Now() != mb.Now() {
		d = append(d, fmt.Sprintf("time %d and %d", ma.Now(), mb.Now()))
	}
	if !bytes.Equal(ma.Queues().AppendSnapshot(nil), mb.Queues().AppendSnapshot(nil)) {
		qa, qb := ma.Queues().Queues(""), mb.Queues().Queues("")
		if len(qa) != len(qb) {
			d = append(d, fmt.Sprintf("%d queues and %d", len(qa), len(qb)))
		}
		for i := range min(len(qa), len(qb)) {
			x, y := fmt.Sprintf("%+v", qa[i]), fmt.Sprintf("%+v", qb[i])
			if x != y {
				d = append(d, fmt.Sprintf("queue %s: %+v and %+v", qa[i].Name, qa[i].Stats, qb[i].Stats))
			}
			pa, _ := ma.Queues().Peek(ma.Now(), qa[i].Name, 0, 100)
			pb, _ := mb.Queues().Peek(mb.Now(), qb[i].Name, 0, 100)
			for j := range min(len(pa), len(pb)) {
				pa[j].Ref, pb[j].Ref = 0, 0
				if fmt.Sprintf("%+v", pa[j]) != fmt.Sprintf("%+v", pb[j]) {
					d = append(d, fmt.Sprintf("message %+v and %+v", pa[j], pb[j]))
				}
			}
		}
	}
	if !bytes.Equal(ma.Topics().AppendSnapshot(nil), mb.Topics().AppendSnapshot(nil)) {
		d = append(d, fmt.Sprintf("topics %+v and %+v", ma.Topics().Topics(""), mb.Topics().Topics("")))
	}
	if !bytes.Equal(ma.Access().AppendSnapshot(nil), mb.Access().AppendSnapshot(nil)) {
		d = append(d, fmt.Sprintf("principals %+v and %+v", ma.Access().List(), mb.Access().List()))
	}
	return strings.Join(d, "; ")
}
