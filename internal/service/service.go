// Package service is the native API's operations over a broker, in the API's wire types
// (package api): what GET /v1/queues lists, what a send answers, a peek's page, a
// redrive task. The native HTTP API (package server) decodes a request, calls the
// service and encodes its answer; the console (package web) reads queues and dead
// letters through the same calls. Both therefore show one conversion of the broker's
// results to the wire, and map errors through one table (internal/errcode): an error a
// method returns is already the *api.Error a client is to see.
//
// What a request's fields must hold (ranges, ids, which fields an operation takes) is
// checked here, after the transport has decoded it and before the broker is called;
// how a request is carried (JSON or okiba's binary encoding, a plain request or a
// stream frame) is the transport's business.
//
// Permissions: each interface checks the permission its route table names before it
// calls here (internal/auth). What no route can see — the resources a request's body
// names (a dead-letter queue, a redrive's destinations, a subscription's queue), the
// queue of a redrive task — is checked here, with auth.Require on the caller in ctx,
// before anything changes, so that every caller of the service gets the same checks;
// lists are narrowed to what the caller may browse. A context
// without a principal is a call from inside the process, which may do everything.
package service

import (
	"fmt"
	"log/slog"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/errcode"
)

// Options configure a Service. The zero value means the defaults.
type Options struct {
	// Logger receives internal errors, whose details the answers leave out. Defaults to
	// discarding them.
	Logger *slog.Logger
	// Keys are the node's principals' secrets: the principals' API seals the secrets it
	// makes with them and tells the declared principals from the log's. Without Keys the
	// API lists only the log's principals and cannot create or rotate any.
	Keys *auth.Keyring
}

// Service offers the native API's operations on one broker. It holds no state of its
// own: it is safe for concurrent use, and several may share a broker.
type Service struct {
	b    *broker.Broker
	log  *slog.Logger
	keys *auth.Keyring
}

// New returns the service of b.
func New(b *broker.Broker, opts Options) *Service {
	s := &Service{b: b, log: opts.Logger, keys: opts.Keys}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

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

func (s *Service) errorOf(err error) *api.Error { return ErrorOf(s.log, err) }

// Invalid is an invalid_request error with a formatted message.
func Invalid(format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

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

// Health is the broker's health, and whether it serves. A degraded broker serves (body
// reads failed lately, broker.Health): it is answered as serving, so that a load
// balancer keeps routing to it, while its status tells operators.
func (s *Service) Health() (api.Health, bool) {
	h := s.b.Health()
	switch {
	case h.Err != nil:
		return api.Health{Status: "failed", Error: h.Err.Error()}, false
	case h.Degraded != "":
		return api.Health{Status: "degraded", Reason: h.Degraded}, true
	}
	return api.Health{Status: "ok"}, true
}
