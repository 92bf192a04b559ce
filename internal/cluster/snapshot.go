package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/internal/replica"
)

// Snapshots and log compaction. Every node's broker checkpoints its own state, and the
// checkpoint names the last committed entry it holds (broker.CheckpointedApplied); the
// entries up to it are then in the node's own data directory twice, and its raft log
// drops them once there are more than Config.SnapshotEntries of them, keeping the last
// Config.CatchUpEntries so that a follower a little behind still catches up from the
// log. The raft snapshot this leaves is small: its index, term and configuration, and
// the members (snapData). A follower that is further behind than the leader's log
// reaches — one that was down a long time, or a member that joins — gets that snapshot
// from raft, and then fetches the state itself out of band (SnapshotPath): a backup
// (broker.Backup, an export of every machine, body and topic record, never held whole
// in memory) of a node that holds at least the snapshot's index, spooled by that node and
// downloaded resumably (transfer.go), which its broker installs (broker.Install) before
// the raft log takes the snapshot.

// SnapshotPath serves this node's state to a member that installs a raft snapshot: GET,
// with the cluster proof and ?min=INDEX, the raft index the state must hold; the answer
// is a backup (broker.Backup), in ranges if asked (transfer.go).
const SnapshotPath = "/v1/cluster/snapshot"

// resumeAtOnce is how much of a state an attempt must have received for the next to
// resume without the pause between attempts.
const resumeAtOnce = 1 << 20

// Defaults of Config's compaction.
const (
	DefaultSnapshotEntries = 10000
	DefaultCatchUpEntries  = 5000
	// The byte bounds beside the counts: raft's records share the broker's log, whose
	// segments go only once raft is done with them, so a log of few large entries (many
	// commands each) must be compacted by its size too, or it keeps every segment.
	DefaultSnapshotBytes = 64 << 20
	DefaultCatchUpBytes  = 64 << 20
)

// snapData is a raft snapshot's data: who the members were, so that a node that
// installs it knows where to send, and the founders' voters, for the members that join
// later (JoinHandler).
type snapData struct {
	Version  int      `json:"version"`
	Members  []Member `json:"members"`
	Founders []uint64 `json:"founders"`
}

// confPoint is the configuration from an entry on: the raft snapshot at an index
// carries the configuration in force there.
type confPoint struct {
	index uint64
	cs    *pb.ConfState
}

// confAt returns the configuration at index i (run's goroutine).
func (r *Raft) confAt(i uint64) *pb.ConfState {
	var cs *pb.ConfState
	for _, p := range r.confLog {
		if p.index > i {
			break
		}
		cs = p.cs
	}
	return cs
}

// noteConf records the configuration from entry index on.
func (r *Raft) noteConf(index uint64, cs *pb.ConfState) {
	r.confLog = append(r.confLog, confPoint{index: index, cs: proto.Clone(cs).(*pb.ConfState)})
}

// replayConf applies to raft the membership changes between the snapshot and the
// entry the broker has applied: raft restores its configuration from the snapshot only,
// and hands on no entry up to Config.Applied, so those changes would be lost at every
// restart.
func (r *Raft) replayConf(snapIndex, applied uint64) error {
	for lo := snapIndex + 1; lo <= applied; {
		ents, err := r.storage.Entries(lo, applied+1, 8<<20)
		if err != nil {
			return fmt.Errorf("cluster: read the raft log: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			var cs *pb.ConfState
			switch e.GetType() {
			case pb.EntryConfChange:
				var cc pb.ConfChange
				if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
					return fmt.Errorf("cluster: entry %d: %w", e.GetIndex(), err)
				}
				cs = r.rn.ApplyConfChange(&cc)
			case pb.EntryConfChangeV2:
				var cc pb.ConfChangeV2
				if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
					return fmt.Errorf("cluster: entry %d: %w", e.GetIndex(), err)
				}
				cs = r.rn.ApplyConfChange(&cc)
				for _, ch := range cc.GetChanges() {
					r.maxID = max(r.maxID, ch.GetNodeId())
				}
			default:
				continue
			}
			r.confState = cs
			r.noteConf(e.GetIndex(), cs)
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

// maybeCompact drops the raft log's entries that the broker's latest checkpoint holds,
// once there are enough of them, or once it holds a member added since the snapshot
// (run's goroutine).
func (r *Raft) maybeCompact() error {
	upto := min(r.b.CheckpointedApplied(), r.applied)
	snap := r.snapIndex
	forced := r.wantSnap > snap && upto >= r.wantSnap
	if r.wantSnap > snap && upto < r.wantSnap && !r.ckptAsked {
		// A checkpoint that holds the change, soon: Checkpoint waits for commits, which
		// this goroutine makes, so it runs on its own.
		r.ckptAsked = true
		go func() {
			if err := r.b.Checkpoint(context.Background()); err != nil {
				r.log.Debug("cluster: a checkpoint for a snapshot failed", "error", err)
			}
			select {
			case r.ckptDone <- struct{}{}:
			default:
			}
		}()
	}
	if !forced && (upto <= snap || (upto-snap < uint64(r.cfg.SnapshotEntries) && r.storage.Size(snap, upto) < uint64(r.cfg.SnapshotBytes))) {
		return nil
	}
	cs := r.confAt(upto)
	if cs == nil {
		return fmt.Errorf("compaction at %d: no configuration known there", upto)
	}
	data, err := json.Marshal(snapData{Version: 1, Members: r.Members(), Founders: r.joinFounders()})
	if err != nil {
		return err
	}
	if err := r.storage.SaveSnapshot(upto, cs, data); err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return fmt.Errorf("compaction at %d: %w", upto, err)
	}
	r.snapIndex = upto
	first, _ := r.storage.FirstIndex()
	r.forgetBefore(first)
	r.compactions++
	r.log.Debug("cluster: raft log compacted", "snapshot", upto, "first", first)
	return nil
}

// noteAdded asks for a snapshot that holds a member added at entry index, if the raft
// log no longer starts at the founding: raft sends a member only a snapshot whose
// configuration has it, and a snapshot taken before its addition does not.
func (r *Raft) noteAdded(index uint64) {
	if r.snapIndex > 1 {
		r.wantSnap = max(r.wantSnap, index)
	}
}

// guardedStorage is the raft log as raft sees it: a snapshot that leaves out a member
// of the current configuration is not offered (raft tries again later, by when
// maybeCompact has taken one that has it).
type guardedStorage struct {
	*replica.WALStorage
	r *Raft
}

func (g guardedStorage) Snapshot() (*pb.Snapshot, error) {
	snap, err := g.WALStorage.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() <= 1 {
		return snap, err
	}
	have := snap.GetMetadata().GetConfState()
	for _, ids := range [][]uint64{g.r.confState.GetVoters(), g.r.confState.GetLearners()} {
		for _, id := range ids {
			if !slices.Contains(have.GetVoters(), id) && !slices.Contains(have.GetLearners(), id) {
				return nil, raft.ErrSnapshotTemporarilyUnavailable
			}
		}
	}
	return snap, nil
}

// forgetBefore drops what run keeps of entries before first: the configurations but the
// one in force there, and this node's proposals (a replay of the broker's log never asks
// for one that old: its checkpoint holds them).
func (r *Raft) forgetBefore(first uint64) {
	k := 0
	for k+1 < len(r.confLog) && r.confLog[k+1].index < first {
		k++
	}
	r.confLog = r.confLog[k:]
	r.mu.Lock()
	for key, idx := range r.own {
		if idx < first {
			delete(r.own, key)
		}
	}
	r.mu.Unlock()
}

// installSnapshot makes the broker hold at least the state of snap, which raft has
// handed on from the leader, before the raft log takes it: it fetches a backup from the
// leader (or, failing that, any other member) and has the broker install it, trying
// again every second until one succeeds or the node stops. The members and the
// configuration come from the snapshot.
func (r *Raft) installSnapshot(ctx context.Context, snap *pb.Snapshot, hs *pb.HardState) error {
	idx := snap.GetMetadata().GetIndex()
	r.installing = &installing{snap: snap, hs: hs}
	defer func() { r.installing = nil }()
	var sd snapData
	if idx > 1 {
		if err := json.Unmarshal(snap.GetData(), &sd); err != nil || sd.Version != 1 {
			return fmt.Errorf("the snapshot at %d holds no members (%v)", idx, err)
		}
	}
	if r.b.Applied() < idx {
		if len(sd.Members) > 0 {
			r.adoptMembers(sd.Members)
		}
		start := time.Now()
		for attempt := 0; ; attempt++ {
			got, err := r.fetchState(ctx, idx)
			if err == nil {
				break
			}
			if attempt%10 == 0 || got > 0 {
				r.log.Warn("cluster: fetching the state of a snapshot failed; trying again", "snapshot", idx, "received", got, "error", err)
			}
			if got >= resumeAtOnce && ctx.Err() == nil {
				// It broke after a good part of the state arrived: resume at once
				// (transfer.go). The pause is for a member that does not answer, and for
				// a link that breaks after a few bytes every time, which would otherwise
				// be asked again without rest.
				continue
			}
			select {
			case <-ctx.Done():
				r.dropDownload()
				return fmt.Errorf("installing the snapshot at %d: %w", idx, ctx.Err())
			case <-time.After(time.Second):
			}
		}
		r.installs++
		r.log.Info("cluster: installed a snapshot of the state", "snapshot", idx, "applied", r.b.Applied(), "duration", time.Since(start))
	}
	if len(sd.Founders) > 0 {
		r.mu.Lock()
		r.founders = sd.Founders
		r.mu.Unlock()
	}
	if len(sd.Members) > 0 {
		r.adoptMembers(sd.Members)
	}
	return nil
}

// fetchState installs the state of a member that holds entry idx at least: the member
// whose spool the download under way is of, if any, then the leader, then the others.
// It returns the bytes of the state it received.
func (r *Raft) fetchState(ctx context.Context, idx uint64) (int64, error) {
	lead := r.rn.BasicStatus().Lead
	var from uint64
	if dl := r.xfer.dl; dl != nil {
		from = dl.member
	}
	var order []Member
	r.peersMu.RLock()
	for id, m := range r.peers {
		if id != r.id {
			order = append(order, m)
		}
	}
	r.peersMu.RUnlock()
	rank := func(id uint64) int {
		switch id {
		case from:
			return 0
		case lead:
			return 1
		}
		return 2
	}
	slices.SortFunc(order, func(a, b Member) int {
		if d := rank(a.ID) - rank(b.ID); d != 0 {
			return d
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var errs []error
	var got int64
	for _, m := range order {
		n, err := r.fetchFrom(ctx, m, idx)
		got += n
		if err == nil {
			return got, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		if n > 0 {
			break // resume from m first
		}
	}
	return got, errors.Join(errs...)
}

// fetchClient is Config.Client's transport without its timeout: a state takes as long
// as it takes to stream.
func (r *Raft) fetchClient() *http.Client {
	if r.cfg.Client != nil {
		return &http.Client{Transport: r.cfg.Client.Transport}
	}
	return &http.Client{}
}

// adoptMembers makes members (a snapshot's) this node's: the transport sends to them.
func (r *Raft) adoptMembers(members []Member) {
	r.peersMu.Lock()
	old := r.peers
	r.peers = map[uint64]Member{}
	for _, m := range members {
		r.peers[m.ID] = m
		r.maxID = max(r.maxID, m.ID)
	}
	if _, ok := r.peers[r.id]; !ok {
		r.peers[r.id] = old[r.id]
	}
	r.peersMu.Unlock()
	if r.net != nil {
		for id := range old {
			if _, ok := r.peers[id]; !ok {
				r.net.removePeer(id)
			}
		}
		for id, m := range r.peers {
			r.net.addPeer(id, m.URL)
		}
	}
	if err := r.saveMembers(); err != nil {
		r.log.Warn("cluster: saving the members of a snapshot", "error", err)
	}
}

// SnapshotHandler serves this node's state at SnapshotPath to a member installing a
// snapshot, proved by the cluster secret: a spool of its backup, in ranges if asked
// (transfer.go).
func (r *Raft) SnapshotHandler() http.Handler {
	return r.nodesOnly(http.MethodGet, func(w http.ResponseWriter, req *http.Request) {
		if r.b == nil {
			http.Error(w, "not started", http.StatusServiceUnavailable)
			return
		}
		r.serveSpool(w, req)
	})
}

// raftApplied is the Applied raft starts from: the broker's, but never past what raft's
// log holds committed — after an install the broker may hold entries the raft log has
// yet to receive; raft hands them on again and the broker skips them.
func raftApplied(brokerApplied, commit, snapIndex uint64) uint64 {
	return min(brokerApplied, max(commit, snapIndex))
}

// joinFounders returns the founders' voters, which a joining node starts from.
func (r *Raft) joinFounders() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.founders)
}

// DefaultSnapshotRate is Config.SnapshotRate when it is zero: enough to send a few GB in
// a minute, little enough to leave a leader's disk and network to its clients.
const DefaultSnapshotRate = 64 << 20

// pacedWriter passes writes on at no more than rate bytes a second on average, sleeping
// as it goes: a state sent to a member must not take the leader's disk and network from
// the clients it serves.
type pacedWriter struct {
	w       io.Writer
	rate    float64 // bytes a second
	start   time.Time
	written int64
	now     func() time.Time
	sleep   func(time.Duration)
}

func newPacedWriter(w io.Writer, rate int64) *pacedWriter {
	return &pacedWriter{w: w, rate: float64(rate), now: time.Now, sleep: time.Sleep}
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = p.now()
	}
	n, err := p.w.Write(b)
	p.written += int64(n)
	due := time.Duration(float64(p.written) / p.rate * float64(time.Second))
	if ahead := due - p.now().Sub(p.start); ahead > 0 {
		p.sleep(ahead)
	}
	return n, err
}
