package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/auth"
)

// newPrincipal makes a principal of the broker's log with grants (as `okiba principal
// create` does) and returns its secret.
func newPrincipal(t testing.TB, e *env, name string, grants ...string) string {
	t.Helper()
	var gs []access.Grant
	for _, s := range grants {
		g, err := access.ParseGrant(s)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	secret := auth.NewSecret()
	if _, err := e.b.CreatePrincipal(context.Background(), name, gs, e.keys.Seal(name, secret)); err != nil {
		t.Fatal(err)
	}
	return secret
}

// signIn posts the sign-in form with secret, as the page does, and returns the session
// cookie as a Cookie header's value.
func signIn(t testing.TB, e *env, secret string) string {
	t.Helper()
	body, ct := loginForm(t, secret, "/")
	resp := do(t, "POST", e.url+"/login", body, "Content-Type", ct, "Origin", e.url, "Sec-Fetch-Site", "same-origin")
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie && resp.StatusCode == http.StatusSeeOther {
			return sessionCookie + "=" + c.Value
		}
	}
	t.Fatalf("sign-in: %s, cookies %v", resp.Status, resp.Cookies())
	return ""
}

// signedIn reports whether cookie is a session the server takes.
func signedIn(t testing.TB, e *env, cookie string) bool {
	t.Helper()
	r := do(t, "GET", e.url+"/ui/api/overview", nil, "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	switch r.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusUnauthorized:
		return false
	}
	t.Fatalf("GET /ui/api/overview: %s", r.Status)
	return false
}

// roundTrip is do without a client: the answer as sent, even when its Location is no URL
// a client can parse (a browser reads such a Location anyway).
func roundTrip(t testing.TB, method, u string, body io.Reader, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A browser drops TAB, CR and LF from a URL, so "/\t/attacker.example/" is
// "//attacker.example/" to it: another site. After signing in, as when already signed
// in, the console sends the browser to its own front page instead.
func TestSignInNeverSendsTheBrowserOffSite(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	cookie := signIn(t, e, testToken)
	for _, next := range []string{"/\t/attacker.example/", "/\n/attacker.example/", "/\r/attacker.example/", "/\\/attacker.example/", "//attacker.example/", "https://attacker.example/"} {
		// Already signed in: the sign-in page sends the browser on at once.
		r := roundTrip(t, "GET", e.url+"/login?next="+url.QueryEscape(next), nil, "Cookie", cookie)
		if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
			t.Errorf("GET /login?next=%q signed in: %s, Location %q; want 303 to /", next, r.Status, r.Header.Get("Location"))
		}
		// Signing in: the form's next.
		body, ct := loginForm(t, testToken, next)
		r = roundTrip(t, "POST", e.url+"/login", body, "Content-Type", ct, "Sec-Fetch-Site", "same-origin")
		if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
			t.Errorf("POST /login next=%q: %s, Location %q; want 303 to /", next, r.Status, r.Header.Get("Location"))
		}
		// Not signed in: the form carries "/" rather than the destination.
		if status, html := page(t, e.url+"/login?next="+url.QueryEscape(next)); status != http.StatusOK || !strings.Contains(html, `name="next" value="/"`) {
			t.Errorf("GET /login?next=%q: %d, the form's next is not /", next, status)
		}
	}
	// The literal request of the report: %09 in the query.
	r := roundTrip(t, "GET", e.url+"/login?next=/%09/attacker.example/", nil, "Cookie", cookie)
	if r.Header.Get("Location") != "/" {
		t.Errorf("GET /login?next=/%%09/attacker.example/: Location %q", r.Header.Get("Location"))
	}
	// A destination on the site is kept.
	body, ct := loginForm(t, testToken, "/queues/orders?x=1")
	if r := do(t, "POST", e.url+"/login", body, "Content-Type", ct); r.Header.Get("Location") != "/queues/orders?x=1" {
		t.Errorf("POST /login to a page of the site: Location %q", r.Header.Get("Location"))
	}
}

// oldSession is a cookie as the console made them before: an expiry and its
// HMAC-SHA256 under a key derived from the token alone — which anyone holding one cookie
// could brute-force offline, and anyone knowing the token could mint for any expiry.
func oldSession(token string, exp time.Time) string {
	key := sha256.Sum256([]byte("okiba console session v1\x00" + token))
	buf := binary.BigEndian.AppendUint64(nil, uint64(exp.Unix()))
	mac := hmac.New(sha256.New, key[:])
	mac.Write(buf)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(buf))
}

// Session cookies are signed with the server's random key and bounded by the server:
// none can be minted from the token, and none lives longer than SessionTTL.
func TestSessionCookiesAreTheServersOwn(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	admin, _ := e.keys.ByToken(testToken)
	year9999 := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	tokenKey := sha256.Sum256([]byte("okiba console session v1\x00" + testToken))
	forged := map[string]string{
		"the old cookie, valid until 9999":             oldSession(testToken, year9999),
		"a cookie under a key derived from the token":  (&Console{opts: Options{SessionKey: tokenKey[:]}}).newSession(admin, e.clock.now()),
		"a cookie of the server's key signed in 9999":  e.c.newSession(admin, year9999),
		"a cookie of the server's key from 13 h ago":   e.c.newSession(admin, e.clock.now().Add(-13*time.Hour)),
		"a cookie of the server's key 10 min from now": e.c.newSession(admin, e.clock.now().Add(10*time.Minute)),
	}
	for what, v := range forged {
		if signedIn(t, e, sessionCookie+"="+v) {
			t.Errorf("%s is accepted", what)
		}
	}
	if !signedIn(t, e, sessionCookie+"="+e.c.newSession(admin, e.clock.now())) {
		t.Fatal("a session of the server's own is refused")
	}
}

// A session ends SessionTTL after its sign-in, whatever the browser keeps.
func TestSessionEndsAfterSessionTTL(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{SessionTTL: time.Hour})
	cookie := signIn(t, e, testToken)
	e.clock.advance(59 * time.Minute)
	if !signedIn(t, e, cookie) {
		t.Fatal("session refused within its hour")
	}
	e.clock.advance(2 * time.Minute)
	if signedIn(t, e, cookie) {
		t.Fatal("session accepted after SessionTTL")
	}
	r := do(t, "GET", e.url+"/queues/orders", nil, "Cookie", cookie, "Accept", "text/html")
	if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login?") {
		t.Fatalf("a page after SessionTTL: %s, Location %q; want the sign-in page", r.Status, r.Header.Get("Location"))
	}
}

// A session ends with the secret it signed in with: at once when its principal is
// deleted or its secret rotated without a keep window, at the window's end otherwise.
func TestSessionEndsWithItsSecret(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	ctx := context.Background()

	secret := newPrincipal(t, e, "ops", "browse queue:*")
	cookie := signIn(t, e, secret)
	if !signedIn(t, e, cookie) {
		t.Fatal("fresh session refused")
	}
	if err := e.b.DeletePrincipal(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if signedIn(t, e, cookie) {
		t.Fatal("session accepted after its principal's deletion")
	}
	// A principal made again under the same name is another: the old session stays dead.
	newPrincipal(t, e, "ops", "browse queue:*")
	if signedIn(t, e, cookie) {
		t.Fatal("session of a deleted principal accepted for a new one of its name")
	}

	secret = newPrincipal(t, e, "worker", "browse queue:*")
	cookie = signIn(t, e, secret)
	next := auth.NewSecret()
	if _, err := e.b.RotatePrincipal(ctx, "worker", e.keys.Seal("worker", next), 0); err != nil {
		t.Fatal(err)
	}
	if signedIn(t, e, cookie) {
		t.Fatal("session accepted after its secret was rotated with keep 0")
	}
	cookie = signIn(t, e, next)

	// A rotation with a keep window: the old secret's sessions last as long as it does.
	if _, err := e.b.RotatePrincipal(ctx, "worker", e.keys.Seal("worker", auth.NewSecret()), time.Hour); err != nil {
		t.Fatal(err)
	}
	e.clock.advance(59 * time.Minute)
	if !signedIn(t, e, cookie) {
		t.Fatal("session refused within its secret's keep window")
	}
	e.clock.advance(2 * time.Minute)
	if signedIn(t, e, cookie) {
		t.Fatal("session accepted after its secret's keep window")
	}
}

// The cookie is Secure whenever the console is reached over TLS, or behind a proxy that
// ends TLS (SecureCookies); HttpOnly and SameSite=Strict always.
func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	cookieOf := func(r *http.Response) *http.Cookie {
		t.Helper()
		for _, c := range r.Cookies() {
			if c.Name == sessionCookie {
				return c
			}
		}
		t.Fatalf("no session cookie: %s", r.Status)
		return nil
	}
	login := func(h http.Handler, tls bool) *http.Cookie {
		body, ct := loginForm(t, testToken, "/")
		req := httptest.NewRequest("POST", "/login", body)
		if tls {
			req = httptest.NewRequest("POST", "https://okiba.example/login", body)
		}
		req.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return cookieOf(w.Result())
	}
	mux := http.NewServeMux()
	e.c.Register(mux)
	if c := login(mux, false); c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != 12*3600 {
		t.Errorf("plain HTTP: %+v", c)
	}
	if c := login(mux, true); !c.Secure || !c.HttpOnly {
		t.Errorf("TLS: %+v", c)
	}
	proxied, err := New(e.c.svc, Options{Keys: e.keys, SessionKey: e.c.opts.SessionKey, SecureCookies: true})
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	mux = http.NewServeMux()
	proxied.Register(mux)
	if c := login(mux, false); !c.Secure {
		t.Errorf("SecureCookies behind a proxy: %+v", c)
	}
}
