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

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
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
	// StreamIdleTimeout closes a stream (docs/api.md) on which no frame has arrived for
	// this long and no request is in flight, as HTTP servers close idle keep-alive
	// connections. Default 5 minutes; the Go client closes its own idle streams sooner.
	StreamIdleTimeout time.Duration
}

// Server serves the native API over a broker.
//
// It serves the native API only: who may call it is decided before (the node's router
// authenticates every request and refuses browsers from elsewhere, internal/node).
type Server struct {
	svc  *service.Service
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	streams streams
	busy    atomic.Int64 // stream requests in flight, all streams
}

// New returns a server of the native API's operations on b (internal/service), whose
// internal errors go to opts.Logger.
func New(b *broker.Broker, opts Options) *Server {
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.svc = service.New(b, service.Options{Logger: s.log})
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) { s.observed(w, r, s.route) }

// observed serves r with serve, which returns the route, and tells Observe about it.
func (s *Server) observed(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request) string) {
	if s.opts.Observe == nil {
		serve(w, r)
		return
	}
	start := time.Now()
	sw := &reply.Recorder{ResponseWriter: w}
	route := serve(sw, r)
	if sw.Status == 0 {
		sw.Status = http.StatusOK
	}
	s.opts.Observe(route, r.Method, sw.Status, time.Since(start))
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

func (s *Server) routes() {
	s.mux.Handle("/healthz", methods{"GET": s.health})
	s.mux.Handle("/v1/queues", methods{"GET": s.listQueues})
	s.mux.Handle("/v1/queues/{name}", methods{"PUT": s.putQueue, "GET": s.getQueue, "DELETE": s.deleteQueue})
	s.mux.Handle("/v1/queues/{name}/messages", methods{"POST": s.send, "GET": s.peek})
	s.mux.Handle("/v1/queues/{name}/messages/{id}", methods{"GET": s.getMessage, "DELETE": s.deleteMessage})
	s.mux.Handle("/v1/queues/{name}/receive", methods{"POST": s.receive})
	s.mux.Handle("/v1/queues/{name}/ack", methods{"POST": s.settle((*service.Service).Ack)})
	s.mux.Handle("/v1/queues/{name}/nack", methods{"POST": s.settle((*service.Service).Nack)})
	s.mux.Handle("/v1/queues/{name}/extend", methods{"POST": s.settle((*service.Service).Extend)})
	s.mux.Handle("/v1/queues/{name}/deadletter", methods{"POST": s.settle((*service.Service).DeadLetter)})
	s.mux.Handle("/v1/queues/{name}/purge", methods{"POST": s.purge})
	s.mux.Handle("/v1/queues/{name}/redrive", methods{"POST": s.redrive})
	s.mux.Handle("/v1/redrives", methods{"GET": s.listRedrives})
	s.mux.Handle("/v1/redrives/{id}", methods{"GET": s.getRedrive, "DELETE": s.cancelRedrive})
	s.mux.Handle("/v1/stats", methods{"GET": s.listQueues})
	s.mux.Handle("/v1/topics", methods{"GET": s.listTopics})
	s.mux.Handle("/v1/topics/{name}", methods{"PUT": s.putTopic, "GET": s.getTopic, "DELETE": s.deleteTopic})
	s.mux.Handle("/v1/topics/{name}/records", methods{"POST": s.publish})
	s.mux.Handle("/v1/topics/{name}/partitions/{partition}/records", methods{"GET": s.read})
	s.mux.Handle("/v1/topics/{name}/subscriptions", methods{"GET": s.listSubscriptions})
	s.mux.Handle("/v1/topics/{name}/subscriptions/{sub}", methods{"PUT": s.putSubscription, "GET": s.getSubscription, "DELETE": s.deleteSubscription})
	s.mux.Handle("/v1/topics/{name}/groups", methods{"GET": s.listGroups})
	s.mux.Handle("/v1/topics/{name}/groups/{group}", methods{"PUT": s.putGroup, "GET": s.getGroup, "DELETE": s.deleteGroup})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/pull", methods{"POST": s.pull})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/heartbeat", methods{"POST": s.heartbeat})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/commit", methods{"POST": s.commit})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/seek", methods{"POST": s.seek})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/leave", methods{"POST": s.leave})
	s.mux.Handle("/v1/topics/{name}/groups/{group}/deadletter", methods{"POST": s.groupDeadLetter})
	s.mux.Handle(api.StreamPath, methods{"GET": s.stream})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply.Error(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no route for %s %s; see docs/api.md", r.Method, r.URL.Path)})
	})
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
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
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
