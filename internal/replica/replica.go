package replica

import (
	"errors"
	"fmt"
	"math"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Errors a caller branches on.
var (
	// ErrNotLeader: this replica does not lead; NotLeaderError names the leader it
	// knows of. Nothing was proposed: send the command to the leader.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrUnavailable: retry later. From Propose, nothing was proposed (a new leader
	// whose first entry is not committed yet, or raft dropped the proposal). In an
	// Outcome, the replica lost its leadership before the command's entry was known to
	// be committed: the entry may still commit, or never. The outcome is indeterminate,
	// as a lost answer is; at-least-once delivery allows it, and a retry may apply the
	// command twice (dedup ids make a retried send safe).
	ErrUnavailable = errors.New("replica: unavailable, retry")
)

// NotLeaderError is ErrNotLeader with the leader this replica knows of (0: none).
type NotLeaderError struct{ Leader uint64 }

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return "replica: not the leader, and no leader is known"
	}
	return fmt.Sprintf("replica: not the leader; the leader is node %d", e.Leader)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// Config configures a Replica. The zero value of a field means its default.
type Config struct {
	// ID is this node's id in the cluster: not 0, unique for ever.
	ID uint64
	// Storage is the node's raft log and state, bootstrapped (Bootstrap) or left by an
	// earlier Replica of this node.
	Storage Storage
	// ElectionTick and HeartbeatTick are raft's timeouts in ticks: a follower that hears
	// nothing from a leader for ElectionTick ticks (randomised up to twice that) stands
	// for election, a leader that hears from no quorum for ElectionTick ticks steps down,
	// and a leader sends heartbeats every HeartbeatTick ticks. Default to 10 and 1.
	ElectionTick  int
	HeartbeatTick int
	// SnapshotEntries is how many entries the replica applies between snapshots of its
	// machines, after which the storage may drop the entries a snapshot covers. Defaults
	// to 10,000.
	SnapshotEntries uint64
	// MaxSizePerMsg bounds the entries of one append message, in bytes. Defaults to 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight to one follower. Defaults to 256.
	MaxInflightMsgs int
	// MaxUncommittedBytes bounds what a leader has proposed and not yet seen committed;
	// past it Propose refuses with ErrUnavailable. Defaults to 64 MiB.
	MaxUncommittedBytes uint64
	// Logger is raft's logger. Defaults to one that drops everything but panics.
	Logger raft.Logger
	// Coalesce makes Propose leave the entry to Process, which puts the commands proposed
	// since the last Process into as few entries as fit MaxSizePerMsg/2 bytes each — as a
	// cluster node's driver does (internal/cluster). Off, each command is an entry of its
	// own, proposed by Propose.
	Coalesce bool
}

func (c *Config) withDefaults() error {
	if c.ID == 0 {
		return errors.New("replica: config: ID must not be 0")
	}
	if c.Storage == nil {
		return errors.New("replica: config: no Storage")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ElectionTick, 10)
	def(&c.HeartbeatTick, 1)
	def(&c.MaxInflightMsgs, 256)
	if c.ElectionTick <= c.HeartbeatTick || c.HeartbeatTick < 0 {
		return fmt.Errorf("replica: config: ElectionTick (%d) must be more than HeartbeatTick (%d), which must be positive", c.ElectionTick, c.HeartbeatTick)
	}
	if c.MaxInflightMsgs < 0 {
		return errors.New("replica: config: MaxInflightMsgs must not be negative")
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10_000
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = quiet{}
	}
	return nil
}

// Replica is one node's replica of the replicated record stream: a raft.RawNode over
// the node's Storage, and the Machines that the committed entries build.
//
// The leader evaluates a command at once on its machines (Propose): the command's
// records are applied as it emits them, as on a single node, and proposed as one entry
// (with Config.Coalesce, in one with the others proposed before the next Process); its
// answer is held until the entry comes back committed (an Outcome of Process). Its
// machines are therefore speculative — the committed state and, after it, its own
// proposals in order — which is sound because, while it leads, the entries committed
// after its first one are exactly its proposals, in the order it made them. Followers
// apply committed entries as they arrive. A new leader takes no command until an entry
// of its own term is committed and applied, so that every entry before it is applied
// and its machines hold the whole committed state before it evaluates anything.
//
// When its speculation can no longer come true — it lost its leadership, or an entry it
// did not propose is committed while it has proposals pending — the replica drops its
// machines, restores them from its storage's snapshot and the committed entries after
// it, and fails every pending proposal with ErrUnavailable, answering nothing in
// between. A deposed leader's uncommitted effects are never visible: no answer depends
// on them, and its machines forget them. A command raft refuses after the leader ran it
// is taken back out the same way, the pending proposals before it applied again.
//
// Time: a command runs at max(the caller's clock, the latest now of the entries applied
// and proposed), which the entry carries. Followers never read a clock: the entries'
// times are the machines' only time, so time never runs backwards across failovers.
//
// A Replica does no I/O and starts no goroutines. Its owner calls Tick, Step and
// Propose, then Process, which writes to the storage, applies what is committed and
// returns the messages to send: a deterministic driver (the simulation) and a real
// transport run it alike. It is not safe for concurrent use.
type Replica struct {
	cfg      Config
	rn       *raft.RawNode
	storage  Storage
	machines *Machines

	applied   uint64 // the last entry applied to machines (with its snapshot's)
	snapIndex uint64 // the index of storage's snapshot
	confState *pb.ConfState

	// leaderTerm is the term this replica leads, 0 when it does not; ready says that
	// an entry of that term has been applied, so commands may run.
	leaderTerm uint64
	ready      bool
	seq        uint64      // proposals made in leaderTerm
	pending    []*proposal // proposed in leaderTerm, applied to machines, not yet committed
	unsent     int         // the last of pending, not yet given to raft (Coalesce)

	broken   error // a failure Process cannot recover from; every call returns it
	rebuilds int
}

// proposal is a command evaluated on the leader's machines whose entry is not yet
// committed: enough to answer it, and to apply it again if the machines are rebuilt
// while it may still commit.
type proposal struct {
	id     ProposalID
	now    int64
	recs   [][]byte
	answer any
}

// New returns the replica of cfg.Storage: its machines restored from the storage's
// snapshot; raft hands the committed entries after it to the first Process calls.
func New(cfg Config) (*Replica, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("replica: storage snapshot: %w", err)
	}
	idx := snap.GetMetadata().GetIndex()
	if idx == 0 {
		return nil, errors.New("replica: storage not bootstrapped (replica.Bootstrap)")
	}
	m, err := RestoreMachines(snap.GetData())
	if err != nil {
		return nil, err
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTick,
		HeartbeatTick:             cfg.HeartbeatTick,
		Storage:                   cfg.Storage,
		Applied:                   idx,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		// A leader steps down when it loses its quorum, and a node cut off and back does
		// not unseat a working leader.
		CheckQuorum: true,
		PreVote:     true,
		// Entries are computed by the leader from its machines: a follower must never
		// pass a proposal on.
		DisableProposalForwarding: true,
		Logger:                    cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	return &Replica{cfg: cfg, rn: rn, storage: cfg.Storage, machines: m, applied: idx, snapIndex: idx,
		confState: snap.GetMetadata().GetConfState()}, nil
}

// Tick advances raft's clock by one tick.
func (r *Replica) Tick() { r.rn.Tick() }

// Step hands the replica a message from another node. Errors are about the message
// (a local message from the network, a response from an unknown peer): drop it.
func (r *Replica) Step(m *pb.Message) error { return r.rn.Step(m) }

// Campaign makes the replica stand for election now, as its election timeout would: for
// a driver that keeps the election timers itself (the simulation, whose seed must decide
// who stands when).
func (r *Replica) Campaign() error { return r.rn.Campaign() }

// ForgetLeader makes a follower forget its leader, as if its election timeout had
// passed, so that it grants votes to a candidate (see Campaign).
func (r *Replica) ForgetLeader() error { return r.rn.ForgetLeader() }

// ReportUnreachable tells the leader that a message to node id was not delivered.
func (r *Replica) ReportUnreachable(id uint64) { r.rn.ReportUnreachable(id) }

// ReportSnapshot tells the leader whether a snapshot message (MsgSnap) it sent to node
// id was delivered. A transport must report every one.
func (r *Replica) ReportSnapshot(id uint64, ok bool) {
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	r.rn.ReportSnapshot(id, st)
}

// Status is what a replica knows of its role.
type Status struct {
	ID, Term uint64
	Lead     uint64 // the leader this replica knows of; 0: none
	// Leader says this replica leads Term and takes commands (its first entry of the
	// term is applied).
	Leader  bool
	Applied uint64 // the last entry the machines hold, committed
	Commit  uint64
	Pending int // proposals evaluated, not yet committed
	// Rebuilds counts the times this Replica dropped its machines for the committed
	// state (its speculation void, or a proposal raft refused).
	Rebuilds int
}

// Status returns the replica's status.
func (r *Replica) Status() Status {
	st := r.rn.BasicStatus()
	return Status{ID: r.cfg.ID, Term: st.GetTerm(), Lead: st.Lead, Leader: r.leading(st) && r.ready,
		Applied: r.applied, Commit: st.GetCommit(), Pending: len(r.pending), Rebuilds: r.rebuilds}
}

func (r *Replica) leading(st raft.BasicStatus) bool {
	return r.leaderTerm != 0 && st.RaftState == raft.StateLeader && st.GetTerm() == r.leaderTerm
}

// Propose evaluates cmd on the leader's machines at max(now, the latest entry time) and
// proposes what it emitted as one entry (with Config.Coalesce, Process proposes it, and
// raft's refusal comes as its Outcome). The command's answer comes from Process as an
// Outcome with the returned id, once the entry is committed (or fails with
// ErrUnavailable if the replica loses its leadership first). A replica that does not
// lead refuses with a *NotLeaderError; a leader whose first entry of its term is not yet
// applied, with ErrUnavailable. Refused, the command has not run.
func (r *Replica) Propose(now int64, cmd Command) (ProposalID, error) {
	if r.broken != nil {
		return ProposalID{}, r.broken
	}
	st := r.rn.BasicStatus()
	if !r.leading(st) {
		return ProposalID{}, &NotLeaderError{Leader: st.Lead}
	}
	if !r.ready {
		return ProposalID{}, fmt.Errorf("%w: a new leader, its first entry not yet committed", ErrUnavailable)
	}
	now = max(now, r.machines.Now())
	recs, ans := r.machines.Run(now, cmd)
	r.seq++
	id := ProposalID{Node: r.cfg.ID, Term: r.leaderTerm, Seq: r.seq}
	if r.cfg.Coalesce {
		r.pending = append(r.pending, &proposal{id: id, now: now, recs: recs, answer: ans})
		r.unsent++
		return id, nil
	}
	if err := r.rn.Propose(AppendEntry(nil, &Entry{Now: now, ID: id, Records: recs})); err != nil {
		// Not in the log: take the command's effects back out of the machines, keeping
		// the proposals before it, which are.
		if rerr := r.rebuild(true); rerr != nil {
			return ProposalID{}, r.fail(rerr)
		}
		return ProposalID{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.pending = append(r.pending, &proposal{id: id, now: now, recs: recs, answer: ans})
	return id, nil
}

// Outcome is the end of one proposal.
type Outcome struct {
	ID ProposalID
	// Index is the entry's index in the log; 0 when Err is set.
	Index uint64
	// Answer is what the command returned, when Err is nil.
	Answer any
	// Err is nil when the entry is committed, else an ErrUnavailable: the replica lost
	// its leadership first, and the entry may or may not commit (see ErrUnavailable).
	Err error
}

// Output is what one Process call leaves to its caller.
type Output struct {
	// Messages must be sent to their nodes (To); everything they depend on is in the
	// storage already. A MsgSnap's delivery must be reported (ReportSnapshot).
	Messages []*pb.Message
	// Done are the proposals that ended, in order.
	Done []Outcome
	// Applied are the committed entries applied to the machines, in log order (raft's
	// own empty ones too).
	Applied []*pb.Entry
	// Installed is the index of a snapshot from the leader that replaced the machines,
	// 0 if none did.
	Installed uint64
	// Snapshot is the index of a snapshot of the machines this replica saved to its
	// storage, 0 if it saved none.
	Snapshot uint64
}

// Process handles everything raft has ready, as raft's contract asks, until it has
// nothing more: it saves the entries and hard state to the storage (a snapshot from the
// leader first), then collects the messages, notices a change of leadership, applies
// the committed entries (answering the leader's own proposals) and tells raft it is
// done. Messages are returned, not sent, and everything they depend on is saved by then.
// An error is a failure the replica cannot recover from (the storage failed, a
// committed entry does not apply): the replica is broken and the node must stop it.
func (r *Replica) Process() (Output, error) {
	var out Output
	if r.broken != nil {
		return out, r.broken
	}
	if err := r.flush(&out); err != nil {
		return out, r.fail(err)
	}
	for r.rn.HasReady() {
		rd := r.rn.Ready()
		if err := r.storage.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
			return out, r.fail(fmt.Errorf("replica: save: %w", err))
		}
		out.Messages = append(out.Messages, rd.Messages...)
		if err := r.noteLeadership(&out); err != nil {
			return out, r.fail(err)
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := r.install(rd.Snapshot, &out); err != nil {
				return out, r.fail(err)
			}
		}
		for _, e := range rd.CommittedEntries {
			if err := r.apply(e, &out); err != nil {
				return out, r.fail(err)
			}
		}
		r.rn.Advance(rd)
		if err := r.maybeSnapshot(&out); err != nil {
			return out, r.fail(err)
		}
	}
	return out, nil
}

// flush gives raft the proposals Propose left unsent (Coalesce), coalesced: a run of
// them in one entry, up to MaxSizePerMsg/2 bytes of commands (a larger one alone). An
// entry raft refuses is not in the log: its commands and every one after it, which ran
// on the machines after them, are taken back out (the pending ones before them applied
// again) and fail with ErrUnavailable.
func (r *Replica) flush(out *Output) error {
	q := r.pending[len(r.pending)-r.unsent:]
	r.unsent = 0
	limit := int(min(r.cfg.MaxSizePerMsg/2, math.MaxInt32))
	for len(q) > 0 {
		ents := []*Entry{{Now: q[0].now, ID: q[0].id, Records: q[0].recs}}
		size := EntrySize(ents[0])
		for _, p := range q[1:] {
			e := &Entry{Now: p.now, ID: p.id, Records: p.recs}
			if s := EntrySize(e); size+s <= limit && e.ID.Follows(ents[len(ents)-1].ID) {
				ents, size = append(ents, e), size+s
				continue
			}
			break
		}
		if err := r.rn.Propose(AppendEntries(nil, ents)); err != nil {
			r.pending = r.pending[:len(r.pending)-len(q)]
			if rerr := r.rebuild(true); rerr != nil {
				return rerr
			}
			for _, p := range q {
				out.Done = append(out.Done, Outcome{ID: p.id, Err: fmt.Errorf("%w: raft refused the entry of %d commands from %v: %w", ErrUnavailable, len(ents), ents[0].ID, err)})
			}
			return nil
		}
		q = q[len(ents):]
	}
	return nil
}

func (r *Replica) fail(err error) error {
	if r.broken == nil {
		r.broken = err
	}
	return r.broken
}

// noteLeadership compares raft's role with the one the replica acts on: a leader that
// lost its term drops its speculation; a new leader starts counting its proposals.
func (r *Replica) noteLeadership(out *Output) error {
	st := r.rn.BasicStatus()
	if r.leaderTerm != 0 && !r.leading(st) {
		r.leaderTerm, r.ready = 0, false
		if len(r.pending) > 0 {
			if err := r.rebuild(false); err != nil {
				return err
			}
			r.failPending(out, "leadership lost")
		}
	}
	if r.leaderTerm == 0 && st.RaftState == raft.StateLeader {
		r.leaderTerm, r.ready, r.seq = st.GetTerm(), false, 0
	}
	return nil
}

func (r *Replica) failPending(out *Output, why string) {
	for _, p := range r.pending {
		out.Done = append(out.Done, Outcome{ID: p.id,
			Err: fmt.Errorf("%w: %s before the command's entry was known to be committed; it may or may not take effect", ErrUnavailable, why)})
	}
	r.pending, r.unsent = nil, 0
}

// install replaces the machines with a snapshot the leader sent.
func (r *Replica) install(snap *pb.Snapshot, out *Output) error {
	idx := snap.GetMetadata().GetIndex()
	if idx <= r.applied {
		return fmt.Errorf("replica: snapshot at %d, but %d is applied", idx, r.applied)
	}
	m, err := RestoreMachines(snap.GetData())
	if err != nil {
		return fmt.Errorf("replica: snapshot at %d: %w", idx, err)
	}
	if len(r.pending) > 0 { // a leader is sent no snapshot: only a bug gets here
		r.failPending(out, "a snapshot replaced the machines")
	}
	r.machines, r.applied, r.snapIndex = m, idx, idx
	r.confState = snap.GetMetadata().GetConfState()
	out.Installed = idx
	return nil
}

// apply applies one committed entry: the leader's own next proposal is on its machines
// already and only answered; any other entry is applied, after dropping speculation it
// contradicts.
func (r *Replica) apply(e *pb.Entry, out *Output) error {
	idx := e.GetIndex()
	if idx != r.applied+1 {
		return fmt.Errorf("replica: committed entry %d after %d", idx, r.applied)
	}
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: entry %d: configuration change: %w", idx, err)
		}
		r.confState = r.rn.ApplyConfChange(&cc)
	case pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: entry %d: configuration change: %w", idx, err)
		}
		r.confState = r.rn.ApplyConfChange(&cc)
	case pb.EntryNormal:
		if len(e.GetData()) == 0 {
			break // a new leader's first entry
		}
		ents, err := DecodeEntries(e.GetData())
		if err != nil {
			return fmt.Errorf("replica: entry %d: %w", idx, err)
		}
		if t := ents[0].ID.Term; t != e.GetTerm() {
			return fmt.Errorf("replica: entry %d of term %d: %w: proposed in term %d", idx, e.GetTerm(), ErrCorruptEntry, t)
		}
		if r.ownNext(ents) {
			for _, p := range r.pending[:len(ents)] {
				out.Done = append(out.Done, Outcome{ID: p.id, Index: idx, Answer: p.answer})
			}
			r.pending = r.pending[len(ents):]
			break
		}
		if len(r.pending) > 0 {
			// Someone else's entry where ours were to be: our speculation is void. A
			// leader notices it lost its term before it applies what the next leader
			// committed (noteLeadership), so this is defence, not a path the
			// simulation takes.
			if err := r.rebuild(false); err != nil {
				return err
			}
			r.failPending(out, "another entry was committed")
		}
		for _, ent := range ents {
			if err := r.machines.ApplyEntry(ent); err != nil {
				return fmt.Errorf("replica: entry %d: %w", idx, err)
			}
		}
	default:
		return fmt.Errorf("replica: entry %d: unknown type %v", idx, e.GetType())
	}
	r.applied = idx
	if r.leaderTerm != 0 && e.GetTerm() == r.leaderTerm {
		r.ready = true
	}
	out.Applied = append(out.Applied, e)
	return nil
}

// ownNext says whether ents, the commands of one committed entry, are this leader's
// next pending proposals, in order: they are on its machines already.
func (r *Replica) ownNext(ents []*Entry) bool {
	if len(r.pending) < len(ents) {
		return false
	}
	for i, ent := range ents {
		if r.pending[i].id != ent.ID {
			return false
		}
	}
	return true
}

// rebuild replaces the machines with the committed state: the storage's snapshot and
// the committed entries after it, up to the last applied. With keepPending, the pending
// proposals are applied again after them (they are still in the log, in order).
func (r *Replica) rebuild(keepPending bool) error {
	snap, err := r.storage.Snapshot()
	if err != nil {
		return fmt.Errorf("replica: rebuild: %w", err)
	}
	from := snap.GetMetadata().GetIndex()
	if from > r.applied {
		return fmt.Errorf("replica: rebuild: the snapshot at %d is past the last applied entry %d", from, r.applied)
	}
	m, err := RestoreMachines(snap.GetData())
	if err != nil {
		return fmt.Errorf("replica: rebuild: %w", err)
	}
	for lo := from + 1; lo <= r.applied; {
		ents, err := r.storage.Entries(lo, r.applied+1, math.MaxUint64)
		if err != nil {
			return fmt.Errorf("replica: rebuild: entries %d..%d: %w", lo, r.applied, err)
		}
		if len(ents) == 0 {
			return fmt.Errorf("replica: rebuild: no entry at %d", lo)
		}
		for _, e := range ents {
			if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
				continue
			}
			ents, err := DecodeEntries(e.GetData())
			for i := 0; err == nil && i < len(ents); i++ {
				err = m.ApplyEntry(ents[i])
			}
			if err != nil {
				return fmt.Errorf("replica: rebuild: entry %d: %w", e.GetIndex(), err)
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	if keepPending {
		for _, p := range r.pending {
			if err := m.ApplyEntry(&Entry{Now: p.now, ID: p.id, Records: p.recs}); err != nil {
				return fmt.Errorf("replica: rebuild: proposal %v: %w", p.id, err)
			}
		}
	}
	r.machines = m
	r.rebuilds++
	return nil
}

// maybeSnapshot snapshots the machines once SnapshotEntries entries are applied since
// the last snapshot, when they hold only committed state (no proposal pending).
func (r *Replica) maybeSnapshot(out *Output) error {
	if r.applied-r.snapIndex < r.cfg.SnapshotEntries || len(r.pending) > 0 {
		return nil
	}
	if err := r.storage.SaveSnapshot(r.applied, r.confState, r.machines.AppendSnapshot(nil)); err != nil {
		return fmt.Errorf("replica: snapshot at %d: %w", r.applied, err)
	}
	r.snapIndex = r.applied
	out.Snapshot = r.applied
	return nil
}

// Committed returns the snapshot of the machines and the index it describes, when they
// hold the committed state alone: not while the leader has proposals pending.
func (r *Replica) Committed() (index uint64, snapshot []byte, ok bool) {
	if len(r.pending) > 0 || r.broken != nil {
		return 0, nil, false
	}
	return r.applied, r.machines.AppendSnapshot(nil), true
}

// quiet is raft's logger when Config has none: a replica in a test, or one whose node
// logs on its own, hears nothing from raft but its panics.
type quiet struct{}

func (quiet) Debug(...any)              {}
func (quiet) Debugf(string, ...any)     {}
func (quiet) Info(...any)               {}
func (quiet) Infof(string, ...any)      {}
func (quiet) Warning(...any)            {}
func (quiet) Warningf(string, ...any)   {}
func (quiet) Error(...any)              {}
func (quiet) Errorf(string, ...any)     {}
func (quiet) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (quiet) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (quiet) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (quiet) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
