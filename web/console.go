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
// Authentication: with a bearer token configured, a browser signs in on /login with the
// token and gets a session cookie (HttpOnly, SameSite=Strict, 12 hours) that the server
// accepts in place of the bearer header (server.Options.Browsers); see docs/console.md.
package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
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
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/errcode"
)

//go:embed static templates
var assets embed.FS

// Options configure a Console. The zero value means the defaults.
type Options struct {
	// AuthToken is the server's bearer token. When set, browsers sign in with it and get
	// a session cookie; when empty, the console is open like the rest of the API.
	AuthToken string
	// SessionTTL is how long a session lasts. Defaults to 12 hours.
	SessionTTL time.Duration
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

// Console serves the console over one broker. Create it with New, mount it with
// Register, and stop it with Close (before closing the broker).
type Console struct {
	b      *broker.Broker
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

// New returns a console for b and starts its history sampler.
func New(b *broker.Broker, opts Options) (*Console, error) {
	opts = opts.withDefaults()
	c := &Console{b: b, opts: opts, log: opts.Logger}
	var err error
	if c.static, err = loadStatic(); err != nil {
		return nil, err
	}
	c.pages, err = template.New("").Funcs(template.FuncMap{"asset": c.assetURL}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: parse templates: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.hist = newHistory(opts.SampleInterval, opts.History)
	c.play = newPlayground(opts.Client, opts, c.log)
	c.goBackground(func() { c.hist.run(ctx, b) })
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

// Close stops the sampler and every playground run (deleting their queues) and waits
// for them. Call it before closing the broker. It is safe to call twice.
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
// /queues/…, /dead-letters, /playground, /login, /logout, /favicon.ico and /ui/….
func (c *Console) Register(mux Handler) {
	page := func(name, title string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.render(w, r, name, title) })
	}
	hf := func(f func(http.ResponseWriter, *http.Request)) http.Handler { return http.HandlerFunc(f) }
	mux.Handle("GET /{$}", page("overview", "Queues"))
	mux.Handle("GET /queues/{name}", page("queue", ""))
	mux.Handle("GET /dead-letters", page("deadletters", "Dead letters"))
	mux.Handle("GET /playground", page("playground", "Playground"))
	mux.Handle("GET /login", hf(c.loginPage))
	mux.Handle("POST /login", hf(c.login))
	mux.Handle("POST /logout", hf(c.logout))
	mux.Handle("GET /favicon.ico", hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, "icon.svg") }))
	mux.Handle("GET /ui/static/{file...}", hf(func(w http.ResponseWriter, r *http.Request) { c.serveStatic(w, r, r.PathValue("file")) }))
	mux.Handle("GET /ui/api/overview", hf(c.overview))
	mux.Handle("GET /ui/api/queues/{name}/history", hf(c.queueHistory))
	mux.Handle("GET /ui/api/dead-letters/{name}", hf(c.deadLetters))
	mux.Handle("POST /ui/api/playground/{lesson}", sameOrigin(hf(c.play.start)))
	mux.Handle("GET /ui/api/playground/runs/{id}", hf(c.play.get))
	mux.Handle("POST /ui/api/playground/runs/{id}", sameOrigin(hf(c.play.control)))
	mux.Handle("DELETE /ui/api/playground/runs/{id}", sameOrigin(hf(c.play.stop)))
}

// sameOrigin refuses cross-origin writes from browsers even without authentication
// (a page elsewhere must not drive the playground of a broker on loopback).
func sameOrigin(h http.Handler) http.Handler { return crossOrigin.Handler(h) }

var crossOrigin = http.NewCrossOriginProtection()

// pageData is what the templates see.
type pageData struct {
	Title string
	Page  string
	Queue string
	Auth  bool
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
	d := pageData{Title: title, Page: name, Auth: c.opts.AuthToken != ""}
	status := http.StatusOK
	if name == "queue" {
		d.Queue = r.PathValue("name")
		d.Title = d.Queue
		if _, err := c.b.QueueConfig(d.Queue); err != nil {
			status, d.Title, name, d.Page = http.StatusNotFound, "No such queue", "notfound", "notfound"
		}
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

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// apiError answers an error in the native API's shape ({"error":{"code","message"}}).
func apiError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": fmt.Sprintf(format, args...)}})
}

// brokerError answers an error of the broker with its native code and status
// (internal/errcode); an internal error is logged and its details kept from the page.
func (c *Console) brokerError(w http.ResponseWriter, err error) {
	row := errcode.Of(err)
	if row.Internal() {
		c.log.Error("console: internal error", "error", err)
		apiError(w, api.Status[row.Code], row.Code, "%s", errcode.InternalMessage)
		return
	}
	apiError(w, api.Status[row.Code], row.Code, "%v", err)
}
