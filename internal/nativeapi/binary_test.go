package nativeapi_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// The binary encoding is the same API: what it sends, JSON receives, and the other way
// round; it is checked like JSON, and a rejected batch changes nothing.

func (e *env) binary(path string, body []byte) (int, http.Header, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.base+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", api.ContentTypeBinary)
	} else {
		req.Body = io.NopCloser(bytes.NewReader([]byte(`{"max":10}`)))
	}
	req.Header.Set("Accept", api.ContentTypeBinary)
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func TestBinaryAndJSONAreOneAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	batch := []api.BinaryMessage{
		{Body: []byte{0, 1, 0xff}, Group: "g", DedupID: "d1", Delay: -1, Headers: []api.Header{{Name: "k", Value: "v"}}},
		{Body: []byte("text"), Delay: -1},
		{Body: []byte("again"), DedupID: "d1", Delay: -1},
	}
	status, hdr, data := e.binary("/v1/queues/q/messages", api.AppendSendRequest(nil, batch))
	if status != 200 || hdr.Get("Content-Type") != api.ContentTypeBinary {
		t.Fatalf("binary send: %d %s %q", status, hdr.Get("Content-Type"), data)
	}
	rs, err := api.DecodeSendAnswer(data)
	if err != nil || len(rs) != 3 || rs[0].Err != nil || !rs[2].Duplicate || rs[2].ID != rs[0].ID {
		t.Fatalf("binary send results: %+v %v", rs, err)
	}
	// JSON sees what binary sent.
	ms := e.receive("q", 10, "")
	if len(ms) != 2 || ms[0].BodyBase64 == nil || ms[0].Group != "g" || ms[0].Headers["k"] != "v" || *ms[1].Body != "text" {
		t.Fatalf("JSON receive of binary sends: %+v", ms)
	}
	e.settle("q", "ack", receiptsOf(ms), "")
	// Binary receives what JSON sent.
	e.send("q", "from json")
	status, _, data = e.binary("/v1/queues/q/receive", nil)
	got, err := api.DecodeReceiveAnswer(data)
	if status != 200 || err != nil || len(got) != 1 || string(got[0].Body) != "from json" || got[0].Deliveries != 1 || got[0].Receipt == "" {
		t.Fatalf("binary receive: %d %+v %v", status, got, err)
	}
}

func TestBinaryRejectsLikeJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{"max_message_size":10,"max_messages":2}`)
	e.send("q", "1")
	before := e.snapshot()
	for name, body := range map[string][]byte{
		"malformed":   []byte("OKB1\x01\x05garbage"),
		"empty batch": api.AppendSendRequest(nil, nil),
		"too many":    api.AppendSendRequest(nil, make([]api.BinaryMessage, api.MaxBatch+1)),
		"bad delay":   api.AppendSendRequest(nil, []api.BinaryMessage{{Body: []byte("x"), Delay: 8 * 24 * 3600 * 1000}}),
	} {
		status, hdr, data := e.binary("/v1/queues/q/messages", body)
		if status < 400 || status >= 500 || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s: HTTP %d %s %q, want a 4xx JSON error", name, status, hdr.Get("Content-Type"), data)
		}
		e.unchanged(t, before, name)
	}
	// Entry-level errors come back per item, in binary, as in JSON.
	status, _, data := e.binary("/v1/queues/q/messages", api.AppendSendRequest(nil, []api.BinaryMessage{
		{Body: []byte("ok"), Delay: -1}, {Body: []byte("far too large"), Delay: -1},
	}))
	rs, err := api.DecodeSendAnswer(data)
	if status != 200 || err != nil || rs[0].Err != nil || rs[1].Err == nil || rs[1].Err.Code != api.CodeMessageTooLarge {
		t.Fatalf("mixed batch: %d %+v %v", status, rs, err)
	}
	// Every entry refused alike: that error's status, Retry-After, still a binary answer.
	status, hdr, data := e.binary("/v1/queues/q/messages", api.AppendSendRequest(nil, []api.BinaryMessage{{Body: []byte("x"), Delay: -1}}))
	rs, err = api.DecodeSendAnswer(data)
	if status != 429 || hdr.Get("Retry-After") == "" || err != nil || rs[0].Err.Code != api.CodeQueueFull {
		t.Fatalf("full queue: %d %v %+v %v", status, hdr, rs, err)
	}
}
