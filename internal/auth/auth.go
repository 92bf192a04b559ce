// Package auth says who is calling: the principal a request proved itself to be, by a
// bearer token, a console session or an SQS signature. The node's router runs the one
// authentication step (internal/node) and leaves the principal in the request's
// context; what a principal may do is decided per action, by the service that runs it
// (an SQS request names its queue inside its body).
package auth

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Method is how a caller proved who it is.
type Method uint8

const (
	// Anonymous: the node requires no authentication (loopback without a token).
	Anonymous Method = iota
	// Token: an Authorization: Bearer header with the node's token.
	Token
	// Session: a console session cookie, minted at sign-in with the token.
	Session
	// Signature: an SQS request signed (AWS Signature Version 4) with a configured key.
	Signature
)

func (m Method) String() string {
	switch m {
	case Token:
		return "token"
	case Session:
		return "session"
	case Signature:
		return "signature"
	}
	return "anonymous"
}

// Principal is who a request comes from. Today every authenticated principal may do
// everything; permissions per principal come with the security work.
type Principal struct {
	// Name identifies the principal: "admin" for the node's token and its sessions, the
	// access key id for a signed SQS request, "" when anonymous.
	Name   string
	Method Method
}

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the principal ctx carries, and whether the authentication step ran.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Bearer reports whether r carries the bearer token (compared in constant time).
func Bearer(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && token != "" &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// Browsers is how the console signs in web browsers, which cannot send a bearer token
// (package web implements it).
type Browsers interface {
	// SignedIn reports whether r carries a valid session.
	SignedIn(r *http.Request) bool
	// Public reports whether r may be served without authentication (the sign-in page
	// and the console's assets).
	Public(r *http.Request) bool
	// SignInURL is where a browser without a session that asked for r is sent.
	SignInURL(r *http.Request) string
}

// Step is the authentication step of every request but an SQS one (whose signature its
// front checks over the body): the bearer token, or a console session; /healthz and the
// console's public pages pass. Without a Token every request passes, anonymous.
type Step struct {
	Token    string
	Browsers Browsers // nil: no console
	// Refuse answers a refused request (status, the native error body); it gets the
	// status and the message.
	Refuse func(w http.ResponseWriter, status int, message string)
}

// sessionOrigin keeps a console session to its own pages even for an origin the node's
// browser guard lets in (listed with --cors-origins): such an application must send
// the token.
var sessionOrigin = http.NewCrossOriginProtection()

// Authenticate returns who sent r, or answers the refusal itself and reports false: 401
// with a WWW-Authenticate challenge, or, for a browser asking for a console page without
// a session, a redirect to the sign-in page.
func (s *Step) Authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	if s.Token == "" {
		return Principal{Method: Anonymous}, true
	}
	if Bearer(r, s.Token) {
		return Principal{Name: "admin", Method: Token}, true
	}
	if r.URL.Path == "/healthz" {
		return Principal{Method: Anonymous}, true
	}
	b := s.Browsers
	switch {
	case b != nil && b.SignedIn(r):
		if err := sessionOrigin.Check(r); err != nil {
			s.Refuse(w, http.StatusUnauthorized, "cross-origin request refused: the console session is good only on its own pages")
			return Principal{}, false
		}
		return Principal{Name: "admin", Method: Session}, true
	case b != nil && b.Public(r):
		return Principal{Method: Anonymous}, true
	case b != nil && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		http.Redirect(w, r, b.SignInURL(r), http.StatusSeeOther)
		return Principal{}, false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="okiba"`)
	s.Refuse(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>")
	return Principal{}, false
}
