package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// groupClient speaks the consumer-group calls of the native API (docs/api.md "Consumer
// groups") over plain HTTP with the api package's wire types: this branch's Go client has
// none, and plain requests keep each call's outcome plain too (answered, refused, or
// unknown).
type groupClient struct {
	base string // …/v1/topics/{topic}/groups/{group}
	hc   *http.Client
}

func newGroupClient(server string, hc *http.Client) *groupClient {
	return &groupClient{base: server + "/v1/topics/" + url.PathEscape(topicName) + "/groups/" + url.PathEscape(topicGroup), hc: hc}
}

// do sends one call. An error the server answered is an *api.Error (wrapped); out also
// receives the body of an error answer, where per-offset results travel.
func (g *groupClient) do(ctx context.Context, method, suffix string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s: %w", suffix, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+suffix, body)
	if err != nil {
		return fmt.Errorf("group %s%s: %w", method, suffix, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return fmt.Errorf("group %s%s: %w", method, suffix, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("group %s%s: read the answer: %w", method, suffix, err)
	}
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == nil {
			return fmt.Errorf("group %s%s: HTTP %d: %.200s", method, suffix, resp.StatusCode, data)
		}
		eb.Error.Status = resp.StatusCode
		if out != nil {
			_ = json.Unmarshal(data, out)
		}
		return fmt.Errorf("group %s%s: %w", method, suffix, eb.Error)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("group %s%s: decode the answer: %w", method, suffix, err)
		}
	}
	return nil
}

func (g *groupClient) put(ctx context.Context, cfg api.GroupConfig) error {
	return g.do(ctx, "PUT", "", cfg, nil)
}

func (g *groupClient) get(ctx context.Context) (*api.Group, error) {
	var out api.Group
	if err := g.do(ctx, "GET", "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// memberPart is what a member knows of a partition it holds.
type memberPart struct {
	epoch     uint64
	next      uint64 // the offset after the last record it was handed under epoch
	committed uint64 // its last accepted commit, or the committed offset it was granted at
}

// member is one consumer of the group: a name, a session, and what it was handed.
type member struct {
	name    string
	gc      *groupClient
	th      *topicHistory
	rng     *rand.Rand
	session string
	parts   map[int]*memberPart
}

// forget drops the session and everything handed under it, as a process that dies does;
// the next pull joins again under the same name, and the broker then hands the member's
// partitions from their committed offsets under new epochs.
func (m *member) forget() {
	m.session = ""
	m.parts = map[int]*memberPart{}
}

// pull pulls once. A pull that fails makes the member forget: the broker may have handed
// records in an answer the member never read, and committing past them would skip them.
// It reports whether a partition is being revoked (to commit before the next call).
func (m *member) pull(ctx context.Context) (revoking, ok bool) {
	wait := api.Duration(time.Second)
	req := api.PullRequest{Member: m.name, Session: m.session, Max: 1 + m.rng.IntN(100), Wait: &wait}
	sent := time.Now()
	var resp api.PullResponse
	if err := m.gc.do(ctx, "POST", "/pull", req, &resp); err != nil {
		if ctx.Err() == nil {
			m.th.mu.Lock()
			m.th.rejoins++
			m.th.mu.Unlock()
		}
		m.forget()
		return false, false
	}
	joined := m.session == ""
	m.session = resp.Session
	return m.th.pulled(m.name, sent, &resp, m.parts, joined), true
}

// commit commits, for each partition it holds, the offset after the last record it was
// handed (it processes records as it is handed them).
func (m *member) commit(ctx context.Context) {
	var offs []api.CommitOffset
	for p, st := range m.parts {
		if st.next > st.committed {
			offs = append(offs, api.CommitOffset{Partition: p, Offset: st.next, Epoch: st.epoch})
		}
	}
	if len(offs) == 0 {
		return
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i].Partition < offs[j].Partition })
	sent := time.Now()
	var out api.ReceiptsResponse
	err := m.gc.do(ctx, "POST", "/commit", api.CommitRequest{Member: m.name, Session: m.session, Offsets: offs}, &out)
	if len(out.Results) != len(offs) {
		if client.IsCode(err, api.CodeMemberUnknown) {
			m.forget() // its lease ended (a frozen broker, say): join again
		}
		return // otherwise unknown: the broker was killed, or the call timed out
	}
	m.th.committed(m.name, sent, offs, out.Results)
	for i, r := range out.Results {
		if r.OK {
			if st := m.parts[offs[i].Partition]; st != nil && st.epoch == offs[i].Epoch {
				st.committed = offs[i].Offset
			}
		}
	}
}

func (m *member) leave(ctx context.Context) {
	if m.session == "" {
		return
	}
	if m.gc.do(ctx, "POST", "/leave", api.MemberRequest{Member: m.name, Session: m.session}, nil) == nil {
		m.th.mu.Lock()
		m.th.leaves++
		m.th.mu.Unlock()
	}
	m.forget()
}

// runMember consumes the group until ctx ends. After each pull it commits (60%), lets its
// commits lag behind (35%, or never when a partition is being revoked), or crashes before
// committing (5%: it forgets its session and what it was handed, and joins again). An
// intermittent member works in spells of 2 to 21 pulls and ends each by leaving or by
// going silent (its lease then runs out), so that partitions move between members.
// Draining, it commits after every pull; the intermittent one leaves.
func runMember(ctx context.Context, gc *groupClient, th *topicHistory, name string, seed uint64, stream uint64, intermittent bool) {
	m := &member{name: name, gc: gc, th: th, rng: rand.New(rand.NewPCG(seed, stream))}
	m.forget()
	spell := 0
	for ctx.Err() == nil {
		draining := th.isDraining()
		if intermittent {
			if draining {
				m.leave(ctx)
				return
			}
			if spell == 0 {
				if m.session != "" {
					if m.rng.IntN(2) == 0 {
						m.leave(ctx)
					} else {
						m.forget() // silent: the broker waits for the lease to run out
					}
				}
				pause(ctx, time.Duration(500+m.rng.IntN(2500))*time.Millisecond)
				spell = 2 + m.rng.IntN(20)
			}
			spell--
		}
		revoking, ok := m.pull(ctx)
		if !ok {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		switch r := m.rng.IntN(100); {
		case draining:
			m.commit(ctx)
		case r < 5:
			th.mu.Lock()
			th.crashes++
			th.mu.Unlock()
			m.forget()
			pause(ctx, time.Duration(m.rng.IntN(300))*time.Millisecond)
		case r < 40 && !revoking:
			// The commit lags: the records stay handed but uncommitted for now.
		default:
			m.commit(ctx)
		}
	}
}

// pulled records a pull's answer and checks it: each partition's records go on from
// where the member's last pull under the same epoch left off (under a new epoch, from the
// committed offset), and its position is right after them. It updates parts, the
// member's view, and reports whether a partition is being revoked.
func (th *topicHistory) pulled(name string, sent time.Time, resp *api.PullResponse, parts map[int]*memberPart, joined bool) bool {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.pulls++
	byPart := map[int][]api.Record{}
	for _, r := range resp.Records {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	held := map[int]bool{}
	revoking := false
	for _, a := range resp.Assignment {
		p := a.Partition
		if p < 0 || p >= topicPartitions {
			th.violate(vTopicUnexpected, fmt.Sprintf("assigned %d", p), fmt.Sprintf("%s was assigned partition %d of a topic of %d", name, p, topicPartitions))
			continue
		}
		held[p] = true
		revoking = revoking || a.Revoking
		th.observeCommitted(p, a.Committed, sent, name+"'s pull")
		st := parts[p]
		if st == nil || st.epoch != a.Epoch || joined {
			// A grant (or a rejoin) sets the position to the committed offset, and nobody
			// else commits the partition under this epoch.
			st = &memberPart{epoch: a.Epoch, next: a.Committed, committed: a.Committed}
			parts[p] = st
		}
		for _, r := range byPart[p] {
			switch at := (pos{p, r.Offset}); {
			case r.Offset > st.next:
				th.violate(vGroupSkipped, fmt.Sprintf("pull %s", pos{p, st.next}), fmt.Sprintf("%s was handed %s under epoch %d where it expected offset %d", name, at, a.Epoch, st.next))
			case r.Offset < st.next:
				th.violate(vGroupRehanded, fmt.Sprintf("%s@%d", at, a.Epoch), fmt.Sprintf("%s was handed %s again under epoch %d (expected offset %d)", name, at, a.Epoch, st.next))
			}
			th.hand(name, pos{p, r.Offset}, r)
			if r.Offset >= st.next {
				st.next = r.Offset + 1
			}
		}
		if a.Position > st.next {
			th.violate(vGroupSkipped, fmt.Sprintf("position %s", pos{p, st.next}), fmt.Sprintf("%s's pull left partition %d at position %d under epoch %d, but handed it only to %d", name, p, a.Position, a.Epoch, st.next))
		}
		delete(byPart, p)
	}
	for p, recs := range byPart {
		th.violate(vTopicUnexpected, fmt.Sprintf("unheld %s %d", name, p), fmt.Sprintf("%s was handed %d records of partition %d, which its assignment does not list", name, len(recs), p))
		for _, r := range recs {
			if p >= 0 && p < topicPartitions {
				th.hand(name, pos{p, r.Offset}, r)
			}
		}
	}
	for p := range parts {
		if !held[p] {
			delete(parts, p)
		}
	}
	return revoking
}

// hand records that a member was handed the record at at. Callers hold mu.
func (th *topicHistory) hand(name string, at pos, r api.Record) {
	th.handouts++
	body, err := api.DecodeBody(r.Body, r.BodyBase64)
	if err != nil || len(body) == 0 {
		th.violate(vTopicUnexpected, "handed "+at.String(), fmt.Sprintf("%s was handed record %s with a body it cannot read (%v)", name, at, err))
		return
	}
	h := th.handed[at.p]
	for uint64(len(h)) <= at.o {
		h = append(h, "")
	}
	switch was := h[at.o]; {
	case was == "":
		h[at.o] = string(body)
	case was != string(body):
		th.violate(vTopicUnexpected, "handed "+at.String(), fmt.Sprintf("%s was handed %s as %q, earlier as %q", name, at, body, was))
	}
	th.handed[at.p] = h
}

// committed records a commit's per-offset answers: an accepted offset is an observation of
// the committed offset; a refusal other than a moved partition (epoch_stale) is wrong, as
// the member commits only offsets it was handed under the epoch it gives.
func (th *topicHistory) committed(name string, sent time.Time, offs []api.CommitOffset, res []api.ItemResult) {
	th.mu.Lock()
	defer th.mu.Unlock()
	for i, r := range res {
		o := offs[i]
		if r.OK {
			th.commits++
			th.observeCommitted(o.Partition, o.Offset, sent, name+"'s accepted commit")
			continue
		}
		code := "unknown"
		if r.Error != nil {
			code = r.Error.Code
		}
		th.refused[code]++
		if code == api.CodeOffsetRegressed || code == api.CodeOffsetOutOfRange {
			th.violate(vGroupRefused, fmt.Sprintf("%s %d/%d@%d", name, o.Partition, o.Offset, o.Epoch),
				fmt.Sprintf("%s's commit of %d/%d under epoch %d, all handed to it, was refused: %v", name, o.Partition, o.Offset, o.Epoch, r.Error))
		}
	}
}
