package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/internal/auth"
)

// Browsers cannot send a bearer token, so with authentication on the console signs
// them in: the sign-in form takes a principal's secret, and a valid one earns a session
// cookie that the server accepts in its place (auth.Browsers, in the node's
// authentication step), as that principal, with its grants.
//
// The cookie names the principal, the secret it signed in with and when, under an
// HMAC-SHA256 keyed by a random server key (derived from the data directory's secret,
// never from a token, so a leaked cookie tells nothing about any secret). The server
// keeps no session state and bounds a session itself: it ends SessionTTL after sign-in
// whatever the cookie says, and at once when its secret stops being valid (a rotation's
// end, the principal's deletion). It is HttpOnly (scripts cannot read it),
// SameSite=Strict (other sites' pages cannot make the browser send it) and Secure over
// TLS; the node's browser guard refuses requests from pages of other origins before
// anyone looks at the cookie (internal/crossorigin).

const sessionCookie = "okiba_session"

// sessionVersion is the first byte of a session cookie's value.
const sessionVersion = 2

// newSession returns a cookie value for p, signed in at now.
func (c *Console) newSession(p auth.Principal, now time.Time) string {
	buf := []byte{sessionVersion, byte(len(p.Name))}
	buf = append(buf, p.Name...)
	buf = binary.BigEndian.AppendUint64(buf, p.SecretID)
	buf = binary.BigEndian.AppendUint64(buf, uint64(now.Unix()))
	mac := hmac.New(sha256.New, c.opts.SessionKey)
	mac.Write(buf)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(buf))
}

// session returns the principal of a cookie value made by newSession, if its MAC holds,
// it was made less than SessionTTL ago and its secret is still valid.
func (c *Console) session(v string, now time.Time) (auth.Principal, bool) {
	var none auth.Principal
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) < 2+16+sha256.Size || raw[0] != sessionVersion || len(raw) != 2+int(raw[1])+16+sha256.Size {
		return none, false
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	mac := hmac.New(sha256.New, c.opts.SessionKey)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return none, false
	}
	n := int(raw[1])
	name := string(body[2 : 2+n])
	secretID := binary.BigEndian.Uint64(body[2+n:])
	issued := time.Unix(int64(binary.BigEndian.Uint64(body[2+n+8:])), 0)
	if now.Before(issued.Add(-time.Minute)) || !now.Before(issued.Add(c.opts.SessionTTL)) {
		return none, false
	}
	return c.opts.Keys.Session(name, secretID)
}

// SignedIn returns the principal of r's valid session cookie (auth.Browsers).
func (c *Console) SignedIn(r *http.Request) (auth.Principal, bool) {
	if c.opts.Keys == nil {
		return auth.Principal{}, false
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return auth.Principal{}, false
	}
	return c.session(ck.Value, c.now())
}

// Public reports whether r is for the sign-in page or a static asset (auth.Browsers).
func (c *Console) Public(r *http.Request) bool {
	p := r.URL.Path
	return p == "/login" || p == "/favicon.ico" || strings.HasPrefix(p, "/ui/static/")
}

// SignInURL sends a browser to the sign-in page, to come back to r's page
// (auth.Browsers).
func (c *Console) SignInURL(r *http.Request) string {
	return "/login?next=" + url.QueryEscape(r.URL.RequestURI())
}

// safeNext keeps a post-sign-in destination on this site: a path that begins with one
// '/', with no backslash and no control character anywhere (browsers drop TAB, CR and LF
// from URLs, so "/\t/evil.example" would become "//evil.example", another site).
func safeNext(v string) string {
	if !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") || strings.Contains(v, "\\") {
		return "/"
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return "/"
		}
	}
	return v
}

// sessionLife says a session's lifetime for the sign-in page: "12 hours".
func sessionLife(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return fmtDur(d)
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

type loginData struct {
	pageData
	Next  string
	Error string
	TTL   string // how long a session lasts, in words
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if _, in := c.SignedIn(r); c.opts.Keys == nil || in {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	c.renderLogin(w, http.StatusOK, next, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, status int, next, msg string) {
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	d := loginData{pageData: pageData{Title: "Sign in", Page: "login"}, Next: next, Error: msg, TTL: sessionLife(c.opts.SessionTTL)}
	if err := c.pages.ExecuteTemplate(w, "login.html", d); err != nil {
		c.log.Error("console: render page", "page", "login", "error", err)
	}
}

// signInOrigin refuses sign-ins posted from pages of other origins. The node's browser
// guard lets any page reach the sign-in page (Public), so the form checks for itself.
var signInOrigin = http.NewCrossOriginProtection()

// login checks the secret from the sign-in form (multipart, so that the SQS front, which
// claims form-encoded POSTs, leaves it alone) and sets the session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if err := signInOrigin.Check(r); err != nil {
		http.Error(w, "cross-origin sign-in refused", http.StatusForbidden)
		return
	}
	if c.opts.Keys == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseMultipartForm(64 << 10); err != nil {
		c.renderLogin(w, http.StatusBadRequest, "/", "The form could not be read; reload the page and try again.")
		return
	}
	next := safeNext(r.FormValue("next"))
	token := strings.TrimSpace(r.FormValue("token"))
	p, ok := c.opts.Keys.ByToken(token)
	if !ok {
		c.log.Warn("console: sign-in with a wrong secret", "remote", r.RemoteAddr)
		if c.opts.Refused != nil {
			c.opts.Refused(r)
		}
		c.renderLogin(w, http.StatusUnauthorized, next, "That is no principal's secret.")
		return
	}
	now := c.now()
	exp := now.Add(c.opts.SessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: c.newSession(p, now), Path: "/", Expires: exp, MaxAge: int(c.opts.SessionTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil || c.opts.SecureCookies, SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console: signed in", "principal", p.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the session cookie. Pages of other origins never get here: the node's
// browser guard refuses them.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil || c.opts.SecureCookies, SameSite: http.SameSiteStrictMode})
	target := "/login"
	if c.opts.Keys == nil {
		target = "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
