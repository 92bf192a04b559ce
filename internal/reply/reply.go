// Package reply writes answers in the native API's shape over HTTP: a JSON body, and an
// error as {"error":{…}} with the status its code has (api.Status) and, for an error a
// client should retry later, the Retry-After header. The native API (package server),
// the console (package web) and the node's router (internal/node) answer through it, so
// that an answer looks the same whoever gives it.
//
// It knows nothing of the broker: what an error of okiba's domain is on the wire is
// internal/errcode's table, which internal/service applies.
package reply

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
)

// JSON answers v as JSON with status. Headers set on w before stay.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Error answers e: its code's status (500 for a code api.Status does not know), its
// Retry-After, and the body {"error":e}.
func Error(w http.ResponseWriter, e *api.Error) {
	status := api.Status[e.Code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	retryAfter(w, e)
	JSON(w, status, api.ErrorBody{Error: e})
}

// Batch answers v, a batch's per-item results, as JSON with BatchStatus(w, common).
func Batch(w http.ResponseWriter, common *api.Error, v any) {
	JSON(w, BatchStatus(w, common), v)
}

// BatchStatus is the status of a batch answer: 200, or, when every item failed with
// the same error (common), that error's status, with its Retry-After set on w.
func BatchStatus(w http.ResponseWriter, common *api.Error) int {
	if common == nil {
		return http.StatusOK
	}
	retryAfter(w, common)
	return api.Status[common.Code]
}

// retryAfter sets the Retry-After header (whole seconds, at least 1) of a retryable error.
func retryAfter(w http.ResponseWriter, e *api.Error) {
	if e.RetryAfter != nil {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(e.RetryAfter.D().Round(time.Second)/time.Second))))
	}
}

// Recorder wraps a ResponseWriter and remembers the status the handler answered with,
// for metrics (200 once anything is written without one; 101 when the connection is
// hijacked: the request became a stream, and its duration is that connection's life).
// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
type Recorder struct {
	http.ResponseWriter
	Status int
}

func (w *Recorder) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Recorder) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// TakeBody hands b on as WriteOwned does.
func (w *Recorder) TakeBody(b []byte) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	WriteOwned(w.ResponseWriter, b)
}

func (w *Recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *Recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over (http.ResponseController finds it before Unwrap).
func (w *Recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.Status == 0 {
		w.Status = http.StatusSwitchingProtocols
	}
	return conn, brw, err
}

// BodyTaker is a ResponseWriter that can keep a body's bytes instead of copying them:
// a stream's answer, collected whole before it is sent.
type BodyTaker interface {
	TakeBody(b []byte)
}

// WriteOwned writes b, a whole answer body that the caller hands over: it must not
// change it afterwards. A BodyTaker keeps it as it is; any other writer gets a Write. A
// pull's answer of megabytes is thus not copied on its way into a stream's frame.
func WriteOwned(w http.ResponseWriter, b []byte) {
	if t, ok := w.(BodyTaker); ok {
		t.TakeBody(b)
		return
	}
	w.Write(b)
}
