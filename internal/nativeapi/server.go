// Package server is okiba's HTTP transport: the native JSON API under /v1 and /healthz.
// It decodes requests (JSON, okiba's binary encoding, stream frames), calls the native
// API's operations (internal/service, which checks them, calls the broker and converts
// its answers and errors to the wire types of package api) and encodes the answers; it
// holds no queue semantics of its own.
package nativeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/consumers"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// Options configure a Server. The zero value means the defaults.
type Options struct {
	// Logger receives internal errors, whose details the answers leave out, and
	// requests of a stream that panicked. Defaults to discarding.
	Logger *slog.Logger
	// Observe, when set, is told about every request of the native API once it is
	// answered (plain HTTP and stream frames alike): the route it matched (its pattern),
	// its method, status and duration. Package metrics records them.
	Observe func(route, method string, status int, d time.Duration)
	// Audit, when set, is told about every request of the native API once it is
	// answered (plain HTTP and stream frames alike) with the permission checks it made
	// (the node's audit log).
	Audit func(r *http.Request, status int, decisions []auth.Decision)
	// Keys are the node's principals' secrets (its auth.Keyring), which the principals'
	// API needs to seal the secrets it makes and to tell the declared principals. Without
	// them it lists the log's principals only and creates none.
	Keys *auth.Keyring
	// StreamBytes bounds the bytes of requests one stream holds in flight (their bodies
	// and targets); a request beyond is answered 503 unavailable with Retry-After, and
	// the stream goes on. Defaults to 64 MiB. ServerStreamBytes bounds all streams
	// together; defaults to 512 MiB.
	StreamBytes, ServerStreamBytes int64
	// StreamIdleTimeout closes a stream (docs/api.md) on which no frame has arrived for
	// this long and no request is in flight, as HTTP servers close idle keep-alive
	// connections. Default 5 minutes; the Go client closes its own idle streams sooner.
	StreamIdleTimeout time.Duration
	// Consumers is the node's table of receivers (internal/consumers), which receives
	// and settles feed and GET /v1/queues/{name}/consumers lists; the node shares it with
	// its SQS front. Defaults to a table of this server's own.
	Consumers *consumers.Table
	// Now tells the time of the consumers' table. Defaults to time.Now.
	Now func() time.Time
	// Cluster, on a node of a cluster, says what the node knows of it, for /healthz.
	Cluster func() *api.ClusterHealth
	// ReadBarrier, on a node of a cluster, runs before every read (GET) but /healthz,
	// the stream's upgrade and a backup: it returns once the node's state may answer it
	// without being stale (cluster.Raft.ReadBarrier), or why not (503 unavailable).
	ReadBarrier func(ctx context.Context) error
	// StaleBarrier runs instead before a read that asks for ?stale=true: it need not
	// confirm the lead, only that what the read sees is committed (broker.Barrier).
	StaleBarrier func(ctx context.Context) error
}

// Server serves the native API over a broker.
//
// It serves the native API only: who may call it is decided before (the node's router
// authenticates every request and refuses browsers from elsewhere, internal/node).
type Server struct {
	svc   *service.Service
	opts  Options
	table *consumers.Table
	log   *slog.Logger
	mux   *http.ServeMux

	streams streams
	busy    atomic.Int64 // stream requests in flight, all streams
	held    atomic.Int64 // bytes of the stream requests in flight, all streams
}

// New returns a server of the native API's operations on b (internal/service), whose
// internal errors go to opts.Logger.
func New(b *broker.Broker, opts Options) *Server {
	if opts.StreamBytes <= 0 {
		opts.StreamBytes = defaultStreamBytes
	}
	if opts.ServerStreamBytes <= 0 {
		opts.ServerStreamBytes = defaultServerStreamBytes
	}
	s := &Server{opts: opts, log: opts.Logger, table: opts.Consumers}
	if s.table == nil {
		s.table = consumers.New(consumers.Options{})
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.svc = service.New(b, service.Options{Logger: s.log, Keys: opts.Keys})
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) { s.observed(w, r, s.route) }

// observed serves r with serve, which returns the route, and tells Observe about it.
func (s *Server) observed(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request) string) {
	if s.opts.Observe == nil && s.opts.Audit == nil {
		serve(w, r)
		return
	}
	var rec *auth.Recorder
	if s.opts.Audit != nil {
		var ctx context.Context
		ctx, rec = auth.WithRecorder(r.Context())
		r = r.WithContext(ctx)
	}
	start := time.Now()
	sw := &reply.Recorder{ResponseWriter: w}
	route := serve(sw, r)
	if sw.Status == 0 {
		sw.Status = http.StatusOK
	}
	if s.opts.Observe != nil {
		s.opts.Observe(route, r.Method, sw.Status, time.Since(start))
	}
	if rec != nil {
		s.opts.Audit(r, sw.Status, rec.Decisions())
	}
}

// route serves a request of the native API and returns its route.
func (s *Server) route(w http.ResponseWriter, r *http.Request) string {
	s.mux.ServeHTTP(w, r)
	return r.Pattern // set by the mux on r itself
}

// methods dispatches one path by method, answering 405 in JSON for the others.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	allowed := make([]string, 0, len(m))
	for k := range m {
		allowed = append(allowed, k)
	}
	slices.Sort(allowed)
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	reply.Error(w, &api.Error{Code: api.CodeMethod, Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
}

// Route is one method and path pattern of the native API with what it requires of its
// caller (auth.Rule). The table is the one list of the API's routes: the mux is built
// from it, every handler runs behind its rule's check, and the permission matrix test
// walks it.
type Route struct {
	Method, Pattern string
	Rule            auth.Rule
	h               http.HandlerFunc
}

var (
	open = auth.Rule{Open: true}
	// on returns the rule of perm on the resource of kind named by the path parameter
	// param ("" when the handler finds the resource itself, as a redrive task's queue).
	on = func(perm access.Permission, kind access.Kind, param string) auth.Rule {
		return auth.Rule{Permission: perm, Kind: kind, Param: param}
	}
	listing = func(perm access.Permission, kind access.Kind) auth.Rule {
		return auth.Rule{Permission: perm, Kind: kind, Filtered: true}
	}
	also = func(r auth.Rule, what string) auth.Rule { r.Also = what; return r }
)

const (
	send, receive, browse, manage, admin = access.Send, access.Receive, access.Browse, access.Manage, access.Admin
	queue, topic                         = access.Queue, access.Topic
)

// Routes returns the native API's route table.
func (s *Server) Routes() []Route {
	settle := s.settle
	return []Route{
		{"GET", "/healthz", open, s.health},
		{"GET", "/v1/queues", listing(browse, queue), s.listQueues},
		{"PUT", "/v1/queues/{name}", also(on(manage, queue, "name"), "send on a dead_letter_queue it names, unless its own default <name>-dlq or none"), s.putQueue},
		{"GET", "/v1/queues/{name}", on(browse, queue, "name"), s.getQueue},
		{"DELETE", "/v1/queues/{name}", on(manage, queue, "name"), s.deleteQueue},
		{"POST", "/v1/queues/{name}/messages", on(send, queue, "name"), s.send},
		{"POST", api.ProducersPath, also(listing(send, queue), "nothing: a producer id is a fresh random name that grants nothing; each send still needs send on its queue"), s.newProducer},
		{"GET", "/v1/queues/{name}/messages", on(browse, queue, "name"), s.peek},
		{"GET", "/v1/queues/{name}/messages/{id}", on(browse, queue, "name"), s.getMessage},
		{"DELETE", "/v1/queues/{name}/messages/{id}", on(manage, queue, "name"), s.deleteMessage},
		{"GET", "/v1/queues/{name}/messages/{id}/explain", on(browse, queue, "name"), s.explain},
		{"GET", "/v1/queues/{name}/explain", on(browse, queue, "name"), s.explain},
		{"GET", "/v1/queues/{name}/consumers", on(browse, queue, "name"), s.consumers},
		{"POST", "/v1/queues/{name}/receive", on(receive, queue, "name"), s.receive},
		{"POST", "/v1/queues/{name}/ack", on(receive, queue, "name"), settle((*service.Service).Ack)},
		{"POST", "/v1/queues/{name}/nack", on(receive, queue, "name"), settle((*service.Service).Nack)},
		{"POST", "/v1/queues/{name}/extend", on(receive, queue, "name"), settle((*service.Service).Extend)},
		{"POST", "/v1/queues/{name}/deadletter", on(receive, queue, "name"), settle((*service.Service).DeadLetter)},
		{"POST", "/v1/queues/{name}/defer", on(receive, queue, "name"), settle((*service.Service).Defer)},
		{"POST", "/v1/queues/{name}/deferred/receive", on(receive, queue, "name"), s.receiveDeferred},
		{"POST", "/v1/queues/{name}/purge", on(manage, queue, "name"), s.purge},
		{"GET", "/v1/queues/{name}/parked", on(browse, queue, "name"), s.parked},
		{"POST", "/v1/queues/{name}/groups/{group}/release", on(manage, queue, "name"), s.releaseGroup},
		{"POST", "/v1/queues/{name}/redrive", also(on(manage, queue, "name"), "send on every queue it moves messages into: to, or each queue its dead letters came from"), s.redrive},
		{"GET", "/v1/redrives", listing(browse, queue), s.listRedrives},
		{"GET", "/v1/redrives/{id}", also(on(browse, queue, ""), "on the task's dead-letter queue"), s.getRedrive},
		{"DELETE", "/v1/redrives/{id}", also(on(manage, queue, ""), "on the task's dead-letter queue"), s.cancelRedrive},
		{"GET", "/v1/stats", listing(browse, queue), s.listQueues},
		{"GET", "/v1/topics", listing(browse, topic), s.listTopics},
		{"PUT", "/v1/topics/{name}", on(manage, topic, "name"), s.putTopic},
		{"GET", "/v1/topics/{name}", on(browse, topic, "name"), s.getTopic},
		{"DELETE", "/v1/topics/{name}", on(manage, topic, "name"), s.deleteTopic},
		{"POST", "/v1/topics/{name}/records", on(send, topic, "name"), s.publish},
		{"GET", "/v1/topics/{name}/partitions/{partition}/records", on(browse, topic, "name"), s.read},
		{"GET", "/v1/topics/{name}/subscriptions", on(browse, topic, "name"), s.listSubscriptions},
		{"PUT", "/v1/topics/{name}/subscriptions/{sub}", also(on(manage, topic, "name"), "send on the queue it delivers to"), s.putSubscription},
		{"GET", "/v1/topics/{name}/subscriptions/{sub}", on(browse, topic, "name"), s.getSubscription},
		{"DELETE", "/v1/topics/{name}/subscriptions/{sub}", on(manage, topic, "name"), s.deleteSubscription},
		{"GET", "/v1/topics/{name}/groups", on(browse, topic, "name"), s.listGroups},
		{"PUT", "/v1/topics/{name}/groups/{group}", on(receive, topic, "name"), s.putGroup},
		{"GET", "/v1/topics/{name}/groups/{group}", on(browse, topic, "name"), s.getGroup},
		{"DELETE", "/v1/topics/{name}/groups/{group}", on(manage, topic, "name"), s.deleteGroup},
		{"POST", "/v1/topics/{name}/groups/{group}/pull", on(receive, topic, "name"), s.pull},
		{"POST", "/v1/topics/{name}/groups/{group}/heartbeat", on(receive, topic, "name"), s.heartbeat},
		{"POST", "/v1/topics/{name}/groups/{group}/commit", on(receive, topic, "name"), s.commit},
		{"POST", "/v1/topics/{name}/groups/{group}/seek", on(receive, topic, "name"), s.seek},
		{"POST", "/v1/topics/{name}/groups/{group}/leave", on(receive, topic, "name"), s.leave},
		{"POST", "/v1/topics/{name}/groups/{group}/deadletter", on(receive, topic, "name"), s.groupDeadLetter},
		{"POST", "/v1/principals", on(admin, access.AnyKind, ""), s.createPrincipal},
		{"GET", "/v1/principals", on(admin, access.AnyKind, ""), s.listPrincipals},
		{"GET", "/v1/principals/{name}", on(admin, access.AnyKind, ""), s.getPrincipal},
		{"DELETE", "/v1/principals/{name}", on(admin, access.AnyKind, ""), s.deletePrincipal},
		{"POST", "/v1/principals/{name}/grant", on(admin, access.AnyKind, ""), s.grantPrincipal},
		{"POST", "/v1/principals/{name}/revoke", on(admin, access.AnyKind, ""), s.revokePrincipal},
		{"POST", "/v1/principals/{name}/rotate", on(admin, access.AnyKind, ""), s.rotatePrincipal},
		{"GET", api.BackupPath, on(admin, access.AnyKind, ""), s.backup},
		{"GET", api.StreamPath, also(open, "each request of the stream is checked as its own route"), s.stream},
	}
}

func (s *Server) routes() {
	byPattern := map[string]methods{}
	var patterns []string
	for _, rt := range s.Routes() {
		if !rt.Rule.Open && rt.Rule.Permission == 0 {
			panic("nativeapi: route " + rt.Method + " " + rt.Pattern + " has no rule") // a bug: every route says what it needs
		}
		if byPattern[rt.Pattern] == nil {
			byPattern[rt.Pattern] = methods{}
			patterns = append(patterns, rt.Pattern)
		}
		h := rt.h
		if rt.Method == http.MethodGet && s.opts.ReadBarrier != nil && !rt.Rule.Open && rt.Pattern != api.BackupPath {
			h = s.barrier(h)
		}
		byPattern[rt.Pattern][rt.Method] = s.checked(rt.Rule, h)
	}
	for _, p := range patterns {
		s.mux.Handle(p, byPattern[p])
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply.Error(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no route for %s %s; see docs/api.md", r.Method, r.URL.Path)})
	})
}

// StaleHeader marks an answer to a read that asked for ?stale=true: served from what
// this node of a cluster has applied, with no read barrier (and, on a follower, without
// going to the leader); the node adds AppliedHeader, the index of the state it read.
const (
	StaleHeader   = "Okiba-Stale"
	AppliedHeader = "Okiba-Applied"
)

// barrier runs h once Options.ReadBarrier lets the read through, or at once for a read
// that asks for a stale answer (?stale=true).
func (s *Server) barrier(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		stale, e := boolParam(r, "stale")
		if e != nil {
			reply.Error(w, e)
			return
		}
		if stale {
			// Old, perhaps, but never uncommitted: a leader's machines hold what it ran
			// before it is committed.
			if s.opts.StaleBarrier != nil {
				if err := s.opts.StaleBarrier(r.Context()); err != nil {
					reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
						Message: fmt.Sprintf("this node cannot serve even a stale read now: %v; retry", err)})
					return
				}
			}
			w.Header().Set(StaleHeader, "true")
			h(w, r)
			return
		}
		if err := s.opts.ReadBarrier(r.Context()); err != nil {
			reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
				Message: fmt.Sprintf("this node cannot confirm that it leads the cluster, so it answers no read: %v; retry", err)})
			return
		}
		h(w, r)
	}
}

// checked runs h once the caller holds the rule's permission on the resource the path
// names; a rule whose resource the path does not name (a listing, a redrive task) is
// the handler's to check.
func (s *Server) checked(rule auth.Rule, h http.HandlerFunc) http.HandlerFunc {
	if rule.Open || rule.Filtered || rule.Kind != access.AnyKind && rule.Param == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := auth.Require(r.Context(), rule.Permission, rule.Resource(r.PathValue(rule.Param))); err != nil {
			reply.Error(w, service.ErrorOf(s.log, err))
			return
		}
		h(w, r)
	}
}

// LongPoll reports whether a request of the native API may wait for messages to arrive
// (a receive): shutdown ends such a request at once, with what it has, rather than wait
// for it. It is the one definition of a long poll, for plain requests (internal/node)
// and stream frames alike.
func LongPoll(method, path string) bool {
	return method == http.MethodPost && strings.HasSuffix(path, "/receive") ||
		method == http.MethodGet && strings.HasPrefix(path, "/v1/topics/") && strings.HasSuffix(path, "/records") ||
		method == http.MethodPost && strings.HasPrefix(path, "/v1/topics/") && strings.HasSuffix(path, "/pull")
}

// MaxHeaderBytes is the most a request's line and headers may take: more is answered 431.
const MaxHeaderBytes = 64 << 10

// HTTPServer returns an *http.Server with okiba's timeouts against slow clients; long
// polls (up to 60s) fit inside the write timeout.
func HTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       120 * time.Second,
		// net/http reads up to MaxHeaderBytes plus 4 KiB of buffer slack: this makes the
		// limit the documented 64 KiB, request line included.
		MaxHeaderBytes: MaxHeaderBytes - 4<<10,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve runs h on ln until ctx is done, then shuts down gracefully (waiting up to grace
// for requests in progress, long polls included).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger, grace time.Duration) error {
	srv := HTTPServer(h, logger)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Grace is over: cut the requests still running rather than let them race the
		// broker's shutdown. Their callers get a broken connection, never a false answer.
		srv.Close()
	}
	<-errc
	return err
}

// ---------------------------------------------------------------------------------------
// Decoding helpers

func invalid(format string, args ...any) *api.Error { return service.Invalid(format, args...) }

// decode reads exactly one JSON value into v, refusing unknown fields and oversized
// bodies. An empty body leaves v untouched when allowEmpty.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) *api.Error {
	data, e := readBody(w, r)
	if e != nil {
		return e
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return invalid("request body is empty; send a JSON object (see docs/api.md)")
	}
	if !utf8.Valid(data) {
		return invalid("request body is not valid UTF-8; send binary message bodies base64-encoded in body_base64")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("malformed JSON: %s", jsonError(err))
	}
	if dec.More() {
		return invalid("malformed JSON: unexpected data after the object")
	}
	return nil
}

func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d: %v", se.Offset, se)
	case errors.As(err, &te) && te.Field == "":
		return "the request body must be a JSON object"
	case errors.As(err, &te) && te.Type == reflect.TypeFor[api.Duration]():
		return fmt.Sprintf("field %q: %s is not a duration; give a string such as \"30s\", \"250ms\" or \"1h30m\", or a number of seconds", te.Field, te.Value)
	case errors.As(err, &te) && te.Type == reflect.TypeFor[api.Retention]():
		return fmt.Sprintf("field %q: %s is neither a duration (\"168h\") nor \"forever\"", te.Field, te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, jsonType(te.Type), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonType names a Go type the way a JSON user thinks of it.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return t.String()
}
