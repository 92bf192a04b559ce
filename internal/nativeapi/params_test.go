package nativeapi_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/errcode"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/queue"
)

// TestRequestParametersAgree: a receive or peek parameter out of range is one error
// whoever asks. The broker refuses it in process with a *queue.ParamError, and the native
// API answers the same words under invalid_request, over HTTP and over a stream.
func TestRequestParametersAgree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	b := e.srv.Broker
	ctx := context.Background()

	t.Run("max 0 in process", func(t *testing.T) {
		// On the wire max 0 means 1 (an omitted max decodes as 0, docs/api.md); in process
		// there is no such default.
		_, err := b.Receive(ctx, "q", broker.ReceiveOptions{Max: 0, Wait: -1, Visibility: -1})
		var pe *queue.ParamError
		if !errors.As(err, &pe) || pe.Field != "max" || !errors.Is(err, queue.ErrInvalidParameter) {
			t.Fatalf("Receive(max 0) = %v (%T), want a *queue.ParamError for max", err, err)
		}
		var ce *queue.ConfigError
		if errors.As(err, &ce) {
			t.Fatalf("Receive(max 0) = %v is a ConfigError: a request parameter is not the queue's configuration", err)
		}
		// The code the native API answers for this very error, as for the same value
		// sent over HTTP below.
		if row := errcode.Of(err); row.Code != api.CodeInvalidRequest {
			t.Fatalf("Receive(max 0) = %v maps to %s, want %s", err, row.Code, api.CodeInvalidRequest)
		}
		expectError(t, e.do("POST", "/v1/queues/q/receive", `{"max":-1}`), api.CodeInvalidRequest, "max")
	})

	s := e.openStream()
	id := uint64(0)
	for _, c := range []struct {
		name string
		opts broker.ReceiveOptions
		body string
	}{
		{"max 1001", broker.ReceiveOptions{Max: 1001, Wait: -1, Visibility: -1}, `{"max":1001}`},
		{"max -1", broker.ReceiveOptions{Max: -1, Wait: -1, Visibility: -1}, `{"max":-1}`},
		{"wait 61s", broker.ReceiveOptions{Max: 1, Wait: 61 * time.Second, Visibility: -1}, `{"wait":"61s"}`},
		{"visibility 13h", broker.ReceiveOptions{Max: 1, Wait: -1, Visibility: 13 * time.Hour}, `{"visibility":"13h"}`},
		{"visibility 1.5ms", broker.ReceiveOptions{Max: 1, Wait: -1, Visibility: 1500 * time.Microsecond}, `{"visibility":"1.5ms"}`},
		{"max before wait", broker.ReceiveOptions{Max: 1001, Wait: 61 * time.Second, Visibility: -1}, `{"max":1001,"wait":"61s"}`},
	} {
		t.Run("receive "+c.name, func(t *testing.T) {
			_, err := b.Receive(ctx, "q", c.opts)
			var pe *queue.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("in process: %v (%T), want a *queue.ParamError", err, err)
			}
			he := expectError(t, e.do("POST", "/v1/queues/q/receive", c.body), api.CodeInvalidRequest)
			id++
			se := frameError(t, s.call(id, "POST", "/v1/queues/q/receive", c.body))
			if row := errcode.Of(err); row.Code != he.Code {
				t.Errorf("in process %v maps to %s; HTTP answers %s", err, row.Code, he.Code)
			}
			if he.Message != err.Error() || se.Code != api.CodeInvalidRequest || se.Message != err.Error() {
				t.Errorf("in process %q; HTTP %s %q; stream %s %q", err, he.Code, he.Message, se.Code, se.Message)
			}
		})
	}
	// A negative duration means the queue's default in process; on the wire it is refused.
	for _, body := range []string{`{"wait":"-1s"}`, `{"visibility":"-1ms"}`} {
		expectError(t, e.do("POST", "/v1/queues/q/receive", body), api.CodeInvalidRequest, "between 0 and")
	}

	for _, limit := range []int{0, -3, 1001} {
		_, err := b.Peek(ctx, "q", 0, limit)
		var pe *queue.ParamError
		if !errors.As(err, &pe) || pe.Field != "limit" {
			t.Fatalf("Peek(limit %d) = %v (%T), want a *queue.ParamError for limit", limit, err, err)
		}
		he := expectError(t, e.do("GET", "/v1/queues/q/messages?limit="+strconv.Itoa(limit), nil), api.CodeInvalidRequest)
		if he.Message != err.Error() {
			t.Errorf("peek limit %d: in process %q, HTTP %q", limit, err, he.Message)
		}
	}
}
