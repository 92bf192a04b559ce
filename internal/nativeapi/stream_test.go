package nativeapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// The stream, spoken by hand over a raw connection, so that malformed frames can be sent.

type rawStream struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

// upgrade opens a connection and asks for a stream with the given extra header lines;
// it returns the server's answer, and the stream when that answer is 101.
func (e *env) upgrade(lines ...string) (*http.Response, *rawStream) {
	e.t.Helper()
	addr := strings.TrimPrefix(e.base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	req := "GET /v1/stream HTTP/1.1\r\nHost: " + addr + "\r\n" + strings.Join(lines, "") + "\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(waitLong))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatalf("upgrade: %v", err)
	}
	conn.SetReadDeadline(time.Time{})
	if res.StatusCode != http.StatusSwitchingProtocols {
		return res, nil
	}
	return res, &rawStream{t: e.t, conn: conn, br: br}
}

// serverAt starts a broker and a server with opts on loopback, for tests and
// benchmarks that need the *nativeapi.Server itself; setup, if given, runs before the
// listener starts (to add handlers, or to set the HTTP server's protocols).
func serverAt(t testing.TB, opts nativeapi.Options, setup ...func(*nativeapi.Server, *httptest.Server)) (*nativeapi.Server, *env) {
	t.Helper()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := nativeapi.New(b, opts)
	hs := httptest.NewUnstartedServer(srv.Handler())
	for _, f := range setup {
		f(srv, hs)
	}
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		srv.CloseStreams(ctx)
		hs.Close()
		b.Close()
	})
	return srv, envAt(t, hs.URL)
}

const upgradeLines = "Connection: Upgrade\r\nUpgrade: okiba-stream/1\r\n"

func (e *env) openStream() *rawStream {
	e.t.Helper()
	auth := ""
	if e.token != "" {
		auth = "Authorization: Bearer " + e.token + "\r\n"
	}
	res, s := e.upgrade(upgradeLines + auth)
	if s == nil {
		body, _ := io.ReadAll(res.Body)
		e.t.Fatalf("upgrade refused: HTTP %d %s", res.StatusCode, body)
	}
	return s
}

func (s *rawStream) write(b []byte) {
	s.t.Helper()
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatalf("write: %v", err)
	}
}

// request sends a request frame; hdr are name, value pairs.
func (s *rawStream) request(id uint64, method, target, body string, hdr ...string) {
	s.t.Helper()
	f := api.Frame{Kind: api.FrameRequest, ID: id, Method: method, Target: target, Body: []byte(body)}
	if body != "" {
		f.Header = append(f.Header, api.Header{Name: "Content-Type", Value: "application/json"})
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		f.Header = append(f.Header, api.Header{Name: hdr[i], Value: hdr[i+1]})
	}
	s.write(api.AppendFrame(nil, &f))
}

// next reads the next frame, failing the test if none comes within waitLong.
func (s *rawStream) next() api.Frame {
	s.t.Helper()
	f, err := s.read()
	if err != nil {
		s.t.Fatalf("read frame: %v", err)
	}
	return f
}

func (s *rawStream) read() (api.Frame, error) {
	s.conn.SetReadDeadline(time.Now().Add(waitLong))
	f, _, err := api.ReadFrame(s.br, nil, 64<<20)
	return f, err
}

// call sends one request and reads its answer (the only one expected).
func (s *rawStream) call(id uint64, method, target, body string) api.Frame {
	s.t.Helper()
	s.request(id, method, target, body)
	f := s.next()
	if f.Kind != api.FrameAnswer || f.ID != id {
		s.t.Fatalf("%s %s: got frame kind %d id %d, want the answer to %d", method, target, f.Kind, f.ID, id)
	}
	return f
}

// closed reports whether the server closed the connection (after any frames left).
func (s *rawStream) closed() bool {
	for {
		_, err := s.read()
		if err != nil {
			return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset")
		}
	}
}

func frameError(t testing.TB, f api.Frame) *api.Error {
	t.Helper()
	return wireError(t, &response{Status: f.Status, Body: f.Body})
}

// TestStreamServesTheAPI: requests in frames mean what the same HTTP requests mean, many
// at once on one connection, each answer carrying its request's id.
func TestStreamServesTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	s := e.openStream()
	if f := s.call(1, "PUT", "/v1/queues/jobs", `{"visibility_timeout":"30s"}`); f.Status != 201 {
		t.Fatalf("PUT queue: HTTP %d %s", f.Status, f.Body)
	}

	// 50 sends in flight at once; answers may come in any order.
	const n = 50
	for i := range n {
		s.request(uint64(100+i), "POST", "/v1/queues/jobs/messages", fmt.Sprintf(`{"messages":[{"body":"m%d"}]}`, i))
	}
	sent := map[string]bool{}
	for range n {
		f := s.next()
		if f.Kind != api.FrameAnswer || f.ID < 100 || f.ID >= 100+n || f.Status != 200 {
			t.Fatalf("send answer: kind %d id %d HTTP %d %s", f.Kind, f.ID, f.Status, f.Body)
		}
		var out api.SendResponse
		if err := json.Unmarshal(f.Body, &out); err != nil || len(out.Results) != 1 || out.Results[0].ID == "" {
			t.Fatalf("send answer %d: %s (%v)", f.ID, f.Body, err)
		}
		sent[out.Results[0].ID] = true
	}
	if len(sent) != n {
		t.Fatalf("%d distinct ids for %d sends", len(sent), n)
	}
	if q := e.queue("jobs"); q.Stats.Ready != n {
		t.Fatalf("HTTP sees %d ready after %d sends on the stream", q.Stats.Ready, n)
	}

	f := s.call(2, "POST", "/v1/queues/jobs/receive", `{"max":100}`)
	var got api.ReceiveResponse
	if err := json.Unmarshal(f.Body, &got); err != nil || len(got.Messages) != n {
		t.Fatalf("receive: HTTP %d, %d messages (%v)", f.Status, len(got.Messages), err)
	}
	for _, m := range got.Messages {
		if !sent[m.ID] {
			t.Fatalf("received %s, which was not sent", m.ID)
		}
	}
	if f := s.call(3, "POST", "/v1/queues/jobs/ack", receiptsBody(receiptsOf(got.Messages), "")); f.Status != 200 {
		t.Fatalf("ack: HTTP %d %s", f.Status, f.Body)
	}
	if q := e.queue("jobs"); q.Stats.Ready+q.Stats.InFlight != 0 {
		t.Fatalf("after the ack: %+v", q.Stats)
	}

	// The binary encoding travels too: headers and body pass as they are.
	bin := api.AppendSendRequest(nil, []api.BinaryMessage{{Body: []byte{0, 1, 2}, Delay: -1}})
	bf := api.Frame{Kind: api.FrameRequest, ID: 4, Method: "POST", Target: "/v1/queues/jobs/messages", Body: bin,
		Header: []api.Header{{Name: "Content-Type", Value: api.ContentTypeBinary}, {Name: "Accept", Value: api.ContentTypeBinary}}}
	s.write(api.AppendFrame(nil, &bf))
	if a := s.next(); a.ID != 4 || a.Status != 200 || !hasHeader(a, "Content-Type", api.ContentTypeBinary) {
		t.Fatalf("binary send: id %d HTTP %d %v %q", a.ID, a.Status, a.Header, a.Body)
	} else if rs, err := api.DecodeSendAnswer(a.Body); err != nil || len(rs) != 1 || rs[0].Err != nil || rs[0].ID == 0 {
		t.Fatalf("binary send answer: %+v %v", rs, err)
	}

	// Errors are the HTTP API's, status, code and message alike.
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/v1/queues/nope/messages", `{"messages":[{"body":"x"}]}`},
		{"POST", "/v1/queues/jobs/messages", `{"messages":[{"body":"x"}], "extra": 1}`},
		{"DELETE", "/v1/queues/jobs/receive", ""},
		{"GET", "/v1/nowhere", ""},
	} {
		var hb any
		if c.body != "" {
			hb = c.body
		}
		want := e.do(c.method, c.target, hb)
		got := s.call(5, c.method, c.target, c.body)
		if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) {
			t.Errorf("%s %s: stream answers HTTP %d %s; HTTP answers %v", c.method, c.target, got.Status, got.Body, want)
		}
	}
}

func hasHeader(f api.Frame, name, value string) bool {
	for _, h := range f.Header {
		if http.CanonicalHeaderKey(h.Name) == name && h.Value == value {
			return true
		}
	}
	return false
}

// TestStreamUpgradeRules: a stream opens only when asked for properly, and only with the
// token; once open, its requests need no token.
func TestStreamUpgradeRules(t *testing.T) {
	t.Parallel()
	opts := okibatest.Options{}
	opts.Token = "s3cret-s3cret-s3cret-s3cret"
	e := newEnv(t, opts)
	cases := []struct {
		name   string
		lines  string
		status int
		code   string
	}{
		{"no token", upgradeLines, 401, api.CodeUnauthorized},
		{"wrong token", upgradeLines + "Authorization: Bearer nope\r\n", 401, api.CodeUnauthorized},
		{"no upgrade", "Authorization: Bearer s3cret-s3cret-s3cret-s3cret\r\n", 400, api.CodeInvalidRequest},
		{"another protocol", "Connection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer s3cret-s3cret-s3cret-s3cret\r\n", 400, api.CodeInvalidRequest},
	}
	for _, c := range cases {
		res, s := e.upgrade(c.lines)
		if s != nil {
			t.Fatalf("%s: the stream opened", c.name)
		}
		body, _ := io.ReadAll(res.Body)
		if got := wireError(t, &response{Status: res.StatusCode, Body: body}); res.StatusCode != c.status || got.Code != c.code {
			t.Errorf("%s: HTTP %d %s, want %d %s", c.name, res.StatusCode, body, c.status, c.code)
		}
		if c.status == 400 && res.Header.Get("Upgrade") != api.StreamProtocol {
			t.Errorf("%s: the refusal does not say which protocol to ask for: %v", c.name, res.Header)
		}
	}
	if r := e.do("POST", "/v1/stream", nil); r.Status != 405 {
		t.Errorf("POST /v1/stream: %v", r)
	}

	s := e.openStream()
	if f := s.call(1, "PUT", "/v1/queues/q", "{}"); f.Status != 201 {
		t.Fatalf("PUT on an authorized stream: HTTP %d %s", f.Status, f.Body)
	}
	// A stream inside a stream is refused; the stream goes on.
	s.request(2, "GET", "/v1/stream", "", "Connection", "Upgrade", "Upgrade", api.StreamProtocol)
	if f := s.next(); f.ID != 2 || frameError(t, f).Code != api.CodeInvalidRequest {
		t.Fatalf("stream in a stream: id %d HTTP %d %s", f.ID, f.Status, f.Body)
	}
	// So is a target that names a host.
	if f := s.call(3, "GET", "//example.com/v1/queues", ""); frameError(t, f).Code != api.CodeInvalidRequest {
		t.Errorf("target with a host: HTTP %d %s", f.Status, f.Body)
	}
	if f := s.call(4, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("after the refusals: HTTP %d %s", f.Status, f.Body)
	}
}

// TestStreamRejectsMalformedFrames: a frame that breaks the protocol gets an answer with
// id 0 that says what is wrong, the connection closes, and nothing changes.
func TestStreamRejectsMalformedFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", "{}")
	e.send("q", "keep")
	before := e.snapshot()

	send := api.Frame{Kind: api.FrameRequest, ID: 9, Method: "POST", Target: "/v1/queues/q/messages", Body: []byte(`{"messages":[{"body":"x"}]}`),
		Header: []api.Header{{Name: "Content-Type", Value: "application/json"}}}
	good := api.AppendFrame(nil, &send)
	length := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	cases := []struct {
		name string
		wire []byte
		code string
	}{
		{"unknown kind", append(length(2), 9, 1), api.CodeInvalidRequest},
		{"an answer from the client", api.AppendFrame(nil, &api.Frame{Kind: api.FrameAnswer, ID: 1, Status: 200}), api.CodeInvalidRequest},
		{"request id 0", api.AppendFrame(nil, &api.Frame{Kind: api.FrameRequest, ID: 0, Method: "GET", Target: "/v1/queues"}), api.CodeInvalidRequest},
		{"no target", api.AppendFrame(nil, &api.Frame{Kind: api.FrameRequest, ID: 1, Method: "GET"}), api.CodeInvalidRequest},
		{"field past the end", append(length(5), 1, 1, 1, 100, 'G'), api.CodeInvalidRequest},
		{"too large", length(api.MaxFrame + 1), api.CodeRequestTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := e.openStream()
			s.write(c.wire)
			f := s.next()
			if f.ID != 0 {
				t.Fatalf("answer to id %d, want 0 (the connection)", f.ID)
			}
			if got := frameError(t, f); got.Code != c.code {
				t.Fatalf("code %s (%s), want %s", got.Code, got.Message, c.code)
			}
			if !s.closed() {
				t.Fatal("the connection stayed open after a protocol error")
			}
		})
	}
	e.unchanged(t, before, "malformed frames")

	// A connection that ends inside a frame: the request before it is served, the torn
	// one is not.
	s := e.openStream()
	s.write(append(append([]byte(nil), good...), good[:len(good)-3]...))
	f := s.next()
	if f.ID != 9 || f.Status != 200 {
		t.Fatalf("the whole request: id %d HTTP %d %s", f.ID, f.Status, f.Body)
	}
	s.conn.(*net.TCPConn).CloseWrite()
	if !s.closed() {
		t.Fatal("the connection stayed open")
	}
	if ms := e.peek("q", "").Messages; len(ms) != 2 || ms[1].ID != sendID(t, f) {
		t.Fatalf("after a torn frame: %v, want keep and the one whole send", bodies(ms))
	}

	// A request id already in flight: a long poll holds id 7, and a second 7 breaks the
	// protocol, which ends the connection and the long poll with it.
	s = e.openStream()
	e.putQueue("empty", "{}")
	s.request(7, "POST", "/v1/queues/empty/receive", `{"wait":"20s"}`)
	s.request(7, "GET", "/v1/queues", "")
	for {
		f := s.next()
		if f.ID == 0 {
			if got := frameError(t, f); !strings.Contains(got.Message, "already in flight") {
				t.Fatalf("duplicate id: %s", got.Message)
			}
			break
		}
	}
	if !s.closed() {
		t.Fatal("the connection stayed open after a duplicate id")
	}
}

func sendID(t testing.TB, f api.Frame) string {
	t.Helper()
	var out api.SendResponse
	if err := json.Unmarshal(f.Body, &out); err != nil || len(out.Results) != 1 {
		t.Fatalf("send answer %s: %v", f.Body, err)
	}
	return out.Results[0].ID
}

// TestStreamCancelEndsALongPoll: a cancel frame ends the request it names, which
// answers without having leased anything.
func TestStreamCancelEndsALongPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", "{}")
	s := e.openStream()
	s.request(5, "POST", "/v1/queues/q/receive", `{"wait":"30s"}`)
	// The cancel must reach the request once it runs; a GET answered means the reader
	// has passed the receive's frame.
	if f := s.call(6, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("GET: HTTP %d", f.Status)
	}
	s.write(api.AppendFrame(nil, &api.Frame{Kind: api.FrameCancel, ID: 5}))
	f := s.next() // within waitLong, far less than the receive's 30 s wait
	if f.ID != 5 {
		t.Fatalf("answer to %d, want 5", f.ID)
	}
	var out api.ReceiveResponse
	if f.Status == 200 {
		if err := json.Unmarshal(f.Body, &out); err != nil || len(out.Messages) != 0 {
			t.Fatalf("cancelled receive: %s", f.Body)
		}
	}
	e.send("q", "after")
	if ms := e.receive("q", 10, ""); len(ms) != 1 || bodyOf(ms[0]) != "after" {
		t.Fatalf("after the cancel: %v", bodies(ms))
	}
	// Cancelling an id that is not in flight is no error.
	s.write(api.AppendFrame(nil, &api.Frame{Kind: api.FrameCancel, ID: 99}))
	if f := s.call(8, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("after a stray cancel: HTTP %d", f.Status)
	}
}

// TestCloseStreams: shutdown ends long polls, answers what is in flight, closes the
// connections and refuses new streams.
func TestCloseStreams(t *testing.T) {
	t.Parallel()
	srv, e := serverAt(t, nativeapi.Options{})
	e.putQueue("q", "{}")
	s := e.openStream()
	s.request(1, "POST", "/v1/queues/q/receive", `{"wait":"60s"}`)
	if f := s.call(2, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("GET: HTTP %d", f.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := srv.CloseStreams(ctx); err != nil { // within waitLong: the 60 s long poll did not hold it
		t.Fatalf("CloseStreams: %v", err)
	}
	if f := s.next(); f.ID != 1 {
		t.Fatalf("answer to %d, want the long poll's", f.ID)
	}
	if !s.closed() {
		t.Fatal("the stream stayed open")
	}
	res, s2 := e.upgrade(upgradeLines)
	if s2 != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new stream after CloseStreams: HTTP %d", res.StatusCode)
	}
	if q := e.queue("q"); q.Stats.InFlight != 0 {
		t.Fatalf("the ended long poll leased %d messages", q.Stats.InFlight)
	}
}

// TestStreamSurvivesAPanickingHandler: a handler that panics answers 500 internal, and
// the stream and the server go on, as with HTTP.
func TestStreamSurvivesAPanickingHandler(t *testing.T) {
	t.Parallel()
	_, e := serverAt(t, nativeapi.Options{}, func(srv *nativeapi.Server, _ *httptest.Server) {
		srv.Handle("/boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	})
	s := e.openStream()
	f := s.call(1, "GET", "/boom", "")
	if got := frameError(t, f); f.Status != 500 || got.Code != api.CodeInternal {
		t.Fatalf("panicking handler: HTTP %d %s", f.Status, f.Body)
	}
	if f := s.call(2, "GET", "/v1/queues", ""); f.Status != 200 {
		t.Fatalf("after the panic: HTTP %d %s", f.Status, f.Body)
	}
}

// TestStreamIdleTimeout: a stream with nothing in flight closes after the idle timeout;
// one with a long poll in flight does not.
func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	_, e := serverAt(t, nativeapi.Options{StreamIdleTimeout: 300 * time.Millisecond})
	e.putQueue("q", "{}")

	busy := e.openStream()
	busy.request(1, "POST", "/v1/queues/q/receive", `{"wait":"1500ms"}`)
	if f := busy.next(); f.ID != 1 || f.Status != 200 {
		t.Fatalf("a long poll longer than the idle timeout: id %d HTTP %d %s", f.ID, f.Status, f.Body)
	}
	if !busy.closed() {
		t.Fatal("the stream stayed open once idle")
	}

	idle := e.openStream()
	if !idle.closed() {
		t.Fatal("an idle stream stayed open")
	}
}

// TestStreamRequestsAreObserved: framed requests reach Observe under their own routes,
// and the stream itself once, when it ends, with status 101.
func TestStreamRequestsAreObserved(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 16)
	srv, e := serverAt(t, nativeapi.Options{Observe: func(route, method string, status int, d time.Duration) {
		seen <- fmt.Sprintf("%s %s %d", method, route, status)
	}})
	s := e.openStream()
	if f := s.call(1, "GET", "/v1/queues/nope", ""); f.Status != 404 {
		t.Fatalf("GET: HTTP %d", f.Status)
	}
	if got := testkit.Recv(t, seen, waitLong, "the framed request to be observed"); got != "GET /v1/queues/{name} 404" {
		t.Fatalf("observed %q for the framed request", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := srv.CloseStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Recv(t, seen, waitLong, "the stream's end to be observed"); got != "GET /v1/stream 101" {
		t.Fatalf("observed %q for the stream", got)
	}
}

// A stream cannot hold more than its budget of request bytes in flight, nor all streams
// more than the server's: padded long polls used to let one connection pin 1,024 × 16
// MiB. Beyond the budget a request is answered 503 with Retry-After, the stream goes
// on, and the bytes come back when the requests end.
func TestStreamBoundsTheBytesItHolds(t *testing.T) {
	t.Parallel()
	_, e := serverAt(t, nativeapi.Options{StreamBytes: 3 << 20, ServerStreamBytes: 4 << 20})
	e.putQueue("q", "{}")
	poll := `{"wait":"30s"}` + strings.Repeat(" ", 1<<20) // a long poll padded to 1 MiB
	s := e.openStream()
	for id := uint64(1); id <= 2; id++ {
		s.request(id, "POST", "/v1/queues/q/receive", poll)
	}
	// The third fits nowhere in this stream's 3 MiB (each costs 1 MiB and a little).
	f := s.call(3, "POST", "/v1/queues/q/receive", poll)
	if e := frameError(t, f); f.Status != 503 || e.Code != api.CodeUnavailable || e.RetryAfter == nil || !strings.Contains(e.Message, "this stream") {
		t.Fatalf("third padded poll: HTTP %d %s", f.Status, f.Body)
	}
	if f := s.call(4, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("a small request beside them: HTTP %d", f.Status)
	}
	// Another stream meets the server's budget: 4 MiB in all (its polls wait on another
	// queue, so that they take nothing of q's).
	e.putQueue("q2", "{}")
	s2 := e.openStream()
	s2.request(1, "POST", "/v1/queues/q2/receive", poll)
	f = s2.call(2, "POST", "/v1/queues/q2/receive", poll)
	if e := frameError(t, f); f.Status != 503 || !strings.Contains(e.Message, "the server's streams") {
		t.Fatalf("past the server's budget: HTTP %d %s", f.Status, f.Body)
	}
	// A cancelled poll gives its bytes back: the next fits.
	s.write(api.AppendFrame(nil, &api.Frame{Kind: api.FrameCancel, ID: 1}))
	if f := s.next(); f.ID != 1 {
		t.Fatalf("answer to %d, want the cancelled 1", f.ID)
	}
	s.request(5, "POST", "/v1/queues/q/receive", poll)
	e.send("q", "one")
	for got := 0; got < 1; {
		f := s.next()
		if f.ID == 5 || f.ID == 2 {
			got++
			if f.Status != 200 {
				t.Fatalf("a poll after the budget freed: HTTP %d %s", f.Status, f.Body)
			}
		}
	}
}

// TestStreamLargeAnswersArriveWhole: answers larger than coalesce.LargeBody leave as
// they lie, behind their frame's head, while other answers are being written; each
// arrives whole, in a frame of its own, among small answers to requests in flight with
// them.
func TestStreamLargeAnswersArriveWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	s := e.openStream()
	if f := s.call(1, "PUT", "/v1/queues/big", `{"visibility_timeout":"5m"}`); f.Status != 201 {
		t.Fatalf("PUT queue: HTTP %d %s", f.Status, f.Body)
	}
	const n, size, per = 40, 32 << 10, 5 // 8 receives of 5 × 32 KiB: 160 KiB answers
	var msgs []api.BinaryMessage
	for i := range n {
		body := bytes.Repeat([]byte{byte(i)}, size)
		binary.BigEndian.PutUint32(body, uint32(i))
		msgs = append(msgs, api.BinaryMessage{Body: body, Delay: -1})
	}
	bin := api.AppendSendRequest(nil, msgs)
	bf := api.Frame{Kind: api.FrameRequest, ID: 2, Method: "POST", Target: "/v1/queues/big/messages", Body: bin,
		Header: []api.Header{{Name: "Content-Type", Value: api.ContentTypeBinary}, {Name: "Accept", Value: api.ContentTypeBinary}}}
	s.write(api.AppendFrame(nil, &bf))
	if a := s.next(); a.Status != 200 {
		t.Fatalf("send: HTTP %d %s", a.Status, a.Body)
	}
	for i := range n / per {
		s.request(uint64(100+i), "POST", "/v1/queues/big/receive", fmt.Sprintf(`{"max":%d}`, per), "Accept", api.ContentTypeBinary)
		s.request(uint64(200+i), "GET", "/v1/queues/big", "")
	}
	seen := map[uint32]bool{}
	for range 2 * (n / per) {
		f := s.next()
		if f.Status != 200 {
			t.Fatalf("answer %d: HTTP %d %s", f.ID, f.Status, f.Body)
		}
		if f.ID >= 200 {
			var q api.Queue
			if err := json.Unmarshal(f.Body, &q); err != nil || q.Name != "big" {
				t.Fatalf("queue answer %d: %v %.80q", f.ID, err, f.Body)
			}
			continue
		}
		got, err := api.DecodeReceiveAnswer(f.Body)
		if err != nil || len(got) != per {
			t.Fatalf("receive answer %d: %d messages, %v", f.ID, len(got), err)
		}
		for _, m := range got {
			i := binary.BigEndian.Uint32(m.Body)
			want := bytes.Repeat([]byte{byte(i)}, size)
			binary.BigEndian.PutUint32(want, i)
			if seen[i] || !bytes.Equal(m.Body, want) {
				t.Fatalf("message %d received twice or damaged", i)
			}
			seen[i] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d messages received", len(seen), n)
	}
}
