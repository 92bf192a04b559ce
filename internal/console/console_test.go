package console

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/crossorigin"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
	"github.com/okiba/okiba/internal/testkit"
)

const testToken = "console-test-token-long-enough"

type env struct {
	b     *broker.Broker
	c     *Console
	keys  *auth.Keyring // nil without a token
	clock *testClock    // the sessions' and the keyring's time
	url   string
	token string
	api   *client.Client // with the bearer token
}

// testClock is the wall clock moved on by the test: sessions and the keyring's secret
// expiries read it, the broker (which stamps the expiries) the wall clock.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func start(t testing.TB, token string, opts Options) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, ln, token, opts)
}

// startOn serves the console and the native API on ln. As the node does, the listener
// comes first, then the client of its address that the playground's lessons use
// (opts.Client, unless the test gives its own), then the console.
func startOn(t testing.TB, ln net.Listener, token string, opts Options) *env {
	t.Helper()
	return startOnBroker(t, ln, token, opts, broker.Config{Dir: t.TempDir()})
}

// keyring returns the node's keyring as internal/node makes it: the broker's
// principals, and token as the secret of the static principal admin (none when token
// is empty).
func keyring(t testing.TB, b *broker.Broker, token string, now func() time.Time) *auth.Keyring {
	t.Helper()
	var static []auth.Static
	if token != "" {
		static = append(static, auth.Static{Name: "admin", Secret: token, Grants: auth.AdminGrants})
	}
	k, err := auth.NewKeyring(b.DeriveKey("principal secrets"), b, static, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startOnBroker is startOn with a broker of the given configuration. With a token,
// authentication is on: the token is the secret of the principal admin, and browsers
// sign in with a principal's secret.
func startOnBroker(t testing.TB, ln net.Listener, token string, opts Options, cfg broker.Config) *env {
	t.Helper()
	b, err := broker.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	hs.Listener.Close()
	hs.Listener = ln
	url := "http://" + ln.Addr().String()
	cl, err := client.New(url, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	clock := &testClock{}
	var keys *auth.Keyring
	if token != "" {
		keys = keyring(t, b, token, clock.now)
		opts.Keys, opts.SessionKey = keys, b.DeriveKey("console sessions")
		if opts.Now == nil {
			opts.Now = clock.now
		}
	}
	if opts.Client == nil {
		opts.Client = cl
	}
	c, err := New(service.New(b, service.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	h = routed(t, b, c, keys, nil)
	hs.Start()
	t.Cleanup(func() {
		c.Close() // its runs delete their queues through the API
		cl.Close()
		hs.Close()
		b.Close()
	})
	return &env{b: b, c: c, keys: keys, clock: clock, url: url, token: token, api: cl}
}

// routed serves the console as the node does (internal/node, which this package's tests
// cannot import: it imports this package): the same browser guard and authentication
// step in front of the console's routes, with the native API beside them, and the
// request's principal in its context.
func routed(t testing.TB, b *broker.Broker, c *Console, keys *auth.Keyring, origins []string) http.Handler {
	t.Helper()
	mux := http.NewServeMux()
	c.Register(mux)
	mux.Handle("/", nativeapi.New(b, nativeapi.Options{}).Handler())
	guard, err := crossorigin.New(crossorigin.Config{Origins: origins, Authenticated: keys != nil,
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" || c.Public(r) }})
	if err != nil {
		t.Fatal(err)
	}
	step := auth.Step{Keys: keys, Browsers: c, Refuse: func(w http.ResponseWriter, _ int, msg string) {
		reply.Error(w, &api.Error{Code: api.CodeUnauthorized, Message: msg})
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if guard.Serve(w, r) {
			return
		}
		if p, ok := step.Authenticate(w, r); ok {
			mux.ServeHTTP(w, r.WithContext(auth.With(r.Context(), p)))
		}
	})
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t testing.TB, method, u string, body io.Reader, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func loginForm(t testing.TB, token, next string) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("token", token)
	mw.WriteField("next", next)
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func TestSignInWithTheToken(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	// A browser without a session is sent to sign in, and comes back after.
	resp := do(t, "GET", e.url+"/queues/orders", nil, "Accept", "text/html")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next="+url.QueryEscape("/queues/orders") {
		t.Fatalf("page without a session: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	// The sign-in page and the assets are public; the API is not.
	if r := do(t, "GET", e.url+"/login?next=/x", nil); r.StatusCode != 200 {
		t.Fatalf("GET /login: %s", r.Status)
	}
	if r := do(t, "GET", e.url+"/ui/static/console.css", nil); r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("GET console.css: %s %s", r.Status, r.Header.Get("Content-Type"))
	}
	for _, p := range []string{"/v1/queues", "/ui/api/overview", "/metrics"} {
		if r := do(t, "GET", e.url+p, nil); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET %s without a session: %s", p, r.Status)
		}
	}
	// A wrong token is refused.
	body, ct := loginForm(t, "guess", "/")
	if r := do(t, "POST", e.url+"/login", body, "Content-Type", ct); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %s", r.Status)
	}
	// The right one sets the cookie and goes back.
	body, ct = loginForm(t, testToken, "/queues/orders")
	resp = do(t, "POST", e.url+"/login", body, "Content-Type", ct, "Origin", e.url, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/queues/orders" {
		t.Fatalf("sign-in: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" {
		t.Fatalf("session cookie = %+v", session)
	}
	cookie := sessionCookie + "=" + session.Value

	// The session opens the pages, the console's endpoints and the API.
	if _, err := e.api.PutQueue(context.Background(), "orders", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/queues/orders", "/dead-letters", "/playground", "/ui/api/overview", "/v1/queues/orders"} {
		if r := do(t, "GET", e.url+p, nil, "Cookie", cookie); r.StatusCode != 200 {
			t.Fatalf("GET %s with the session: %s", p, r.Status)
		}
	}
	// Writes with the session from the console's own pages pass; from another site not
	// (the server refuses pages of other origins before it looks at the session).
	if r := do(t, "POST", e.url+"/v1/queues/orders/messages", strings.NewReader(`{"body":"x"}`), "Cookie", cookie, "Sec-Fetch-Site", "same-origin"); r.StatusCode != 200 {
		t.Fatalf("same-origin send with the session: %s", r.Status)
	}
	if r := do(t, "POST", e.url+"/v1/queues/orders/purge", nil, "Cookie", cookie, "Sec-Fetch-Site", "cross-site"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site purge with the session: %s", r.Status)
	}
	if r := do(t, "POST", e.url+"/v1/queues/orders/purge", nil, "Cookie", cookie, "Origin", "https://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin purge with the session: %s", r.Status)
	}
	if st, _ := e.api.Queue(context.Background(), "orders"); st == nil || st.Stats.Ready != 1 {
		t.Fatalf("after refused purges: %+v", st)
	}
	// A forged or tampered cookie is worth nothing; the bearer token still works.
	// One character inside the MAC changes (not the last, whose low bits base64 may
	// ignore, and never to the character it already was).
	tampered := []byte(session.Value)
	if i := len(tampered) - 5; tampered[i] == 'A' {
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}
	if r := do(t, "GET", e.url+"/v1/queues", nil, "Cookie", sessionCookie+"="+string(tampered)); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tampered cookie: %s", r.Status)
	}
	admin, _ := e.keys.ByToken(testToken)
	other := &Console{opts: Options{SessionKey: bytes.Repeat([]byte{7}, 32)}}
	if r := do(t, "GET", e.url+"/v1/queues", nil, "Cookie", sessionCookie+"="+other.newSession(admin, e.clock.now())); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("cookie made with another key: %s", r.Status)
	}
	if r := do(t, "GET", e.url+"/v1/queues", nil, "Authorization", "Bearer "+testToken); r.StatusCode != 200 {
		t.Fatalf("bearer token: %s", r.Status)
	}
	// Sign-out clears the cookie.
	r := do(t, "POST", e.url+"/logout", nil, "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %s %v", r.Status, r.Cookies())
	}
}

// TestSessionIsGoodOnlyOnTheConsolesPages: an origin listed for browser applications
// may call the API with the bearer token, not with the console's session, which a page
// of the same site (another port of localhost, say) would make the browser send.
func TestSessionIsGoodOnlyOnTheConsolesPages(t *testing.T) {
	t.Parallel()
	const app = "http://localhost:3000"
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	keys := keyring(t, b, testToken, nil)
	c, err := New(service.New(b, service.Options{}), Options{Keys: keys, SessionKey: b.DeriveKey("console sessions")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(routed(t, b, c, keys, []string{app}))
	t.Cleanup(func() {
		hs.Close()
		c.Close()
		b.Close()
	})
	if r := do(t, "PUT", hs.URL+"/v1/queues/orders", nil, "Authorization", "Bearer "+testToken); r.StatusCode != 201 {
		t.Fatalf("create: %s", r.Status)
	}
	admin, _ := keys.ByToken(testToken)
	cookie := sessionCookie + "=" + c.newSession(admin, time.Now())
	if r := do(t, "POST", hs.URL+"/v1/queues/orders/purge", nil, "Cookie", cookie, "Origin", app, "Sec-Fetch-Site", "same-site"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("purge from the listed origin with the session: %s", r.Status)
	}
	r := do(t, "POST", hs.URL+"/v1/queues/orders/purge", nil, "Authorization", "Bearer "+testToken, "Origin", app, "Sec-Fetch-Site", "same-site")
	if r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != app {
		t.Fatalf("purge from the listed origin with the token: %s %v", r.Status, r.Header)
	}
	// The console's own endpoints are behind the same checks.
	if r := do(t, "GET", hs.URL+"/ui/api/overview", nil, "Cookie", cookie, "Origin", "https://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("console endpoint from another origin: %s", r.Status)
	}
	if r := do(t, "GET", hs.URL+"/ui/api/overview", nil, "Cookie", cookie, "Sec-Fetch-Site", "same-origin"); r.StatusCode != 200 {
		t.Fatalf("console endpoint from its page: %s", r.Status)
	}
}

// TestSessionsExpire: a session lasts SessionTTL from its sign-in, whatever else, and a
// cookie that is not one the server made is none.
func TestSessionsExpire(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := keyring(t, b, testToken, nil)
	c := &Console{opts: Options{Keys: keys, SessionKey: b.DeriveKey("console sessions"), SessionTTL: time.Minute}}
	admin, _ := keys.ByToken(testToken)
	now := time.Now()
	v := c.newSession(admin, now)
	if p, ok := c.session(v, now); !ok || p.Name != "admin" || p.Method != auth.Session {
		t.Fatalf("fresh session: %+v %v", p, ok)
	}
	if _, ok := c.session(v, now.Add(time.Minute)); ok {
		t.Fatal("a session past SessionTTL accepted")
	}
	for _, bad := range []string{"", "x", strings.Repeat("A", 54), v + "A", v[:len(v)-1]} {
		if _, ok := c.session(bad, now); ok {
			t.Fatalf("session %q accepted", bad)
		}
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/queues/a?x=1": "/queues/a?x=1", "": "/", "https://evil.example/": "/", "//evil.example": "/",
		"/\\evil.example": "/", "javascript:alert(1)": "/", "/ok\r\nSet-Cookie: x": "/",
		// Browsers drop TAB, CR and LF from a URL and read a backslash as a slash, anywhere.
		"/\t/attacker.example/": "/", "/\n/attacker.example": "/", "/\r/attacker.example": "/", "/.\\/evil": "/",
		"/x\x00": "/", "/x\x7f": "/", "/queues/a%09b": "/queues/a%09b",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenWithoutAToken(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	if r := do(t, "GET", e.url+"/", nil, "Accept", "text/html"); r.StatusCode != 200 {
		t.Fatalf("GET /: %s", r.Status)
	}
	if r := do(t, "GET", e.url+"/login", nil); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
		t.Fatalf("GET /login without a token: %s %q", r.Status, r.Header.Get("Location"))
	}
	// The playground refuses to be driven from another site even so, and so do the
	// console's endpoints and the API its pages call.
	if r := do(t, "POST", e.url+"/ui/api/playground/absorb", strings.NewReader(`{}`), "Sec-Fetch-Site", "cross-site"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site playground start: %s", r.Status)
	}
	for _, p := range []string{"/ui/api/overview", "/v1/queues"} {
		if r := do(t, "GET", e.url+p, nil, "Sec-Fetch-Site", "cross-site"); r.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site GET %s: %s", p, r.Status)
		}
		if r := do(t, "GET", e.url+p, nil, "Sec-Fetch-Site", "same-origin"); r.StatusCode != 200 {
			t.Fatalf("same-origin GET %s: %s", p, r.Status)
		}
	}
	// Its sign-in page and assets are open to any page, by any name.
	for _, p := range []string{"/ui/static/console.css", "/favicon.ico"} {
		req, _ := http.NewRequest("GET", e.url+p, nil)
		req.Host = "rebound.example"
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if r, err := noRedirect.Do(req); err != nil || r.StatusCode != 200 {
			t.Fatalf("GET %s from anywhere: %v %v", p, r, err)
		} else {
			r.Body.Close()
		}
	}
	// Pages carry their security headers; unknown queues and assets are 404.
	r := do(t, "GET", e.url+"/queues/nope", nil)
	if r.StatusCode != 404 || !strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("unknown queue page: %s, CSP %q", r.Status, r.Header.Get("Content-Security-Policy"))
	}
	if r := do(t, "GET", e.url+"/ui/static/nope.js", nil); r.StatusCode != 404 {
		t.Fatalf("unknown asset: %s", r.Status)
	}
}

func decodeOverview(t testing.TB, r *http.Response) overviewAnswer {
	t.Helper()
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	var a overviewAnswer
	if err := json.NewDecoder(body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestOverviewNumbersAndUpdates(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{SampleInterval: 20 * time.Millisecond})
	ctx := context.Background()
	if _, err := e.api.PutQueue(ctx, "orders", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	var msgs []client.Message
	for i := range 7 {
		msgs = append(msgs, client.Message{Body: []byte(fmt.Sprint(i))})
	}
	if _, err := e.api.SendBatch(ctx, "orders", msgs); err != nil {
		t.Fatal(err)
	}
	ds, err := e.api.Receive(ctx, "orders", client.ReceiveOptions{Max: 3})
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive: %d %v", len(ds), err)
	}
	if _, err := e.api.DeadLetter(ctx, "orders", "bad", "", ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	// Wait for a history sample that has the queue in its current state.
	testkit.Eventually(t, 10*time.Second, func() bool {
		pts, _ := e.c.hist.depths(0, 30)
		p := pts["orders"]
		return len(p) > 0 && p[len(p)-1] == 6
	}, "a history sample with orders at 6 messages")
	r := do(t, "GET", e.url+"/ui/api/overview", nil)
	a := decodeOverview(t, r)
	rows := map[string]overviewRow{}
	for _, q := range a.Queues {
		rows[q.Name] = q
	}
	o, d := rows["orders"], rows["orders-dlq"]
	if o.Ready != 4 || o.InFlight != 2 || o.DeadLetters != 1 || o.DLQ != "orders-dlq" || o.OldestAt == 0 || len(o.Spark) == 0 {
		t.Fatalf("orders row = %+v", o)
	}
	if d.Ready != 1 || d.Sources != 1 || d.DLQ != "" {
		t.Fatalf("orders-dlq row = %+v", d)
	}
	// Asked again with the ETag and nothing changed: 304, no body. (Wait out the sampler:
	// a new sample changes the answer's seq.)
	etag := r.Header.Get("ETag")
	if etag == "" || r.Header.Get("X-Okiba-Now") == "" {
		t.Fatalf("headers: %v", r.Header)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r1 := do(t, "GET", e.url+"/ui/api/overview", nil)
		io.Copy(io.Discard, r1.Body)
		r2 := do(t, "GET", e.url+"/ui/api/overview", nil, "If-None-Match", r1.Header.Get("ETag"))
		n, _ := io.Copy(io.Discard, r2.Body)
		return r2.StatusCode == http.StatusNotModified && n == 0
	}, "an overview that answers 304 to its own ETag")
	// since= leaves out the samples the page has.
	r = do(t, "GET", fmt.Sprintf("%s/ui/api/overview?since=%d", e.url, a.Seq+1000), nil)
	later := decodeOverview(t, r)
	if len(later.Queues) != len(a.Queues) {
		t.Fatalf("since= answered %d queues, want %d", len(later.Queues), len(a.Queues))
	}
	for _, q := range later.Queues {
		if len(q.Spark) != 0 {
			t.Fatalf("samples after the latest: %v", q.Spark)
		}
	}
	// The queue page's history.
	r = do(t, "GET", e.url+"/ui/api/queues/orders/history", nil)
	var h queueHistory
	if err := json.NewDecoder(r.Body).Decode(&h); err != nil || len(h.T) == 0 || len(h.T) != len(h.Ready) || h.Ready[len(h.Ready)-1] != 4 {
		t.Fatalf("history = %+v, %v", h, err)
	}
	if r := do(t, "GET", e.url+"/ui/api/queues/nope/history", nil); r.StatusCode != 404 {
		t.Fatalf("history of a missing queue: %s", r.Status)
	}
}

func TestOverviewIsGzippedWhenLarge(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	for i := range 40 {
		if _, err := e.api.PutQueue(context.Background(), fmt.Sprintf("queue-%03d", i), api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, "GET", e.url+"/ui/api/overview", nil, "Accept-Encoding", "gzip")
	if r.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", r.Header.Get("Content-Encoding"))
	}
	if n := len(decodeOverview(t, r).Queues); n != 80 {
		t.Fatalf("%d queues, want 80 (with their DLQs)", n)
	}
}

func TestDeadLetterSummary(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	ctx := context.Background()
	for _, q := range []string{"orders", "payments"} {
		if _, err := e.api.PutQueue(ctx, q, api.QueueConfig{DeadLetterQueue: ptr("shared-dlq")}); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(q, reason string, n int) {
		t.Helper()
		for range n {
			if _, err := e.api.Send(ctx, q, client.Message{Body: []byte(q + " " + reason), Headers: map[string]string{"correlation-id": "c1"}}); err != nil {
				t.Fatal(err)
			}
		}
		ds, err := e.api.Receive(ctx, q, client.ReceiveOptions{Max: n})
		if err != nil || len(ds) != n {
			t.Fatalf("receive %s: %d %v", q, len(ds), err)
		}
		var rs []string
		for _, d := range ds {
			rs = append(rs, d.Receipt)
		}
		if _, err := e.api.DeadLetter(ctx, q, reason, "because", rs...); err != nil {
			t.Fatal(err)
		}
	}
	fail("orders", "invalid", 3)
	fail("payments", "invalid", 1)
	fail("payments", "timeout", 2)
	var a deadLetterAnswer
	r := do(t, "GET", e.url+"/ui/api/dead-letters/shared-dlq?reason=invalid&source=orders", nil)
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	want := []reasonCount{{"orders", "invalid", 3}, {"payments", "timeout", 2}, {"payments", "invalid", 1}}
	if fmt.Sprint(a.Reasons) != fmt.Sprint(want) || a.Scanned != 6 || !a.Complete {
		t.Fatalf("summary = %+v", a)
	}
	if len(a.Messages) != 3 {
		t.Fatalf("%d messages match, want 3", len(a.Messages))
	}
	m := a.Messages[0]
	if m.DeadLetter == nil || m.DeadLetter.Source != "orders" || m.DeadLetter.Description != "because" || m.DeadLetter.Deliveries != 1 || m.Headers["correlation-id"] != "c1" {
		t.Fatalf("message = %+v", m)
	}
	if r := do(t, "GET", e.url+"/ui/api/dead-letters/nope", nil); r.StatusCode != 404 {
		t.Fatalf("missing queue: %s", r.Status)
	}
	// The overview: every dead-letter queue, the one holding dead letters first, with
	// its counts by source and reason; the queues' own empty DLQs after it.
	var all struct{ Queues []deadQueue }
	r = do(t, "GET", e.url+"/ui/api/dead-letters", nil)
	if err := json.NewDecoder(r.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	if len(all.Queues) != 1 {
		t.Fatalf("overview = %+v, want shared-dlq only", all)
	}
	d := all.Queues[0]
	if d.Queue != "shared-dlq" || d.Messages != 6 || fmt.Sprint(d.Reasons) != fmt.Sprint(want) || fmt.Sprint(d.Sources) != "[orders payments]" || !d.Complete {
		t.Fatalf("overview's shared-dlq = %+v", d)
	}
	if _, err := e.api.PutQueue(ctx, "audit", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	r = do(t, "GET", e.url+"/ui/api/dead-letters", nil)
	if err := json.NewDecoder(r.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	if len(all.Queues) != 2 || all.Queues[0].Queue != "shared-dlq" || all.Queues[1].Queue != "audit-dlq" || all.Queues[1].Messages != 0 {
		t.Fatalf("overview with an empty DLQ = %+v", all.Queues)
	}
}
