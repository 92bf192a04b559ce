package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// RaftPath is where a node receives the other nodes' raft messages: POST, a body of
// messages each as a uvarint length and raft's protobuf encoding, and the header
// SecretHeader proving the sender knows the cluster secret. The node routes it before
// its authentication step, which it does not take part in.
const RaftPath = "/v1/cluster/raft"

// SecretHeader carries hex(HMAC-SHA256(cluster secret, "okiba cluster transport")): the
// secret itself never travels.
const SecretHeader = "Okiba-Cluster-Proof"

// maxBatch bounds one POST's body, both ways: a sender sends what it has queued up to
// it, a receiver refuses more.
const maxBatch = 64 << 20

func proof(secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("okiba cluster transport"))
	return hex.EncodeToString(mac.Sum(nil))
}

// transport sends raft messages to the other nodes: one sender goroutine per peer,
// each POSTing what has queued for it since its last POST, so that messages to one peer
// keep their order and a slow peer holds up no other. A full queue drops messages, a
// failed POST drops its batch and tells raft the peer is unreachable: raft retransmits
// what matters.
type transport struct {
	r      *Raft
	proof  string
	client *http.Client
	mu     sync.Mutex // guards peers
	peers  map[uint64]*peerQueue
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

type peerQueue struct {
	url  string
	mu   sync.Mutex
	msgs []*pb.Message
	wake chan struct{}
	stop chan struct{} // closed when the member is removed
}

// peerQueueMax bounds the messages waiting for one peer.
const peerQueueMax = 4096

func newTransport(r *Raft) *transport {
	c := r.cfg.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	t := &transport{r: r, proof: proof(r.cfg.Secret), client: c, peers: map[uint64]*peerQueue{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	r.peersMu.RLock()
	for id, m := range r.peers {
		if id != r.id {
			t.addPeer(id, m.URL)
		}
	}
	r.peersMu.RUnlock()
	return t
}

// addPeer starts sending to a member (run's goroutine, or newTransport's).
func (t *transport) addPeer(id uint64, url string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == t.r.id || t.peers[id] != nil {
		return
	}
	q := &peerQueue{url: url, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	t.peers[id] = q
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.sender(id, q)
	}()
}

// removePeer stops sending to a member removed.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.peers[id]; q != nil {
		close(q.stop)
		delete(t.peers, id)
	}
}

func (t *transport) close() {
	t.cancel()
	t.wg.Wait()
}

// send queues msgs for their peers. It does not block.
func (t *transport) send(msgs []*pb.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		q := t.peers[m.GetTo()]
		if q == nil {
			continue
		}
		q.mu.Lock()
		if len(q.msgs) < peerQueueMax {
			q.msgs = append(q.msgs, m)
		}
		q.mu.Unlock()
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

func (t *transport) sender(id uint64, q *peerQueue) {
	var buf bytes.Buffer
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-q.stop:
			return
		case <-q.wake:
		}
		for {
			q.mu.Lock()
			msgs := q.msgs
			q.msgs = nil
			q.mu.Unlock()
			if len(msgs) == 0 {
				break
			}
			buf.Reset()
			var scratch []byte
			snaps := 0
			for _, m := range msgs {
				if m.GetType() == pb.MessageType_MsgSnap {
					snaps++
				}
				b, err := proto.Marshal(m)
				if err != nil {
					continue
				}
				scratch = binary.AppendUvarint(scratch[:0], uint64(len(b)))
				buf.Write(scratch)
				buf.Write(b)
			}
			err := t.post(q.url, buf.Bytes())
			if err != nil {
				select {
				case t.r.fails <- id:
				default:
				}
				// A peer that is down is tried again with the next messages; raft sends
				// heartbeats often enough.
			}
			for range snaps { // raft waits to hear of every snapshot it sent
				select {
				case t.r.snaps <- snapReport{to: id, ok: err == nil}:
				case <-t.ctx.Done():
				}
			}
		}
	}
}

func (t *transport) post(url string, body []byte) error {
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, url+RaftPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(SecretHeader, t.proof)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("cluster: %s answered %d", url, resp.StatusCode)
	}
	return nil
}

// nodesOnly serves h to the other nodes only: requests of method whose SecretHeader
// proves the cluster secret (compared in constant time); what every path of the nodes'
// own (raft, join, snapshot, peers) checks first.
func (r *Raft) nodesOnly(method string, h http.HandlerFunc) http.Handler {
	want := []byte(proof(r.cfg.Secret))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != method {
			w.Header().Set("Allow", method)
			http.Error(w, method+" only", http.StatusMethodNotAllowed)
			return
		}
		if !hmac.Equal([]byte(req.Header.Get(SecretHeader)), want) {
			http.Error(w, "this path is for the cluster's nodes, which prove they know its secret", http.StatusUnauthorized)
			return
		}
		h(w, req)
	})
}

// Handler receives the other nodes' messages at RaftPath.
func (r *Raft) Handler() http.Handler {
	return r.nodesOnly(http.MethodPost, func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, maxBatch+1))
		if err != nil || len(body) > maxBatch {
			http.Error(w, "the batch could not be read, or is larger than 64 MiB", http.StatusBadRequest)
			return
		}
		msgs, err := decodeBatch(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !r.Step(msgs) {
			http.Error(w, "busy: the messages were dropped", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func decodeBatch(b []byte) ([]*pb.Message, error) {
	var out []*pb.Message
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("cluster: a malformed batch of messages")
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(b[k:k+int(n)], m); err != nil {
			return nil, fmt.Errorf("cluster: a malformed message: %w", err)
		}
		out = append(out, m)
		b = b[k+int(n):]
	}
	return out, nil
}
