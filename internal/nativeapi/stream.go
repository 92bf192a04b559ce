package nativeapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/coalesce"
	"github.com/okiba/okiba/internal/reply"
)

// The stream (api.StreamPath, docs/api.md): after an authenticated upgrade, the
// connection carries framed requests, which run concurrently through the same routes
// and handlers as HTTP requests, and their answers, which leave in the order they are
// ready. The frames are only a cheaper way to carry the same requests: validation,
// errors, metrics and limits are those of the HTTP API.

// Stream limits.
const (
	// streamInFlight bounds the requests one stream runs at once; further frames wait
	// in the socket, which pushes back on the client.
	streamInFlight = 1024
	// streamFrameTimeout is how long a frame may take to arrive once its first byte has.
	streamFrameTimeout = 60 * time.Second
	// defaultStreamIdle is Options.StreamIdleTimeout's default.
	defaultStreamIdle = 5 * time.Minute
	// streamWriteTimeout bounds one write of answers to a client that stopped reading.
	streamWriteTimeout = 90 * time.Second
	// defaultStreamBytes and defaultServerStreamBytes are Options.StreamBytes' and
	// Options.ServerStreamBytes' defaults.
	defaultStreamBytes       = 64 << 20
	defaultServerStreamBytes = 512 << 20
)

// streams are the server's open streams, which http.Server no longer sees once the
// connections are hijacked.
type streams struct {
	mu      sync.Mutex
	live    map[*streamConn]struct{}
	closing bool
}

// add registers sc, unless the server is closing its streams.
func (ss *streams) add(sc *streamConn) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closing {
		return false
	}
	if ss.live == nil {
		ss.live = make(map[*streamConn]struct{})
	}
	ss.live[sc] = struct{}{}
	return true
}

func (ss *streams) isClosing() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.closing
}

func (ss *streams) remove(sc *streamConn) {
	ss.mu.Lock()
	delete(ss.live, sc)
	ss.mu.Unlock()
}

// CloseStreams ends the server's streams and refuses new ones: each stops reading,
// ends its long polls (receives waiting for messages answer with what they have), and
// answers the requests it started; then its connection closes. When ctx ends first, the
// remaining connections are cut: their clients see a broken connection, never a false
// answer. Serve does not know about streams; whoever runs the server calls this at
// shutdown, alongside Serve's own grace.
func (s *Server) CloseStreams(ctx context.Context) error {
	s.streams.mu.Lock()
	s.streams.closing = true
	live := make([]*streamConn, 0, len(s.streams.live))
	for sc := range s.streams.live {
		live = append(live, sc)
	}
	s.streams.mu.Unlock()
	for _, sc := range live {
		sc.drain()
	}
	for _, sc := range live {
		select {
		case <-sc.done:
		case <-ctx.Done():
			for _, sc := range live {
				sc.cut()
			}
			return ctx.Err()
		}
	}
	return nil
}

// stream answers GET /v1/stream by upgrading the connection to a stream.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	if r.Context().Value(framedKey{}) != nil {
		reply.Error(w, invalid("%s opens a stream; it cannot be requested inside one", api.StreamPath))
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), api.StreamProtocol) {
		w.Header().Set("Upgrade", api.StreamProtocol)
		reply.Error(w, invalid("%s opens a stream: send Connection: Upgrade and Upgrade: %s", api.StreamPath, api.StreamProtocol))
		return
	}
	if s.streams.isClosing() {
		reply.Error(w, &api.Error{Code: api.CodeUnavailable, Message: "the server is shutting down"})
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		reply.Error(w, &api.Error{Code: api.CodeInvalidRequest, Message: "this connection cannot become a stream (only HTTP/1.1 connections can): " + err.Error()})
		return
	}
	sc := &streamConn{
		s:      s,
		conn:   conn,
		br:     brw.Reader,
		w:      coalesce.New(deadlineWriter{conn}),
		calls:  make(map[uint64]*streamCall),
		slots:  make(chan struct{}, streamInFlight),
		done:   make(chan struct{}),
		host:   r.Host,
		remote: r.RemoteAddr,
	}
	sc.token, _ = auth.Bearer(r)
	sc.client = r.Header.Get(api.ClientHeader)
	// The request's context ends when this handler returns; the stream's lives as long
	// as the connection, and keeps the values (trace context of the upgrade, say).
	sc.ctx, sc.cancel = context.WithCancel(context.WithValue(context.WithoutCancel(r.Context()), framedKey{}, true))
	defer close(sc.done)
	defer sc.cancel()
	if !s.streams.add(sc) {
		conn.Close()
		return
	}
	defer s.streams.remove(sc)
	_ = conn.SetWriteDeadline(time.Time{}) // the http.Server's deadlines were for one request
	_ = conn.SetReadDeadline(time.Now().Add(s.streamIdle()))
	if _, err := conn.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.StreamProtocol + "\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	sc.run()
}

// headerHas reports whether header name lists token (comma-separated, any case).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// streamConn is one stream. Its reader is the upgrading handler's goroutine; each
// request runs in a goroutine of its own, because most wait for an fsync that the
// requests behind them should share.
type streamConn struct {
	s            *Server
	conn         net.Conn
	br           *bufio.Reader
	w            *coalesce.Writer
	ctx          context.Context // the connection's: ends when it closes
	cancel       context.CancelFunc
	slots        chan struct{} // one per request in flight
	held         atomic.Int64  // bytes of the requests in flight (admit)
	wg           sync.WaitGroup
	done         chan struct{}
	host, remote string
	client       string // the upgrade's api.ClientHeader, which its frames inherit

	// token is the bearer token the stream was opened with: each frame runs as the
	// principal it proves then (current).
	token string

	mu       sync.Mutex
	calls    map[uint64]*streamCall // in flight, by id
	draining bool
}

// framedKey marks the context of a request that came in a frame.
type framedKey struct{}

// streamCall is a request in flight.
type streamCall struct {
	cancel   context.CancelFunc
	longPoll bool // a receive, which shutdown ends early
}

// run reads frames until the connection ends, the client breaks the protocol or the
// stream is drained, then waits for the requests it started.
func (sc *streamConn) run() {
	defer func() {
		sc.mu.Lock()
		draining := sc.draining
		sc.mu.Unlock()
		if !draining {
			sc.cancel() // the client is gone or broke the protocol: its requests are moot
		}
		sc.wg.Wait()
		sc.conn.Close()
	}()
	for {
		select {
		case sc.slots <- struct{}{}:
		case <-sc.ctx.Done():
			return
		}
		f, err := sc.read()
		if err != nil {
			<-sc.slots
			if errors.Is(err, api.ErrBinary) && !sc.isDraining() {
				sc.protocolError(err)
			}
			return
		}
		switch f.Kind {
		case api.FrameCancel:
			<-sc.slots
			sc.mu.Lock()
			if c := sc.calls[f.ID]; c != nil {
				c.cancel()
			}
			sc.mu.Unlock()
		case api.FrameRequest:
			if f.ID == 0 {
				sc.protocolError(fmt.Errorf("%w: request id 0 is reserved for errors of the connection", api.ErrBinary))
				return
			}
			if e := sc.admit(f); e != nil {
				fw := newFrameWriter()
				reply.Error(fw, e)
				err := sc.answer(fw, f.ID)
				<-sc.slots
				if err != nil {
					sc.cut()
					return
				}
				continue
			}
			ctx, call := sc.start(f)
			if call == nil {
				sc.protocolError(fmt.Errorf("%w: request id %d is already in flight", api.ErrBinary, f.ID))
				return
			}
			sc.wg.Add(1)
			if sc.alone(call) {
				sc.serve(ctx, f, call)
				continue
			}
			go sc.serve(ctx, f, call)
		default:
			sc.protocolError(fmt.Errorf("%w: a client sends requests (kind %d) and cancels (kind %d), not kind %d", api.ErrBinary, api.FrameRequest, api.FrameCancel, f.Kind))
			return
		}
	}
}

// frameCost is what a request frame holds in memory while it runs.
func frameCost(f api.Frame) int64 { return int64(len(f.Body) + len(f.Target) + 256) }

// admit reserves f's bytes of the stream's and the server's budgets of requests in
// flight, or returns the retryable error to answer it with: a stream cannot hold more
// than StreamBytes of requests at once (1,024 padded long polls would otherwise hold
// gigabytes), nor all streams together more than ServerStreamBytes. serve gives the
// bytes back once the request is answered.
func (sc *streamConn) admit(f api.Frame) *api.Error {
	n := frameCost(f)
	conn := sc.held.Add(n)
	all := sc.s.held.Add(n)
	if conn <= sc.s.opts.StreamBytes && all <= sc.s.opts.ServerStreamBytes {
		return nil
	}
	sc.held.Add(-n)
	sc.s.held.Add(-n)
	which, held, limit := "this stream holds", conn-n, sc.s.opts.StreamBytes
	if conn <= sc.s.opts.StreamBytes {
		which, held, limit = "the server's streams hold", all-n, sc.s.opts.ServerStreamBytes
	}
	return &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
		Message: fmt.Sprintf("%s %.1f MiB of requests in flight; this one's %.1f MiB would pass the limit of %d MiB: retry once fewer are in flight",
			which, float64(held)/(1<<20), float64(n)/(1<<20), limit>>20)}
}

// start registers request f, which a cancel frame can then stop, and returns its
// context and call; a nil call if its id is already in flight.
func (sc *streamConn) start(f api.Frame) (context.Context, *streamCall) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, dup := sc.calls[f.ID]; dup {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(sc.ctx)
	sc.s.busy.Add(1)
	call := &streamCall{cancel: cancel, longPoll: LongPoll(f.Method, pathOf(f.Target))}
	sc.calls[f.ID] = call
	return ctx, call
}

// read reads the next frame: idle as long as the client likes, then the whole frame
// within streamFrameTimeout.
func (sc *streamConn) read() (api.Frame, error) {
	for {
		_, err := sc.br.Peek(1)
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return api.Frame{}, err
		}
		// The idle deadline passed. A stream with requests in flight (a long poll) is
		// not idle; one without is closed, as HTTP servers close idle connections.
		sc.mu.Lock()
		busy := len(sc.calls) > 0 && !sc.draining
		if busy {
			sc.setDeadlineLocked(sc.s.streamIdle())
		}
		sc.mu.Unlock()
		if !busy {
			return api.Frame{}, err
		}
	}
	sc.mu.Lock()
	sc.setDeadlineLocked(streamFrameTimeout)
	sc.mu.Unlock()
	// A fresh buffer each time: the frame's body lives on in its request's goroutine.
	f, _, err := api.ReadFrame(sc.br, nil, api.MaxFrame)
	if err == nil {
		sc.mu.Lock()
		sc.setDeadlineLocked(sc.s.streamIdle())
		sc.mu.Unlock()
	}
	return f, err
}

// setDeadlineLocked sets the read deadline d from now, unless the stream is draining
// (drain set a deadline in the past to wake the reader: it stays).
func (sc *streamConn) setDeadlineLocked(d time.Duration) {
	if !sc.draining {
		_ = sc.conn.SetReadDeadline(time.Now().Add(d))
	}
}

func pathOf(target string) string {
	p, _, _ := strings.Cut(target, "?")
	return p
}

// serve runs one request and sends its answer.
func (sc *streamConn) serve(ctx context.Context, f api.Frame, call *streamCall) {
	defer sc.wg.Done()
	fw := newFrameWriter()
	ctx, ok := sc.current(ctx)
	if !ok {
		reply.Error(fw, &api.Error{Code: api.CodeUnauthorized, Message: "the secret this stream was opened with is no longer valid (rotated, expired, or its principal deleted): open a stream with a valid one"})
	} else if r, err := sc.request(ctx, f); err != nil {
		reply.Error(fw, invalid("%v", err))
	} else {
		sc.handle(fw, r)
	}
	sc.mu.Lock()
	delete(sc.calls, f.ID)
	sc.mu.Unlock()
	sc.s.busy.Add(-1)
	n := frameCost(f)
	sc.held.Add(-n)
	sc.s.held.Add(-n)
	call.cancel()
	err := sc.answer(fw, f.ID)
	<-sc.slots
	if err != nil {
		sc.cut()
	}
}

// current returns ctx with the principal the stream was opened as, as it is now, or
// false if its credential is no longer valid: a stream lives long, and a rotation, an
// expiry or a deletion must end what it may do, and a grant or a revocation count from
// its next frame, as they do for plain requests. Without a keyring (or for an anonymous
// stream) the principal of the upgrade stays.
func (sc *streamConn) current(ctx context.Context) (context.Context, bool) {
	keys := sc.s.opts.Keys
	p, ok := auth.From(ctx)
	if keys == nil || !ok {
		return ctx, true
	}
	var now auth.Principal
	switch p.Method {
	case auth.Token:
		now, ok = keys.ByToken(sc.token)
	case auth.Session:
		now, ok = keys.Session(p.Name, p.SecretID)
	default:
		return ctx, true
	}
	if !ok || now.Name != p.Name {
		return ctx, false
	}
	return auth.With(ctx, now), true
}

// answer sends what fw collected as the answer to request id.
func (sc *streamConn) answer(fw *frameWriter, id uint64) error {
	status := fw.status
	if status == 0 {
		status = http.StatusOK
	}
	ans := api.Frame{Kind: api.FrameAnswer, ID: id, Status: status, Header: api.FrameHeader(fw.header)}
	return sc.w.WriteBody(func(b []byte) []byte { return api.AppendFrameHead(b, &ans, len(fw.body)) }, fw.body)
}

// handle runs r's handler. A handler that panics answers 500 and the stream goes on,
// as net/http keeps the server up after a panicking request.
func (sc *streamConn) handle(fw *frameWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			sc.s.log.Error("panic serving a stream request", "method", r.Method, "target", r.RequestURI, "panic", v, "stack", string(debug.Stack()))
			*fw = *newFrameWriter()
			reply.Error(fw, &api.Error{Code: api.CodeInternal, Message: "internal error; see the server's log"})
		}
	}()
	sc.s.observed(fw, r, sc.s.route)
}

// frameBody is a stream frame's body as its request's body. The frame was read into a
// buffer of its own (run passes ReadFrame no buffer to reuse), so readBody takes the
// bytes as they are instead of copying them again, as it must a body read from the
// network: that copy was a second allocation of every request's body.
type frameBody struct {
	bytes.Reader
	b []byte
}

func (*frameBody) Close() error { return nil }

// request makes the HTTP request that frame f stands for.
func (sc *streamConn) request(ctx context.Context, f api.Frame) (*http.Request, error) {
	var body io.Reader = http.NoBody
	if len(f.Body) > 0 {
		fb := &frameBody{b: f.Body}
		fb.Reset(f.Body)
		body = fb
	}
	r, err := http.NewRequestWithContext(ctx, f.Method, f.Target, body)
	if err != nil {
		return nil, fmt.Errorf("frame %d is not a request: %v", f.ID, err)
	}
	r.ContentLength = int64(len(f.Body))
	if r.URL.Host != "" { // "//host/path"; DecodeFrame let only targets starting with / through
		return nil, fmt.Errorf("frame %d: the target must be a path, not %q", f.ID, f.Target)
	}
	r.RequestURI = f.Target
	r.Host = sc.host
	r.RemoteAddr = sc.remote
	r.Header = f.HTTPHeader()
	if sc.client != "" && r.Header.Get(api.ClientHeader) == "" {
		r.Header.Set(api.ClientHeader, sc.client) // named once, at the upgrade
	}
	return r, nil
}

// protocolError answers id 0 with what was wrong, for the client to fail its requests
// with; run then closes the connection.
func (sc *streamConn) protocolError(err error) {
	e := invalid("stream closed: %v", err)
	if errors.Is(err, api.ErrFrameTooLarge) {
		e.Code = api.CodeRequestTooLarge
	}
	fw := newFrameWriter()
	reply.Error(fw, e)
	_ = sc.answer(fw, 0)
}

func (sc *streamConn) isDraining() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.draining
}

// drain stops reading and ends the long polls; the requests in flight finish.
func (sc *streamConn) drain() {
	sc.mu.Lock()
	sc.draining = true
	for _, c := range sc.calls {
		if c.longPoll {
			c.cancel()
		}
	}
	sc.mu.Unlock()
	_ = sc.conn.SetReadDeadline(time.Now()) // wakes the reader
}

func (s *Server) streamIdle() time.Duration {
	if s.opts.StreamIdleTimeout > 0 {
		return s.opts.StreamIdleTimeout
	}
	return defaultStreamIdle
}

// cut closes the connection at once.
func (sc *streamConn) cut() {
	sc.cancel()
	sc.conn.Close()
}

// deadlineWriter bounds every write, so that a client that stops reading cannot hold
// the goroutines answering it.
type deadlineWriter struct{ c net.Conn }

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.c.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	return d.c.Write(p)
}

// WriteBuffers sends bufs in one vectored write (a large answer as it lies, after its
// frame's head), under the same bound.
func (d deadlineWriter) WriteBuffers(bufs *net.Buffers) (int64, error) {
	_ = d.c.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	return bufs.WriteTo(d.c)
}

func newFrameWriter() *frameWriter { return &frameWriter{header: make(http.Header)} }

// frameWriter collects a handler's answer for a frame.
type frameWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *frameWriter) Header() http.Header { return w.header }

func (w *frameWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *frameWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// TakeBody is reply.WriteOwned's way in: a handler's whole answer, taken as it is
// rather than copied (the stream then sends it without a copy either).
func (w *frameWriter) TakeBody(b []byte) {
	if w.body != nil {
		w.Write(b)
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = b
}

// alone reports whether call, just registered, may be served by the reader itself: it
// is the only stream request in flight on the whole server (so the only one of this
// stream too), no other frame of this stream has been read, and it is not a receive
// (which may wait long for messages). A lone request then costs no goroutine start and
// no hand-off, which on a machine whose idle cores sleep wakes one of them: a lone
// sender's p50 through `okiba serve` went from 262–293 µs to 240–272 µs
// (docs/benchmarks.md).
//
// Whenever anything else is in flight, each request gets a goroutine of its own, so
// that the reader goes on decoding and appending the frames behind it while its fsync
// runs and they make the next group commit. Serving every request that was alone on
// its own stream inline cost 16 pipelining producers 10% of their throughput, on one
// connection half of it; the server-wide condition costs them nothing measurable.
func (sc *streamConn) alone(call *streamCall) bool {
	return !call.longPoll && sc.br.Buffered() == 0 && sc.s.busy.Load() == 1
}
