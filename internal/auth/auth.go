// Package auth says who is calling and what it may do: the principal a request proved
// itself to be, by a bearer token, a console session or an SQS signature (the Keyring
// finds it from the secret), with its grants (package access). The node's router runs
// the one authentication step (internal/node) and leaves the principal in the request's
// context; each interface asks Require before it acts, per action — its route table
// says which permission on which resource (an SQS request names its queue inside its
// body; a subscription needs a second permission on its queue).
package auth

import (
	"context"
	"net/http"
	"strings"

	"github.com/okiba/okiba/access"
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

// Principal is who a request comes from and what it may do.
type Principal struct {
	// Name identifies the principal, which is also its SQS access key id: "admin" for
	// the node's --auth-token; "" when anonymous.
	Name   string
	Method Method
	Grants access.Grants
	// SecretID is the secret it proved itself with (console sessions end with it).
	SecretID uint64
}

// AdminGrants allow everything: the node's --auth-token, and every request of a node
// that requires no authentication.
var AdminGrants = access.Grants{{Permission: access.Admin, On: access.Pattern{Kind: access.AnyKind, Glob: "*"}}}

// Allows reports whether the principal may do perm on r.
func (p Principal) Allows(perm access.Permission, r access.Resource) bool {
	return p.Grants.Allows(perm, r)
}

// Check returns nil if the principal may do perm on r, else an *access.DeniedError
// naming what is missing.
func (p Principal) Check(perm access.Permission, r access.Resource) error {
	if p.Allows(perm, r) {
		return nil
	}
	return &access.DeniedError{Principal: p.Name, Permission: perm, Resource: r}
}

// Require checks that the principal in ctx may do perm on r. A context without a
// principal is a call from inside the process (the node's router puts one into every
// request it serves) and may do anything.
//
// The decision is recorded for the node's audit log when ctx has a Recorder.
func Require(ctx context.Context, perm access.Permission, r access.Resource) error {
	p, ok := From(ctx)
	if !ok {
		return nil
	}
	err := p.Check(perm, r)
	record(ctx, Decision{Permission: perm, Resource: r, Allowed: err == nil})
	return err
}

// Allowed reports whether the principal in ctx may do perm on r, without recording a
// decision: for filtering lists and for offering actions, which refuse nothing.
func Allowed(ctx context.Context, perm access.Permission, r access.Resource) bool {
	p, ok := From(ctx)
	return !ok || p.Allows(perm, r)
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

// Bearer returns the bearer token r carries, if any.
func Bearer(r *http.Request) (string, bool) {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	got = strings.TrimSpace(got)
	return got, got != ""
}

// Browsers is how the console signs in web browsers, which cannot send a bearer token
// (package console implements it).
type Browsers interface {
	// SignedIn returns the principal of r's valid session, if it has one.
	SignedIn(r *http.Request) (Principal, bool)
	// Public reports whether r may be served without authentication (the sign-in page
	// and the console's assets).
	Public(r *http.Request) bool
	// SignInURL is where a browser without a session that asked for r is sent.
	SignInURL(r *http.Request) string
}

// Step is the authentication step of every request but an SQS one (whose signature its
// front checks over the body): a bearer token, or a console session; /healthz and the
// console's public pages pass. Without Keys every request passes, anonymous, with
// AdminGrants.
type Step struct {
	Keys     *Keyring // nil: no authentication
	Browsers Browsers // nil: no console
	// Refuse answers a refused request (status, the native error body); it gets the
	// status and the message.
	Refuse func(w http.ResponseWriter, status int, message string)
	// Throttle, when set, delays the answer to a request whose credential is wrong
	// (per source address, Sources.Of).
	Throttle *Throttle
	Sources  Sources
}

// sessionOrigin keeps a console session to its own pages even for an origin the node's
// browser guard lets in (listed with --cors-origins): such an application must send
// the token.
var sessionOrigin = http.NewCrossOriginProtection()

// Authenticate returns who sent r, or answers the refusal itself and reports false: 401
// with a WWW-Authenticate challenge, or, for a browser asking for a console page without
// a session, a redirect to the sign-in page.
func (s *Step) Authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	if s.Keys == nil {
		return Principal{Method: Anonymous, Grants: AdminGrants}, true
	}
	token, hasToken := Bearer(r)
	if hasToken {
		if p, ok := s.Keys.ByToken(token); ok {
			return p, true
		}
	}
	if r.URL.Path == "/healthz" {
		return Principal{Method: Anonymous}, true
	}
	b := s.Browsers
	if b != nil && !hasToken {
		if p, ok := b.SignedIn(r); ok {
			if err := sessionOrigin.Check(r); err != nil {
				s.Refuse(w, http.StatusUnauthorized, "cross-origin request refused: the console session is good only on its own pages")
				return Principal{}, false
			}
			return p, true
		}
	}
	switch {
	case b != nil && b.Public(r):
		return Principal{Method: Anonymous}, true
	case b != nil && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		http.Redirect(w, r, b.SignInURL(r), http.StatusSeeOther)
		return Principal{}, false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="okiba"`)
	msg := "missing bearer token: send Authorization: Bearer <secret>"
	if hasToken {
		msg = "wrong bearer token: it is no principal's valid secret"
		if s.Throttle != nil {
			s.Throttle.Wait(r.Context(), s.Sources.Of(r))
		}
	}
	s.Refuse(w, http.StatusUnauthorized, msg)
	return Principal{}, false
}
