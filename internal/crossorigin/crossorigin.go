// Package crossorigin keeps web pages from driving a server that the user's browser can
// reach. Any page the user visits can send requests to 127.0.0.1: "simple" cross-origin
// POSTs go out without asking, and with DNS rebinding a page on a name the attacker
// controls can even read the answers, its requests being same-origin to the browser.
// A Guard refuses both, before authentication and routing:
//
//   - The origin rule. A request that a browser marks as coming from another origin —
//     Sec-Fetch-Site cross-site or same-site, or, without Sec-Fetch-Site, an Origin whose
//     host is not the request's Host (as http.CrossOriginProtection decides) — is refused,
//     whatever its method, unless its Origin is listed in Config.Origins. Listed origins
//     get proper CORS answers: preflights, and Access-Control-Allow-Origin on responses.
//     Requests without these headers (SDKs, curl, the Go client) pass, and so does a
//     top-level navigation (a GET with Sec-Fetch-Mode navigate: a followed link), whose
//     answer the linking page cannot read.
//   - The Host rule. Unless the server requires a credential (Config.Authenticated), a
//     request whose Host is a name rather than an IP address must use a name of this
//     server: localhost, a name under .localhost (browsers resolve those to loopback
//     themselves), this machine's host name, or one of Config.Hosts. DNS rebinding needs a
//     name the attacker controls, which is none of these. IP addresses always pass.
//
// The Guard is an http.Handler wrapper (Handler, Serve) around a pure decision (Check),
// independent of what it protects.
package crossorigin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// CORS answers for listed origins. They cover every interface a server of okiba's has:
// the native API and the console (Authorization, JSON and binary bodies) and the SQS
// front (the headers AWS SDKs sign and send, and those they read back).
const (
	allowMethods = "GET, POST, PUT, DELETE"
	allowHeaders = "Authorization, Content-Type, Accept, " +
		"X-Amz-Target, X-Amz-Date, X-Amz-Security-Token, X-Amz-Content-Sha256, X-Amz-User-Agent, " +
		"X-Amzn-Query-Mode, X-Amzn-Trace-Id, Amz-Sdk-Invocation-Id, Amz-Sdk-Request"
	exposeHeaders = "Retry-After, WWW-Authenticate, Allow, X-Okiba-Settled, X-Okiba-Unsettled, " +
		"X-Amzn-RequestId, X-Amzn-Query-Error"
	// maxAge lets a browser reuse a preflight for 10 minutes: long enough to spare a
	// round trip per request, short enough that a changed list takes effect soon.
	maxAge = "600"
)

// The reasons a request is refused; an *Error wraps one of them.
var (
	// ErrCrossOrigin: a browser sent the request for a page on an origin that is not the
	// server's own and is not listed.
	ErrCrossOrigin = errors.New("cross-origin request")
	// ErrHost: the request addresses the server by a name that is not one of its own.
	ErrHost = errors.New("unknown host name")
)

// Error is a refusal: why, and what the request said. Its message says what to change.
type Error struct {
	Err    error  // ErrCrossOrigin or ErrHost
	Origin string // the Origin header, if any
	Site   string // the Sec-Fetch-Site header, if any
	Host   string // the request's Host
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	if e.Err == ErrHost {
		return fmt.Sprintf("request refused: Host %q is not a name of this server. Without authentication okiba answers only "+
			"requests addressed to an IP address, localhost or a name in --allowed-hosts, so that a web page cannot reach it "+
			"through DNS rebinding: add the name to --allowed-hosts, or turn authentication on", e.Host)
	}
	if e.Origin == "" {
		return fmt.Sprintf("cross-origin request refused: the browser sent it for a page of another site (Sec-Fetch-Site: %s) "+
			"and named no origin; a browser application must be served from an origin listed in --cors-origins", e.Site)
	}
	return fmt.Sprintf("cross-origin request refused: a page on %q may not call this server (Host %q); "+
		"to let a browser application on that origin in, list it in --cors-origins", e.Origin, e.Host)
}

// Config says what a Guard lets through. The zero value means the defaults: no
// cross-origin browser request, and only the default names (see Hosts).
type Config struct {
	// Origins are the origins (scheme://host[:port], for example
	// "https://app.example.com") whose pages may call the server; see ParseOrigin.
	// Defaults to none.
	Origins []string
	// Hosts are the names, besides localhost, the names under .localhost and this
	// machine's host name (os.Hostname), by which a request may address the server
	// while Authenticated is false; see ParseHost. "*.example.com" stands for every name
	// under example.com. IP addresses always pass. Defaults to none.
	Hosts []string
	// Authenticated says that the server requires a credential on every request the Guard
	// protects. The Host rule then does not apply: a page that reaches the server through
	// DNS rebinding has no credential to send, and proxies, containers and other names
	// keep working. Defaults to false.
	Authenticated bool
	// Exempt, when set, reports the requests that any page may make by any name: those
	// that reveal and change nothing, such as a health check or static assets. They still
	// get CORS headers for a listed origin. Defaults to none.
	Exempt func(r *http.Request) bool
	// Refuse answers a refused request; err is an *Error. Defaults to a plain-text 403
	// with err's message.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
}

// Guard applies a Config. It is safe for concurrent use.
type Guard struct {
	origins  map[string]bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
	auth     bool
	exempt   func(*http.Request) bool
	refuse   func(http.ResponseWriter, *http.Request, error)
}

// New returns a Guard for cfg, or an error naming the first entry of Origins or Hosts
// that is not valid.
func New(cfg Config) (*Guard, error) {
	g := &Guard{origins: map[string]bool{}, names: map[string]bool{"localhost": true},
		suffixes: []string{".localhost"}, auth: cfg.Authenticated, exempt: cfg.Exempt, refuse: cfg.Refuse}
	for _, o := range cfg.Origins {
		n, err := ParseOrigin(o)
		if err != nil {
			return nil, err
		}
		g.origins[n] = true
	}
	hosts := cfg.Hosts
	if h, err := os.Hostname(); err == nil && h != "" {
		if _, err := ParseHost(h); err == nil { // an odd host name is not worth failing for
			hosts = append([]string{h}, hosts...)
		}
	}
	for _, h := range hosts {
		n, err := ParseHost(h)
		switch {
		case err != nil:
			return nil, err
		case n == "":
			// an IP address: always allowed
		case strings.HasPrefix(n, "*."):
			g.suffixes = append(g.suffixes, n[1:])
		default:
			g.names[n] = true
		}
	}
	if g.exempt == nil {
		g.exempt = func(*http.Request) bool { return false }
	}
	if g.refuse == nil {
		g.refuse = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusForbidden)
		}
	}
	return g, nil
}

// ParseOrigin checks that s is an origin as browsers send it in the Origin header,
// scheme://host[:port] with the scheme http or https and no path, and returns it in the
// form browsers send: lower case, without the scheme's default port.
func ParseOrigin(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%q is not an origin: %s; write it as scheme://host[:port], for example https://app.example.com", s, why)
	}
	if s == "*" || s == "null" {
		return bad("okiba lets in listed origins only, each written out")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return bad("it does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("the scheme must be http or https")
	case u.Opaque != "" || u.Host == "" || strings.HasSuffix(u.Host, ":"):
		return bad("it names no host")
	case u.User != nil:
		return bad("it has a user name")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(s, "#"):
		return bad("it has a path, a query or a fragment (no trailing slash either)")
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return bad("the port is not a number from 1 to 65535")
		}
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p)
	}
	return u.Scheme + "://" + host, nil
}

// ParseHost checks that s is a host name (or "*." and a name, for every name under it)
// and returns it in lower case without a trailing dot; for an IP address, which needs no
// listing, it returns "".
func ParseHost(s string) (string, error) {
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return "", nil
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%q is not a host name: %s; give names such as broker.internal or *.example.com, without a scheme, port or path", s, why)
	}
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	rest, wild := strings.CutPrefix(name, "*.")
	if rest == "" || len(rest) > 253 {
		return bad("it is empty or too long")
	}
	for label := range strings.SplitSeq(rest, ".") {
		if label == "" || len(label) > 63 {
			return bad("a label between dots is empty or longer than 63 characters")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return bad(fmt.Sprintf("%q is not a letter, digit, '-' or '_'", c))
			}
		}
	}
	if wild {
		return "*." + rest, nil
	}
	return rest, nil
}

// Check decides whether r may be served: it returns nil, or an *Error wrapping
// ErrHost or ErrCrossOrigin. It only reads r.
func (g *Guard) Check(r *http.Request) error {
	if g.exempt(r) {
		return nil
	}
	if !g.auth && !g.knownHost(r.Host) {
		return &Error{Err: ErrHost, Host: r.Host}
	}
	origin, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate" {
		// A link followed from another site: the page that had the link cannot read
		// what the browser then shows, and no GET changes anything, so it opens (the
		// console from a bookmark page, an API URL from a chat message).
		return nil
	}
	switch site {
	case "same-origin", "none": // "none": the user typed the address or used a bookmark
		return nil
	case "":
		// A browser that does not send Sec-Fetch-Site (or not a browser): only the Origin
		// tells, and it is absent from requests that are not cross-origin.
		if origin == "" || sameHost(origin, r.Host) {
			return nil
		}
	}
	if g.listed(origin) {
		return nil
	}
	return &Error{Err: ErrCrossOrigin, Origin: origin, Site: site, Host: r.Host}
}

// Serve applies the Guard to r before the caller serves it, and reports whether it has
// answered r itself: a refusal, or the preflight of a listed origin. Otherwise the
// caller serves r; for a listed origin the CORS headers are already set on w.
func (g *Guard) Serve(w http.ResponseWriter, r *http.Request) bool {
	if err := g.Check(r); err != nil {
		g.refuse(w, r, err)
		return true
	}
	if len(g.origins) == 0 {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin") // the answer depends on it: caches must not mix them up
	origin := r.Header.Get("Origin")
	if !g.listed(origin) {
		return false
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", allowMethods)
		h.Set("Access-Control-Allow-Headers", allowHeaders)
		h.Set("Access-Control-Max-Age", maxAge)
		if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
			// Chrome asks before a public page may reach a private or loopback address.
			h.Set("Access-Control-Allow-Private-Network", "true")
		}
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	return false
}

// Handler returns h behind the Guard.
func (g *Guard) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.Serve(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// listed reports whether origin, as the request sent it, is one of Config.Origins.
func (g *Guard) listed(origin string) bool {
	return origin != "" && g.origins[strings.ToLower(origin)]
}

// knownHost reports whether a Host header names the server by an IP address or by one
// of its names. An empty Host (HTTP/1.0) comes from no browser.
func (g *Guard) knownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if g.names[name] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			return true
		}
	}
	return false
}

// sameHost reports whether an Origin header names the request's own Host, as
// http.CrossOriginProtection compares them (the scheme is not compared: the Host
// header does not carry it).
func sameHost(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}
