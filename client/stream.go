package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/coalesce"
)

// The client's calls travel as frames on a few persistent stream connections (api's
// stream, docs/api.md), opened on first use; many calls share each at once, as requests
// pipelined to Redis or publishes in a RabbitMQ confirm window do. A server that does
// not offer the stream (an older okiba, or a proxy that drops Upgrade) gets plain HTTP
// requests instead, as does every client with Options.NoStream or its own HTTPClient.

// maxAnswer bounds the answer frames the client reads, against a corrupt length.
const maxAnswer = 1 << 30

// streamIdle is how long a stream may go unused, by Options.Clock, before the client
// closes it rather than use it again: shorter than the server's idle timeout, as HTTP
// clients close idle keep-alive connections before servers do.
const streamIdle = 2 * time.Minute

// streamRetry is how long, by Options.Clock, a client waits before trying to open a
// stream again after an attempt failed for a reason that may pass (a refused
// connection, a restart).
const streamRetry = time.Second

// errStreamBroken wraps the errors of calls whose stream broke before they were answered:
// like an HTTP request on a broken connection, such a call may or may not have happened.
var errStreamBroken = errors.New("okiba stream broken")

// streamConns is how many stream connections a client spreads its calls over. One
// connection serializes everything on one reader at each end; a few let the server's
// and the client's cores share the decoding and the copying of large batches.
const streamConns = 4

// streamState is the client's streams, or why it has none.
type streamState struct {
	next  atomic.Uint32 // round robin over slots
	slots [streamConns]streamSlot

	mu      sync.Mutex
	off     bool      // the server does not offer streams: plain HTTP from now on
	retryAt time.Time // after a failed attempt, plain HTTP until then
}

// streamSlot holds one stream connection. Its lock is a channel so that a call waiting
// while another opens the connection can give up when its context ends; each slot has
// its own, so that a slow dial holds up only the calls that picked its slot.
type streamSlot struct {
	lock chan struct{}
	st   *stream
}

func (s *streamState) init() {
	for i := range s.slots {
		s.slots[i].lock = make(chan struct{}, 1)
	}
}

// stream returns one of the client's open streams, in turn, opening it if needed, or
// nil when this call should be a plain HTTP request (which then fails at once if ctx
// has ended).
func (c *Client) stream(ctx context.Context) *stream {
	s := &c.streams
	sl := &s.slots[s.next.Add(1)%streamConns]
	select {
	case sl.lock <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	defer func() { <-sl.lock }()
	if st := sl.st; st != nil && st.alive() {
		if st.idle() < streamIdle {
			return st
		}
		// Close it before the server does (after 5 minutes by default), so that no call
		// races the server's close.
		st.fail(fmt.Errorf("%w: closed after %v idle", errStreamBroken, streamIdle))
	}
	sl.st = nil
	s.mu.Lock()
	skip := s.off || c.clock.Now().Before(s.retryAt)
	s.mu.Unlock()
	if skip {
		return nil
	}
	st, err := c.dialStream(ctx)
	if err != nil {
		var refused *upgradeRefused
		s.mu.Lock()
		if errors.As(err, &refused) && refused.permanent() {
			s.off = true
		} else {
			if refused != nil && refused.leader != "" {
				c.moveOn(c.cur.Load(), refused.leader) // plain calls, and the next stream, go to the leader
			}
			s.retryAt = c.clock.Now().Add(streamRetry)
		}
		s.mu.Unlock()
		return nil
	}
	sl.st = st
	return st
}

// closeStreams closes the client's streams; calls in flight on them fail.
func (c *Client) closeStreams() {
	for i := range c.streams.slots {
		sl := &c.streams.slots[i]
		sl.lock <- struct{}{}
		st := sl.st
		sl.st = nil
		<-sl.lock
		if st != nil {
			st.fail(fmt.Errorf("%w: the client was closed", errStreamBroken))
		}
	}
}

// upgradeRefused is a server's answer other than 101 to the stream's upgrade.
type upgradeRefused struct {
	status int
	leader string // a follower's: the leader's URL
}

func (e *upgradeRefused) Error() string {
	return fmt.Sprintf("the server refused the stream upgrade with HTTP %d", e.status)
}

// permanent reports whether the answer means the server does not offer streams at all,
// rather than a passing condition (shutting down, overloaded).
func (e *upgradeRefused) permanent() bool {
	switch e.status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUpgradeRequired, http.StatusNotImplemented:
		return true
	}
	return false
}

// dialStream connects and upgrades a connection to a stream.
func (c *Client) dialStream(ctx context.Context) (*stream, error) {
	from := c.cur.Load()
	u, err := url.Parse(c.servers[from])
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{NextProtos: []string{"http/1.1"}} // HTTP/2 has no Upgrade
		if c.tls != nil {
			cfg = c.tls.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	// ctx's end (its deadline or a cancel) ends the handshake. A connection's deadline
	// is on the system clock, whatever Options.Clock says.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	req := "GET " + api.StreamPath + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: Upgrade\r\nUpgrade: " + api.StreamProtocol + "\r\n"
	if c.token != "" {
		req += "Authorization: Bearer " + c.token + "\r\n"
	}
	if c.name != "" {
		req += api.ClientHeader + ": " + c.name + "\r\n" // the stream's frames go by it
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := func() (*http.Response, error) {
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
			return nil, err
		}
		return http.ReadResponse(br, nil)
	}()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), api.StreamProtocol) {
		conn.Close()
		return nil, &upgradeRefused{status: resp.StatusCode, leader: resp.Header.Get(LeaderHeader)}
	}
	if !stop() { // ctx ended just as the handshake did: the deadline may be set
		conn.Close()
		return nil, ctx.Err()
	}
	st := &stream{conn: conn, w: coalesce.New(conn), clock: c.clock, pending: make(map[uint64]chan answer), lastUsed: c.clock.Now()}
	go st.readLoop(br)
	return st, nil
}

// stream is one open stream connection.
type stream struct {
	conn  net.Conn
	w     *coalesce.Writer
	clock clock.Clock // the client's: it times the idle close

	mu       sync.Mutex
	pending  map[uint64]chan answer
	next     uint64
	err      error
	lastUsed time.Time // last request sent or answer received
}

// idle is how long the stream has had nothing in flight; 0 while it has.
func (st *stream) idle() time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.pending) > 0 {
		return 0
	}
	return st.clock.Now().Sub(st.lastUsed)
}

// answer is what a call gets back: an answer frame, or the stream's failure.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (st *stream) alive() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err == nil
}

// fail breaks the stream: every call waiting gets err, and the connection closes.
func (st *stream) fail(err error) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err = err
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	st.conn.Close()
	for _, ch := range pending {
		ch <- answer{err: err}
	}
}

// readLoop hands each answer to its call until the connection ends.
func (st *stream) readLoop(br *bufio.Reader) {
	for {
		f, err := api.ReadTrustedFrame(br, maxAnswer)
		if err != nil {
			st.fail(fmt.Errorf("%w: %w", errStreamBroken, err))
			return
		}
		if f.Kind != api.FrameAnswer {
			st.fail(fmt.Errorf("%w: the server sent a frame of kind %d", errStreamBroken, f.Kind))
			return
		}
		if f.ID == 0 { // the server found fault with the connection and closes it
			e, _ := answerError(f.Status, f.Body)
			st.fail(fmt.Errorf("%w: %w", errStreamBroken, e))
			return
		}
		st.mu.Lock()
		ch := st.pending[f.ID]
		delete(st.pending, f.ID)
		st.lastUsed = st.clock.Now()
		st.mu.Unlock()
		if ch != nil { // nil: the call gave up waiting
			ch <- answer{status: f.Status, header: f.HTTPHeader(), body: f.Body}
		}
	}
}

// roundTrip sends req, whose body is body, as a frame and waits for its answer. When
// ctx ends first, it tells the server to cancel the request and returns ctx's error.
func (st *stream) roundTrip(req *http.Request, body []byte) (*http.Response, []byte, error) {
	f := api.Frame{Kind: api.FrameRequest, Method: req.Method, Target: req.URL.RequestURI(), Body: body,
		Header: api.FrameHeader(req.Header, "Authorization", api.ClientHeader)} // the stream was authorized and named when it opened
	ch := make(chan answer, 1)
	st.mu.Lock()
	if st.err != nil {
		err := st.err
		st.mu.Unlock()
		return nil, nil, err
	}
	st.next++
	f.ID = st.next
	st.pending[f.ID] = ch
	st.lastUsed = st.clock.Now()
	st.mu.Unlock()
	if err := st.w.Write(func(b []byte) []byte { return api.AppendFrame(b, &f) }); err != nil {
		st.fail(fmt.Errorf("%w: %w", errStreamBroken, err))
	}
	ctx := req.Context()
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, nil, a.err
		}
		return &http.Response{StatusCode: a.status, Header: a.header}, a.body, nil
	case <-ctx.Done():
		st.mu.Lock()
		delete(st.pending, f.ID)
		st.mu.Unlock()
		cancel := api.Frame{Kind: api.FrameCancel, ID: f.ID}
		_ = st.w.Write(func(b []byte) []byte { return api.AppendFrame(b, &cancel) })
		return nil, nil, ctx.Err()
	}
}
