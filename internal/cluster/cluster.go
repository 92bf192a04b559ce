// Package cluster makes one okiba node a member of a replicated cluster: a Raft group
// (go.etcd.io/raft/v3, through raft.RawNode) whose log carries every command's records,
// over the raft storage of internal/replica (WALStorage), with the node's broker as the
// state machine (broker.Replication).
//
// The Raft is the one owner of the raft node: one goroutine (run) ticks it, steps the
// messages other nodes send, proposes what the broker hands it, saves what raft has
// ready, sends the messages, and applies what is committed — resolving the leader's own
// proposals, handing the others' to the broker — in raft's Ready order. The broker runs
// commands only while Term says this node leads; the leader's broker is therefore
// speculative (its pending proposals applied), and when a proposal it ran can no longer
// commit (the lead was lost, raft refused it) the Raft fences the broker, fails what is
// pending, and has the broker rebuild itself from the committed state before it
// applies anything more.
//
// The rules are those internal/replica's Replica follows and its deterministic
// simulation checks: a new leader takes commands only once an entry of its term is
// applied; proposal forwarding is off (an entry is computed by the leader that proposes
// it); pre-vote and the quorum check are on.
//
// Node-to-node messages travel over the nodes' ordinary port (transport.go), in one
// long POST to RaftStreamPath per pair of nodes, with the cluster secret.
package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// Peer is one founding member: its name (--node) and the URL of its port.
type Peer struct {
	Name string
	URL  string
}

// Config configures a Raft.
type Config struct {
	// Name is this node's name; Peers are every founding member, this one included.
	// Every member must be given the same Peers. After the first start the members are
	// those of the node's members file (changed by AddMember and RemoveMember), and
	// Peers is only checked against it.
	Name  string
	Peers []Peer
	// Join is the URL of a member of an existing cluster: a node with an empty data
	// directory asks it to be added (as a learner, promoted once it has caught up)
	// instead of bootstrapping a new cluster with Peers.
	Join string
	// Dir is the data directory: the raft log goes in Dir/raft.
	Dir string
	// FS is the file system. Defaults to vfs.OS.
	FS vfs.FS
	// Secret authenticates the nodes to each other (at least 22 characters): every
	// member is given the same. The data directory's secret, which signs receipts and
	// seals principals' secrets, is derived from it (DataSecret), so that every member
	// has the same.
	Secret string
	// Tick is raft's tick. Defaults to 100 ms: with ElectionTick 10 a follower stands for
	// election after 1 to 2 s without a leader, and a leader cut off from its quorum
	// steps down after 1 s.
	Tick time.Duration
	// ElectionTick and HeartbeatTick default to 10 and 1.
	ElectionTick, HeartbeatTick int
	// Client sends messages to the other nodes. Defaults to a client with keep-alive
	// connections and a 5 s timeout.
	Client *http.Client
	// Logger receives the cluster's events. Defaults to discarding them.
	Logger *slog.Logger
	// SnapshotEntries is how many entries the broker's checkpoints must hold beyond the
	// raft log's snapshot before the log drops them (snapshot.go); CatchUpEntries how
	// many of them it keeps for followers a little behind. Default
	// DefaultSnapshotEntries and DefaultCatchUpEntries.
	SnapshotEntries, CatchUpEntries int
	// SnapshotBytes drops them too once they are that many bytes (raft's size of the
	// entries), whatever their count; CatchUpBytes bounds the bytes of those kept. Default
	// DefaultSnapshotBytes and DefaultCatchUpBytes.
	SnapshotBytes, CatchUpBytes int64
	// SnapshotRate bounds, in bytes a second, how fast this node sends its state to a
	// member installing a snapshot. Defaults to DefaultSnapshotRate; negative: unbounded.
	SnapshotRate int64
	// SnapshotSpoolAge is how long the spool of this node's state (transfer.go) is offered
	// to a member that starts a transfer afresh, SnapshotSpoolIdle how long it stays
	// unread before it is removed. Default DefaultSnapshotSpoolAge and
	// DefaultSnapshotSpoolIdle.
	SnapshotSpoolAge, SnapshotSpoolIdle time.Duration
	// Version is this node's okiba version and commit (internal/buildinfo), sent with a
	// join; the leader refuses a node whose version is not its own.
	Version string
	// entryBytes bounds the commands one entry coalesces; 0: maxEntryBytes. Tests make it
	// small, so that a few small commands show the bound.
	entryBytes int
}

// Errors callers branch on.
var (
	// ErrNoLeader: no node is known to lead (an election, or no quorum).
	ErrNoLeader = errors.New("the cluster has no leader: an election is under way or a quorum of nodes is unreachable")
	// ErrLost: the command ran, and the node lost its lead before its entry was known
	// to be committed: it may or may not take effect, as a lost answer.
	ErrLost = broker.ErrLeadLost
)

// DataSecret is the data directory secret of every member of the cluster whose secret
// is secret: 32 bytes derived from it, so that a receipt, a console session or a sealed
// principal secret made on one node holds on every other.
func DataSecret(secret string) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("okiba cluster data directory secret"))
	return mac.Sum(nil)
}

// Raft is this node's member of the cluster's Raft group. It implements
// broker.Replication.
type Raft struct {
	cfg     Config
	log     *slog.Logger
	id      uint64
	peersMu sync.RWMutex
	peers   map[uint64]Member   // every member, this one too: by raft id
	storage *replica.WALStorage // in the broker's log, once attached (Attach)
	replay  *replica.WALReplay  // what the broker's log replay gathers for the next Attach
	boot    *boot               // what the first Attach bootstraps the raft log with
	// installing is the snapshot installSnapshot is installing, and the hard state of its
	// Ready, for Carry.
	installing *installing
	rn         *raft.RawNode
	b          *broker.Broker
	net        *transport
	xfer       transfers // the state's spool and download (transfer.go)

	// term is the term this node leads and takes commands in (Term), 0 when it does
	// not; lead the leader it knows of. Read by the broker and the node without a lock.
	term atomic.Uint64
	lead atomic.Uint64
	// leadChanged is closed when lead changes (LeaderChanged).
	leadMu      sync.Mutex
	leadChanged chan struct{}

	mu        sync.Mutex
	queued    []queued     // proposals handed over by the broker, not yet given to raft
	nextReads []chan error // reads waiting for the next round (reads.go)
	own       map[[2]uint64]uint64

	wake    chan struct{}
	handoff chan struct{}
	inbox   chan []*pb.Message
	fails   chan uint64     // peers a message could not reach
	snaps   chan snapReport // snapshots sent, or not
	confs   chan confReq    // membership changes asked for (membership.go)

	// Owned by run:
	leaderTerm uint64   // the term raft says this node leads, before it is ready
	handingOff bool     // Handoff began: this node takes no more commands
	confWait   *confReq // a membership change proposed, not yet applied
	maxID      uint64   // the largest raft id ever seen in a change
	confState  *pb.ConfState
	ticks      int
	pending    []pending
	applied    uint64 // the last entry run handed on
	// confLog holds the configurations since the raft log's snapshot, snapIndex, with
	// the entries they start at; founders are the founding voters (snapshot.go).
	confLog     []confPoint
	snapIndex   uint64
	founders    []uint64
	compactions uint64
	installs    uint64
	snapsSent   uint64
	wantSnap    uint64        // a snapshot at this index at least is wanted (noteAdded)
	ckptAsked   bool          // a checkpoint for it is under way
	ckptDone    chan struct{} // it ended
	round       *readRound
	rounds      uint64
	proposed    uint64 // entries of commands this node proposed
	commands    uint64 // the commands they carried
	// holdProposals (tests): run leaves what is queued for a later round, so that a
	// test knows what one round finds queued.
	holdProposals atomic.Bool

	statusMu sync.Mutex
	status   Status
	lagAt    time.Time // when Status's Lag was last taken
	rebuilds uint64

	cancel context.CancelFunc
	done   chan struct{}
}

type queued struct {
	term, seq uint64
	now       int64
	recs      [][]byte
	p         *broker.Proposal
	seal      bool // the entry that carries it carries nothing after it (Seal)
}

// pending is one entry this leader proposed, not yet applied: the commands it carries,
// the first one's id (the others' seqs follow), and their proposals, in order.
type pending struct {
	first replica.ProposalID
	ps    []*broker.Proposal
}

// maxSizePerMsg bounds the entries of one append message to a follower (raft's
// MaxSizePerMsg); maxEntryBytes bounds the commands one entry coalesces, at half of it,
// so that an append of a full entry still has room for the entries about it and a
// follower applies the entry in one go. A command larger than the bound travels alone.
const (
	maxSizePerMsg = 1 << 20
	maxEntryBytes = maxSizePerMsg / 2
)

// Status is what a node knows of the cluster.
type Status struct {
	Node    string
	Term    uint64
	Leader  string // "" when none is known
	Leading bool   // this node leads and takes commands
	Commit  uint64
	Applied uint64
	Members []string
	// Lag is, on the leader, how many committed entries each follower has yet to store
	// (by name); nil elsewhere. Rebuilds counts the broker's rebuilds.
	Lag      map[string]uint64
	Rebuilds uint64
	// Snapshot is the index of the raft log's snapshot (its entries start after it);
	// Compactions counts the times this node dropped entries, Installs the snapshots
	// of another node's state it installed (snapshot.go).
	Snapshot      uint64
	Compactions   uint64
	Installs      uint64
	SnapshotsSent uint64
	// SnapshotResumes counts the transfers of a state this node resumed after a break.
	SnapshotResumes uint64
	// Proposed counts the entries of commands this node proposed as leader, Commands the
	// commands they carried: Commands/Proposed is how many commands an entry coalesced.
	Proposed, Commands uint64
	learners           []uint64
}

// Open opens this node's raft storage, bootstrapping a new cluster of Peers if it is
// empty. It does not start: the broker is opened with the Raft as its Replication, and
// Start then runs it.
func Open(cfg Config) (*Raft, error) {
	if cfg.FS == nil {
		cfg.FS = vfs.OS
	}
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = 10
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SnapshotEntries <= 0 {
		cfg.SnapshotEntries = DefaultSnapshotEntries
	}
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = DefaultSnapshotBytes
	}
	if cfg.CatchUpBytes <= 0 {
		cfg.CatchUpBytes = DefaultCatchUpBytes
	}
	if cfg.CatchUpEntries <= 0 {
		cfg.CatchUpEntries = DefaultCatchUpEntries
	}
	if cfg.SnapshotRate == 0 {
		cfg.SnapshotRate = DefaultSnapshotRate
	}
	if cfg.entryBytes <= 0 {
		cfg.entryBytes = maxEntryBytes
	}
	if len(cfg.Secret) < 22 {
		return nil, errors.New("cluster: the cluster secret must be at least 22 characters (okiba token makes one)")
	}
	r := &Raft{cfg: cfg, log: cfg.Logger, peers: map[uint64]Member{},
		own: map[[2]uint64]uint64{}, wake: make(chan struct{}, 1), handoff: make(chan struct{}, 1), inbox: make(chan []*pb.Message, 256),
		fails: make(chan uint64, 64), ckptDone: make(chan struct{}, 1), snaps: make(chan snapReport, 16), confs: make(chan confReq, 4), done: make(chan struct{})}
	dir := filepath.Join(cfg.Dir, "raft")
	if err := cfg.FS.MkdirAll(dir, vfs.DirMode); err != nil {
		return nil, err
	}
	if err := removeTransfers(cfg.FS, cfg.Dir); err != nil {
		return nil, err
	}
	members, stored, err := r.loadMembers()
	if err != nil {
		return nil, err
	}
	var founders []uint64 // a joining node's: the founders' voters
	switch {
	case stored:
		// The members file is the truth after the first start: --peers only checked.
	case cfg.Join != "":
		if members, founders, err = r.join(); err != nil {
			return nil, err
		}
	default:
		if members, err = membersOfPeers(cfg.Peers); err != nil {
			return nil, err
		}
		if err := r.probePeers(); err != nil {
			return nil, err
		}
	}
	for _, m := range members {
		r.peers[m.ID] = m
		if m.Name == cfg.Name {
			r.id = m.ID
		}
	}
	if r.id == 0 {
		return nil, fmt.Errorf("cluster: this node, %q, is not among the members (%s)", cfg.Name, strings.Join(r.memberNames(), ", "))
	}
	if !stored {
		if err := r.saveMembers(); err != nil {
			return nil, err
		}
	}
	if _, err := cfg.FS.Stat(filepath.Join(dir, "wal")); err == nil {
		return nil, fmt.Errorf("cluster: %s holds a raft log of its own, which development builds of okiba kept beside the broker's log; "+
			"this okiba keeps raft's records in the broker's log and cannot open it: remove the member (okiba cluster remove) and have it "+
			"join again on an empty data directory, and it takes the cluster's state from the others (docs/cluster.md, runbook \"A node's disk is gone\")",
			filepath.Join(dir, "wal"))
	}
	// The raft log lives in the broker's log (broker.SharedLog): the broker opens it and
	// attaches the storage, and the first Attach bootstraps it if it is new.
	if r.storage, err = replica.NewWAL(replica.WALOptions{FS: cfg.FS, Dir: dir, Logger: cfg.Logger,
		Keep: uint64(cfg.CatchUpEntries), KeepBytes: uint64(cfg.CatchUpBytes)}); err != nil {
		return nil, fmt.Errorf("cluster: raft log: %w", err)
	}
	r.boot = &boot{members: members, founders: founders, stored: stored}
	return r, nil
}

type installing struct {
	snap *pb.Snapshot
	hs   *pb.HardState
}

// boot is what Open learnt of the members for the first Attach: a new node's raft log
// starts with them.
type boot struct {
	members  []Member
	founders []uint64 // a joining node's: the founders' voters
	stored   bool     // the members file was there: the raft log is not new
}

// Replayer implements broker.SharedLog: the raft records of the broker's log in dir, as
// it replays from where the storage last said they begin, go into a new WALReplay for
// the Attach that follows.
func (r *Raft) Replayer(dir string) (wal.Pos, func(pos wal.Pos, raw []byte) error) {
	r.replay = &replica.WALReplay{}
	return replica.ReadStart(r.cfg.FS, dir), r.replay.Record
}

// Attach implements broker.SharedLog: the raft log is the broker's log, with the state
// its replay gathered. The first one bootstraps a new node's raft log; every one (the
// broker opens its log again at a rebuild and an install) learns which of this node's
// proposals the log holds committed.
func (r *Raft) Attach(log *wal.Log, hold *wal.Hold) error {
	rp := r.replay
	r.replay = nil
	if rp == nil {
		// An empty replay would look like a new node's log, and bootstrap it.
		return errors.New("cluster: the raft log is attached without its records replayed (Replayer)")
	}
	if err := r.storage.Attach(log, hold, rp); err != nil {
		return fmt.Errorf("cluster: raft log: %w", err)
	}
	if bt := r.boot; bt != nil {
		r.boot = nil
		snap, err := r.storage.Snapshot()
		if err != nil {
			return err
		}
		last, _ := r.storage.LastIndex()
		if snap.GetMetadata().GetIndex() == 0 && last == 0 && bt.founders != nil {
			if err := replica.BootstrapLearner(r.storage, bt.founders, r.id); err != nil {
				return fmt.Errorf("cluster: join: %w", err)
			}
		} else if snap.GetMetadata().GetIndex() == 0 && last == 0 && !bt.stored {
			voters := make([]uint64, 0, len(bt.members))
			for _, m := range bt.members {
				voters = append(voters, m.ID)
			}
			slices.Sort(voters)
			if err := replica.Bootstrap(r.storage, voters); err != nil {
				return fmt.Errorf("cluster: bootstrap: %w", err)
			}
			r.log.Info("cluster bootstrapped", "node", r.cfg.Name, "members", len(voters))
		}
	}
	if err := r.indexOwn(); err != nil {
		return err
	}
	return r.loadFounders()
}

// Carry implements broker.SharedLog: the snapshot being installed (installSnapshot)
// and the hard state go into the log of the state that replaces the broker's.
func (r *Raft) Carry(log *wal.Log) error {
	if r.installing == nil {
		return errors.New("cluster: an install with no snapshot being installed")
	}
	return r.storage.Carry(log, r.installing.snap, r.installing.hs)
}

// loadFounders learns the founders' voters from the raft log's snapshot: the founding
// one's configuration, or a later one's data.
func (r *Raft) loadFounders() error {
	snap, err := r.storage.Snapshot()
	if err != nil {
		return err
	}
	r.snapIndex = snap.GetMetadata().GetIndex()
	founders := snap.GetMetadata().GetConfState().GetVoters()
	if r.snapIndex > 1 {
		var sd snapData
		if err := json.Unmarshal(snap.GetData(), &sd); err != nil {
			return fmt.Errorf("cluster: the raft log's snapshot at %d: %w", r.snapIndex, err)
		}
		founders = sd.Founders
	}
	r.mu.Lock()
	r.founders = founders
	r.mu.Unlock()
	return nil
}

// indexOwn learns which of this node's proposals the raft log holds committed, for the
// broker's replay (Committed).
func (r *Raft) indexOwn() error {
	hs, _, err := r.storage.InitialState()
	if err != nil {
		return err
	}
	first, _ := r.storage.FirstIndex()
	for lo := first; lo <= hs.GetCommit(); {
		ents, err := r.storage.Entries(lo, hs.GetCommit()+1, 8<<20)
		if err != nil {
			return fmt.Errorf("cluster: read the raft log: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			r.noteOwn(e)
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

func (r *Raft) noteOwn(e *pb.Entry) {
	if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
		return
	}
	ents, err := replica.DecodeEntries(e.GetData())
	if err == nil {
		r.noteOwnEntry(e.GetIndex(), ents)
	}
}

// noteOwnEntry records, if the commands of the entry at idx are this node's proposals,
// that each is committed there.
func (r *Raft) noteOwnEntry(idx uint64, ents []*replica.Entry) {
	if ents[0].ID.Node != r.id {
		return
	}
	r.mu.Lock()
	for _, ent := range ents {
		r.own[[2]uint64{ent.ID.Term, ent.ID.Seq}] = idx
	}
	r.mu.Unlock()
}

// Term implements broker.Replication.
func (r *Raft) Term() uint64 { return r.term.Load() }

// Committed implements broker.Replication.
func (r *Raft) Committed(term, seq uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.own[[2]uint64{term, seq}]
	return i, ok
}

// Propose implements broker.Replication: the proposal waits in a queue for run.
func (r *Raft) Propose(term, seq uint64, now int64, recs [][]byte) *broker.Proposal {
	p := broker.NewProposal()
	r.mu.Lock()
	r.queued = append(r.queued, queued{term: term, seq: seq, now: now, recs: recs, p: p})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return p
}

// Seal implements broker.Replication: the proposal handed over last ends its entry.
func (r *Raft) Seal() {
	r.mu.Lock()
	if n := len(r.queued); n > 0 {
		r.queued[n-1].seal = true
	}
	// Otherwise run has taken it, and the entry it went into took nothing queued later.
	r.mu.Unlock()
}

// Start runs the Raft with b, the broker opened with it as its Replication: raft hands
// b the committed entries it has not applied.
func (r *Raft) Start(b *broker.Broker) error {
	r.b = b
	snap, _ := r.storage.Snapshot()
	snapIndex := snap.GetMetadata().GetIndex()
	b.NoteCommitted(snapIndex) // the bootstrap snapshot holds nothing to apply
	hs, _, _ := r.storage.InitialState()
	if b.Applied() < snapIndex {
		return fmt.Errorf("cluster: the raft log starts after entry %d, the broker holds only up to entry %d: "+
			"its data directory is not this raft log's", snapIndex, b.Applied())
	}
	if err := r.completeOwn(hs.GetCommit()); err != nil {
		return err
	}
	applied := raftApplied(b.Applied(), hs.GetCommit(), snapIndex)
	if applied < b.Applied() {
		// The broker installed a state (snapshot.go) the raft log has yet to receive.
		r.log.Info("cluster: the broker holds entries the raft log has yet to receive", "broker", b.Applied(), "commit", hs.GetCommit())
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: r.id, ElectionTick: r.cfg.ElectionTick, HeartbeatTick: r.cfg.HeartbeatTick,
		Storage: guardedStorage{r.storage, r}, Applied: applied,
		MaxSizePerMsg: maxSizePerMsg, MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 0,
		CheckQuorum: true, PreVote: true, DisableProposalForwarding: true,
		Logger: raftLogger{r.log},
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	r.rn, r.applied = rn, applied
	_, cs, _ := r.storage.InitialState()
	r.confState = cs
	r.noteConf(snapIndex, cs)
	if err := r.replayConf(snapIndex, applied); err != nil {
		return err
	}
	r.net = newTransport(r)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return nil
}

// completeOwn hands the broker the rest of the committed entry its replay ended in,
// when the replay's last group was one of this node's proposals and the entry carries
// later ones: the broker's log lost them (its tail was not yet durable when the node
// went down, the entry committed on the others' disks), and raft hands on only the
// entries after the broker's applied one.
func (r *Raft) completeOwn(commit uint64) error {
	idx, term, seq := r.b.ReplayedOwn()
	if term == 0 || idx == 0 || idx > commit {
		return nil
	}
	first, _ := r.storage.FirstIndex()
	if idx < first {
		return nil // covered by the broker's checkpoint, which holds whole entries
	}
	ents, err := r.storage.Entries(idx, idx+1, math.MaxUint64)
	if err != nil || len(ents) != 1 || ents[0].GetType() != pb.EntryNormal || len(ents[0].GetData()) == 0 {
		return fmt.Errorf("cluster: the broker's log ends in entry %d, which the raft log does not hold as a command (%v)", idx, err)
	}
	cmds, err := replica.DecodeEntries(ents[0].GetData())
	if err != nil {
		return fmt.Errorf("cluster: entry %d: %w", idx, err)
	}
	k := slices.IndexFunc(cmds, func(e *replica.Entry) bool { return e.ID == replica.ProposalID{Node: r.id, Term: term, Seq: seq} })
	if k < 0 {
		return fmt.Errorf("cluster: the broker's log has proposal %d/%d in entry %d, which does not carry it", term, seq, idx)
	}
	rest := cmds[k+1:]
	if len(rest) == 0 {
		return nil
	}
	own := make([]broker.OwnCommand, len(rest))
	for i, e := range rest {
		own[i] = broker.OwnCommand{Term: e.ID.Term, Seq: e.ID.Seq, Records: e.Records}
	}
	r.log.Warn("cluster: the broker's log lost the end of a committed entry; applying it from the raft log",
		"entry", idx, "commands", len(rest))
	return r.b.CompleteEntry(idx, own)
}

// Close stops the Raft (the broker is closed by its owner, after).
func (r *Raft) Close() error {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.net.close()
	}
	r.closeTransfers()
	r.failQueued(broker.ErrClosed)
	return r.storage.Close()
}

// RenewStreams has this node's raft streams to the others end and open again with their
// next message: after a TLS reload, so that they show the new certificate rather than
// keep, for as long as they last, the one they were opened with.
func (r *Raft) RenewStreams() {
	if r.net != nil {
		r.net.renewStreams()
	}
}

// Step hands the Raft messages another node sent.
func (r *Raft) Step(msgs []*pb.Message) bool {
	select {
	case r.inbox <- msgs:
		return true
	default:
		return false // raft retransmits
	}
}

// Handoff makes another member lead if this one does, for a graceful shutdown: the
// broker stops taking commands (the node answers 503, which clients with several nodes
// retry elsewhere), and raft transfers the lead to the follower furthest along, which
// takes it once its log is this one's. It returns when another node leads, or when ctx
// ends (the transfer failed: the others elect a leader once this one is gone).
func (r *Raft) Handoff(ctx context.Context) {
	if r.cancel == nil || r.lead.Load() != r.id {
		return
	}
	select {
	case r.handoff <- struct{}{}:
	default:
	}
	t := time.NewTicker(r.cfg.Tick / 4)
	defer t.Stop()
	for r.lead.Load() == r.id {
		select {
		case <-ctx.Done():
			r.log.Warn("cluster: the lead was not handed over before shutdown; the others elect a leader", "error", ctx.Err())
			return
		case <-t.C:
		}
	}
	if to := r.lead.Load(); to != 0 {
		r.log.Info("cluster: lead handed over", "to", r.nameOf(to))
	} else {
		r.log.Warn("cluster: this node no longer leads, and no other does yet (no quorum to hand the lead to)")
	}
}

// transfer starts the lead's transfer (run's goroutine).
func (r *Raft) transfer() {
	st := r.rn.Status()
	if st.RaftState != raft.StateLeader {
		return
	}
	r.term.Store(0) // no more commands here; what is pending commits or fails as usual
	r.handingOff = true
	// The follower furthest along, an active one first: raft clears RecentActive at each
	// quorum check, so a handoff right after one may find none marked, and handing the
	// lead to the furthest then is still better than none.
	var to, best uint64
	active := false
	for id, pr := range st.Progress {
		if id == r.id || pr.IsLearner {
			continue
		}
		if to == 0 || (pr.RecentActive && !active) || (pr.RecentActive == active && pr.Match > best) {
			to, best, active = id, pr.Match, pr.RecentActive
		}
	}
	if to == 0 {
		r.log.Warn("cluster: no follower to hand the lead to")
		return
	}
	r.log.Info("cluster: handing the lead over for shutdown", "to", r.nameOf(to))
	r.rn.TransferLeader(to)
}

// Status returns what this node knows of the cluster.
func (r *Raft) Status() Status {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.status
}

// LeaderChanged returns a channel closed when the leader this node knows of changes
// (or is lost): a forward to the one it knew ends then.
func (r *Raft) LeaderChanged() <-chan struct{} {
	r.leadMu.Lock()
	defer r.leadMu.Unlock()
	if r.leadChanged == nil {
		r.leadChanged = make(chan struct{})
	}
	return r.leadChanged
}

// Leader returns the name and URL of the leader this node knows of ("" if none) and
// whether it is this node.
func (r *Raft) Leader() (name, url string, self bool) {
	id := r.lead.Load()
	m := r.member(id)
	return m.Name, m.URL, id == r.id
}

func (r *Raft) run(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.failPending(broker.ErrClosed)
			r.failReads()
			return
		case <-tick.C:
			r.rn.Tick()
			if r.ticks++; r.ticks%10 == 0 {
				r.promote()
				if err := r.maybeCompact(); err != nil {
					r.log.Warn("cluster: compacting the raft log failed", "error", err)
				}
			}
		case q := <-r.confs:
			r.proposeConf(q)
		case s := <-r.snaps:
			r.reportSnap(s.to, s.ok)
		case <-r.ckptDone:
			r.ckptAsked = false
			if err := r.maybeCompact(); err != nil {
				r.log.Warn("cluster: compacting the raft log failed", "error", err)
			}
		case msgs := <-r.inbox:
			for _, m := range msgs {
				_ = r.rn.Step(m) // a message from a stale term or an unknown peer: dropped
			}
		case id := <-r.fails:
			r.rn.ReportUnreachable(id)
		case <-r.handoff:
			r.transfer()
		case <-r.wake:
		}
		// Everything else that has arrived joins this round: one Ready, one save (one
		// fsync) for all of it, rather than one per message.
	drain:
		for {
			select {
			case msgs := <-r.inbox:
				for _, m := range msgs {
					_ = r.rn.Step(m)
				}
			case id := <-r.fails:
				r.rn.ReportUnreachable(id)
			default:
				break drain
			}
		}
		if err := r.process(ctx); err != nil {
			r.log.Error("cluster: this node stops replicating", "error", err)
			r.term.Store(0)
			r.b.Fence()
			r.failPending(err)
			<-ctx.Done()
			r.failPending(broker.ErrClosed)
			return
		}
	}
}

// process proposes what is queued, then handles everything raft has ready.
func (r *Raft) process(ctx context.Context) error {
	// A test's hold (holdProposals) leaves what is queued for a later round.
	if !r.holdProposals.Load() {
		if void := r.proposeQueued(); void {
			if err := r.rebuild("raft did not take a command the leader ran"); err != nil {
				return err
			}
		}
	}
	for r.rn.HasReady() {
		rd := r.rn.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) {
			// The leader's log no longer reaches this node's: the broker takes the state
			// before the raft log takes the snapshot, so that a crash in between leaves
			// the log as it was (and the snapshot sent again).
			if err := r.installSnapshot(ctx, rd.Snapshot, rd.HardState); err != nil {
				return err
			}
		}
		// A leader sends its appends while it saves them (the Raft thesis, 10.2.1): its
		// followers' fsyncs overlap its own, and an entry commits once a majority, which
		// may or may not include the leader, has it durable. Everything else a node sends
		// (an append's answer, a vote) waits for its save: it promises what it saved.
		leading := r.rn.BasicStatus().RaftState == raft.StateLeader
		if leading {
			r.net.send(rd.Messages)
		}
		if err := r.storage.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
			return fmt.Errorf("save the raft log: %w", err)
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			idx := rd.Snapshot.GetMetadata().GetIndex()
			r.applied = max(r.applied, idx)
			r.b.NoteCommitted(idx)
			r.confState = rd.Snapshot.GetMetadata().GetConfState()
			r.confLog = nil
			r.noteConf(idx, r.confState)
			r.snapIndex = idx
			first, _ := r.storage.FirstIndex()
			r.forgetBefore(first)
		}
		if !leading {
			r.net.send(rd.Messages)
		}
		if err := r.noteLeadership(); err != nil {
			return err
		}
		r.noteReadStates(rd.ReadStates)
		for _, e := range rd.CommittedEntries {
			if err := r.apply(e); err != nil {
				return err
			}
		}
		r.rn.Advance(rd)
	}
	r.finishReads()
	r.startReads()
	r.noteStatus()
	return nil
}

// proposeQueued gives raft the broker's queued proposals, coalesced: a run of them
// that follow each other (one term, no gap in their seqs) goes into one entry, up to
// maxEntryBytes and up to a sealed one, so that raft saves, sends and applies one entry
// for all of them. void reports one that cannot be (the broker ran it in a term this
// node no longer leads, or raft refused its entry): it and everything queued after it
// fail with ErrLost.
func (r *Raft) proposeQueued() (void bool) {
	r.mu.Lock()
	q := r.queued
	r.queued = nil
	r.mu.Unlock()
	term := r.term.Load()
	for len(q) > 0 {
		if q[0].term == 0 || q[0].term != term || void {
			q[0].p.Resolve(0, ErrLost)
			void = true
			q = q[1:]
			continue
		}
		ents, size := r.coalesce(q)
		n := len(ents)
		data := replica.AppendEntries(make([]byte, 0, size+32), ents)
		if err := r.rn.Propose(data); err != nil {
			r.log.Warn("cluster: raft refused a proposal", "error", err, "commands", n)
			for _, x := range q[:n] {
				x.p.Resolve(0, ErrLost)
			}
			void = true
		} else {
			ps := make([]*broker.Proposal, n)
			for i, x := range q[:n] {
				ps[i] = x.p
			}
			r.pending = append(r.pending, pending{first: ents[0].ID, ps: ps})
			r.proposed++
			r.commands += uint64(n)
		}
		clear(q[:n]) // the records are in data now
		q = q[n:]
	}
	return void
}

// coalesce returns the commands of q's first entry — the longest run from q[0] that
// follow each other, end at no seal before the last, and fit in maxEntryBytes (the
// first always does) — and their size.
func (r *Raft) coalesce(q []queued) ([]*replica.Entry, int) {
	cmd := func(x *queued) *replica.Entry {
		return &replica.Entry{Now: x.now, ID: replica.ProposalID{Node: r.id, Term: x.term, Seq: x.seq}, Records: x.recs}
	}
	ents := []*replica.Entry{cmd(&q[0])}
	size := replica.EntrySize(ents[0])
	for i := 1; i < len(q) && !q[i-1].seal; i++ {
		e := cmd(&q[i])
		s := replica.EntrySize(e)
		if !e.ID.Follows(ents[len(ents)-1].ID) || size+s > r.cfg.entryBytes {
			break
		}
		ents, size = append(ents, e), size+s
	}
	return ents, size
}

// noteLeadership compares raft's role with the one the broker acts on.
func (r *Raft) noteLeadership() error {
	st := r.rn.BasicStatus()
	if old := r.lead.Swap(st.Lead); old != st.Lead {
		r.leadMu.Lock()
		if r.leadChanged != nil {
			close(r.leadChanged)
			r.leadChanged = nil
		}
		r.leadMu.Unlock()
	}
	leading := st.RaftState == raft.StateLeader
	if r.leaderTerm != 0 && (!leading || st.GetTerm() != r.leaderTerm) {
		r.leaderTerm = 0
		r.term.Store(0)
		if r.round != nil {
			r.endRound(ErrNoLeader)
		}
		r.failConf(ErrNoLeader)
		r.log.Info("cluster: no longer the leader", "term", st.GetTerm(), "leader", r.nameOf(st.Lead))
		if len(r.pending) > 0 {
			if err := r.rebuild("the lead was lost with commands not yet committed"); err != nil {
				return err
			}
		}
	}
	if r.leaderTerm == 0 && leading {
		r.leaderTerm = st.GetTerm()
		r.log.Info("cluster: elected leader", "term", st.GetTerm())
	}
	return nil
}

// apply handles one committed entry.
func (r *Raft) apply(e *pb.Entry) error {
	idx := e.GetIndex()
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
		r.confState = r.rn.ApplyConfChange(&cc)
		r.noteConf(idx, r.confState)
	case pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
		if err := r.applyConf(idx, &cc); err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
	case pb.EntryNormal:
		if len(e.GetData()) == 0 {
			break // a new leader's first entry
		}
		ents, err := replica.DecodeEntries(e.GetData())
		if err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
		r.noteOwnEntry(idx, ents)
		if len(r.pending) > 0 && r.pending[0].carries(ents) {
			p := r.pending[0]
			r.pending = r.pending[1:]
			for _, x := range p.ps {
				x.Resolve(idx, nil)
			}
			r.b.NoteCommitted(idx)
			break
		}
		if len(r.pending) > 0 {
			if err := r.rebuild("another entry was committed where this leader's were to be"); err != nil {
				return err
			}
		}
		if err := r.applyReplicated(idx, ents); err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
	}
	r.applied = idx
	// An entry the broker had nothing to apply of (raft's own, a configuration change)
	// still moves its applied index: the next entry must follow it.
	r.b.NoteCommitted(idx)
	if r.leaderTerm != 0 && e.GetTerm() == r.leaderTerm && r.term.Load() == 0 && !r.handingOff {
		// An entry of its own term applied: everything before it is, and the broker
		// holds the whole committed state. It may take commands.
		r.b.NoteCommitted(idx)
		r.term.Store(r.leaderTerm)
		r.b.Lead()
	}
	return nil
}

// carries says whether ents, the commands of a committed entry, are those of p.
func (p pending) carries(ents []*replica.Entry) bool {
	return len(ents) == len(p.ps) && ents[0].ID == p.first
}

// applyReplicated hands the broker the commands of the committed entry at idx, which
// it did not run: their records in order, as one group under the entry's index, at the
// last one's time (each record carries its own).
func (r *Raft) applyReplicated(idx uint64, ents []*replica.Entry) error {
	recs := ents[0].Records
	if len(ents) > 1 {
		n := 0
		for _, ent := range ents {
			n += len(ent.Records)
		}
		recs = make([][]byte, 0, n)
		for _, ent := range ents {
			recs = append(recs, ent.Records...)
		}
	}
	return r.b.ApplyReplicated(idx, ents[len(ents)-1].Now, recs)
}

// rebuild fails everything pending and queued, and has the broker drop what it ran
// and rebuild from the committed state, then hands it the committed entries up to the
// last one run has applied that its own log does not hold.
func (r *Raft) rebuild(why string) error {
	r.term.Store(0)
	r.b.Fence()
	r.failPending(ErrLost)
	r.failQueued(ErrLost)
	r.log.Warn("cluster: rebuilding the broker from the committed state", "why", why)
	r.rebuilds++
	if err := r.b.Rebuild(); err != nil {
		return err
	}
	first, err := r.storage.FirstIndex()
	if err != nil {
		return err
	}
	for lo := max(r.b.Applied()+1, first); lo <= r.applied; {
		ents, err := r.storage.Entries(lo, r.applied+1, math.MaxUint64)
		if err != nil {
			return fmt.Errorf("rebuild: entries %d..%d: %w", lo, r.applied, err)
		}
		for _, e := range ents {
			if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
				r.b.NoteCommitted(e.GetIndex())
				continue
			}
			ents, err := replica.DecodeEntries(e.GetData())
			if err != nil {
				return fmt.Errorf("rebuild: entry %d: %w", e.GetIndex(), err)
			}
			if err := r.applyReplicated(e.GetIndex(), ents); err != nil {
				return fmt.Errorf("rebuild: entry %d: %w", e.GetIndex(), err)
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

func (r *Raft) failPending(err error) {
	for _, p := range r.pending {
		for _, x := range p.ps {
			x.Resolve(0, err)
		}
	}
	r.pending = nil
}

func (r *Raft) failQueued(err error) {
	r.mu.Lock()
	q := r.queued
	r.queued = nil
	r.mu.Unlock()
	for _, x := range q {
		x.p.Resolve(0, err)
	}
}

func (r *Raft) noteStatus() {
	st := r.rn.BasicStatus()
	s := Status{Node: r.cfg.Name, Term: st.GetTerm(), Leader: r.nameOf(st.Lead), Leading: r.term.Load() != 0,
		Commit: st.GetCommit(), Applied: r.applied, Rebuilds: r.rebuilds,
		Snapshot: r.snapIndex, Compactions: r.compactions, Installs: r.installs, SnapshotsSent: r.snapsSent,
		SnapshotResumes: r.xfer.resumes.Load(), Proposed: r.proposed, Commands: r.commands}
	s.Members = r.memberNames()
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	s.Lag = r.status.Lag
	s.learners = r.confState.GetLearners()
	if st.RaftState != raft.StateLeader {
		s.Lag = nil
	} else if now := time.Now(); now.Sub(r.lagAt) >= r.cfg.Tick {
		// The followers' progress copies a map: once a tick is enough.
		r.lagAt = now
		s.Lag = map[string]uint64{}
		for id, pr := range r.rn.Status().Progress {
			if id != r.id {
				s.Lag[r.nameOf(id)] = st.GetCommit() - min(pr.Match, st.GetCommit())
			}
		}
	}
	r.status = s
}

// raftLogger passes raft's warnings and errors to the node's log; its debug and info
// chatter is dropped.
type raftLogger struct{ l *slog.Logger }

func (raftLogger) Debug(...any)                  {}
func (raftLogger) Debugf(string, ...any)         {}
func (raftLogger) Info(...any)                   {}
func (raftLogger) Infof(string, ...any)          {}
func (g raftLogger) Warning(v ...any)            { g.l.Warn("raft: " + fmt.Sprint(v...)) }
func (g raftLogger) Warningf(f string, v ...any) { g.l.Warn("raft: " + fmt.Sprintf(f, v...)) }
func (g raftLogger) Error(v ...any)              { g.l.Error("raft: " + fmt.Sprint(v...)) }
func (g raftLogger) Errorf(f string, v ...any)   { g.l.Error("raft: " + fmt.Sprintf(f, v...)) }
func (raftLogger) Fatal(v ...any)                { panic(fmt.Sprint(v...)) }
func (raftLogger) Fatalf(f string, v ...any)     { panic(fmt.Sprintf(f, v...)) }
func (raftLogger) Panic(v ...any)                { panic(fmt.Sprint(v...)) }
func (raftLogger) Panicf(f string, v ...any)     { panic(fmt.Sprintf(f, v...)) }

// PrepareDataDir gives a member's data directory the cluster's data secret
// (DataSecret) before its broker opens it. A directory that already holds another
// secret — a single node's, or another cluster's — is refused: its receipts, sessions
// and sealed secrets belong to that one.
func PrepareDataDir(fs vfs.FS, dir, secret string) error {
	if fs == nil {
		fs = vfs.OS
	}
	want := DataSecret(secret)
	path := filepath.Join(dir, "secret")
	got, err := vfs.ReadFile(fs, path)
	switch {
	case err == nil && hmac.Equal(got, want):
		return nil
	case err == nil:
		return fmt.Errorf("cluster: %s holds another secret: the directory belongs to a single node or to another cluster (or the cluster secret changed); give the node an empty data directory", dir)
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := fs.MkdirAll(dir, vfs.DirMode); err != nil {
		return err
	}
	if err := vfs.WriteFile(fs, path, vfs.FileMode, want); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}
