package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
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

// RaftStreamPath is where a node keeps one long POST open to each other node: its
// chunked body carries the messages, in RaftPath's framing, as they come, and it is
// answered only when the sender ends it. A message thus costs a chunk on a connection
// already open, not a request and its answer; and the sender need not wait for one
// batch's answer before it sends the next.
const RaftStreamPath = "/v1/cluster/raft/stream"

// maxBatch bounds one POST's body, both ways: a sender sends what it has queued up to
// it, a receiver refuses more. On a stream it bounds one message.
const maxBatch = 64 << 20

const (
	// streamWriteTimeout ends a stream that took a batch no further for this long: its
	// peer stopped reading (paused, or its buffers are full). The next batch opens
	// another. Where the system allows it (Linux), a connection whose sent bytes go
	// unacknowledged for as long is ended by the kernel too, which notices a peer cut
	// off by a partition long before the buffers fill.
	streamWriteTimeout = 5 * time.Second
	// streamIdle ends, on the receiving side, a stream that brought nothing for this
	// long, so that one of a sender that vanished without a word does not linger.
	// Heartbeats keep a leader's streams busy many times a second.
	streamIdle = 2 * time.Minute
	// legacyRetry is how long a peer that refused the stream (a node of a version
	// before it) gets one POST per batch at RaftPath before the stream is tried again.
	legacyRetry = time.Minute
)

func proof(secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("okiba cluster transport"))
	return hex.EncodeToString(mac.Sum(nil))
}

// transport sends raft messages to the other nodes: one sender goroutine per peer,
// each writing what has queued for it since its last write into its stream to the peer
// (RaftStreamPath), so that messages to one peer keep their order and a slow peer holds
// up no other. A snapshot's message is POSTed alone at RaftPath, because raft wants to
// hear whether it arrived; so is every batch to a peer that does not take the stream.
// A full queue drops messages, a failed write or POST drops its batch and tells raft
// the peer is unreachable: raft retransmits what matters.
type transport struct {
	r      *Raft
	proof  string
	client *http.Client // POSTs, each bounded by the client's timeout
	stream *http.Client // streams: no timeout, they last
	mu     sync.Mutex   // guards peers
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

	renew atomic.Bool // the open stream ends before the next write (renewStreams)

	// The sender goroutine's own:
	st          *peerStream // the open stream, if any
	legacyUntil time.Time   // until then, POSTs: the peer refused the stream
}

// peerQueueMax bounds the messages waiting for one peer.
const peerQueueMax = 4096

func newTransport(r *Raft) *transport {
	c := r.cfg.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	t := &transport{r: r, proof: proof(r.cfg.Secret), client: c, stream: streamClient(c), peers: map[uint64]*peerQueue{}}
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

// renewStreams has every peer's stream end before its next write, so that the next
// opens a new connection: one with the certificate this node now shows.
func (t *transport) renewStreams() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.peers {
		q.renew.Store(true)
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
	defer func() {
		if q.st != nil {
			q.st.end()
		}
	}()
	var buf []byte
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
			buf = buf[:0]
			for _, m := range msgs {
				if m.GetType() != pb.MessageType_MsgSnap {
					buf = appendFrame(buf, m)
					continue
				}
				// Raft waits to hear of every snapshot it sent: what precedes it goes
				// first, then it alone, in a POST whose answer says it arrived.
				if len(buf) > 0 {
					t.deliver(id, q, buf, false)
					buf = buf[:0]
				}
				err := t.deliver(id, q, appendFrame(nil, m), true)
				select {
				case t.r.snaps <- snapReport{to: id, ok: err == nil}:
				case <-t.ctx.Done():
				}
			}
			if len(buf) > 0 {
				t.deliver(id, q, buf, false)
			}
		}
	}
}

// appendFrame appends m in the transport's framing: a uvarint length, then m.
func appendFrame(b []byte, m *pb.Message) []byte {
	start := len(b)
	b = binary.AppendUvarint(b, uint64(proto.Size(m)))
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil { // raft's own messages marshal; were one not to, it is dropped
		return b[:start]
	}
	return b
}

// deliver sends one batch of frames to the peer, by its stream unless post says (or
// the peer wants) a POST, and tells raft when the peer could not be reached: a peer
// that is down is tried again with the next messages, which raft sends often enough.
func (t *transport) deliver(id uint64, q *peerQueue, frames []byte, post bool) error {
	var err error
	if post || time.Now().Before(q.legacyUntil) {
		err = t.post(q.url, frames)
	} else {
		err = t.write(q, frames)
	}
	if err != nil {
		select {
		case t.r.fails <- id:
		default:
		}
	}
	return err
}

// write writes frames into the peer's stream, opening one if none is open. A stream
// that fails is ended; one the peer refused (a node from before the stream) turns the
// peer to POSTs for legacyRetry, beginning with these frames.
func (t *transport) write(q *peerQueue, frames []byte) error {
	if renew := q.renew.Swap(false); q.st != nil && (renew || q.st.ended()) {
		q.st.end()
		q.st = nil
	}
	if q.st == nil {
		q.st = t.openStream(q.url)
	}
	err := q.st.write(frames)
	if err == nil {
		return nil
	}
	st := q.st
	st.end()
	q.st = nil
	if st.refused() {
		q.legacyUntil = time.Now().Add(legacyRetry)
		t.r.log.Info("cluster: a member does not take the raft stream: POSTing to it", "member", q.url, "status", st.status)
		return t.post(q.url, frames)
	}
	return err
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

// peerStream is one open stream to a peer: a POST at RaftStreamPath whose body is the
// reading end of a pipe, written by the sender goroutine.
type peerStream struct {
	pw     *io.PipeWriter
	cancel context.CancelFunc
	timer  *time.Timer   // cancels a write that takes longer than streamWriteTimeout
	done   chan struct{} // closed once the POST has returned; then status holds
	status int           // the peer's answer, 0 if none came
}

// errStreamEnded is what a write into a stream whose POST the peer answered gets (one
// whose POST failed gets that error).
var errStreamEnded = errors.New("cluster: the peer ended the raft stream")

func (t *transport) openStream(url string) *peerStream {
	ctx, cancel := context.WithCancel(t.ctx)
	pr, pw := io.Pipe()
	s := &peerStream{pw: pw, cancel: cancel, timer: time.AfterFunc(time.Hour, cancel), done: make(chan struct{})}
	s.timer.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+RaftStreamPath, pr)
	if err != nil {
		pr.CloseWithError(err)
		close(s.done)
		return s
	}
	req.Header.Set(SecretHeader, t.proof)
	req.Header.Set("Content-Type", "application/octet-stream")
	// The body waits for the receiver's 100 Continue, which it sends as it begins to
	// read: a node that answers otherwise (refuses the path, the proof) answers at once,
	// rather than while it drains, unread, the messages sent meanwhile.
	req.Header.Set("Expect", "100-continue")
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(s.done)
		resp, err := t.stream.Do(req)
		if err == nil {
			s.status = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			err = errStreamEnded
		}
		pr.CloseWithError(err) // the next write fails at once, saying why
		cancel()
	}()
	return s
}

func (s *peerStream) write(frames []byte) error {
	s.timer.Reset(streamWriteTimeout)
	_, err := s.pw.Write(frames)
	s.timer.Stop()
	return err
}

// ended says whether the stream's POST has returned.
func (s *peerStream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// refused says whether the peer answered the stream as a node that does not know it
// does (an older version's router: not found, or not allowed without a token).
func (s *peerStream) refused() bool {
	switch s.status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return false
}

// end closes the stream and waits for its POST to return.
func (s *peerStream) end() {
	s.cancel()
	s.pw.Close()
	<-s.done
}

// streamClient is c without its timeout, for streams, which last. Its connections, on
// Linux, are ended by the kernel when what they sent stays unacknowledged for
// streamWriteTimeout (TCP_USER_TIMEOUT): a peer behind a partition is noticed then,
// not when the socket's buffer has filled (which heartbeats alone take minutes to do)
// or when TCP's retransmissions, backing off meanwhile, reach it after the heal.
func streamClient(c *http.Client) *http.Client {
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if tr, ok := rt.(*http.Transport); ok {
		tr = tr.Clone()
		tr.ExpectContinueTimeout = streamWriteTimeout
		dial := tr.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: streamWriteTimeout, KeepAlive: 30 * time.Second}).DialContext
		}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err == nil {
				setUserTimeout(conn, streamWriteTimeout)
			}
			return conn, err
		}
		rt = tr
	}
	return &http.Client{Transport: rt, CheckRedirect: c.CheckRedirect, Jar: c.Jar}
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

// StreamHandler receives the other nodes' streams at RaftStreamPath: it reads frame
// after frame and hands raft what has arrived whenever the connection has no more
// waiting, until the sender ends the stream (answered 204), the stream is silent for
// streamIdle, the request's context ends (the node shuts down) or the Raft closes.
func (r *Raft) StreamHandler() http.Handler {
	return r.nodesOnly(http.MethodPost, func(w http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(w)
		// The watcher marks the end, then moves the deadline to now; the loop moves it
		// on, then looks for the mark: whichever runs last, a marked stream stops.
		var ending atomic.Bool
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-stop:
				return
			case <-req.Context().Done():
			case <-r.done:
			}
			ending.Store(true)
			rc.SetReadDeadline(time.Now()) // wakes the read
		}()
		br := bufio.NewReaderSize(req.Body, 64<<10)
		var msgs []*pb.Message
		var frame []byte
		for {
			if br.Buffered() == 0 {
				if len(msgs) > 0 {
					r.Step(msgs) // a full inbox drops them: raft retransmits
					msgs = nil
				}
				rc.SetReadDeadline(time.Now().Add(streamIdle))
				if ending.Load() {
					rc.SetReadDeadline(time.Now())
				}
			}
			m, err := readFrame(br, &frame)
			if err != nil {
				if len(msgs) > 0 {
					r.Step(msgs)
				}
				if errors.Is(err, io.EOF) {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					http.Error(w, err.Error(), http.StatusBadRequest)
				}
				// The server would otherwise read on, draining what the sender still
				// sends, before its answer reaches the sender: end the connection.
				rc.SetReadDeadline(time.Now())
				return
			}
			msgs = append(msgs, m)
		}
	})
}

// readFrame reads one message in the transport's framing, reading into *buf (which it
// grows): the message copies what it keeps. A stream ending between frames is io.EOF.
func readFrame(br *bufio.Reader, buf *[]byte) (*pb.Message, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("cluster: the stream ended inside a frame")
		}
		return nil, err
	}
	if n > maxBatch {
		return nil, fmt.Errorf("cluster: a message of %d bytes, more than 64 MiB", n)
	}
	if uint64(cap(*buf)) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := io.ReadFull(br, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("cluster: the stream ended inside a frame")
		}
		return nil, err
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("cluster: a malformed message: %w", err)
	}
	return m, nil
}

// decodeBatch decodes a POSTed batch: frames as readFrame reads them, to its end.
func decodeBatch(b []byte) ([]*pb.Message, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	var out []*pb.Message
	var frame []byte
	for {
		m, err := readFrame(br, &frame)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
}
