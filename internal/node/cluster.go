package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/buildinfo"
	"github.com/okiba/okiba/internal/cluster"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// ForwardedHeader marks a request a follower forwarded to the leader: a node forwards
// a request once, never one that was forwarded to it (two nodes that each think the
// other leads would pass it back and forth).
const ForwardedHeader = "Okiba-Forwarded-By"

// openCluster joins the node to its cluster before the broker opens: the data
// directory gets the cluster's secret, the raft log opens (bootstrapping a new
// cluster), and the broker will run through it.
func (n *Node) openCluster(bcfg *broker.Config) error {
	c := n.cfg
	if err := cluster.PrepareDataDir(n.rt.FS, c.Data, c.clusterSecret); err != nil {
		return err
	}
	ccfg := cluster.Config{Name: c.Cluster.Node, Peers: c.peers, Join: c.Cluster.Join, Dir: c.Data, FS: n.rt.FS,
		Secret: c.clusterSecret, Logger: n.log, SnapshotEntries: c.Cluster.SnapshotEntries, CatchUpEntries: c.Cluster.CatchUpEntries,
		Version: clusterVersion(), SnapshotRate: int64(c.Cluster.SnapshotRate)}
	n.fwd = forwardTransport
	if c.tls != nil && c.tls.cluster != nil {
		// Mutual TLS between the members: every call to another node, raft's and the
		// forwarded requests alike, trusts the cluster's authority and shows this node's
		// certificate.
		n.fwd = n.clusterTransport(c.tls)
		ccfg.Client = &http.Client{Timeout: 5 * time.Second, Transport: n.fwd}
	}
	r, err := cluster.Open(ccfg)
	if err != nil {
		return err
	}
	n.raft = r
	bcfg.Replication = r
	n.leaders = map[string]*httputil.ReverseProxy{}
	n.log.Info("cluster member", "node", c.Cluster.Node, "members", len(r.Members()))
	return nil
}

// proxyTo returns the reverse proxy that forwards to the member named name at u.
func (n *Node) proxyTo(name, u string) (*httputil.ReverseProxy, error) {
	n.leadersMu.Lock()
	defer n.leadersMu.Unlock()
	if p := n.leaders[u]; p != nil {
		return p, nil
	}
	target, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("cluster: member %s: %w", name, err)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // what the client signed (SQS) and addressed
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, n.cfg.Cluster.Node)
		},
		Transport:     n.fwd,
		FlushInterval: -1, // long polls and backups stream as they come
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			n.log.Warn("cluster: forwarding to the leader failed", "leader", name, "error", err)
			reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
				Message: fmt.Sprintf("the leader, %s, did not answer the forwarded request: retry", name)})
		},
	}
	n.leaders[u] = p
	return p, nil
}

// forwardTransport carries forwarded requests: a leader that cannot be reached (dead, or
// cut off by a partition, where a connection attempt hangs rather than fails) answers
// 503 within a second, for the client to try again once an election has found another,
// rather than hold the request until the client gives up on it.
var forwardTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = 64
	return t
}()

// serveJoin answers a node asking to join: on the leader itself, else forwarded to it.
func (n *Node) serveJoin(w http.ResponseWriter, r *http.Request) {
	if n.raft.Term() != 0 {
		n.raft.JoinHandler().ServeHTTP(w, r)
		return
	}
	name, u, self := n.raft.Leader()
	if u == "" || self || r.Header.Get(ForwardedHeader) != "" {
		http.Error(w, "no leader ready: retry", http.StatusServiceUnavailable)
		return
	}
	p, err := n.proxyTo(name, u)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	p.ServeHTTP(w, r)
}

// MembersPath is the admin API of membership: GET lists, POST {"name","url"} adds a
// learner, DELETE MembersPath/NAME removes one (admin permission; on the leader).
const MembersPath = "/v1/cluster/members"

// serveMembers answers the membership admin API.
func (n *Node) serveMembers(w http.ResponseWriter, r *http.Request) {
	if err := auth.Require(r.Context(), access.Admin, access.Resource{}); err != nil {
		reply.Error(w, service.ErrorOf(n.log, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	var members []cluster.Member
	var err error
	switch name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, MembersPath), "/"); {
	case r.Method == http.MethodGet && name == "":
		members = n.raft.Members()
	case r.Method == http.MethodPost && name == "":
		var m cluster.Member
		if derr := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&m); derr != nil || m.Name == "" ||
			!(strings.HasPrefix(m.URL, "http://") || strings.HasPrefix(m.URL, "https://")) {
			reply.Error(w, &api.Error{Code: api.CodeInvalidRequest, Message: `want {"name":"n4","url":"http://10.0.0.4:7070"}: the member's name and the URL its port answers on`})
			return
		}
		members, err = n.raft.AddMember(ctx, m.Name, m.URL)
	case r.Method == http.MethodDelete && name != "":
		members, err = n.raft.RemoveMember(ctx, name)
	default:
		reply.Error(w, &api.Error{Code: api.CodeMethod, Message: "GET or POST " + MembersPath + ", DELETE " + MembersPath + "/NAME"})
		return
	}
	switch {
	case errors.Is(err, cluster.ErrMemberUnknown):
		reply.Error(w, &api.Error{Code: api.CodeNotFound, Message: err.Error()})
	case errors.Is(err, cluster.ErrMemberExists):
		reply.Error(w, &api.Error{Code: api.CodeInvalidRequest, Message: err.Error()})
	case err != nil:
		reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second), Message: err.Error() + "; retry"})
	default:
		reply.JSON(w, http.StatusOK, map[string]any{"members": members})
	}
}

// forward serves r on the leader when this node does not lead, and reports whether it
// did. Every interface is forwarded but /healthz and /metrics, which describe this
// node: a follower's state may lag, and only the leader runs commands.
func (n *Node) forward(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" || n.raft.Term() != 0 {
		return false
	}
	if r.Method == http.MethodGet && r.URL.Query().Get("stale") == "true" && strings.HasPrefix(r.URL.Path, "/v1/") {
		// A stale read is served here, from what this follower has applied (the native
		// API skips the barrier and says so).
		w.Header().Set(nativeapi.AppliedHeader, strconv.FormatUint(n.broker.Applied(), 10))
		return false
	}
	name, leaderURL, self := n.raft.Leader()
	switch {
	case name == "" || self:
		reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
			Message: "the cluster has no leader ready: an election is under way, or a quorum of its nodes is unreachable; retry"})
	case r.Header.Get(ForwardedHeader) != "":
		reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
			Message: fmt.Sprintf("forwarded by %s, which takes this node for the leader, and it is not (a leadership change): retry", r.Header.Get(ForwardedHeader))})
	case r.URL.Path == api.StreamPath:
		// Not proxied: a stream would die with the leader it led to, and hold the
		// follower's connections besides. The client falls back to plain HTTP, which is
		// forwarded, and tries a stream again later (the header says where to).
		w.Header().Set(LeaderHeader, n.leaderURL(name))
		reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
			Message: fmt.Sprintf("this node follows %s: open the stream there (%s)", name, n.leaderURL(name))})
	default:
		p, err := n.proxyTo(name, leaderURL)
		if err != nil {
			reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second), Message: err.Error()})
			break
		}
		// A leader that stops leading while the request is on its way (a partition: its
		// connection neither answers nor breaks) ends the forward with 503 for the client to
		// retry, rather than hold it until the client gives up.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		changed := n.raft.LeaderChanged()
		go func() {
			select {
			case <-changed:
				cancel()
			case <-ctx.Done():
			}
		}()
		p.ServeHTTP(w, r.WithContext(ctx))
	}
	return true
}

// LeaderHeader, on a follower's refusal of a stream, is the leader's URL.
const LeaderHeader = "Okiba-Leader"

func (n *Node) leaderURL(name string) string {
	for _, m := range n.raft.Members() {
		if m.Name == name {
			return m.URL
		}
	}
	return ""
}

// Cluster returns the node's cluster status, nil for a single node.
func (n *Node) Cluster() *cluster.Status {
	if n.raft == nil {
		return nil
	}
	st := n.raft.Status()
	return &st
}

func (n *Node) clusterHealth() *api.ClusterHealth {
	st := n.raft.Status()
	h := &api.ClusterHealth{Node: st.Node, Leader: st.Leader, Term: st.Term, Commit: st.Commit, Applied: st.Applied, Members: st.Members,
		Lag: st.Lag, Snapshot: st.Snapshot}
	switch {
	case st.Leading:
		h.Role = "leader"
	case st.Leader != "" && st.Leader != st.Node:
		h.Role = "follower"
	default:
		h.Role = "no_leader"
	}
	return h
}

func (n *Node) clusterStats() metrics.ClusterStats {
	st := n.raft.Status()
	return metrics.ClusterStats{Term: st.Term, Leading: st.Leading, HasLeader: st.Leader != "", Commit: st.Commit,
		Applied: st.Applied, Lag: st.Lag, Rebuilds: st.Rebuilds,
		Snapshot: st.Snapshot, Compactions: st.Compactions, Installs: st.Installs, SnapshotsSent: st.SnapshotsSent,
		SnapshotResumes: st.SnapshotResumes, Entries: st.Proposed, Commands: st.Commands}
}

// readBarrier makes a read on the leader linearizable: raft confirms the lead after the
// read arrived (ReadIndex), and everything the broker ran before it is committed.
func (n *Node) readBarrier(ctx context.Context) error {
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("%w (%v)", broker.ErrNotLeader, err)
	}
	return n.broker.Barrier(ctx)
}

// clusterVersion names the build a joining node must match: the release version and,
// for a build that is not a release's, its commit.
func clusterVersion() string {
	b := buildinfo.Get()
	if b.Version == "devel" || b.Version == "" {
		return b.Version + "+" + b.Commit
	}
	return b.Version
}
