package nativeapi_test

// Helpers for the end-to-end tests of the native HTTP API: every test talks to a real
// broker over loopback HTTP with raw JSON bodies (so that malformed input can be sent),
// never through the Go client.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// waitLong bounds every wait for a condition; conditions normally hold in milliseconds.
const waitLong = 10 * time.Second

// env is one running broker and an HTTP client for it.
type env struct {
	t     testing.TB
	srv   *okibatest.Server // nil when the broker was built by hand
	base  string
	token string
	hc    *http.Client
}

func newEnv(t testing.TB, opts okibatest.Options) *env {
	t.Helper()
	srv := okibatest.New(t, opts)
	return &env{t: t, srv: srv, base: srv.URL, token: opts.Token, hc: &http.Client{Timeout: 90 * time.Second}}
}

// envAt talks to a server that the test started itself.
func envAt(t testing.TB, url string) *env {
	return &env{t: t, base: url, hc: &http.Client{Timeout: 90 * time.Second}}
}

// response is a complete HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.Status, bytes.TrimSpace(r.Body))
}

// do sends one request. body is sent as is when it is a string or []byte, omitted when
// nil, and JSON-encoded otherwise.
func (e *env) do(method, path string, body any, hdr ...string) *response {
	e.t.Helper()
	r, err := e.roundTrip(e.request(method, path, body, hdr...))
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// doAsync is do in another goroutine: the answer arrives on the channel, or, when the
// request fails, the test is marked failed (from that goroutine only t.Error may be
// called) and nil arrives.
func (e *env) doAsync(method, path string, body any, hdr ...string) <-chan *response {
	e.t.Helper()
	req := e.request(method, path, body, hdr...)
	ch := make(chan *response, 1)
	go func() {
		r, err := e.roundTrip(req)
		if err != nil {
			e.t.Errorf("%s %s: %v", method, path, err)
		}
		ch <- r
	}()
	return ch
}

// request builds a request as do sends it: a string, []byte or JSON-encoded body,
// the env's token, and hdr as name, value pairs ("" deletes a header).
func (e *env) request(method, path string, body any, hdr ...string) *http.Request {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("encode request: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return req
}

// roundTrip sends req and reads the whole answer. Unlike do it does not end the test,
// so goroutines other than the test's own may use it.
func (e *env) roundTrip(req *http.Request) (*response, error) {
	res, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: data}, nil
}

// call sends a request, checks the status and decodes the answer into out (if not nil).
func (e *env) call(method, path string, body any, want int, out any) *response {
	e.t.Helper()
	r := e.do(method, path, body)
	if r.Status != want {
		e.t.Fatalf("%s %s: got %v, want HTTP %d", method, path, r, want)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, r.Body, err)
		}
	}
	return r
}

func (e *env) putQueue(name string, cfg string) api.Queue {
	e.t.Helper()
	var q api.Queue
	r := e.do("PUT", "/v1/queues/"+name, cfg)
	if r.Status != 200 && r.Status != 201 {
		e.t.Fatalf("PUT queue %s %s: %v", name, cfg, r)
	}
	if err := json.Unmarshal(r.Body, &q); err != nil {
		e.t.Fatal(err)
	}
	return q
}

func (e *env) queue(name string) api.Queue {
	e.t.Helper()
	var q api.Queue
	e.call("GET", "/v1/queues/"+name, nil, 200, &q)
	return q
}

// send sends bodies as one batch and returns their ids.
func (e *env) send(queue string, bodies ...string) []string {
	e.t.Helper()
	msgs := make([]api.SendMessage, len(bodies))
	for i := range bodies {
		msgs[i] = api.SendMessage{Body: &bodies[i]}
	}
	var out api.SendResponse
	e.call("POST", "/v1/queues/"+queue+"/messages", api.SendRequest{Messages: msgs}, 200, &out)
	ids := make([]string, len(out.Results))
	for i, r := range out.Results {
		if r.Error != nil || r.ID == "" {
			e.t.Fatalf("send %d: %+v", i, r)
		}
		ids[i] = r.ID
	}
	return ids
}

// receive leases up to max messages without waiting.
func (e *env) receive(queue string, max int, extra string) []api.Message {
	e.t.Helper()
	body := fmt.Sprintf(`{"max":%d,"wait":0%s}`, max, extra)
	var out api.ReceiveResponse
	e.call("POST", "/v1/queues/"+queue+"/receive", body, 200, &out)
	return out.Messages
}

func (e *env) peek(queue, query string) api.PeekResponse {
	e.t.Helper()
	var out api.PeekResponse
	e.call("GET", "/v1/queues/"+queue+"/messages"+query, nil, 200, &out)
	return out
}

// receiptsBody is the JSON of a receipts request with extra fields appended.
func receiptsBody(receipts []string, extra string) string {
	data, _ := json.Marshal(receipts)
	return fmt.Sprintf(`{"receipts":%s%s}`, data, extra)
}

// settle posts a receipts request (op is ack, nack, extend or deadletter).
func (e *env) settle(queue, op string, receipts []string, extra string) (*response, api.ReceiptsResponse) {
	e.t.Helper()
	r := e.do("POST", "/v1/queues/"+queue+"/"+op, receiptsBody(receipts, extra))
	var out api.ReceiptsResponse
	if r.Status < 500 {
		if err := json.Unmarshal(r.Body, &out); err != nil {
			e.t.Fatalf("%s: decode %q: %v", op, r.Body, err)
		}
	}
	return r, out
}

// wireError decodes the top-level error of a response, or nil.
func wireError(t testing.TB, r *response) *api.Error {
	t.Helper()
	var body struct {
		Error *api.Error `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("response is not JSON: %v: %v", r, err)
	}
	return body.Error
}

// expectError checks that r carries code with its HTTP status, as JSON, with a
// message that is not empty and mentions every string in mentions.
func expectError(t testing.TB, r *response, code string, mentions ...string) *api.Error {
	t.Helper()
	want, ok := api.Status[code]
	if !ok {
		t.Fatalf("test bug: %q is not an error code", code)
	}
	if r.Status != want {
		t.Fatalf("got %v; want HTTP %d with code %s", r, want, code)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	e := wireError(t, r)
	if e == nil {
		t.Fatalf("no top-level error in %v", r)
	}
	if e.Code != code {
		t.Fatalf("error code %q (%s), want %q", e.Code, e.Message, code)
	}
	if strings.TrimSpace(e.Message) == "" {
		t.Errorf("%s: empty message", code)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Message, m) {
			t.Errorf("%s: message %q does not mention %q", code, e.Message, m)
		}
	}
	return e
}

// regression fails the (sub)test when a check that once caught a bug fails again; the
// message names the bug.
func regression(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatal("regression: " + fmt.Sprintf(format, args...))
	}
}

// ---------------------------------------------------------------------------------------
// State snapshots: what a rejected request must leave exactly as it was.

// queueState is everything durable and observable about one queue, without the parts
// that move with the clock (rates, ages).
type queueState struct {
	Name      string
	UpdatedAt time.Time
	Config    api.QueueConfig
	Counts    [4]int64 // ready, delayed, in flight, bytes
	Counters  api.Stats
	Messages  []api.Message
}

// state is every queue with its messages, and the redrive tasks.
type state struct {
	Queues []queueState
	Tasks  []api.RedriveTask
}

func (e *env) snapshot() state {
	e.t.Helper()
	var list api.QueueList
	e.call("GET", "/v1/queues", nil, 200, &list)
	var st state
	for _, q := range list.Queues {
		s := q.Stats
		qs := queueState{Name: q.Name, UpdatedAt: q.UpdatedAt, Config: q.Config,
			Counts: [4]int64{s.Ready, s.Delayed, s.InFlight, s.Bytes}}
		s.Ready, s.Delayed, s.InFlight, s.Bytes = 0, 0, 0, 0
		s.OldestReadyAgeMS, s.Rates, s.Waiting, s.InSystem = 0, api.Rates{}, api.LittlesLaw{}, api.LittlesLaw{}
		qs.Counters = s
		for after := ""; ; {
			p := e.peek(q.Name, "?limit=1000"+after)
			qs.Messages = append(qs.Messages, p.Messages...)
			if p.Next == "" {
				break
			}
			after = "&after=" + p.Next
		}
		st.Queues = append(st.Queues, qs)
	}
	var tasks api.RedriveList
	e.call("GET", "/v1/redrives", nil, 200, &tasks)
	st.Tasks = tasks.Tasks
	return st
}

// unchanged fails the test if the state differs from before.
func (e *env) unchanged(t testing.TB, before state, what string) {
	t.Helper()
	after := e.snapshot()
	if reflect.DeepEqual(before, after) {
		return
	}
	b, _ := json.MarshalIndent(before, "", " ")
	a, _ := json.MarshalIndent(after, "", " ")
	t.Fatalf("%s changed the broker's state:\nbefore: %s\nafter:  %s", what, b, a)
}

func ids(ms []api.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func receiptsOf(ms []api.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Receipt
	}
	return out
}

func bodyOf(m api.Message) string {
	if m.Body != nil {
		return *m.Body
	}
	return "base64:" + *m.BodyBase64
}

func bodies(ms []api.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = bodyOf(m)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
