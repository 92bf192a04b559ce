// Package web is okiba's console: an overview of every queue, a page per queue, the
// dead letters, and a playground of live lessons in event-driven design, served by the
// broker itself (okiba serve mounts it at /).
//
// The pages are hand-written HTML, CSS and JavaScript embedded in the binary with
// go:embed (no Node is needed to build or run okiba); the charts use uPlot, vendored as
// its released build file under static/vendor/uplot with its licence and version. The
// pages read the console's own JSON endpoints under /ui/api/ and act through the native
// API under /v1 (peek, send, receive, ack, purge, redrive, delete).
//
// The console never sees the broker. Its endpoints read okiba through the native API's
// operations (Service, which internal/service implements), in the API's wire types, so
// that they show what GET /v1/queues shows; the playground's lessons act through a Go
// client of the node's own API (Options.Client).
//
// Authentication: with authentication on, a browser signs in on /login with a
// principal's secret and gets a session cookie as that principal (HttpOnly,
// SameSite=Strict, Secure over TLS, 12 hours at most, ended with its secret) that the
// server accepts in place of the bearer header (auth.Browsers). The console then shows
// what that principal may see and offers only what it may do: every route has a rule
// (Routes) checked before its handler, lists are filtered, and pages leave out the
// actions the principal's grants do not allow; see docs/console.md.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/reply"
)

//go:embed static templates
var assets embed.FS

// Service is what the console reads okiba through: the native API's operations, in its
// wire types, with errors as the API answers them. internal/service implements it. Each
// read takes the request's context, which carries its principal (auth.From), so that the
// service's own checks and filters apply to the console's reads as to the API's; the
// console also checks its routes' rules before its handlers and filters its lists
// itself (auth.Allowed), so that what a page shows never depends on a read it did not
// make. The history sampler reads with a context without a principal: everything.
type Service interface {
	// Queues lists the queues whose name starts with prefix, sorted by name.
	Queues(ctx context.Context, prefix string) []api.Queue
	// Queue returns one queue.
	Queue(ctx context.Context, name string) (api.Queue, *api.Error)
	// Peek lists up to limit messages of a queue after sequence after, without leasing
	// them, in the given states (all when none).
	Peek(ctx context.Context, name string, after uint64, limit int, states []string) (api.PeekResponse, *api.Error)
	// Topics lists the topics whose name starts with prefix, sorted by name.
	Topics(ctx context.Context, prefix string) []api.Topic
	// Topic returns one topic with its partitions.
	Topic(ctx context.Context, name string) (api.Topic, *api.Error)
	// Subscriptions lists a topic's subscriptions with their progress.
	Subscriptions(ctx context.Context, topic string) ([]api.Subscription, *api.Error)
	// Groups lists a topic's consumer groups with their partitions, members and lag.
	Groups(ctx context.Context, topic string) ([]api.Group, *api.Error)
}

// Options configure a Console. The zero value means the defaults.
type Options struct {
	// Keys are the node's principals (its auth.Keyring). When set, browsers sign in with
	// a principal's secret and get a session cookie as that principal; when nil, the
	// console is open like the rest of the API.
	Keys *auth.Keyring
	// SessionKey signs session cookies (32 random bytes the node keeps). Required with
	// Keys.
	SessionKey []byte
	// SessionTTL is how long a session lasts after sign-in, whatever its cookie says.
	// Defaults to 12 hours.
	SessionTTL time.Duration
	// SecureCookies marks session cookies Secure even on a plain connection (the node
	// behind a proxy that ends TLS).
	SecureCookies bool
	// Refused, when set, is told about every failed sign-in (the node's audit log and
	// throttle).
	Refused func(*http.Request)
	// Now tells the time of sessions. Defaults to time.Now.
	Now func() time.Time
	// Logger receives sign-ins and playground runs. Defaults to discarding them.
	Logger *slog.Logger
	// SampleInterval is how often queue depths and rates are sampled for the charts.
	// Defaults to 5 seconds.
	SampleInterval time.Duration
	// History is how far back the charts reach. Defaults to 10 minutes. Memory: about
	// 28 bytes per queue per sample (3.4 KiB per queue with the defaults).
	History time.Duration
	// MaxRuns bounds the playground runs going at once. Defaults to 4.
	MaxRuns int
	// RunIdle ends a playground run whose page stopped asking for it. Defaults to 20s.
	RunIdle time.Duration
	// RunMax ends a playground run after this long. Defaults to 3 minutes.
	RunMax time.Duration
	// Client is what the playground's lessons drive okiba with: a Go client of this
	// node's own native API, with its address and token, so that a lesson's producers
	// and consumers do what a user's code would. The console neither closes it nor
	// uses it for anything else. Without it, lessons do not start (503).
	Client *client.Client
	// Cluster, on a node of a replicated cluster, is what the node knows of it: every
	// page's header shows the node it was made on, its role, the leader, the term and
	// the followers' lag, and the node the browser reached when that one forwarded it.
	Cluster func() *api.ClusterHealth
}

func (o Options) withDefaults() Options {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = 5 * time.Second
	}
	if o.History <= 0 {
		o.History = 10 * time.Minute
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 4
	}
	if o.RunIdle <= 0 {
		o.RunIdle = 20 * time.Second
	}
	if o.RunMax <= 0 {
		o.RunMax = 3 * time.Minute
	}
	return o
}

// Console serves the console of one node. Create it with New, mount it with Register,
// and stop it with Close (while the node still serves: its playground runs delete their
// queues through the API).
type Console struct {
	svc    Service
	opts   Options
	log    *slog.Logger
	pages  *template.Template
	static map[string]staticFile
	hist   *history
	play   *playground

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// New returns a console that reads okiba through svc, and starts its history sampler.
func New(svc Service, opts Options) (*Console, error) {
	opts = opts.withDefaults()
	if opts.Keys != nil && len(opts.SessionKey) < 32 {
		return nil, errors.New("console: sign-in needs a session key of 32 bytes")
	}
	c := &Console{svc: svc, opts: opts, log: opts.Logger}
	var err error
	if c.static, err = loadStatic(); err != nil {
		return nil, err
	}
	c.pages, err = template.New("").Funcs(templateFuncs(c.assetURL)).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: parse templates: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.hist = newHistory(opts.SampleInterval, opts.History)
	c.play = newPlayground(opts.Client, opts, c.log)
	c.goBackground(func() { c.hist.run(ctx, svc) })
	c.goBackground(func() { c.play.reap(ctx) })
	return c, nil
}

func (c *Console) goBackground(fn func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// Close stops the sampler and every playground run (deleting their queues through the
// client) and waits for them; no run starts after. Call it while the node still serves.
// It is safe to call twice.
func (c *Console) Close() {
	c.closed.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.play.stopAll("console closed")
	})
}

// Handler is what Register needs: a mux (*http.ServeMux, *server.Server).
type Handler interface {
	Handle(pattern string, h http.Handler)
}

// Route is one method and path of the console with what it requires of its caller
// (auth.Rule), like the native API's routes: Register mounts the table, every route
// behind the check of its rule, and the permission matrix test walks it, so that a
// route without a rule fails it. The pages' actions are the native API's own routes
// (/v1), which check theirs.
type Route struct {
	Method, Pattern string
	Rule            auth.Rule
	// Page: the route answers HTML, and so does its refusal (else the native API's
	// error body).
	Page bool
	// on are the resources the rule's permission is needed on when the path names none
	// (the playground's names).
	on []access.Resource
	h  http.Handler
}

// playgroundNames are what a principal needs manage on to start or drive a playground
// run. Its lessons create, fill and delete queues and topics named
// playground-<run>-… through the console's own client (an admin of the node), so the
// console asks on the lessons' behalf what making and deleting those names would need:
// manage on queue:playground-* and topic:playground-*. Sending to and receiving from its
// own queues is the lesson.
var playgroundNames = []access.Resource{access.QueueNamed(PlaygroundPrefix + "*"), access.TopicNamed(PlaygroundPrefix + "*")}

const playgroundAlso = "on queue:playground-* and topic:playground-*: a lesson creates and deletes queues and topics named playground-<run>-…"

// Routes returns the console's route table.
func (c *Console) Routes() []Route {
	page := func(name, title string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.render(w, r, name, title) })
	}
	hf := func(f func(http.ResponseWriter, *http.Request)) http.Handler { return http.HandlerFunc(f) }
	// The endpoints answer JSON that no cache may keep (the overview's own validators
	// aside); who may call them (the browser guard, a session) the node decides before.
	data := func(f func(http.ResponseWriter, *http.Request)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			f(w, r)
		})
	}
	const browse, manage, queue, topic = access.Browse, access.Manage, access.Queue, access.Topic
	open := auth.Rule{Open: true}
	named := func(perm access.Permission, kind access.Kind) auth.Rule {
		return auth.Rule{Permission: perm, Kind: kind, Param: "name"}
	}
	listing := func(kind access.Kind) auth.Rule { return auth.Rule{Permission: browse, Kind: kind, Filtered: true} }
	play := auth.Rule{Permission: manage, Kind: queue, Also: playgroundAlso}
	runs := play
	runs.Also += "; a run answers only the principal that started it"
	return []Route{
		{Method: "GET", Pattern: "/{$}", Rule: listing(queue), Page: true, h: page("overview", "Queues")},
		{Method: "GET", Pattern: "/queues/{name}", Rule: named(browse, queue), Page: true, h: page("queue", "")},
		{Method: "GET", Pattern: "/topics", Rule: listing(topic), Page: true, h: hf(c.topicsList)},
		{Method: "GET", Pattern: "/topics/{name}", Rule: named(browse, topic), Page: true, h: hf(c.topicPage)},
		{Method: "GET", Pattern: "/dead-letters", Rule: listing(queue), Page: true, h: page("deadletters", "Dead letters")},
		// The page is anyone's; its lessons start only for a principal that may play.
		{Method: "GET", Pattern: "/playground", Rule: open, Page: true, h: page("playground", "Playground")},
		{Method: "GET", Pattern: "/login", Rule: open, Page: true, h: hf(c.loginPage)},
		{Method: "POST", Pattern: "/login", Rule: open, Page: true, h: hf(c.login)},
		{Method: "POST", Pattern: "/logout", Rule: open, Page: true, h: hf(c.logout)},
		{Method: "GET", Pattern: "/favicon.ico", Rule: open, h: hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, "icon.svg") })},
		{Method: "GET", Pattern: "/ui/static/{file...}", Rule: open, h: hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, r.PathValue("file")) })},
		{Method: "GET", Pattern: "/ui/api/overview", Rule: listing(queue), h: data(c.overview)},
		{Method: "GET", Pattern: "/ui/api/queues/{name}/history", Rule: named(browse, queue), h: data(c.queueHistory)},
		{Method: "GET", Pattern: "/ui/api/dead-letters", Rule: listing(queue), h: data(c.deadOverview)},
		{Method: "GET", Pattern: "/ui/api/dead-letters/{name}", Rule: named(browse, queue), h: data(c.deadLetters)},
		{Method: "POST", Pattern: "/ui/api/playground/{lesson}", Rule: play, on: playgroundNames, h: data(c.play.start)},
		{Method: "GET", Pattern: "/ui/api/playground/runs/{id}", Rule: runs, on: playgroundNames, h: data(c.play.get)},
		{Method: "POST", Pattern: "/ui/api/playground/runs/{id}", Rule: runs, on: playgroundNames, h: data(c.play.control)},
		{Method: "DELETE", Pattern: "/ui/api/playground/runs/{id}", Rule: runs, on: playgroundNames, h: data(c.play.stop)},
	}
}

// Register mounts the console's pages and endpoints on mux (Routes). They use the paths
// /, /queues/…, /topics, /topics/…, /dead-letters, /playground, /login, /logout,
// /favicon.ico and /ui/….
func (c *Console) Register(mux Handler) {
	for _, rt := range c.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, c.checked(rt))
	}
}

// checked runs rt's handler once the request's principal holds its rule's permission on
// the resource the path names (or on the route's own resources). A listing refuses
// nothing: its handler shows what the principal may browse.
func (c *Console) checked(rt Route) http.Handler {
	rule := rt.Rule
	if rule.Open || rule.Filtered {
		return rt.h
	}
	if rule.Permission == 0 || rule.Param == "" && rule.Kind != access.AnyKind && len(rt.on) == 0 {
		panic("console: route " + rt.Method + " " + rt.Pattern + " has no rule") // a bug: every route says what it needs
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := rt.on
		if rule.Param != "" || rule.Kind == access.AnyKind {
			res = []access.Resource{rule.Resource(r.PathValue(rule.Param))}
		}
		for _, x := range res {
			if err := auth.Require(r.Context(), rule.Permission, x); err != nil {
				c.refuse(w, r, rt.Page, forbidden(err))
				return
			}
		}
		rt.h.ServeHTTP(w, r)
	})
}

// forbidden is the wire error of a refusal: the row of internal/errcode's table for an
// *access.DeniedError (403 forbidden, naming the missing permission), which the console
// cannot reach (errcode is built on the broker). TestRefusalsAnswerAsTheAPIDoes keeps the
// two alike.
func forbidden(err error) *api.Error {
	return &api.Error{Code: api.CodeForbidden, Message: err.Error()}
}

// refuse answers a refused request in the console's shape: a page for a page, else the
// native API's error body.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, page bool, e *api.Error) {
	if page {
		c.write(w, r, http.StatusForbidden, "forbidden", pageData{Title: "Not allowed", Page: "forbidden", Data: e.Message})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	reply.Error(w, e)
}

// mayPlay reports whether the request's principal may start playground runs.
func mayPlay(ctx context.Context) bool {
	for _, x := range playgroundNames {
		if !auth.Allowed(ctx, access.Manage, x) {
			return false
		}
	}
	return true
}

// pageData is what the templates see.
type pageData struct {
	Title string
	Page  string
	Queue string
	Topic string
	// Auth: the console signs browsers in; Principal is the one signed in.
	Auth      bool
	Principal string
	// What the page offers, as the principal's grants allow it on the page's queue or
	// topic (auth.Allowed): the native API refuses the rest anyway, and the page does not
	// offer what would be refused.
	CanSend, CanReceive, CanManage bool
	// CanPlay: the principal may start playground runs (playgroundNames).
	CanPlay bool
	// CanCreate: the overview offers a new queue, the topics page a new topic, to a
	// principal with manage on every name of the kind (queue:* or topic:*); a narrower
	// grant creates through the API or the CLI.
	CanCreate bool
	// Data is what a page rendered on the server shows (the topic pages).
	Data any
	// Cluster is the node's view of its cluster (Options.Cluster), nil on a single node;
	// Via is the member that forwarded the page's request here, if one did.
	Cluster *api.ClusterHealth
	Via     string
}

// securityHeaders are sent with every page: scripts and styles only from the console's
// own files, no framing, no referrer to other sites.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

// offers sets what a page offers on res to the request's principal.
func (d *pageData) offers(ctx context.Context, res access.Resource) {
	d.CanSend = auth.Allowed(ctx, access.Send, res)
	d.CanReceive = auth.Allowed(ctx, access.Receive, res)
	d.CanManage = auth.Allowed(ctx, access.Manage, res)
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string) {
	d := pageData{Title: title, Page: name}
	status := http.StatusOK
	switch name {
	case "queue":
		d.Queue = r.PathValue("name")
		d.Title = d.Queue
		if _, e := c.svc.Queue(r.Context(), d.Queue); e != nil {
			if e.Code == api.CodeForbidden {
				c.refuse(w, r, true, e)
				return
			}
			status, d.Title, name, d.Page = http.StatusNotFound, "No such queue", "notfound", "notfound"
		}
		d.offers(r.Context(), access.QueueNamed(d.Queue))
	case "playground":
		d.CanPlay = mayPlay(r.Context())
	case "overview":
		d.CanCreate = auth.Allowed(r.Context(), access.Manage, access.QueueNamed("*"))
	}
	c.write(w, r, status, name, d)
}

func (c *Console) now() time.Time { return c.opts.Now() }

// write renders the template name with d for r and sends it with the pages' headers.
func (c *Console) write(w http.ResponseWriter, r *http.Request, status int, name string, d pageData) {
	d.Auth = c.opts.Keys != nil
	if c.opts.Cluster != nil {
		d.Cluster = c.opts.Cluster()
		d.Via = r.Header.Get("Okiba-Forwarded-By")
	}
	if p, ok := auth.From(r.Context()); ok && d.Auth {
		d.Principal = p.Name
	}
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, name+".html", d); err != nil {
		c.log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// staticFile is an embedded asset with its validator.
type staticFile struct {
	data  []byte
	ctype string
	etag  string
}

func loadStatic() (map[string]staticFile, error) {
	out := make(map[string]staticFile)
	err := fs.WalkDir(assets, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "static/")] = staticFile{data: data, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return out, err
}

// assetURL names an asset with its content hash, so that a page never runs a stale
// script after an upgrade.
func (c *Console) assetURL(name string) string {
	f, ok := c.static[name]
	if !ok {
		panic("web: no asset " + name)
	}
	return "/ui/static/" + name + "?v=" + strings.Trim(f.etag, `"`)
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	f, ok := c.static[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("ETag", f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if r.URL.Query().Get("v") == strings.Trim(f.etag, `"`) {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if r.Header.Get("If-None-Match") == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Write(f.data)
}

// apiError answers an error in the native API's shape ({"error":{"code","message"}})
// with status, for the console's own errors, some of which have no code of the API
// (too_many_runs).
func apiError(w http.ResponseWriter, status int, code, format string, args ...any) {
	reply.JSON(w, status, api.ErrorBody{Error: &api.Error{Code: code, Message: fmt.Sprintf(format, args...)}})
}
