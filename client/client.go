// Package client is the Go client of okiba's native HTTP API: queue management, send and
// batch send, receive, ack / nack / extend / dead-letter, peek and redrive, topics,
// subscriptions and consumer groups, plus batching runtimes for sending to a queue
// (Producer) and publishing to a topic (TopicPublisher), a consumer runtime (Consume)
// that handles leases, retries and dead letters for you, and a consumer-group member
// runtime (ConsumeGroup) that handles partitions in order, commits, heartbeats, retries,
// dead letters and rebalances.
//
// Every call returns *api.Error for an error the server reported, so callers can branch
// on its Code (api.CodeReceiptStale, api.CodeQueueFull, …).
package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// DefaultServer is the broker address used when none is given.
const DefaultServer = "http://127.0.0.1:7070"

// Options configure a Client. The zero value means the defaults.
type Options struct {
	// Token is sent as a bearer token when set.
	Token string
	// HTTPClient does the requests. Defaults to a client with no overall timeout (long
	// polls last up to 60s; pass a context to bound a call).
	HTTPClient *http.Client
	// TLS configures the connections to an https:// server, plain requests and streams
	// alike: RootCAs to trust a private CA, Certificates to present a client
	// certificate to a server that asks for one. The client uses a copy (taken by New)
	// with its own ServerName (the server address's host, unless set) and NextProtos
	// (HTTP/1.1, which the stream's Upgrade needs). Defaults to the system's roots and no
	// client certificate. Not used with HTTPClient: configure its transport instead.
	TLS *tls.Config
	// Servers are more URLs of nodes of the same cluster (docs/cluster.md), beside the
	// one New is given. With them the client rides through a failover: a call that
	// cannot reach its node, or that a node answers 503 unavailable (no leader yet, a
	// leader that lost its lead, a node shutting down), is sent again — to the leader a
	// follower names, else to the next node — after the answer's Retry-After (at most
	// 200 ms), until FailoverTimeout has passed since the call began. A call whose
	// connection broke after it was sent may have happened: a send retried so may be
	// delivered twice (at-least-once; a dedup id makes it safe), a receive retried so
	// leaves the first attempt's leases to expire. Without Servers nothing is retried.
	Servers []string
	// FailoverTimeout bounds the retries of one call with Servers. Defaults to 30 s.
	FailoverTimeout time.Duration
	// Idempotent numbers every send request (docs/api.md, "Idempotent sends"): the
	// client gets a producer id from the server once, and a request the server has
	// answered is answered again with the same message ids however often it arrives —
	// so a send that met a broken connection is sent again safely, never enqueued twice.
	// On by default with Servers, where failovers make retries common; a server that
	// does not know producers (an older okiba) gets plain sends.
	Idempotent bool
	// NoStream makes every call a plain HTTP/1.1 request. By default the client's calls
	// travel as frames on a few persistent connections (the stream of docs/api.md), each
	// carrying many at once and costs both sides less per call; the client falls back to
	// HTTP by itself when the server does not offer it. A client with its own
	// HTTPClient, or whose server address has a path, always uses HTTP.
	NoStream bool
	// JSON makes sends, receives, topic publishes and group pulls use the JSON encoding
	// instead of okiba's compact binary one (api.ContentTypeBinary), for example to read
	// them through a proxy. The binary encoding costs the server and the client much less
	// per message. (A partition read, ReadPartition, is JSON either way.)
	JSON bool
	// Propagator carries trace context in message headers: sends inject it, Consume
	// extracts it. Defaults to W3C Trace Context (propagation.TraceContext{});
	// otel.GetTextMapPropagator() follows the application's global choice instead.
	Propagator propagation.TextMapPropagator
	// TracerProvider makes the spans of sends and of Consume's handlers. Defaults to the
	// global provider (otel.GetTracerProvider()), which records nothing until the
	// application installs an OpenTelemetry SDK. See trace.go's notes on tracing.
	TracerProvider trace.TracerProvider
	// Clock is the time of every decision the client takes by the clock: when Consume
	// extends leases, how long it backs off before retrying a failed receive or settle,
	// how long settles (AckLinger) and a Producer's or TopicPublisher's batches linger,
	// the drain timeout, the handler-error log's intervals, when an idle stream is closed
	// and when a failed one is tried again. Defaults to clock.Real. A test passes a *clock.Fake (its own,
	// or okibatest's Server.Clock) to move that time by hand: on a fake clock none of
	// these waits ends until the test advances it. What measures the network stays on
	// the system clock — each request's timeout, a connection's deadlines, and the few
	// milliseconds a receive in flight gets to be answered when Consume stops — since
	// only real time shows a peer that stopped answering.
	Clock clock.Clock
	// Name is how the server lists this client among a queue's consumers (GET
	// /v1/queues/{name}/consumers, the console's queue page, okiba consumers): sent in
	// the api.ClientHeader header. Defaults to host/pid, which tells a program's
	// processes apart; "-" sends none (the server then knows it by principal and address).
	Name string
}

// Client talks to one okiba server. It is safe for concurrent use.
type Client struct {
	base string
	// servers are base and Options.Servers; cur indexes the one calls go to now.
	servers     []string
	cur         atomic.Int32
	failoverFor time.Duration
	// The producer of idempotent sends (idempotent.go): its id, got once, and the last
	// sequence given to a request.
	idempotent  bool
	producerMu  sync.Mutex
	producer    string
	producerOff bool
	producerSeq atomic.Uint64
	token       string
	hc          *http.Client
	tls         *tls.Config // the stream's, made from Options.TLS; nil for the defaults
	json        bool
	prop        propagation.TextMapPropagator
	tracer      trace.Tracer

	name     string // api.ClientHeader's value, "" for none
	clock    clock.Clock
	noStream bool
	streams  streamState
}

// New returns a client for the server at base (for example "http://127.0.0.1:7070").
func New(base string, opts Options) (*Client, error) {
	if base == "" {
		base = DefaultServer
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server address %q must look like http://host:port", base)
	}
	var tc *tls.Config
	if opts.TLS != nil {
		tc = opts.TLS.Clone() // the caller may go on changing its own
		tc.NextProtos = []string{"http/1.1"}
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			TLSClientConfig:     tc, // the transport sets ServerName when it is empty
		}}
	}
	c := &Client{base: strings.TrimRight(base, "/"), token: opts.Token, hc: hc, tls: tc, json: opts.JSON, clock: opts.Clock}
	c.servers = []string{c.base}
	for _, s := range opts.Servers {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Scheme != c.scheme() {
			return nil, fmt.Errorf("client: server address %q must look like %s://host:port, as %s", s, c.scheme(), c.base)
		}
		if s = strings.TrimRight(s, "/"); !slices.Contains(c.servers, s) {
			c.servers = append(c.servers, s)
		}
	}
	c.name = opts.Name
	switch c.name {
	case "":
		c.name = defaultName()
	case "-":
		c.name = ""
	}
	// A header value holds no control characters.
	c.name = strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, c.name))
	c.failoverFor = cmp.Or(opts.FailoverTimeout, DefaultFailoverTimeout)
	c.idempotent = opts.Idempotent || len(c.servers) > 1
	if c.clock == nil {
		c.clock = clock.Real
	}
	c.noStream = opts.NoStream || opts.HTTPClient != nil || strings.Trim(u.Path, "/") != ""
	c.streams.init()
	c.prop, c.tracer = tracing(opts)
	return c, nil
}

// Close closes the client's stream connections; calls still waiting on them fail. A
// client is meant to live as long as the program: Close is for programs that make
// clients and drop them. Calls after Close open a new connection.
func (c *Client) Close() error {
	c.closeStreams()
	return nil
}

// Server returns the base URL.
func (c *Client) Server() string { return c.server() }

// do sends a JSON request and decodes a JSON answer into out. For batch endpoints that
// answer with per-item results even on error statuses, out receives the body and the
// error is still returned when the body carries a top-level error.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.doHeader(ctx, method, path, nil, in, out)
}

// doHeader is do with more request headers.
func (c *Client) doHeader(ctx context.Context, method, path string, hdr http.Header, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	req, err := newRequest(ctx, method, c.server()+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, data, err := c.roundTrip(req, body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		e, fromServer := answerError(resp.StatusCode, data)
		if fromServer && out != nil {
			_ = json.Unmarshal(data, out) // per-item results travel with the error
		}
		return e
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return unreadable(resp, data, err)
	}
	return nil
}

// ErrUnreadableAnswer is wrapped by the error of a call whose answer was a success the
// client cannot read: not okiba's encoding (a proxy's page, a test double that answered
// JSON to a binary request). Nothing says the call failed, or that it did not; a read may
// be retried, and the consumer runtime does so.
var ErrUnreadableAnswer = errors.New("okiba: the answer cannot be read")

func unreadable(resp *http.Response, data []byte, err error) error {
	if len(data) > 200 {
		data = append(data[:200:200], "…"...)
	}
	return fmt.Errorf("%w (HTTP %d, %s: %v): %q", ErrUnreadableAnswer, resp.StatusCode, resp.Header.Get("Content-Type"), err, data)
}

// doBinary posts body (binary), or in JSON-encoded when body is nil, accepting a binary
// answer, which decode reads — also on an error status, where the server answers a batch
// whose every item failed alike. A JSON answer on an error status is the error.
func (c *Client) doBinary(ctx context.Context, path string, in any, body []byte, decode func([]byte) error) error {
	ctype := api.ContentTypeBinary
	if body == nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = b, "application/json"
	}
	req, err := newRequest(ctx, "POST", c.server()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", api.ContentTypeBinary)
	resp, data, err := c.roundTrip(req, body)
	if err != nil {
		return err
	}
	if resp.Header.Get("Content-Type") == api.ContentTypeBinary {
		if err := decode(data); err != nil {
			return unreadable(resp, data, err)
		}
		return nil
	}
	if resp.StatusCode < 300 {
		return unreadable(resp, data, errors.New("a binary answer was asked for"))
	}
	e, _ := answerError(resp.StatusCode, data)
	return e
}

// newRequest makes a request whose body, if any, is body.
func newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	return http.NewRequestWithContext(ctx, method, url, rd)
}

// roundTrip sends req, whose body is body, with the client's credentials and reads the
// whole answer. On a stream the body travels as it is, without reading req.Body.
func (c *Client) roundTrip(req *http.Request, body []byte) (*http.Response, []byte, error) {
	if len(c.servers) > 1 {
		return c.roundTripFailover(req, body)
	}
	return c.roundTripOnce(req, body)
}

func (c *Client) roundTripOnce(req *http.Request, body []byte) (*http.Response, []byte, error) {
	if !c.noStream {
		// A stream the server closed can look alive until its reader notices, and when
		// the server restarts, all of them do; a read is safe to send again, as net/http
		// does with a stale keep-alive connection, on each in turn, then on a new one.
		for try := 0; ; try++ {
			st := c.stream(req.Context())
			if st == nil {
				break
			}
			resp, data, err := st.roundTrip(req, body)
			if err == nil || !errors.Is(err, errStreamBroken) || !repeatable(req) || req.Context().Err() != nil || try == streamConns {
				return resp, data, err
			}
		}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.name != "" {
		req.Header.Set(api.ClientHeader, c.name)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, data, nil
}

// repeatable reports whether req may be sent twice. Every POST is refused, a receive too:
// a receive-and-delete sent twice could settle messages nobody sees (ReceiveOptions.Delete);
// but a producer's numbered send is answered once however often it arrives.
func repeatable(req *http.Request) bool {
	if req.Context().Value(idempotentKey{}) != nil {
		return true
	}
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) && req.Body == nil
}

// answerError is the error of an answer with status: the server's JSON error body
// (fromServer), or, for a body that is none (a proxy's page, say), an internal error
// that quotes it.
func answerError(status int, data []byte) (e *api.Error, fromServer bool) {
	var eb api.ErrorBody
	if json.Unmarshal(data, &eb) != nil || eb.Error == nil {
		return &api.Error{Code: api.CodeInternal, Status: status, Message: fmt.Sprintf("HTTP %d: %s", status, strings.TrimSpace(string(data)))}, false
	}
	eb.Error.Status = status
	return eb.Error, true
}

// formatID writes an id as the API does: 16 hex digits. (fmt.Sprintf was 2 % of a
// pipelining producer's CPU.)
func formatID(id uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[id&0xf]
		id >>= 4
	}
	return string(b[:])
}

func qpath(name string, rest ...string) string {
	p := "/v1/queues/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// ---------------------------------------------------------------------------------------
// Queues

// PutQueue creates a queue or updates the fields set in cfg (nil fields keep their value,
// or okiba's default on creation).
func (c *Client) PutQueue(ctx context.Context, name string, cfg api.QueueConfig) (*api.Queue, error) {
	var q api.Queue
	if err := c.do(ctx, "PUT", qpath(name), cfg, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// CreateQueue creates a queue unless it exists (a PUT with If-None-Match: *): a queue
// that exists with the configuration cfg would create is returned as it is; one with
// another is refused with queue_exists, naming the fields, and left unchanged.
func (c *Client) CreateQueue(ctx context.Context, name string, cfg api.QueueConfig) (*api.Queue, error) {
	var q api.Queue
	if err := c.doHeader(ctx, "PUT", qpath(name), http.Header{"If-None-Match": {"*"}}, cfg, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// Queue returns a queue with its statistics.
func (c *Client) Queue(ctx context.Context, name string) (*api.Queue, error) {
	var q api.Queue
	if err := c.do(ctx, "GET", qpath(name), nil, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// Consumers lists the receivers of a queue that the server saw lately: each with its
// name (Options.Name) or principal and address, its long polls waiting and the leases it
// holds. It is the memory of the node asked, not replicated.
func (c *Client) Consumers(ctx context.Context, queue string) (*api.ConsumerList, error) {
	var l api.ConsumerList
	if err := c.do(ctx, "GET", qpath(queue, "consumers"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// defaultName is Options.Name's default: host/pid.
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

// Queues lists queues whose name starts with prefix.
func (c *Client) Queues(ctx context.Context, prefix string) ([]api.Queue, error) {
	var l api.QueueList
	p := "/v1/queues"
	if prefix != "" {
		p += "?prefix=" + url.QueryEscape(prefix)
	}
	if err := c.do(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	return l.Queues, nil
}

// DeleteQueue deletes a queue; force deletes it even if it is another queue's DLQ.
func (c *Client) DeleteQueue(ctx context.Context, name string, force bool) error {
	p := qpath(name)
	if force {
		p += "?force=true"
	}
	return c.do(ctx, "DELETE", p, nil, nil)
}

// Purge removes every message of a queue and returns how many.
func (c *Client) Purge(ctx context.Context, name string) (int64, error) {
	var r api.PurgeResponse
	err := c.do(ctx, "POST", qpath(name, "purge"), nil, &r)
	return r.Purged, err
}

// Parked lists a queue's parked groups (on_dead_letter park_group), each with the dead
// letter it waits for.
func (c *Client) Parked(ctx context.Context, queue string) ([]api.ParkedGroup, error) {
	var r api.ParkedResponse
	if err := c.do(ctx, "GET", qpath(queue, "parked"), nil, &r); err != nil {
		return nil, err
	}
	return r.Groups, nil
}

// ReleaseGroup releases a parked group by hand: its messages are delivered again, in
// order; its dead letter stays where it is. A group that is not parked is not_parked.
func (c *Client) ReleaseGroup(ctx context.Context, queue, group string) error {
	var r api.ReleaseResponse
	return c.do(ctx, "POST", qpath(queue, "groups", url.PathEscape(group), "release"), nil, &r)
}

// Health checks /healthz.
func (c *Client) Health(ctx context.Context) error {
	var h api.Health
	return c.do(ctx, "GET", "/healthz", nil, &h)
}

// ---------------------------------------------------------------------------------------
// Messages

// Message is a message to send.
type Message struct {
	Body    []byte
	Group   string
	DedupID string
	// Delay before the message becomes visible; nil means the queue's delay.
	Delay   *time.Duration
	Headers map[string]string
}

// SendResult is the outcome of one sent message: its id, or Err.
type SendResult struct {
	ID        string
	Duplicate bool
	Err       error
}

func wireSend(m Message) api.SendMessage {
	out := api.SendMessage{Group: m.Group, DedupID: m.DedupID, Headers: m.Headers}
	out.Body, out.BodyBase64 = api.EncodeBody(m.Body)
	if m.Delay != nil {
		out.Delay = api.Ptr(*m.Delay)
	}
	return out
}

// Send sends one message and returns its id.
func (c *Client) Send(ctx context.Context, queue string, m Message) (SendResult, error) {
	res, err := c.SendBatch(ctx, queue, []Message{m})
	if len(res) == 1 && res[0].Err != nil {
		return res[0], res[0].Err
	}
	if err != nil {
		return SendResult{}, err
	}
	return res[0], nil
}

// SendBatch sends up to 1000 messages in one request. A request-level failure returns
// an error; per-message failures (queue_full, message_too_large, …) are in the results.
// Messages get the trace context and the correlation id of ctx in their headers (see
// WithCorrelationID); the caller's messages are not changed.
func (c *Client) SendBatch(ctx context.Context, queue string, msgs []Message) (res []SendResult, err error) {
	ctx, span := c.sendSpan(ctx, queue, len(msgs))
	defer func() { endSpan(span, err) }()
	return c.sendBatch(ctx, queue, c.decorateAll(ctx, msgs))
}

// sendBatch sends messages as they are (the Producer decorates them in Send).
func (c *Client) sendBatch(ctx context.Context, queue string, msgs []Message) ([]SendResult, error) {
	if !c.json {
		return c.sendBinary(ctx, queue, msgs)
	}
	wire := make([]api.SendMessage, len(msgs))
	for i, m := range msgs {
		wire[i] = wireSend(m)
	}
	return c.sendWire(ctx, queue, wire)
}

// sendBinary sends a batch in the binary encoding.
func (c *Client) sendBinary(ctx context.Context, queue string, msgs []Message) ([]SendResult, error) {
	bm := make([]api.BinaryMessage, len(msgs))
	size := 0
	for i, m := range msgs {
		bm[i] = api.BinaryMessage{Body: m.Body, Group: m.Group, DedupID: m.DedupID, Delay: -1}
		if m.Delay != nil {
			bm[i].Delay = m.Delay.Milliseconds()
		}
		if len(m.Headers) > 0 {
			bm[i].Headers = make([]api.Header, 0, len(m.Headers))
			for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
				bm[i].Headers = append(bm[i].Headers, api.Header{Name: k, Value: m.Headers[k]})
			}
		}
		size += len(m.Body) + len(m.Group) + len(m.DedupID) + 16
	}
	var out []SendResult
	body := make([]byte, 0, size+16+producerRoom)
	if producer, seq := c.nextSequence(ctx); producer != "" {
		body, ctx = api.AppendSendRequestFrom(body, producer, seq, bm), idempotent(ctx)
	} else {
		body = api.AppendSendRequest(body, bm)
	}
	err := c.doBinary(ctx, qpath(queue, "messages"), nil, body, func(data []byte) error {
		rs, err := api.DecodeSendAnswer(data)
		if err != nil {
			return err
		}
		if len(rs) != len(msgs) {
			return fmt.Errorf("client: server answered %d results for %d messages", len(rs), len(msgs))
		}
		out = make([]SendResult, len(rs))
		for i, r := range rs {
			if r.Err != nil {
				out[i].Err = r.Err
				continue
			}
			out[i] = SendResult{ID: formatID(r.ID), Duplicate: r.Duplicate}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sendWire sends messages already in JSON wire form.
func (c *Client) sendWire(ctx context.Context, queue string, msgs []api.SendMessage) ([]SendResult, error) {
	var resp api.SendResponse
	req := api.SendRequest{Messages: msgs}
	if req.ProducerID, req.Sequence = c.nextSequence(ctx); req.ProducerID != "" {
		ctx = idempotent(ctx)
	}
	err := c.do(ctx, "POST", qpath(queue, "messages"), req, &resp)
	if len(resp.Results) != len(msgs) {
		if err == nil {
			err = fmt.Errorf("client: server answered %d results for %d messages", len(resp.Results), len(msgs))
		}
		return nil, err
	}
	out := make([]SendResult, len(msgs))
	for i, r := range resp.Results {
		out[i] = SendResult{ID: r.ID, Duplicate: r.Duplicate}
		if r.Error != nil {
			out[i].Err = r.Error
		}
	}
	return out, nil
}

// Delivery is a received, leased message.
type Delivery struct {
	Queue            string
	ID               string
	Receipt          string
	Body             []byte
	Group            string
	DedupID          string
	Headers          map[string]string
	Deliveries       uint32
	EnqueuedAt       time.Time
	FirstDeliveredAt time.Time
	LeaseDeadline    time.Time
	DeadLetter       *api.DeadLetter
}

// ReceiveOptions shape a receive. Zero values mean: 1 message, the queue's receive_wait
// and visibility_timeout.
type ReceiveOptions struct {
	Max        int
	Wait       *time.Duration
	Visibility *time.Duration
	// Delete makes it a receive-and-delete: the server settles the messages as it
	// returns them (at-most-once, on purpose), so a Delivery has no Receipt and no
	// LeaseDeadline, and there is nothing to ack. If the answer is lost — the connection
	// or the stream breaks, the process dies — the messages are lost with it: that is
	// the trade. The client never sends such a call again by itself (a receive is a
	// POST, which roundTrip never repeats), and a caller that retries one after an error
	// must accept that the first attempt may have taken messages. Visibility must be nil.
	Delete bool
}

// Receive leases up to opts.Max messages, long-polling up to opts.Wait.
func (c *Client) Receive(ctx context.Context, queue string, opts ReceiveOptions) ([]Delivery, error) {
	req := api.ReceiveRequest{Max: opts.Max, ReceiveAndDelete: opts.Delete}
	if opts.Wait != nil {
		req.Wait = api.Ptr(*opts.Wait)
	}
	if opts.Visibility != nil {
		req.Visibility = api.Ptr(*opts.Visibility)
	}
	if !c.json {
		var out []Delivery
		err := c.doBinary(ctx, qpath(queue, "receive"), req, nil, func(data []byte) error {
			ms, err := api.DecodeReceiveAnswer(data)
			if err != nil {
				return err
			}
			out = make([]Delivery, len(ms))
			for i := range ms {
				out[i] = binaryDelivery(queue, &ms[i])
			}
			return nil
		})
		return out, err
	}
	var resp api.ReceiveResponse
	if err := c.do(ctx, "POST", qpath(queue, "receive"), req, &resp); err != nil {
		return nil, err
	}
	out := make([]Delivery, len(resp.Messages))
	for i, m := range resp.Messages {
		d, err := delivery(queue, m)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

func binaryDelivery(queue string, m *api.BinaryReceived) Delivery {
	d := Delivery{
		Queue: queue, ID: formatID(m.ID), Receipt: m.Receipt, Body: m.Body, Group: m.Group, DedupID: m.DedupID,
		Deliveries: m.Deliveries, EnqueuedAt: time.UnixMilli(m.EnqueuedAt).UTC(),
	}
	if m.Deadline != 0 { // 0: a receive-and-delete, which leased nothing
		d.LeaseDeadline = time.UnixMilli(m.Deadline).UTC()
	}
	if m.FirstDelivered > 0 {
		d.FirstDeliveredAt = time.UnixMilli(m.FirstDelivered).UTC()
	}
	if len(m.Attrs) > 0 {
		// As the JSON answer shows them: String and Number as text, Binary in base64.
		d.Headers = make(map[string]string, len(m.Attrs))
		for _, a := range m.Attrs {
			if strings.HasPrefix(a.Type, "Binary") {
				d.Headers[a.Name] = base64.StdEncoding.EncodeToString(a.Value)
			} else {
				d.Headers[a.Name] = string(a.Value)
			}
		}
	}
	if x := m.Dead; x != nil {
		d.DeadLetter = &api.DeadLetter{Source: x.Source, Reason: x.Reason, Description: x.Description, At: time.UnixMilli(x.At).UTC(), Deliveries: x.Deliveries}
	}
	return d
}

// Body returns a wire message's body bytes.
func Body(m api.Message) ([]byte, error) { return api.DecodeBody(m.Body, m.BodyBase64) }

func delivery(queue string, m api.Message) (Delivery, error) {
	body, err := Body(m)
	if err != nil {
		return Delivery{}, fmt.Errorf("client: message %s has a bad body_base64: %w", m.ID, err)
	}
	d := Delivery{
		Queue: queue, ID: m.ID, Receipt: m.Receipt, Body: body, Group: m.Group, DedupID: m.DedupID,
		Headers: m.Headers, Deliveries: m.Deliveries, EnqueuedAt: m.EnqueuedAt, DeadLetter: m.DeadLetter,
	}
	if m.FirstDeliveredAt != nil {
		d.FirstDeliveredAt = *m.FirstDeliveredAt
	}
	if m.VisibleAt != nil {
		d.LeaseDeadline = *m.VisibleAt
	}
	return d, nil
}

// receipts posts a receipts request and returns per-receipt errors (nil for success).
func (c *Client) receipts(ctx context.Context, queue, op string, req api.ReceiptsRequest) ([]error, error) {
	var resp api.ReceiptsResponse
	err := c.do(ctx, "POST", qpath(queue, op), req, &resp)
	if len(resp.Results) != len(req.Receipts) {
		if err == nil {
			err = fmt.Errorf("client: server answered %d results for %d receipts", len(resp.Results), len(req.Receipts))
		}
		return nil, err
	}
	out := make([]error, len(resp.Results))
	for i, r := range resp.Results {
		if r.Error != nil {
			out[i] = r.Error
		}
	}
	return out, nil
}

// first turns per-item results of a one-receipt call into a single error.
func first(errs []error, err error) error {
	if err != nil {
		return err
	}
	return errs[0]
}

// Ack settles messages; each receipt gets nil or its error (receipt_stale, …).
func (c *Client) Ack(ctx context.Context, queue string, receipts ...string) ([]error, error) {
	return c.receipts(ctx, queue, "ack", api.ReceiptsRequest{Receipts: receipts})
}

// AckOne acks one receipt.
func (c *Client) AckOne(ctx context.Context, queue, receipt string) error {
	return first(c.Ack(ctx, queue, receipt))
}

// Nack makes messages visible again after delay, or after the queue's backoff if delay
// is nil.
func (c *Client) Nack(ctx context.Context, queue string, delay *time.Duration, receipts ...string) ([]error, error) {
	req := api.ReceiptsRequest{Receipts: receipts}
	if delay != nil {
		req.Delay = api.Ptr(*delay)
	}
	return c.receipts(ctx, queue, "nack", req)
}

// NackError is Nack with the handler's error (at most 1024 bytes): the server stores it
// with each message, explain shows it, and it is the description of the dead letter a
// message becomes when max_deliveries ends it.
func (c *Client) NackError(ctx context.Context, queue string, delay *time.Duration, handlerErr string, receipts ...string) ([]error, error) {
	req := api.ReceiptsRequest{Receipts: receipts, Error: handlerErr}
	if delay != nil {
		req.Delay = api.Ptr(*delay)
	}
	return c.receipts(ctx, queue, "nack", req)
}

// Explain says why a message is or is not being delivered now, in words (Summary) and
// fields: ready and its place in line, delayed, leased, waiting for its group,
// dead-lettered, gone (acked, purged, …) or unknown.
func (c *Client) Explain(ctx context.Context, queue, id string) (*api.Explanation, error) {
	var r api.Explanation
	if err := c.do(ctx, "GET", qpath(queue, "messages", url.PathEscape(id), "explain"), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ExplainDedup explains by dedup id (group: on a queue whose dedup scope is the group):
// whether a send with it is deduplicated, into which message, and that message's state.
func (c *Client) ExplainDedup(ctx context.Context, queue, dedupID, group string) (*api.Explanation, error) {
	v := url.Values{"dedup_id": {dedupID}}
	if group != "" {
		v.Set("group", group)
	}
	var r api.Explanation
	if err := c.do(ctx, "GET", qpath(queue, "explain")+"?"+v.Encode(), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Extend sets leases to end visibility from now.
func (c *Client) Extend(ctx context.Context, queue string, visibility time.Duration, receipts ...string) ([]error, error) {
	return c.receipts(ctx, queue, "extend", api.ReceiptsRequest{Receipts: receipts, Visibility: api.Ptr(visibility)})
}

// DeadLetter moves messages to the queue's dead-letter queue with a reason.
func (c *Client) DeadLetter(ctx context.Context, queue, reason, description string, receipts ...string) ([]error, error) {
	return c.receipts(ctx, queue, "deadletter", api.ReceiptsRequest{Receipts: receipts, Reason: reason, Description: description})
}

// Defer sets leased messages aside: their leases end, no receive returns them, and only
// ReceiveDeferred, by id, takes them again (keep Delivery.ID). Each receipt gets nil or
// its error (receipt_stale, …), as Ack's do.
func (c *Client) Defer(ctx context.Context, queue string, receipts ...string) ([]error, error) {
	return c.receipts(ctx, queue, "defer", api.ReceiptsRequest{Receipts: receipts})
}

// DeferOne defers one receipt.
func (c *Client) DeferOne(ctx context.Context, queue, receipt string) error {
	return first(c.Defer(ctx, queue, receipt))
}

// DeferredResult is one id's outcome of ReceiveDeferred: the message, leased (ack it as
// any delivery; a nack or an ended lease returns it to deferred), or Err — an *api.Error
// with code not_deferred when the id names no deferred message of the queue.
type DeferredResult struct {
	ID       string
	Delivery Delivery
	Err      error
}

// ReceiveDeferred fetches deferred messages by id, each leased for visibility (nil: the
// queue's visibility_timeout); each lease counts a delivery. The results follow ids. A
// fetch is a POST, which the client never sends twice by itself.
func (c *Client) ReceiveDeferred(ctx context.Context, queue string, visibility *time.Duration, ids ...string) ([]DeferredResult, error) {
	req := api.DeferredReceiveRequest{IDs: ids}
	if visibility != nil {
		req.Visibility = api.Ptr(*visibility)
	}
	var resp api.DeferredReceiveResponse
	err := c.do(ctx, "POST", qpath(queue, "deferred", "receive"), req, &resp)
	if len(resp.Results) != len(ids) {
		if err == nil {
			err = fmt.Errorf("client: server answered %d results for %d ids", len(resp.Results), len(ids))
		}
		return nil, err
	}
	out := make([]DeferredResult, len(resp.Results))
	for i, r := range resp.Results {
		out[i].ID = r.ID
		switch {
		case r.Error != nil:
			out[i].Err = r.Error
		case r.Message == nil:
			out[i].Err = fmt.Errorf("client: result %d for %s has neither message nor error", i, r.ID)
		default:
			d, err := delivery(queue, *r.Message)
			if err != nil {
				return nil, err
			}
			out[i].Delivery = d
		}
	}
	return out, nil
}

// PeekOptions page through a queue without leasing.
type PeekOptions struct {
	After  string   // the Next cursor of the previous page
	Limit  int      // 1..1000, default 100
	States []string // ready, delayed, in_flight, deferred
}

// Peek lists messages in arrival order without leasing them.
func (c *Client) Peek(ctx context.Context, queue string, opts PeekOptions) (*api.PeekResponse, error) {
	v := url.Values{}
	if opts.After != "" {
		v.Set("after", opts.After)
	}
	if opts.Limit > 0 {
		v.Set("limit", strconv.Itoa(opts.Limit))
	}
	for _, s := range opts.States {
		v.Add("state", s)
	}
	p := qpath(queue, "messages")
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	var r api.PeekResponse
	if err := c.do(ctx, "GET", p, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DeleteMessage removes one message by id.
func (c *Client) DeleteMessage(ctx context.Context, queue, id string) error {
	return c.do(ctx, "DELETE", qpath(queue, "messages", url.PathEscape(id)), nil, nil)
}

// Redrive starts moving messages out of queue (usually a DLQ); see api.RedriveRequest.
func (c *Client) Redrive(ctx context.Context, queue string, req api.RedriveRequest) (*api.RedriveTask, error) {
	var t api.RedriveTask
	if err := c.do(ctx, "POST", qpath(queue, "redrive"), req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// RedriveTask returns a redrive task's progress.
func (c *Client) RedriveTask(ctx context.Context, id string) (*api.RedriveTask, error) {
	var t api.RedriveTask
	if err := c.do(ctx, "GET", "/v1/redrives/"+url.PathEscape(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// RedriveTasks lists redrive tasks, newest first.
func (c *Client) RedriveTasks(ctx context.Context) ([]api.RedriveTask, error) {
	var l api.RedriveList
	if err := c.do(ctx, "GET", "/v1/redrives", nil, &l); err != nil {
		return nil, err
	}
	return l.Tasks, nil
}

// CancelRedrive stops a running redrive task.
func (c *Client) CancelRedrive(ctx context.Context, id string) (*api.RedriveTask, error) {
	var t api.RedriveTask
	if err := c.do(ctx, "DELETE", "/v1/redrives/"+url.PathEscape(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// IsCode reports whether err is an *api.Error with the given code.
func IsCode(err error, code string) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}
