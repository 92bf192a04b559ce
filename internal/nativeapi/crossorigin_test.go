package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// Web pages the user visits must not drive a broker that the browser can reach: every
// test here stands for a request such a page makes (a cross-origin "simple" POST, a
// fetch marked cross-site, a page on a rebound DNS name) and checks that it is refused
// before it changes or reveals anything.

const evil = "http://evil.example"

// withHost is do with the request's Host replaced (net/http ignores a Host header).
func (e *env) withHost(host, method, path string, body any, hdr ...string) *response {
	e.t.Helper()
	req := e.request(method, path, body, hdr...)
	req.Host = host
	r, err := e.roundTrip(req)
	if err != nil {
		e.t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	return r
}

func port(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestCrossOriginPurgeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("orders", `{}`)
	e.send("orders", "a", "b")
	before := e.snapshot()

	// What `curl -X POST -H 'Origin: http://evil.example' …/purge` stands for: a form or a
	// fetch from a page of another site, which the browser sends without asking.
	r := e.do("POST", "/v1/queues/orders/purge", nil, "Origin", evil)
	expectError(t, r, api.CodeForbidden, evil, "--cors-origins")
	e.unchanged(t, before, "a cross-origin purge")
	if q := e.queue("orders"); q.Stats.Ready != 2 {
		t.Fatalf("after a refused purge: %d ready, want 2", q.Stats.Ready)
	}

	// The same request from curl, the Go client or an SDK (no browser headers) passes.
	e.call("POST", "/v1/queues/orders/purge", nil, 200, nil)
	if q := e.queue("orders"); q.Stats.Ready != 0 {
		t.Fatalf("after a purge: %d ready", q.Stats.Ready)
	}
}

func TestCrossSiteReceiveLeasesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("orders", `{}`)
	id := e.send("orders", "secret")[0]

	for _, site := range []string{"cross-site", "same-site"} {
		r := e.do("POST", "/v1/queues/orders/receive", `{"max":10,"wait":0}`, "Sec-Fetch-Site", site)
		expectError(t, r, api.CodeForbidden, "Sec-Fetch-Site: "+site)
		if strings.Contains(string(r.Body), "secret") {
			t.Fatalf("a refused receive revealed the body: %v", r)
		}
	}
	// Still visible: nothing was leased.
	ms := e.receive("orders", 10, "")
	if len(ms) != 1 || ms[0].ID != id || ms[0].Deliveries != 1 {
		t.Fatalf("receive after refused cross-site receives: %+v", ms)
	}
	// The console's own pages are same-origin: they pass.
	e.call("POST", "/v1/queues/orders/nack", receiptsBody(receiptsOf(ms), `,"delay":0`), 200, nil)
	r := e.do("POST", "/v1/queues/orders/receive", `{"max":10,"wait":0}`, "Sec-Fetch-Site", "same-origin", "Origin", e.base)
	if r.Status != 200 || !strings.Contains(string(r.Body), "secret") {
		t.Fatalf("same-origin receive: %v", r)
	}
}

// TestEveryRouteIsGuarded sends a request of every route from a page of another origin:
// every one is refused and nothing changes, reads included (they reveal bodies and
// configuration).
func TestEveryRouteIsGuarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	id := e.send("q", "a")[0]
	var task api.RedriveTask
	e.putQueue("empty-dlq", `{}`)
	e.call("POST", "/v1/queues/empty-dlq/redrive", `{"to":"q"}`, 202, &task)
	testkit.Eventually(t, waitLong, func() bool {
		var got api.RedriveTask
		e.call("GET", "/v1/redrives/"+task.ID, nil, 200, &got)
		return got.State != "running"
	}, "the redrive of nothing to finish")
	before := e.snapshot()
	routes := [][3]string{
		{"GET", "/v1/queues", ""},
		{"PUT", "/v1/queues/q", `{"max_deliveries":9}`},
		{"PUT", "/v1/queues/new", `{}`},
		{"GET", "/v1/queues/q", ""},
		{"DELETE", "/v1/queues/q", ""},
		{"POST", "/v1/queues/q/messages", `{"body":"x"}`},
		{"GET", "/v1/queues/q/messages", ""},
		{"GET", "/v1/queues/q/messages/" + id, ""},
		{"DELETE", "/v1/queues/q/messages/" + id, ""},
		{"POST", "/v1/queues/q/receive", `{"wait":0}`},
		{"POST", "/v1/queues/q/ack", `{"receipts":["x"]}`},
		{"POST", "/v1/queues/q/nack", `{"receipts":["x"]}`},
		{"POST", "/v1/queues/q/extend", `{"receipts":["x"]}`},
		{"POST", "/v1/queues/q/deadletter", `{"receipts":["x"]}`},
		{"POST", "/v1/queues/q/purge", ""},
		{"POST", "/v1/queues/q/redrive", ""},
		{"GET", "/v1/redrives", ""},
		{"GET", "/v1/redrives/" + task.ID, ""},
		{"DELETE", "/v1/redrives/" + task.ID, ""},
		{"GET", "/v1/stats", ""},
		{"GET", api.StreamPath, ""},
		{"GET", "/v1/nothing", ""},
		{"PATCH", "/v1/queues/q", ""},
	}
	for _, rt := range routes {
		for _, hdr := range [][]string{{"Origin", evil}, {"Origin", "null"}, {"Sec-Fetch-Site", "cross-site"}} {
			var body any
			if rt[2] != "" {
				body = rt[2]
			}
			r := e.do(rt[0], rt[1], body, hdr...)
			if r.Status != 403 || wireError(t, r).Code != api.CodeForbidden {
				t.Errorf("%s %s with %s: %v", rt[0], rt[1], hdr, r)
			}
			if strings.Contains(string(r.Body), `"a"`) || strings.Contains(string(r.Body), `"ready"`) {
				t.Errorf("%s %s with %s revealed data: %v", rt[0], rt[1], hdr, r)
			}
		}
	}
	e.unchanged(t, before, "cross-origin requests of every route")

	// /healthz reveals nothing: any page may ask, by any name.
	if r := e.withHost("evil.test", "GET", "/healthz", nil, "Origin", evil, "Sec-Fetch-Site", "cross-site"); r.Status != 200 {
		t.Fatalf("healthz from another origin: %v", r)
	}
}

func TestUnknownHostNameIsRefusedWithoutAToken(t *testing.T) {
	t.Parallel()
	rebound := "evil.test:" // a name the attacker's DNS points at 127.0.0.1

	e := newEnv(t, okibatest.Options{})
	e.putQueue("orders", `{}`)
	e.send("orders", "secret")
	host := rebound + port(t, e.base)
	r := e.withHost(host, "GET", "/v1/queues/orders", nil)
	expectError(t, r, api.CodeForbidden, host, "--allowed-hosts")
	// Same-origin to the browser, which is what DNS rebinding buys: refused too.
	r = e.withHost(host, "GET", "/v1/queues/orders/messages", nil, "Sec-Fetch-Site", "same-origin", "Origin", "http://"+host)
	expectError(t, r, api.CodeForbidden, "DNS rebinding")
	if strings.Contains(string(r.Body), "secret") {
		t.Fatalf("a refused peek revealed the body: %v", r)
	}
	// The server's own names and IP addresses pass.
	for _, h := range []string{"localhost:" + port(t, e.base), "console.localhost", "127.0.0.1:" + port(t, e.base), "[::1]:7070"} {
		if r := e.withHost(h, "GET", "/v1/queues/orders", nil); r.Status != 200 {
			t.Errorf("Host %s: %v", h, r)
		}
	}

	// With a token the page has no credential to send: any name passes (proxies,
	// containers, cluster forwarding).
	a := newEnv(t, okibatest.Options{Token: "s3cret-s3cret-s3cret-s3cret"})
	a.putQueue("orders", `{}`)
	if r := a.withHost(rebound+port(t, a.base), "GET", "/v1/queues/orders", nil); r.Status != 200 {
		t.Fatalf("Host %s with a token: %v", rebound, r)
	}
	// A cross-origin page is still refused, before the token is looked at.
	expectError(t, a.do("POST", "/v1/queues/orders/purge", nil, "Origin", evil), api.CodeForbidden)
}

// sqsCall posts one SQS JSON-protocol action.
func (e *env) sqsCall(action string, in any, hdr ...string) *response {
	e.t.Helper()
	data, _ := json.Marshal(in)
	h := append([]string{"X-Amz-Target", "AmazonSQS." + action, "Content-Type", "application/x-amz-json-1.0"}, hdr...)
	return e.do("POST", "/", data, h...)
}

func TestCrossOriginSQSIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("orders", `{}`)
	r := e.sqsCall("GetQueueUrl", map[string]string{"QueueName": "orders"})
	var got struct{ QueueUrl string }
	if r.Status != 200 || json.Unmarshal(r.Body, &got) != nil || got.QueueUrl == "" {
		t.Fatalf("GetQueueUrl: %v", r)
	}
	send := map[string]string{"QueueUrl": got.QueueUrl, "MessageBody": "from a page"}
	for _, hdr := range [][]string{{"Origin", evil}, {"Sec-Fetch-Site", "cross-site"}} {
		r := e.sqsCall("SendMessage", send, hdr...)
		expectSQSError(t, r, "AccessDenied", "--cors-origins")
	}
	host := "evil.test:" + port(t, e.base)
	req := e.request("POST", "/", `{"QueueName":"orders"}`, "X-Amz-Target", "AmazonSQS.PurgeQueue", "Content-Type", "application/x-amz-json-1.0")
	req.Host = host
	r, err := e.roundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	expectSQSError(t, r, "AccessDenied", "--allowed-hosts")
	if q := e.queue("orders"); q.Stats.Sent != 0 {
		t.Fatalf("refused SQS sends sent %d messages", q.Stats.Sent)
	}
	// Without browser headers (an SDK), the same send goes through.
	if r := e.sqsCall("SendMessage", send); r.Status != 200 {
		t.Fatalf("SendMessage from an SDK: %v", r)
	}
}

// expectSQSError checks an error in the SQS JSON protocol's shape.
func expectSQSError(t testing.TB, r *response, code string, mentions ...string) {
	t.Helper()
	var body struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if r.Status != 403 || json.Unmarshal(r.Body, &body) != nil || body.Type != "com.amazonaws.sqs#"+code {
		t.Fatalf("got %v, want 403 %s", r, code)
	}
	if q := r.Header.Get("X-Amzn-Query-Error"); q != code+";Sender" {
		t.Errorf("X-Amzn-Query-Error %q", q)
	}
	if r.Header.Get("X-Amzn-RequestId") == "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.0") {
		t.Errorf("headers %v", r.Header)
	}
	for _, m := range mentions {
		if !strings.Contains(body.Message, m) {
			t.Errorf("message %q does not mention %q", body.Message, m)
		}
	}
}

func TestCrossOriginStreamIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	res, s := e.upgrade(upgradeLines + "Origin: " + evil + "\r\n")
	if s != nil || res.StatusCode != 403 {
		t.Fatalf("cross-origin upgrade: HTTP %d", res.StatusCode)
	}
	data, _ := io.ReadAll(res.Body)
	expectError(t, &response{Status: res.StatusCode, Header: res.Header, Body: data}, api.CodeForbidden)
	e.openStream() // and the same upgrade from the Go client passes
}

// TestListedOriginGetsCORS runs a server with a browser application's origin listed, the
// SQS front and /metrics.
func TestListedOriginGetsCORS(t *testing.T) {
	t.Parallel()
	const app = "https://app.example.com"
	e := newEnv(t, okibatest.Options{CORSOrigins: []string{app}, AllowedHosts: []string{"broker.internal"}})
	e.putQueue("orders", `{}`)

	// The preflight a browser sends before a JSON POST with a bearer token.
	pre := e.do("OPTIONS", "/v1/queues/orders/messages", nil, "Origin", app, "Sec-Fetch-Site", "cross-site",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type")
	if pre.Status != 204 || pre.Header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		pre.Header.Get("Access-Control-Max-Age") == "" || !strings.Contains(pre.Header.Get("Vary"), "Origin") {
		t.Fatalf("preflight: %v %v", pre, pre.Header)
	}
	// The request itself, and its answer readable by the page.
	r := e.do("POST", "/v1/queues/orders/messages", `{"body":"from the app"}`, "Origin", app, "Sec-Fetch-Site", "cross-site")
	if r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Fatalf("send from the listed origin: %v %v", r, r.Header)
	}
	if r := e.do("GET", "/metrics", nil, "Origin", app); r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != app {
		t.Fatalf("/metrics from the listed origin: %v", r)
	}
	// SQS from the listed origin: preflight of POST / with X-Amz-Target, then the call.
	pre = e.do("OPTIONS", "/", nil, "Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,x-amz-target,x-amz-date,authorization")
	if pre.Status != 204 || !strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), "X-Amz-Target") {
		t.Fatalf("SQS preflight: %v %v", pre, pre.Header)
	}
	r = e.sqsCall("ListQueues", map[string]string{}, "Origin", app, "Sec-Fetch-Site", "cross-site")
	if r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "X-Amzn-Query-Error") {
		t.Fatalf("SQS from the listed origin: %v %v", r, r.Header)
	}

	// Other origins: their preflight and their requests are refused, /metrics included.
	pre = e.do("OPTIONS", "/v1/queues/orders/messages", nil, "Origin", "https://app.example.com.evil.example", "Access-Control-Request-Method", "POST")
	if pre.Status != 403 || pre.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight of another origin: %v %v", pre, pre.Header)
	}
	expectError(t, e.do("GET", "/metrics", nil, "Origin", evil), api.CodeForbidden)
	expectError(t, e.do("POST", "/v1/queues/orders/purge", nil, "Origin", evil), api.CodeForbidden)
	if q := e.queue("orders"); q.Stats.Ready != 1 {
		t.Fatalf("ready %d, want 1", q.Stats.Ready)
	}

	// AllowedHosts adds a name; others are still refused.
	if r := e.withHost("broker.internal", "GET", "/v1/queues/orders", nil); r.Status != 200 {
		t.Fatalf("Host broker.internal, listed: %v", r)
	}
	expectError(t, e.withHost("other.internal", "GET", "/v1/queues/orders", nil), api.CodeForbidden, "other.internal")

	// The node counts what its guard answered under the route "cross-origin".
	metrics := string(e.do("GET", "/metrics", nil).Body)
	if n204, n403 := countRoute(metrics, "cross-origin", "204"), countRoute(metrics, "cross-origin", "403"); n204 != 2 || n403 != 4 {
		t.Errorf("cross-origin answers counted: %d preflights (want 2), %d refusals (want 4)", n204, n403)
	}
}

// countRoute sums a route's requests with one status code, over every method, from a
// /metrics page.
func countRoute(metrics, route, code string) int {
	n := 0
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "okiba_http_request_duration_seconds_count{") &&
			strings.Contains(l, `code="`+code+`"`) && strings.Contains(l, `route="`+route+`"`) {
			var v int
			fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v)
			n += v
		}
	}
	return n
}
