package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/okiba/okiba/wal"
)

// A broker of a replicated cluster (internal/cluster) writes through a Replication: the
// log of a Raft group whose committed entries are the truth every node applies.
//
// The leader runs commands as a single node does, on its own machines, and its sink
// writes their records to its own log as usual — so the payload store knows where each
// body lies — each command's records behind a marker frame naming the proposal (term,
// seq). When the command ends, its records are proposed, and its answer waits for the
// entry that carries them to be committed (and for its own log, as before). The
// Replication may put several proposals, one after the other, into one entry: they then
// share its index. The leader's machines are thus speculative: the committed entries
// followed by its pending proposals, in order. Followers run no commands: the cluster
// hands each committed entry to ApplyReplicated, which writes its records (every
// command's) to the follower's own log behind a marker naming the entry's index, and
// applies them.
//
// When the speculation cannot come true (the leader lost its term with proposals
// pending), the cluster fences the broker and calls Rebuild: the broker drops its
// machines and its payload store and replays its own log again, applying a group only
// when it is the next committed entry — its own proposals by asking Committed, the
// others' by the index in their marker. Orphaned groups (proposals that never committed)
// stay in the log, skipped by every replay, until segment collection removes them.
//
// Checkpoints are the node's own, as on a single node, and hold the index of the last
// committed entry they contain; a leader's checkpoint waits for the commit of the last
// proposal it holds, and is dropped if that fails.
type Replication interface {
	// Term returns the term this node leads and may run commands in — it leads, and an
	// entry of its term is applied — or 0.
	Term() uint64
	// Propose hands the records of one command, run at now, to the log as this node's
	// proposal seq of term (seq counts from 1 in each term). It is called under the
	// broker's lock, in the order in which the commands ran, and must not block. The
	// Proposal says when (and whether) the entry is committed.
	Propose(term, seq uint64, now int64, recs [][]byte) *Proposal
	// Seal makes the proposal handed over last the last of its entry: the next one goes
	// into another. A checkpoint or backup of a leader's state calls it, under the lock,
	// so that the state holds whole entries and the index of its last proposal's entry
	// says what it holds. Called under the broker's lock; must not block.
	Seal()
	// Committed returns the index of this node's proposal (term, seq) if the log holds
	// it committed.
	Committed(term, seq uint64) (index uint64, ok bool)
}

// SharedLog is a Replication that keeps its own storage (a cluster node's raft log) in
// the broker's log, so that one fsync per commit cycle makes both durable. Its records
// are those of kinds 0xD0..0xDF (IsSharedRecord), which the broker's own replay skips.
//
// When the broker opens its log (at Open, and again at Rebuild and Install), it asks
// Replayer, with the log's directory, where the replication's records begin (0: it does
// not know) and opens the log from there or its checkpoint, whichever comes first; it
// hands every such record, in log order, to the function Replayer returned while the
// log replays, then calls Attach with the open log and the Hold through which the
// replication releases the segments it no longer needs (the broker's payload store has
// another: a segment goes once both released it), and only then replays its own records
// from its checkpoint — Committed must answer from the attached storage by then. Install
// calls Carry with the log of the state it is about to swap in, before the swap, so that
// the replication's durable state (raft's term and vote) survives a crash after it.
type SharedLog interface {
	Replayer(dir string) (from wal.Pos, replay func(pos wal.Pos, raw []byte) error)
	Attach(log *wal.Log, hold *wal.Hold) error
	Carry(log *wal.Log) error
}

// IsSharedRecord reports whether a record of the log is a SharedLog's (0xD0..0xDF).
func IsSharedRecord(raw []byte) bool { return len(raw) > 0 && raw[0]&0xF0 == 0xD0 }

// ErrNotLeader: this node of a cluster does not lead (or has just been elected and has
// not yet applied an entry of its term): nothing ran. Send the call to the leader.
var ErrNotLeader = errors.New("this node does not lead the cluster: send the call to the leader")

// ErrRebuilding: the node lost its leadership with commands it had run not yet
// committed, and is rebuilding its state from what is: nothing ran; retry.
var ErrRebuilding = errors.New("this node is rebuilding its state after losing the cluster's leadership: retry")

// ErrLeadLost: the command ran, and the node lost the cluster's leadership before its
// entry was known to be committed: it may or may not take effect, as when an answer is
// lost on the way. A retry is safe wherever a duplicate is (a send at least once, an
// idempotent producer's, a dedup id's).
var ErrLeadLost = errors.New("the leader lost its lead before the command was committed: it may or may not have taken effect; retry")

// Proposal is one command's entry on its way to being committed.
type Proposal struct {
	done  chan struct{}
	index uint64
	err   error
}

// NewProposal returns a pending proposal.
func NewProposal() *Proposal { return &Proposal{done: make(chan struct{})} }

// Resolve ends the proposal: committed at index, or failed with err. Once only.
func (p *Proposal) Resolve(index uint64, err error) {
	p.index, p.err = index, err
	close(p.done)
}

// Wait returns the entry's index once it is committed, or the error it failed with.
func (p *Proposal) Wait(ctx context.Context) (uint64, error) {
	select {
	case <-p.done:
		return p.index, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// ticket is what a command's answer waits for: its records in this node's log, and, in
// a cluster, its entry committed.
type ticket struct {
	w wal.Ticket
	p *Proposal
}

// Wait waits for the entry's commit first, then for the log: waiting for the log first
// would commit the command's records in a cycle of their own, and the raft entry that
// carries them, appended to the same log a moment later (SharedLog), in the next one —
// two fsyncs in a row where the raft save's one cycle makes both durable.
func (t ticket) Wait(ctx context.Context) error {
	if t.p != nil {
		if _, err := t.p.Wait(ctx); err != nil {
			return err
		}
	}
	return t.w.Wait(ctx)
}

// The marker frames before each group of records in a cluster node's own log. Their
// first byte is outside every range of the machines and of the payload store.
const (
	frameGroupOwn     = 0xE0 // uvarint term | uvarint seq: this node's proposal
	frameGroupApplied = 0xE1 // uvarint index: a committed entry another node proposed
)

func isGroupFrame(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == frameGroupOwn || raw[0] == frameGroupApplied)
}

// groupReplay decides, during a cluster node's replay of its own log, which groups of
// records are applied: committed entries only, each once, in order, so that the
// machines hold the committed state and nothing else.
type groupReplay struct {
	repl    Replication
	applied uint64 // the last entry applied
	skip    bool   // the current group is not applied
	// own is the last group applied when it is this node's proposal (term, seq): the
	// next proposal of the term may be in the same entry. Zero after any other group.
	own [2]uint64
}

// marker starts a group at a marker frame.
func (g *groupReplay) marker(raw []byte) error {
	var idx uint64
	var ok, next bool
	var own [2]uint64
	switch raw[0] {
	case frameGroupOwn:
		term, n := binary.Uvarint(raw[1:])
		seq, m := binary.Uvarint(raw[1+max(n, 0):])
		if n <= 0 || m <= 0 {
			return fmt.Errorf("bad group marker %x", raw)
		}
		idx, ok = g.repl.Committed(term, seq)
		own = [2]uint64{term, seq}
		// The proposal right after the last one applied, committed in the same entry:
		// the rest of that entry, not a repeat.
		next = ok && idx == g.applied && g.own[0] == term && g.own[1]+1 == seq
	case frameGroupApplied:
		v, n := binary.Uvarint(raw[1:])
		if n <= 0 {
			return fmt.Errorf("bad group marker %x", raw)
		}
		idx, ok = v, true
	}
	// Entries without records (a new leader's, configuration changes) leave no group,
	// so the next group's index may jump; but a group always follows every committed
	// group before it in the log, which is written in apply order, so a group at or below
	// the last applied is a repeat (an entry a rebuild applied again) or an orphan —
	// unless it is the next of this node's proposals in the entry just applied.
	g.skip = !ok || (idx <= g.applied && !next)
	if !g.skip {
		g.applied, g.own = idx, own
	}
	return nil
}

// Applied is the index of the last committed entry the machines hold (0 outside a
// cluster).
func (b *Broker) Applied() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}

// CheckpointedApplied is the index of the last committed entry the broker's latest
// durable checkpoint holds: its own data directory restores everything up to it without
// the raft log, which may therefore drop those entries (internal/cluster compacts it).
func (b *Broker) CheckpointedApplied() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ckptApplied
}

// NoteCommitted tells a leader's broker that its proposals up to the entry at index
// are committed (their Proposals resolved): the checkpoint may say so, and the topic
// mover may move their records into partition files.
func (b *Broker) NoteCommitted(index uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if index > b.applied {
		b.applied, b.replayedOwn = index, [2]uint64{}
	}
	for len(b.proposed) > 0 {
		f := b.proposed[0]
		select {
		case <-f.p.done:
		default:
			return
		}
		if f.p.err != nil || f.p.index > index {
			return
		}
		b.commits.advance(f.end)
		b.proposed = b.proposed[1:]
	}
}

// proposed is a proposal of this leader and the position of its last record in this
// node's log.
type proposed struct {
	p   *Proposal
	end wal.Pos
}

// commitGate holds back the topic mover until the records it moves are committed: a
// partition file must never hold a record a failover takes back (and then gives its
// offset to another). Its position only grows, until a rebuild starts it again.
type commitGate struct {
	mu   sync.Mutex
	pos  wal.Pos
	wake chan struct{}
}

func (g *commitGate) advance(pos wal.Pos) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if pos > g.pos {
		g.pos = pos
		if g.wake != nil {
			close(g.wake)
			g.wake = nil
		}
	}
}

// wait returns once everything up to pos is committed.
func (g *commitGate) wait(ctx context.Context, pos wal.Pos) error {
	for {
		g.mu.Lock()
		if g.pos >= pos {
			g.mu.Unlock()
			return nil
		}
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ApplyReplicated applies a committed entry of another node's proposals (at index, the
// last of them run at now) to a follower's machines: the records of all its commands, in
// order, go into this node's log behind one marker, the payload store learns where, and
// the machines apply them as a replay does. It returns once they are in the log (not yet
// durable: the raft log is). Entries must come in order, each the one after Applied,
// each in one call (an entry is applied whole or not at all); an earlier one is ignored.
func (b *Broker) ApplyReplicated(index uint64, now int64, recs [][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if index <= b.applied {
		return nil
	}
	if index != b.applied+1 {
		return fmt.Errorf("broker: committed entry %d after %d", index, b.applied)
	}
	if err := b.log.Err(); err != nil {
		return fmt.Errorf("%w (%v)", ErrStorageFailed, err)
	}
	topics, err := b.appendGroupLocked(binary.AppendUvarint([]byte{frameGroupApplied}, index), recs)
	if err != nil {
		return fmt.Errorf("broker: committed entry %d: %w", index, err)
	}
	if topics {
		kick(b.kickMove)
	}
	if len(recs) > 0 {
		b.commits.advance(b.sink.lastPos)
	}
	b.applied, b.replayedOwn = index, [2]uint64{}
	if len(recs) > 0 {
		b.lastTicket = ticket{w: b.sink.last}
	}
	b.afterLocked()
	b.sink.n = 0
	return nil
}

// ReplayedOwn returns, after Open or Rebuild and before anything else is applied, the
// proposal of this node (term, seq) whose group the replay of its own log applied last,
// and the committed entry it is in (Applied); term 0 when the last group applied was
// not one. The entry may carry proposals after it that the log's tail lost (a power
// loss before the broker's log was durable, the entry committed on the others'
// disks): CompleteEntry applies them.
func (b *Broker) ReplayedOwn() (index, term, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied, b.replayedOwn[0], b.replayedOwn[1]
}

// OwnCommand is one of this node's proposals in a committed entry: its id in its term
// and its records.
type OwnCommand struct {
	Term, Seq uint64
	Records   [][]byte
}

// CompleteEntry applies the proposals of this node that the committed entry at index
// (Applied) carries after the one ReplayedOwn names, which the broker's log lost: each
// goes into the log behind its own marker, as the leader wrote it, so that a later
// replay takes them as the rest of the entry, and the machines apply them as a replay
// does. cmds must follow ReplayedOwn's proposal, in order, with no gap.
func (b *Broker) CompleteEntry(index uint64, cmds []OwnCommand) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	last := b.replayedOwn
	if index != b.applied || last[0] == 0 {
		return fmt.Errorf("broker: complete entry %d: the replay ended at entry %d with proposal %d/%d", index, b.applied, last[0], last[1])
	}
	for _, c := range cmds {
		if c.Term != last[0] || c.Seq != last[1]+1 {
			return fmt.Errorf("broker: complete entry %d: proposal %d/%d does not follow %d/%d", index, c.Term, c.Seq, last[0], last[1])
		}
		last = [2]uint64{c.Term, c.Seq}
	}
	if err := b.log.Err(); err != nil {
		return fmt.Errorf("%w (%v)", ErrStorageFailed, err)
	}
	topics, any := false, false
	for _, c := range cmds {
		if len(c.Records) == 0 {
			continue
		}
		marker := binary.AppendUvarint([]byte{frameGroupOwn}, c.Term)
		marker = binary.AppendUvarint(marker, c.Seq)
		t, err := b.appendGroupLocked(marker, c.Records)
		if err != nil {
			return fmt.Errorf("broker: complete entry %d, proposal %d/%d: %w", index, c.Term, c.Seq, err)
		}
		topics, any = topics || t, true
	}
	b.replayedOwn = last
	if topics {
		kick(b.kickMove)
	}
	if any {
		b.commits.advance(b.sink.lastPos)
		b.lastTicket = ticket{w: b.sink.last}
	}
	b.afterLocked()
	b.sink.n = 0
	return nil
}

// appendGroupLocked writes one group of replicated records into this node's log behind
// its marker (none when there are no records), tells the payload store where each went
// and has the machines apply them as a replay does. topics reports a topic record among
// them (the mover has work).
func (b *Broker) appendGroupLocked(marker []byte, recs [][]byte) (topics bool, err error) {
	if len(recs) == 0 {
		return false, nil
	}
	if _, _, err := b.log.Append(marker); err != nil {
		return false, err
	}
	for i, raw := range recs {
		pos, t, err := b.log.Append(raw)
		if err != nil {
			return topics, err
		}
		b.sink.last, b.sink.lastPos = t, pos
		b.sink.n++
		b.sink.total++
		if err := b.replay(pos, raw); err != nil {
			return topics, fmt.Errorf("record %d: %w", i, err)
		}
		topics = topics || (raw[0] >= 64 && raw[0] < 128)
	}
	return topics, nil
}

// Fence stops the broker from running or answering anything: its machines hold effects
// of proposals that will not all commit. Rebuild ends it.
func (b *Broker) Fence() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fenced = true
	b.wakeAllLocked()
}

// wakeAllLocked ends every long poll and topic read waiting: they find the broker
// unusable (closed, or fenced) and answer so.
func (b *Broker) wakeAllLocked() {
	for name, ch := range b.waiters {
		close(ch)
		delete(b.waiters, name)
	}
	for id, ch := range b.readers {
		close(ch)
		delete(b.readers, id)
	}
}

// Rebuild replaces the machines and the payload store with the committed state: it
// stops the background work, closes the log, and opens the data directory again as at
// start-up, applying only the committed entries its log holds (groupReplay). The caller
// (the cluster) then hands it the committed entries after Applied that only the raft
// log holds. Calls made meanwhile answer ErrRebuilding. Readers of bodies in flight fail
// with the log they read from.
func (b *Broker) Rebuild() error {
	if b.repl == nil {
		return errors.New("broker: Rebuild is for a node of a cluster")
	}
	start := time.Now()
	if err := b.reopen(nil); err != nil {
		return fmt.Errorf("broker: rebuild: %w", err)
	}
	applied := b.Applied()
	b.logger.Info("rebuilt from the committed state", "applied", applied, "duration", time.Since(start))
	return nil
}

// Barrier returns once everything the broker ran before the call is committed (on a
// single node, durable): a read made after it sees no effect a failover could undo.
func (b *Broker) Barrier(ctx context.Context) error {
	b.mu.Lock()
	t := b.lastTicket
	b.mu.Unlock()
	return b.wait(ctx, t)
}
