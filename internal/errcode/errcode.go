// Package errcode says what each error of okiba's domain is on the wire: the native
// API's code (one of api.Code*, whose HTTP status api.Status gives), how long a client
// should wait before retrying, and the SQS error, by its code (package sqs knows each
// code's status and whether the fault is the sender's) with the message SQS clients
// see. The native front (package server), the SQS front (package sqs) and the console
// look errors up here and have no mapping of their own.
//
// The mapping is a table of data (table.go), so that a test can hold it against every
// exported error of the domain packages: a new sentinel or typed error without a row
// fails the build's tests, not a client at run time.
package errcode

import (
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/okiba/okiba/api"
)

// Row is what one kind of error is on the wire.
type Row struct {
	// match says which errors are this row's: any of them matching is enough.
	match []matcher
	// Code is the native API's code; its HTTP status is api.Status[Code]. A row whose
	// code is api.CodeInternal is an error no request should meet: the fronts log it
	// and answer InternalMessage instead of its text.
	Code string
	// RetryAfter, when set, is how long a client should wait before trying again (the
	// native API's Retry-After header and retry_after field).
	RetryAfter time.Duration
	// SQS is the code of the SQS error ("QueueDoesNotExist").
	SQS string
	// SQSMessage is the message of the SQS error: the error's own text when empty, else
	// this text with {queue} replaced by the queue's name, {receipt} by the request's
	// receipt handle and {error} by the error's text.
	SQSMessage string
	// SQSActions, when set, answers the row's errors otherwise in the SQS actions it
	// names: SQS words one lost lease differently for a delete, a visibility change and
	// a batch of visibility changes, and clients branch on each wording's code.
	SQSActions map[string]SQSAnswer
}

// SQSAnswer is an SQS error code and message (see Row.SQS, Row.SQSMessage).
type SQSAnswer struct{ Code, Message string }

// ForSQSAction returns the row as SQS action answers its errors.
func (r Row) ForSQSAction(action string) Row {
	if a, ok := r.SQSActions[action]; ok {
		r.SQS, r.SQSMessage = a.Code, a.Message
	}
	return r
}

// InternalMessage is what a client is told of an internal error; the details go to the
// server's log.
const InternalMessage = "internal error; the server log has the details"

// internal is the row of an error that no row matches.
var internal = Row{Code: api.CodeInternal, SQS: "InternalError"}

// Of returns the row of err: the first in the table that matches it, or the internal row.
// Typed errors come before the sentinels they wrap, so that a typed error with a mapping
// of its own is not taken for its sentinel.
func Of(err error) Row {
	for i := range table {
		if table[i].Matches(err) {
			return table[i]
		}
	}
	return internal
}

// Rows returns a copy of the table, in the order Of consults it.
func Rows() []Row { return append([]Row(nil), table...) }

// Matches reports whether err is one of the row's errors (errors.Is on a sentinel,
// errors.As on a typed error).
func (r *Row) Matches(err error) bool {
	for _, m := range r.match {
		if m.matches(err) {
			return true
		}
	}
	return false
}

// Internal reports whether the row is that of an internal error.
func (r *Row) Internal() bool { return r.Code == api.CodeInternal }

// SQSText is the message of err as an SQS error about queue q.
func (r *Row) SQSText(err error, q string) string { return r.SQSTextOf(err, q, "") }

// SQSTextOf is the message of err as an SQS error about queue q and, for a request
// that gave one, receipt handle receipt.
func (r *Row) SQSTextOf(err error, q, receipt string) string {
	if r.SQSMessage == "" {
		return err.Error()
	}
	return strings.NewReplacer("{queue}", q, "{receipt}", receipt, "{error}", err.Error()).Replace(r.SQSMessage)
}

// matcher recognises one error: a sentinel (errors.Is) or a typed error (errors.As),
// optionally with a condition on its fields.
type matcher struct {
	sentinel error
	typ      reflect.Type // the typed error's type, a pointer
	probe    func(error) bool
	when     bool // probe tests a condition beyond the type
}

func (m matcher) matches(err error) bool {
	if m.sentinel != nil {
		return errors.Is(err, m.sentinel)
	}
	return m.probe(err)
}

// is matches the errors that wrap sentinel.
func is(sentinel error) matcher { return matcher{sentinel: sentinel} }

// as matches the errors that wrap an E for which every condition holds.
func as[E error](when ...func(E) bool) matcher {
	return matcher{typ: reflect.TypeFor[E](), when: len(when) > 0, probe: func(err error) bool {
		var e E
		if !errors.As(err, &e) {
			return false
		}
		for _, ok := range when {
			if !ok(e) {
				return false
			}
		}
		return true
	}}
}

// errs lists the forms of one error a row matches, such as a typed error and the
// sentinel it wraps.
func errs(ms ...matcher) []matcher { return ms }
