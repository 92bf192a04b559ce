package nativeapi

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	"github.com/okiba/okiba/api"
)

// TestFrameBodyIsTakenAsItIs checks readBody on a stream frame's request: an unread
// body is the frame's own bytes, with no copy, read to its end; and one over the API's
// limit is still refused as too large.
func TestFrameBodyIsTakenAsItIs(t *testing.T) {
	sc := &streamConn{host: "okiba", remote: "127.0.0.1:1"}
	frame := func(body []byte) api.Frame {
		return api.Frame{Kind: api.FrameRequest, ID: 1, Method: "POST", Target: "/v1/queues/q/messages", Body: body}
	}
	body := []byte("the frame's body")
	r, err := sc.request(context.Background(), frame(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.ContentLength != int64(len(body)) {
		t.Errorf("ContentLength %d, want %d", r.ContentLength, len(body))
	}
	got, e := readBody(httptest.NewRecorder(), r)
	if e != nil {
		t.Fatal(e)
	}
	if !bytes.Equal(got, body) || &got[0] != &body[0] {
		t.Errorf("readBody returned %q (a copy: %v), want the frame's own bytes", got, &got[0] != &body[0])
	}
	if n, _ := r.Body.Read(make([]byte, 1)); n != 0 {
		t.Errorf("the body reads on after readBody took it")
	}

	r, err = sc.request(context.Background(), frame(make([]byte, api.MaxRequestBody+1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, e := readBody(httptest.NewRecorder(), r); e == nil || e.Code != api.CodeRequestTooLarge {
		t.Errorf("a body over the limit: %v, want %s", e, api.CodeRequestTooLarge)
	}
}
