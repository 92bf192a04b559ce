package nativeapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/okibatest"
)

// FuzzRequests throws arbitrary bodies at the native API's decoding: the server must never
// answer 5xx, and a rejected request (4xx) must leave every queue, message and task as it
// was. `make test` replays the seed corpus; `make fuzz` explores.
func FuzzRequests(f *testing.F) {
	routes := []struct{ method, path string }{
		{"POST", "/v1/queues/q/messages"},
		{"PUT", "/v1/queues/q"},
		{"PUT", "/v1/queues/fresh"},
		{"POST", "/v1/queues/q/ack"},
		{"POST", "/v1/queues/q/nack"},
		{"POST", "/v1/queues/q/extend"},
		{"POST", "/v1/queues/q/deadletter"},
		{"POST", "/v1/queues/q/redrive"},
		{"POST", "/v1/queues/q/receive"},
	}
	seeds := []string{
		`{"body":"x"}`, `{"messages":[{"body":"a","group":"g","dedup_id":"d","delay":"1s","headers":{"k":"v"}}]}`,
		`{"body_base64":"AAE="}`, `{"visibility_timeout":"30s","max_deliveries":3}`, `{"dead_letter_queue":"none"}`,
		`{"receipts":["AQIBgICA6uy_8cRoAQknkO7ErvXSE6LDLWFyt5k"]}`, `{"receipts":["x"],"delay":"1s"}`,
		`{"receipts":["x"],"visibility":"0s"}`, `{"receipts":["x"],"reason":"r"}`, `{"to":"q-dlq","reason":"r"}`,
		`{"max":3,"visibility":"1ms"}`, `[]`, `null`, `{"body":"x"}{}`, "\xff", `{"retention":1e400}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i%len(routes)), []byte(s))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		t.Parallel() // each input gets a broker of its own (a no-op while fuzzing)
		r := routes[int(route)%len(routes)]
		if strings.Contains(r.path, "receive") && strings.Contains(string(body), "wait") {
			t.Skip("long polls are not what this target is about")
		}
		// A fresh broker per input, so that nothing earlier inputs started (a redrive, a
		// lease) changes the state while this one is checked.
		srv := okibatest.New(t, okibatest.Options{})
		e := &env{t: t, srv: srv, base: srv.URL, hc: &http.Client{Timeout: 90 * time.Second}}
		srv.CreateQueue(t, "q")
		e.send("q", "one", "two", "three")
		before := e.snapshot()
		resp := e.do(r.method, r.path, body)
		if resp.Status >= 500 {
			t.Fatalf("%s %s %q: %s", r.method, r.path, body, resp)
		}
		if resp.Status >= 400 {
			e.unchanged(t, before, r.method+" "+r.path+" "+string(body))
		}
	})
}
