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
// Authentication: with a bearer token configured, a browser signs in on /login with the
// token and gets a session cookie (HttpOnly, SameSite=Strict, 12 hours) that the server
// accepts in place of the bearer header (auth.Browsers); see docs/console.md.
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

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/reply"
)

//go:embed static templates
var assets embed.FS

// Service is what the console reads okiba through: the native API's operations, in its
// wire types, with errors as the API answers them. internal/service implements it.
type Service interface {
	// Queues lists the queues whose name starts with prefix, sorted by name.
	Queues(prefix string) []api.Queue
	// Queue returns one queue.
	Queue(name string) (api.Queue, *api.Error)
	// Peek lists up to limit messages of a queue after sequence after, without leasing
	// them, in the given states (all when none).
	Peek(ctx context.Context, name string, after uint64, limit int, states []string) (api.PeekResponse, *api.Error)
	// Topics lists the topics whose name starts with prefix, sorted by name.
	Topics(prefix string) []api.Topic
	// Topic returns one topic with its partitions.
	Topic(name string) (api.Topic, *api.Error)
	// Subscriptions lists a topic's subscriptions with their progress.
	Subscriptions(topic string) ([]api.Subscription, *api.Error)
	// Groups lists a topic's consumer groups with their partitions, members and lag.
	Groups(topic string) ([]api.Group, *api.Error)
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

// Register mounts the console's pages and endpoints on mux. They use the paths /,
// /queues/…, /topics, /topics/…, /dead-letters, /playground, /login, /logout,
// /favicon.ico and /ui/….
func (c *Console) Register(mux Handler) {
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
	mux.Handle("GET /{$}", page("overview", "Queues"))
	mux.Handle("GET /queues/{name}", page("queue", ""))
	mux.Handle("GET /topics", hf(c.topicsList))
	mux.Handle("GET /topics/{name}", hf(c.topicPage))
	mux.Handle("GET /dead-letters", page("deadletters", "Dead letters"))
	mux.Handle("GET /playground", page("playground", "Playground"))
	mux.Handle("GET /login", hf(c.loginPage))
	mux.Handle("POST /login", hf(c.login))
	mux.Handle("POST /logout", hf(c.logout))
	mux.Handle("GET /favicon.ico", hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, "icon.svg") }))
	mux.Handle("GET /ui/static/{file...}", hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, r.PathValue("file")) }))
	mux.Handle("GET /ui/api/overview", data(c.overview))
	mux.Handle("GET /ui/api/queues/{name}/history", data(c.queueHistory))
	mux.Handle("GET /ui/api/dead-letters/{name}", data(c.deadLetters))
	mux.Handle("POST /ui/api/playground/{lesson}", data(c.play.start))
	mux.Handle("GET /ui/api/playground/runs/{id}", data(c.play.get))
	mux.Handle("POST /ui/api/playground/runs/{id}", data(c.play.control))
	mux.Handle("DELETE /ui/api/playground/runs/{id}", data(c.play.stop))
}

// pageData is what the templates see.
type pageData struct {
	Title string
	Page  string
	Queue string
	Topic string
	Auth  bool
	// Data is what a page rendered on the server shows (the topic pages).
	Data any
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

func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string) {
	d := pageData{Title: title, Page: name}
	status := http.StatusOK
	if name == "queue" {
		d.Queue = r.PathValue("name")
		d.Title = d.Queue
		if _, e := c.svc.Queue(d.Queue); e != nil {
			status, d.Title, name, d.Page = http.StatusNotFound, "No such queue", "notfound", "notfound"
		}
	}
	c.write(w, status, name, d)
}

func (c *Console) now() time.Time { return c.opts.Now() }

// write renders the template name with d and sends it with the pages' headers.
func (c *Console) write(w http.ResponseWriter, status int, name string, d pageData) {
	d.Auth = c.opts.Keys != nil
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
