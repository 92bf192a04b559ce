package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Browsers cannot send a bearer token, so with a token configured the console signs
// them in: the sign-in form takes the token, and a correct one earns a session cookie
// that the server accepts in its place (auth.Browsers, in the node's authentication step).
//
// The cookie holds its expiry and an HMAC-SHA256 of it keyed by a key derived from the
// token: the server keeps no session state, sessions survive restarts, and changing the
// token ends every session. It is HttpOnly (scripts cannot read it), SameSite=Strict
// (other sites' pages cannot make the browser send it) and Secure over TLS; the node's
// browser guard refuses requests from pages of other origins before anyone looks at the
// cookie (internal/crossorigin). Signing out clears the cookie in that browser; a
// copied cookie stays valid until it expires (SessionTTL), so treat it like the token.

const sessionCookie = "okiba_session"

// sessionKey derives the MAC key from the token.
func (c *Console) sessionKey() []byte {
	k := sha256.Sum256([]byte("okiba console session v1\x00" + c.opts.AuthToken))
	return k[:]
}

// newSession returns a cookie value valid until exp.
func (c *Console) newSession(exp time.Time) string {
	buf := make([]byte, 8, 8+sha256.Size)
	binary.BigEndian.PutUint64(buf, uint64(exp.Unix()))
	mac := hmac.New(sha256.New, c.sessionKey())
	mac.Write(buf)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(buf))
}

// validSession reports whether v is a cookie value made by newSession that has not
// expired.
func (c *Console) validSession(v string, now time.Time) bool {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) != 8+sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, c.sessionKey())
	mac.Write(raw[:8])
	if !hmac.Equal(mac.Sum(nil), raw[8:]) {
		return false
	}
	return now.Unix() < int64(binary.BigEndian.Uint64(raw[:8]))
}

// SignedIn reports whether r carries a valid session cookie (auth.Browsers).
func (c *Console) SignedIn(r *http.Request) bool {
	if c.opts.AuthToken == "" {
		return false
	}
	ck, err := r.Cookie(sessionCookie)
	return err == nil && c.validSession(ck.Value, time.Now())
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

// safeNext keeps a post-sign-in destination on this site.
func safeNext(v string) string {
	if !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") || strings.HasPrefix(v, "/\\") || strings.ContainsAny(v, "\r\n") {
		return "/"
	}
	return v
}

type loginData struct {
	pageData
	Next  string
	Error string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if c.opts.AuthToken == "" || c.SignedIn(r) {
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
	d := loginData{pageData: pageData{Title: "Sign in", Page: "login"}, Next: next, Error: msg}
	if err := c.pages.ExecuteTemplate(w, "login.html", d); err != nil {
		c.log.Error("console: render page", "page", "login", "error", err)
	}
}

// signInOrigin refuses sign-ins posted from pages of other origins. The node's browser
// guard lets any page reach the sign-in page (Public), so the form checks for itself.
var signInOrigin = http.NewCrossOriginProtection()

// login checks the token from the sign-in form (multipart, so that the SQS front, which
// claims form-encoded POSTs, leaves it alone) and sets the session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if err := signInOrigin.Check(r); err != nil {
		http.Error(w, "cross-origin sign-in refused", http.StatusForbidden)
		return
	}
	if c.opts.AuthToken == "" {
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
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.opts.AuthToken)) != 1 {
		c.log.Warn("console: sign-in with a wrong token", "remote", r.RemoteAddr)
		c.renderLogin(w, http.StatusUnauthorized, next, "That is not the server's token.")
		return
	}
	exp := time.Now().Add(c.opts.SessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: c.newSession(exp), Path: "/", Expires: exp, MaxAge: int(c.opts.SessionTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console: signed in", "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the session cookie. Pages of other origins never get here: the node's
// browser guard refuses them.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	target := "/login"
	if c.opts.AuthToken == "" {
		target = "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
