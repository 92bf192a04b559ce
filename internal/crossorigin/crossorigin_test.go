package crossorigin

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

const listed = "https://app.example.com"

// TestCheck is the decision table: every kind of browser and non-browser request, by
// every Host, with and without authentication and listed origins.
func TestCheck(t *testing.T) {
	t.Parallel()
	plain := Config{}
	withOrigin := Config{Origins: []string{listed}}
	withHosts := Config{Hosts: []string{"broker.internal", "*.corp.example"}}
	authed := Config{Authenticated: true}
	exempt := Config{Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" }}
	hostname, _ := os.Hostname()

	type hdr = map[string]string
	cases := []struct {
		name   string
		cfg    Config
		method string
		path   string
		host   string
		header hdr
		want   error // nil, ErrCrossOrigin or ErrHost
	}{
		// The origin rule.
		{"no browser headers (curl, SDKs, the Go client)", plain, "POST", "", "", nil, nil},
		{"Sec-Fetch-Site same-origin", plain, "POST", "", "", hdr{"Sec-Fetch-Site": "same-origin"}, nil},
		{"Sec-Fetch-Site none (typed address)", plain, "GET", "", "", hdr{"Sec-Fetch-Site": "none"}, nil},
		{"Sec-Fetch-Site cross-site", plain, "POST", "", "", hdr{"Sec-Fetch-Site": "cross-site"}, ErrCrossOrigin},
		{"Sec-Fetch-Site same-site", plain, "POST", "", "", hdr{"Sec-Fetch-Site": "same-site"}, ErrCrossOrigin},
		{"Sec-Fetch-Site unknown value", plain, "POST", "", "", hdr{"Sec-Fetch-Site": "elsewhere"}, ErrCrossOrigin},
		{"cross-site GET reveals bodies too", plain, "GET", "/v1/queues/q/messages", "", hdr{"Sec-Fetch-Site": "cross-site"}, ErrCrossOrigin},
		{"a link followed from another site opens", plain, "GET", "/", "", hdr{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, nil},
		{"a navigation that posts a form does not", plain, "POST", "/v1/queues/q/purge", "", hdr{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, ErrCrossOrigin},
		{"a fetch from another site does not", plain, "GET", "/v1/queues/q/messages", "", hdr{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, ErrCrossOrigin},
		{"a navigation by an unknown name does not", plain, "GET", "/", "evil.test:7070", hdr{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, ErrHost},
		{"cross-site preflight", plain, "OPTIONS", "", "", hdr{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, ErrCrossOrigin},
		{"Origin of the server itself", plain, "POST", "", "", hdr{"Origin": "http://127.0.0.1:7070"}, nil},
		{"Origin of the server, other case", plain, "POST", "", "LocalHost:7070", hdr{"Origin": "http://localhost:7070"}, nil},
		{"Origin of another port", plain, "POST", "", "", hdr{"Origin": "http://127.0.0.1:3000"}, ErrCrossOrigin},
		{"foreign Origin", plain, "POST", "", "", hdr{"Origin": "http://evil.example"}, ErrCrossOrigin},
		{"Origin null (sandboxed frame, file)", plain, "POST", "", "", hdr{"Origin": "null"}, ErrCrossOrigin},
		{"Origin that does not parse", plain, "POST", "", "", hdr{"Origin": "http://%zz"}, ErrCrossOrigin},
		{"Sec-Fetch-Site same-origin wins over Origin", plain, "POST", "", "", hdr{"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example"}, nil},
		{"listed origin, cross-site", withOrigin, "POST", "", "", hdr{"Sec-Fetch-Site": "cross-site", "Origin": listed}, nil},
		{"listed origin, no Sec-Fetch-Site", withOrigin, "PUT", "", "", hdr{"Origin": listed}, nil},
		{"listed origin, upper case", withOrigin, "POST", "", "", hdr{"Origin": "https://APP.example.com"}, nil},
		{"listed origin, preflight", withOrigin, "OPTIONS", "", "", hdr{"Sec-Fetch-Site": "cross-site", "Origin": listed, "Access-Control-Request-Method": "POST"}, nil},
		{"unlisted origin beside a listed one", withOrigin, "POST", "", "", hdr{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example.com"}, ErrCrossOrigin},
		{"listed origin over http instead of https", withOrigin, "POST", "", "", hdr{"Origin": "http://app.example.com"}, ErrCrossOrigin},
		{"cross-site without an Origin, list or not", withOrigin, "GET", "", "", hdr{"Sec-Fetch-Site": "cross-site"}, ErrCrossOrigin},
		{"authentication does not lift the origin rule", authed, "POST", "", "evil.test:7070", hdr{"Origin": "http://evil.example"}, ErrCrossOrigin},

		// The Host rule.
		{"Host IPv4 with port", plain, "GET", "", "127.0.0.1:7070", nil, nil},
		{"Host IPv4 without port", plain, "GET", "", "10.1.2.3", nil, nil},
		{"Host IPv6 with port", plain, "GET", "", "[::1]:7070", nil, nil},
		{"Host IPv6 without port", plain, "GET", "", "[::1]", nil, nil},
		{"Host IPv6 with zone", plain, "GET", "", "[fe80::1%25eth0]:7070", nil, nil},
		{"Host localhost", plain, "GET", "", "localhost:7070", nil, nil},
		{"Host localhost without port", plain, "GET", "", "localhost", nil, nil},
		{"Host localhost. (trailing dot)", plain, "GET", "", "LOCALHOST.:7070", nil, nil},
		{"Host under .localhost", plain, "GET", "", "console.localhost:7070", nil, nil},
		{"Host ending in localhost but not under it", plain, "GET", "", "evillocalhost:7070", nil, ErrHost},
		{"Host localhost under another name", plain, "GET", "", "localhost.evil.test:7070", nil, ErrHost},
		{"Host unknown name", plain, "GET", "", "evil.test:7070", nil, ErrHost},
		{"Host unknown name, same-origin to the browser (DNS rebinding)", plain, "POST", "", "evil.test:7070", hdr{"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.test:7070"}, ErrHost},
		{"Host unknown name with authentication", authed, "GET", "", "evil.test:7070", nil, nil},
		{"Host unknown name, listed origin", withOrigin, "POST", "", "evil.test:7070", hdr{"Origin": listed}, ErrHost},
		{"Host in Hosts", withHosts, "GET", "", "Broker.Internal:7070", nil, nil},
		{"Host under a *. entry", withHosts, "GET", "", "a.b.corp.example", nil, nil},
		{"Host equal to a *. entry's domain", withHosts, "GET", "", "corp.example", nil, ErrHost},
		{"Host this machine's name", plain, "GET", "", hostname + ":7070", nil, nil},
		{"no Host (HTTP/1.0)", plain, "GET", "", "-", nil, nil},

		// Exemptions.
		{"exempt path, cross-site by an unknown name", exempt, "GET", "/healthz", "evil.test", hdr{"Sec-Fetch-Site": "cross-site"}, nil},
		{"not exempt path, same request", exempt, "GET", "/v1/queues", "evil.test", hdr{"Sec-Fetch-Site": "cross-site"}, ErrHost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := request(c.method, c.path, c.host, c.header)
			err = g.Check(r)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("got %v, want %v", err, c.want)
			}
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("%T is not an *Error", err)
			}
		})
	}
}

// request builds a request to host ("" for 127.0.0.1:7070, "-" for none) with headers.
func request(method, path, host string, header map[string]string) *http.Request {
	if path == "" {
		path = "/v1/queues/q/purge"
	}
	r := httptest.NewRequest(method, "http://127.0.0.1:7070"+path, nil)
	switch host {
	case "":
	case "-":
		r.Host = ""
	default:
		r.Host = strings.ReplaceAll(host, "%25", "%")
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	return r
}

func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	g, _ := New(Config{})
	for _, c := range []struct {
		r        *http.Request
		mentions []string
	}{
		{request("POST", "", "", map[string]string{"Origin": "http://evil.example"}), []string{`"http://evil.example"`, "--cors-origins"}},
		{request("POST", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}), []string{"Sec-Fetch-Site: cross-site", "--cors-origins"}},
		{request("GET", "", "evil.test:7070", nil), []string{`"evil.test:7070"`, "--allowed-hosts", "DNS rebinding", "authentication"}},
	} {
		err := g.Check(c.r)
		if err == nil {
			t.Fatalf("%v passed", c.r.Header)
		}
		for _, m := range c.mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%q does not mention %q", err, m)
			}
		}
	}
}

// TestServe checks what reaches the handler and what the answers carry.
func TestServe(t *testing.T) {
	t.Parallel()
	var refused error
	g, err := New(Config{
		Origins: []string{listed},
		Exempt:  func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Refuse: func(w http.ResponseWriter, _ *http.Request, err error) {
			refused = err
			w.WriteHeader(http.StatusForbidden)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := false
	h := g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served = true
		w.WriteHeader(http.StatusOK)
	}))
	run := func(r *http.Request) *httptest.ResponseRecorder {
		served, refused = false, nil
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	hdr := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	t.Run("preflight of a listed origin", func(t *testing.T) {
		w := run(request("OPTIONS", "", "", hdr("Origin", listed, "Sec-Fetch-Site", "cross-site",
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type",
			"Access-Control-Request-Private-Network", "true")))
		if served || w.Code != http.StatusNoContent {
			t.Fatalf("served %v, status %d", served, w.Code)
		}
		res := w.Result().Header
		want := map[string][]string{
			"Access-Control-Allow-Origin":          {listed},
			"Vary":                                 {"Origin"},
			"Access-Control-Allow-Methods":         {"GET", "POST", "PUT", "DELETE"},
			"Access-Control-Allow-Headers":         {"Authorization", "Content-Type", "X-Amz-Target", "X-Amz-Date", "Amz-Sdk-Invocation-Id", "X-Amzn-Query-Mode"},
			"Access-Control-Max-Age":               {"600"},
			"Access-Control-Allow-Private-Network": {"true"},
		}
		for k, vs := range want {
			for _, v := range vs {
				if !strings.Contains(res.Get(k), v) {
					t.Errorf("%s: %q lacks %q", k, res.Get(k), v)
				}
			}
		}
		if res.Get("Access-Control-Allow-Credentials") != "" {
			t.Error("credentials allowed: listed origins must send the token, not the console's cookie")
		}
	})
	t.Run("preflight of an unlisted origin", func(t *testing.T) {
		w := run(request("OPTIONS", "", "", hdr("Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Access-Control-Request-Method", "POST")))
		if served || w.Code != http.StatusForbidden || !errors.Is(refused, ErrCrossOrigin) {
			t.Fatalf("served %v, status %d, refused %v", served, w.Code, refused)
		}
		if v := w.Result().Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Errorf("Access-Control-Allow-Origin %q on a refusal", v)
		}
	})
	t.Run("request of a listed origin", func(t *testing.T) {
		w := run(request("POST", "", "", hdr("Origin", listed, "Sec-Fetch-Site", "cross-site")))
		res := w.Result().Header
		if !served || res.Get("Access-Control-Allow-Origin") != listed || res.Get("Vary") != "Origin" {
			t.Fatalf("served %v, headers %v", served, res)
		}
		for _, v := range []string{"Retry-After", "X-Okiba-Settled", "X-Amzn-Query-Error", "X-Amzn-RequestId"} {
			if !strings.Contains(res.Get("Access-Control-Expose-Headers"), v) {
				t.Errorf("Access-Control-Expose-Headers %q lacks %s", res.Get("Access-Control-Expose-Headers"), v)
			}
		}
	})
	t.Run("OPTIONS of a listed origin that is no preflight", func(t *testing.T) {
		if run(request("OPTIONS", "", "", hdr("Origin", listed))); !served {
			t.Fatal("not served: only preflights are answered by the guard")
		}
	})
	t.Run("foreign request", func(t *testing.T) {
		w := run(request("POST", "", "", hdr("Origin", "http://evil.example")))
		if served || w.Code != http.StatusForbidden || !errors.Is(refused, ErrCrossOrigin) {
			t.Fatalf("served %v, status %d, refused %v", served, w.Code, refused)
		}
	})
	t.Run("unknown Host", func(t *testing.T) {
		if run(request("GET", "", "evil.test:7070", nil)); served || !errors.Is(refused, ErrHost) {
			t.Fatalf("served %v, refused %v", served, refused)
		}
	})
	t.Run("curl", func(t *testing.T) {
		w := run(request("POST", "", "", nil))
		if !served || w.Result().Header.Get("Access-Control-Allow-Origin") != "" || w.Result().Header.Get("Vary") != "Origin" {
			t.Fatalf("served %v, headers %v", served, w.Result().Header)
		}
	})
	t.Run("exempt path still answers a listed origin", func(t *testing.T) {
		w := run(request("GET", "/healthz", "evil.test", hdr("Origin", listed)))
		if !served || w.Result().Header.Get("Access-Control-Allow-Origin") != listed {
			t.Fatalf("served %v, headers %v", served, w.Result().Header)
		}
	})
}

func TestDefaultRefusal(t *testing.T) {
	t.Parallel()
	g, _ := New(Config{})
	w := httptest.NewRecorder()
	called := false
	g.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })).
		ServeHTTP(w, request("POST", "", "", map[string]string{"Origin": "http://evil.example"}))
	if called || w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "--cors-origins") {
		t.Fatalf("called %v, %d %q", called, w.Code, w.Body.String())
	}
	if v := w.Result().Header.Get("Vary"); v != "" {
		t.Errorf("Vary %q without listed origins", v)
	}
}

func TestParseOrigin(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://app.example.com":       "https://app.example.com",
		"HTTP://App.Example.com:8080":   "http://app.example.com:8080",
		"https://app.example.com:443":   "https://app.example.com",
		"http://localhost:80":           "http://localhost",
		"http://[::1]:3000":             "http://[::1]:3000",
		"https://app.example.com:80":    "https://app.example.com:80",
		"http://console.localhost:5173": "http://console.localhost:5173",
	} {
		if got, err := ParseOrigin(in); err != nil || got != want {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "*", "null", "app.example.com", "//app.example.com", "ftp://app.example.com", "https://",
		"https://app.example.com/", "https://app.example.com/app", "https://app.example.com?x=1",
		"https://app.example.com?", "https://app.example.com#top", "https://user@app.example.com",
		"https://app.example.com:99999", "https://app.example.com:", "https://app.example.com:x",
		"mailto:a@example.com", "https://exa mple.com",
	} {
		if got, err := ParseOrigin(in); err == nil {
			t.Errorf("ParseOrigin(%q) = %q, want an error", in, got)
		} else if !strings.Contains(err.Error(), "scheme://host[:port]") {
			t.Errorf("ParseOrigin(%q): %v does not say the form", in, err)
		}
	}
	if _, err := New(Config{Origins: []string{listed, "https://app.example.com/"}}); err == nil || !strings.Contains(err.Error(), `"https://app.example.com/"`) {
		t.Errorf("New with an origin with a path: %v", err)
	}
}

func TestParseHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"broker.internal":   "broker.internal",
		"Broker.Internal.":  "broker.internal",
		"*.example.com":     "*.example.com",
		"okiba-1":           "okiba-1",
		"under_score.lan":   "under_score.lan",
		"10.0.0.5":          "",
		"[::1]":             "",
		"2001:db8::1":       "",
		"xn--bcher-kva.tld": "xn--bcher-kva.tld",
	} {
		if got, err := ParseHost(in); err != nil || got != want {
			t.Errorf("ParseHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", ".", "*", "*.", "a..b", ".a", "broker.internal:7070", "http://broker.internal", "broker/x",
		"exa mple", "a.*.b", "**.example.com", strings.Repeat("a", 64) + ".com", "bücher.tld",
	} {
		if got, err := ParseHost(in); err == nil {
			t.Errorf("ParseHost(%q) = %q, want an error", in, got)
		}
	}
	if _, err := New(Config{Hosts: []string{"ok.example", "bad:1"}}); err == nil || !strings.Contains(err.Error(), `"bad:1"`) {
		t.Errorf("New with a host with a port: %v", err)
	}
}
