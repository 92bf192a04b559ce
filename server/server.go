// Package server is okiba's HTTP transport: the native JSON API under /v1 and /healthz.
// It translates requests into broker calls and broker errors into stable codes
// (package api); it holds no queue semantics of its own.
package server

import (
	"bufio"
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
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/errcode"
)

// Options configure a Server. The zero value means the defaults.
type Options struct {
	// Logger receives request errors. Defaults to discarding.
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
	b    *broker.Broker
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	streams streams
	busy    atomic.Int64 // stream requests in flight, all streams
}

// New returns a server for b.
func New(b *broker.Broker, opts Options) *Server {
	s := &Server{b: b, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
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
	sw := &statusWriter{ResponseWriter: w}
	route := serve(sw, r)
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	s.opts.Observe(route, r.Method, sw.status, time.Since(start))
}

// route serves a request of the native API and returns its route.
func (s *Server) route(w http.ResponseWriter, r *http.Request) string {
	s.mux.ServeHTTP(w, r)
	return r.Pattern // set by the mux on r itself
}

// statusWriter remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection (flushes, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over (http.ResponseController finds it before Unwrap)
// and records 101: the request became another protocol (a stream), and its duration is
// that connection's life.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, brw, err
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
	writeError(w, &api.Error{Code: api.CodeMethod, Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
}

func (s *Server) routes() {
	s.mux.Handle("/healthz", methods{"GET": s.health})
	s.mux.Handle("/v1/queues", methods{"GET": s.listQueues})
	s.mux.Handle("/v1/queues/{name}", methods{"PUT": s.putQueue, "GET": s.getQueue, "DELETE": s.deleteQueue})
	s.mux.Handle("/v1/queues/{name}/messages", methods{"POST": s.send, "GET": s.peek})
	s.mux.Handle("/v1/queues/{name}/messages/{id}", methods{"GET": s.getMessage, "DELETE": s.deleteMessage})
	s.mux.Handle("/v1/queues/{name}/receive", methods{"POST": s.receive})
	s.mux.Handle("/v1/queues/{name}/ack", methods{"POST": s.ack})
	s.mux.Handle("/v1/queues/{name}/nack", methods{"POST": s.nack})
	s.mux.Handle("/v1/queues/{name}/extend", methods{"POST": s.extend})
	s.mux.Handle("/v1/queues/{name}/deadletter", methods{"POST": s.deadLetter})
	s.mux.Handle("/v1/queues/{name}/purge", methods{"POST": s.purge})
	s.mux.Handle("/v1/queues/{name}/redrive", methods{"POST": s.redrive})
	s.mux.Handle("/v1/redrives", methods{"GET": s.listRedrives})
	s.mux.Handle("/v1/redrives/{id}", methods{"GET": s.getRedrive, "DELETE": s.cancelRedrive})
	s.mux.Handle("/v1/stats", methods{"GET": s.listQueues})
	s.mux.Handle(api.StreamPath, methods{"GET": s.stream})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no route for %s %s; see docs/api.md", r.Method, r.URL.Path)})
	})
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
// Encoding helpers

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *api.Error) {
	status := api.Status[e.Code]
	if status == 0 {
		status = 500
	}
	setRetryAfter(w, e)
	writeJSON(w, status, api.ErrorBody{Error: e})
}

// setRetryAfter sets the Retry-After header (whole seconds, at least 1) of a retryable error.
func setRetryAfter(w http.ResponseWriter, e *api.Error) {
	if e.RetryAfter != nil {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(e.RetryAfter.D().Round(time.Second)/time.Second))))
	}
}

func invalid(format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

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

// errorOf maps a broker or queue error to its wire error (internal/errcode has the
// table). An internal error is logged and its details kept from the client.
func (s *Server) errorOf(err error) *api.Error { return ErrorOf(s.log, err) }

// ErrorOf maps an error to the native API's wire error (internal/errcode's table); an
// internal one is logged and answered without its details.
func ErrorOf(log *slog.Logger, err error) *api.Error {
	row := errcode.Of(err)
	if row.Internal() {
		log.Error("internal error", "error", err)
		return &api.Error{Code: api.CodeInternal, Message: errcode.InternalMessage}
	}
	e := &api.Error{Code: row.Code, Message: err.Error()}
	if row.RetryAfter > 0 {
		e.RetryAfter = api.Ptr(row.RetryAfter)
	}
	return e
}

// WriteError answers e in the native API's shape: its status, Retry-After, the JSON body.
func WriteError(w http.ResponseWriter, e *api.Error) { writeError(w, e) }

func (s *Server) fail(w http.ResponseWriter, err error) { writeError(w, s.errorOf(err)) }

// commonError returns the error shared by every item, if every item failed with the
// same code: the response then carries that error's status.
func commonError(errs []*api.Error) *api.Error {
	if len(errs) == 0 {
		return nil
	}
	first := errs[0]
	for _, e := range errs {
		if e == nil || e.Code != first.Code {
			return nil
		}
	}
	return first
}

func writeBatch(w http.ResponseWriter, common *api.Error, v any) {
	status := http.StatusOK
	if common != nil {
		status = api.Status[common.Code]
		setRetryAfter(w, common)
	}
	writeJSON(w, status, v)
}
