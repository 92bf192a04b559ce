package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/internal/vfs"
)

// Membership. The founding members come from Peers at the first start; after it, the
// log decides: a node joins as a learner (raft's learner flow: it receives the log but
// does not vote), and the leader promotes it to a voter once it has caught up; a member
// is removed by a configuration change too. Each change carries the member it concerns
// (its name, URL and raft id) in its context, so that every node learns where a new
// member listens from the log itself. Every node keeps the members it knows in
// DATA/raft/members.json, which is the truth at its next start. Raft ids are handed out
// by the leader, one more than the largest ever seen, and never reused.

// Member is one member of the cluster.
type Member struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"`
	URL  string `json:"url"`
	// Learner: not yet a voter (it is catching up). Set in Members' answers only.
	Learner bool `json:"learner,omitempty"`
	// Started: the member has run and acknowledged entries (the leader records it in the
	// log, once): its data directory holds the cluster's log, so an empty one means it
	// was lost, and the member must not bootstrap again (probePeers).
	Started bool `json:"started,omitempty"`
	// Version is, in a join's request, the joining node's okiba version (Config.Version):
	// the leader refuses another than its own.
	Version string `json:"version,omitempty"`
}

// ErrVersionMismatch: a node of another okiba version asked to join. Every member runs
// the same version: records a newer one writes, an older one cannot apply.
var ErrVersionMismatch = errors.New("every member of a cluster runs the same okiba version")

// JoinPath is where a node asks to join: POST {"name","url"}, with the cluster proof.
const JoinPath = "/v1/cluster/join"

// Errors of membership changes.
var (
	ErrMemberExists  = errors.New("a member of that name with another URL exists")
	ErrMemberUnknown = errors.New("no member of that name")
	ErrHandedOver    = errors.New("this node led and was asked to remove itself: it has handed the lead over; ask again (the new leader removes it)")
	ErrChangePending = errors.New("a membership change is under way: retry once it is applied")
)

type membersFile struct {
	Version int      `json:"version"`
	Members []Member `json:"members"`
	// Founders are the voters of the cluster's first snapshot, which a joining node
	// starts from (a join's answer only).
	Founders []uint64 `json:"founders,omitempty"`
}

func (r *Raft) membersPath() string { return filepath.Join(r.cfg.Dir, "raft", "members.json") }

// loadMembers reads the members file: version 2, or the first version's map of names
// to ids (whose URLs are in Peers). stored says a file was there.
func (r *Raft) loadMembers() ([]Member, bool, error) {
	data, err := vfs.ReadFile(r.cfg.FS, r.membersPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var f membersFile
	if json.Unmarshal(data, &f) == nil && f.Version == 2 {
		return f.Members, true, nil
	}
	var v1 map[string]uint64
	if err := json.Unmarshal(data, &v1); err != nil {
		return nil, false, fmt.Errorf("cluster: %s: %w", r.membersPath(), err)
	}
	urls := map[string]string{}
	for _, p := range r.cfg.Peers {
		urls[p.Name] = p.URL
	}
	var out []Member
	for name, id := range v1 {
		if urls[name] == "" {
			return nil, false, fmt.Errorf("cluster: member %q of %s is not among --peers", name, r.membersPath())
		}
		out = append(out, Member{ID: id, Name: name, URL: urls[name]})
	}
	return out, true, nil
}

// membersOfPeers numbers the founding members from 1 in the order of Peers.
func membersOfPeers(peers []Peer) ([]Member, error) {
	var out []Member
	seen := map[string]bool{}
	for i, p := range peers {
		if p.Name == "" || p.URL == "" {
			return nil, fmt.Errorf("cluster: peer %d has no name or no URL", i+1)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("cluster: peer %q is named twice", p.Name)
		}
		seen[p.Name] = true
		out = append(out, Member{ID: uint64(i + 1), Name: p.Name, URL: p.URL})
	}
	return out, nil
}

func (r *Raft) saveMembers() error {
	r.peersMu.RLock()
	f := membersFile{Version: 2}
	for _, m := range r.peers {
		f.Members = append(f.Members, m)
	}
	r.peersMu.RUnlock()
	slices.SortFunc(f.Members, func(a, b Member) int { return int(a.ID) - int(b.ID) })
	data, _ := json.MarshalIndent(f, "", "  ")
	if err := vfs.WriteFile(r.cfg.FS, r.membersPath(), vfs.FileMode, data); err != nil {
		return err
	}
	return r.cfg.FS.SyncDir(filepath.Dir(r.membersPath()))
}

func (r *Raft) member(id uint64) Member {
	r.peersMu.RLock()
	defer r.peersMu.RUnlock()
	return r.peers[id]
}

func (r *Raft) nameOf(id uint64) string { return r.member(id).Name }

func (r *Raft) memberNames() []string {
	r.peersMu.RLock()
	defer r.peersMu.RUnlock()
	var out []string
	for _, m := range r.peers {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// Members returns the members this node knows, learners marked (on the leader, where
// raft's configuration says who votes).
func (r *Raft) Members() []Member {
	r.statusMu.Lock()
	learners := r.status.learners
	r.statusMu.Unlock()
	r.peersMu.RLock()
	defer r.peersMu.RUnlock()
	var out []Member
	for _, m := range r.peers {
		m.Learner = slices.Contains(learners, m.ID)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return int(a.ID) - int(b.ID) })
	return out
}

// PeersPath answers GET with the members this node knows (a members file), proved by
// the cluster secret: what a node about to bootstrap asks its peers (probePeers).
const PeersPath = "/v1/cluster/peers"

// ErrLostLog: this node is about to bootstrap on an empty data directory, and a peer
// says it has run in the cluster before — its data directory, and the votes and entries
// it acknowledged, are gone. Raft's safety needs them: remove it, then join it anew.
var ErrLostLog = errors.New("this member has run in the cluster before, and its data directory is empty: its log is lost")

// probePeers asks the founding peers, before this node bootstraps on an empty data
// directory, whether it has run before: a founder that starts late bootstraps as the
// others did, a member whose data directory was lost must not (it would vote and count
// in majorities without the entries it acknowledged). A peer that does not answer is
// taken for one that has not started either.
func (r *Raft) probePeers() error {
	c := &http.Client{Timeout: 2 * time.Second}
	if r.cfg.Client != nil {
		c = &http.Client{Timeout: 2 * time.Second, Transport: r.cfg.Client.Transport}
	}
	type answer struct {
		peer string
		err  error
	}
	answers := make(chan answer, len(r.cfg.Peers))
	n := 0
	for _, p := range r.cfg.Peers {
		if p.Name == r.cfg.Name {
			continue
		}
		n++
		go func() {
			req, _ := http.NewRequest(http.MethodGet, p.URL+PeersPath, nil)
			req.Header.Set(SecretHeader, proof(r.cfg.Secret))
			resp, err := c.Do(req)
			if err != nil {
				answers <- answer{p.Name, nil}
				return
			}
			defer resp.Body.Close()
			var f membersFile
			if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&f) != nil {
				answers <- answer{p.Name, nil}
				return
			}
			for _, m := range f.Members {
				if m.Name == r.cfg.Name && m.Started {
					answers <- answer{p.Name, fmt.Errorf("cluster: %w (%s says %s started): remove it (okiba cluster remove %s), then start it on the empty directory with --join URL-OF-A-MEMBER",
						ErrLostLog, p.Name, r.cfg.Name, r.cfg.Name)}
					return
				}
			}
			answers <- answer{p.Name, nil}
		}()
	}
	for range n {
		if a := <-answers; a.err != nil {
			return a.err
		}
	}
	return nil
}

// PeersHandler answers PeersPath.
func (r *Raft) PeersHandler() http.Handler {
	return r.nodesOnly(http.MethodGet, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(membersFile{Version: 2, Members: r.Members()})
	})
}

// join asks Config.Join's node to add this one, and returns the members it answers.
func (r *Raft) join() ([]Member, []uint64, error) {
	self := ""
	for _, p := range r.cfg.Peers {
		if p.Name == r.cfg.Name {
			self = p.URL
		}
	}
	if self == "" {
		return nil, nil, fmt.Errorf("cluster: joining needs this node's own URL (--peers %s=URL)", r.cfg.Name)
	}
	body, _ := json.Marshal(Member{Name: r.cfg.Name, URL: self, Version: r.cfg.Version})
	c := r.cfg.Client
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	var lastErr error
	for try := 0; try < 30; try++ {
		req, _ := http.NewRequest(http.MethodPost, r.cfg.Join+JoinPath, bytes.NewReader(body))
		req.Header.Set(SecretHeader, proof(r.cfg.Secret))
		resp, err := c.Do(req)
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var f membersFile
				if err := json.Unmarshal(data, &f); err != nil || len(f.Founders) == 0 {
					return nil, nil, fmt.Errorf("cluster: join: a malformed answer (%v)", err)
				}
				r.log.Info("cluster: joined as a learner", "via", r.cfg.Join, "members", len(f.Members))
				return f.Members, f.Founders, nil
			}
			lastErr = fmt.Errorf("%s answered %d: %s", r.cfg.Join, resp.StatusCode, bytes.TrimSpace(data))
			if resp.StatusCode != http.StatusServiceUnavailable {
				return nil, nil, fmt.Errorf("cluster: join: %w", lastErr)
			}
		} else {
			lastErr = err
		}
		time.Sleep(time.Second)
	}
	return nil, nil, fmt.Errorf("cluster: join: %w", lastErr)
}

// confReq is a membership change asked of the leader; done gets its end.
type confReq struct {
	add    *Member // a learner to add
	remove string  // a member to remove, by name
	done   chan confAnswer
}

type confAnswer struct {
	members []Member
	err     error
}

// AddMember adds a learner (the leader proposes it; a follower answers ErrNoLeader) and
// returns the members once the change is applied. Adding a member that exists with the
// same URL answers the members again: a join retried.
func (r *Raft) AddMember(ctx context.Context, name, url string) ([]Member, error) {
	return r.change(ctx, confReq{add: &Member{Name: name, URL: url}})
}

// RemoveMember removes a member; removing the leader hands the lead over first and
// answers ErrHandedOver, for the caller to ask again.
func (r *Raft) RemoveMember(ctx context.Context, name string) ([]Member, error) {
	return r.change(ctx, confReq{remove: name})
}

func (r *Raft) change(ctx context.Context, q confReq) ([]Member, error) {
	if r.Term() == 0 {
		return nil, ErrNoLeader
	}
	q.done = make(chan confAnswer, 1)
	select {
	case r.confs <- q:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case a := <-q.done:
		return a.members, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// propose starts a membership change (run's goroutine); the answer comes when it is
// applied (applyConf), or now if it is refused.
func (r *Raft) proposeConf(q confReq) {
	if r.confWait != nil {
		q.done <- confAnswer{err: ErrChangePending}
		return
	}
	var cc pb.ConfChangeV2
	var m Member
	switch {
	case q.add != nil:
		r.peersMu.RLock()
		var maxID uint64
		for _, p := range r.peers {
			maxID = max(maxID, p.ID)
			if p.Name == q.add.Name {
				m = p
			}
		}
		r.peersMu.RUnlock()
		if m.ID != 0 {
			if m.URL != q.add.URL {
				q.done <- confAnswer{err: fmt.Errorf("%w: %s at %s", ErrMemberExists, m.Name, m.URL)}
			} else {
				q.done <- confAnswer{members: r.Members()}
			}
			return
		}
		m = Member{ID: max(maxID, r.maxID) + 1, Name: q.add.Name, URL: q.add.URL}
		cc.Changes = []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(m.ID)}}
	default:
		r.peersMu.RLock()
		for _, p := range r.peers {
			if p.Name == q.remove {
				m = p
			}
		}
		r.peersMu.RUnlock()
		if m.ID == 0 {
			q.done <- confAnswer{err: fmt.Errorf("%w: %q", ErrMemberUnknown, q.remove)}
			return
		}
		if m.ID == r.id {
			r.transfer()
			q.done <- confAnswer{err: ErrHandedOver}
			return
		}
		cc.Changes = []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(m.ID)}}
	}
	cc.Context, _ = json.Marshal(m)
	if err := r.rn.ProposeConfChange(&cc); err != nil {
		q.done <- confAnswer{err: fmt.Errorf("cluster: %w", err)}
		return
	}
	r.confWait = &q
}

// promote proposes a learner that has caught up as a voter, or records that a voter has
// started (the leader, once a tick; one change at a time).
func (r *Raft) promote() {
	if r.confWait != nil || r.term.Load() == 0 {
		return
	}
	st := r.rn.Status()
	voters := make([]uint64, 0, len(st.Config.Voters[0]))
	for id := range st.Config.Voters[0] {
		voters = append(voters, id)
	}
	slices.Sort(voters)
	for _, id := range voters {
		m := r.member(id)
		pr, ok := st.Progress[id]
		if m.Started || m.Name == "" || !ok || (id != r.id && pr.Match <= 1) {
			continue
		}
		// A voter that acknowledged an entry past the founding has a log: recorded by a
		// change that adds it again (for raft, no change) with the member marked.
		m.Started = true
		cc := pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: proto.Uint64(id)}}}
		cc.Context, _ = json.Marshal(m)
		if err := r.rn.ProposeConfChange(&cc); err == nil {
			r.confWait = &confReq{}
		}
		return
	}
	learners := make([]uint64, 0, len(st.Config.Learners))
	for id := range st.Config.Learners {
		learners = append(learners, id)
	}
	slices.Sort(learners)
	for _, id := range learners {
		pr, ok := st.Progress[id]
		if !ok || pr.Match < st.GetCommit() {
			continue
		}
		m := r.member(id)
		m.Started = true // caught up: it holds the log
		cc := pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: proto.Uint64(id)}}}
		cc.Context, _ = json.Marshal(m)
		if err := r.rn.ProposeConfChange(&cc); err == nil {
			r.log.Info("cluster: promoting a learner that caught up", "member", m.Name)
			r.confWait = &confReq{} // nobody waits; holds off other changes
		}
		return
	}
}

// applyConf applies a committed membership change: raft's configuration, and the
// member it names in this node's members and transport.
func (r *Raft) applyConf(index uint64, cc *pb.ConfChangeV2) error {
	cs := r.rn.ApplyConfChange(cc)
	var m Member
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &m); err != nil {
			return fmt.Errorf("membership change: %w", err)
		}
	}
	for _, ch := range cc.GetChanges() {
		switch ch.GetType() {
		case pb.ConfChangeType_ConfChangeAddNode, pb.ConfChangeType_ConfChangeAddLearnerNode:
			if ch.GetType() == pb.ConfChangeType_ConfChangeAddLearnerNode {
				r.noteAdded(index) // a new member: every one is a learner first
			}
			if m.ID == ch.GetNodeId() && m.Name != "" {
				r.peersMu.Lock()
				r.peers[m.ID] = m
				r.peersMu.Unlock()
				if r.net != nil {
					r.net.addPeer(m.ID, m.URL)
				}
			}
		case pb.ConfChangeType_ConfChangeRemoveNode:
			id := ch.GetNodeId()
			r.peersMu.Lock()
			delete(r.peers, id)
			r.peersMu.Unlock()
			if r.net != nil {
				r.net.removePeer(id)
			}
			if id == r.id {
				r.log.Warn("cluster: this node was removed from the cluster; stop it")
			}
		}
		r.maxID = max(r.maxID, ch.GetNodeId())
	}
	r.confState = cs
	r.noteConf(index, cs)
	if err := r.saveMembers(); err != nil {
		return err
	}
	r.log.Info("cluster: membership changed", "members", r.memberNames(), "voters", cs.GetVoters(), "learners", cs.GetLearners())
	if w := r.confWait; w != nil {
		r.confWait = nil
		if w.done != nil {
			w.done <- confAnswer{members: r.Members()}
		}
	}
	return nil
}

// failConf ends a change waiting when the lead is lost.
func (r *Raft) failConf(err error) {
	if w := r.confWait; w != nil {
		r.confWait = nil
		if w.done != nil {
			w.done <- confAnswer{err: err}
		}
	}
}

// JoinHandler answers a node that asks to join (JoinPath), proved by the cluster secret.
func (r *Raft) JoinHandler() http.Handler {
	return r.nodesOnly(http.MethodPost, func(w http.ResponseWriter, req *http.Request) {
		var m Member
		if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&m); err != nil || m.Name == "" || m.URL == "" {
			http.Error(w, `want {"name":"…","url":"http://…"}`, http.StatusBadRequest)
			return
		}
		if m.Version != r.cfg.Version {
			http.Error(w, fmt.Sprintf("%v: this cluster runs %q, %s runs %q; start it with the cluster's version",
				ErrVersionMismatch, r.cfg.Version, m.Name, m.Version), http.StatusConflict)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
		defer cancel()
		members, err := r.AddMember(ctx, m.Name, m.URL)
		switch {
		case errors.Is(err, ErrNoLeader) || errors.Is(err, ErrChangePending) || errors.Is(err, context.DeadlineExceeded):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusConflict)
		default:
			// The joining node starts from the founding snapshot; if the log no longer
			// reaches back to it, raft sends the node a later one (snapshot.go).
			founders := r.joinFounders()
			if len(founders) == 0 {
				http.Error(w, "this node does not know the cluster's founders", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(membersFile{Version: 2, Members: members, Founders: founders})
		}
	})
}

// snapReport says whether a snapshot sent to a peer arrived.
type snapReport struct {
	to uint64
	ok bool
}

func (r *Raft) reportSnap(to uint64, ok bool) {
	if ok {
		r.snapsSent++
	}
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	r.rn.ReportSnapshot(to, st)
}
