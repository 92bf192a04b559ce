package nativeapi_test

import (
	"strings"
	"testing"

	"github.com/okiba/okiba/okibatest"
)

// A PUT with If-None-Match: * creates a queue unless it exists: 201 when it creates, 200
// when the queue is what the request would create, 409 queue_exists naming the fields
// when it is not (and then changes nothing); another If-None-Match is refused. A plain
// PUT still updates.
func TestCreateOnlyPut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	body := `{"max_deliveries":3,"tags":{"team":"a"}}`
	if r := e.do("PUT", "/v1/queues/co", body, "If-None-Match", "*"); r.Status != 201 {
		t.Fatalf("create: %v", r)
	}
	if r := e.do("PUT", "/v1/queues/co", body, "If-None-Match", "*"); r.Status != 200 {
		t.Fatalf("the same again: %v", r)
	}
	r := e.do("PUT", "/v1/queues/co", `{"max_deliveries":4,"visibility_timeout":"45s"}`, "If-None-Match", "*")
	if r.Status != 409 || !strings.Contains(string(r.Body), `"queue_exists"`) ||
		!strings.Contains(string(r.Body), "max_deliveries, tags, visibility_timeout") {
		t.Fatalf("another configuration: %v", r)
	}
	if r := e.do("PUT", "/v1/queues/co", `{"visibility_timeout":"13h"}`, "If-None-Match", "*"); r.Status != 400 || !strings.Contains(string(r.Body), "invalid_config") {
		t.Fatalf("a bad value: %v", r)
	}
	if r := e.do("PUT", "/v1/queues/co", body, "If-None-Match", `"abc"`); r.Status != 400 {
		t.Fatalf("If-None-Match other than *: %v", r)
	}
	q := e.do("GET", "/v1/queues/co", nil)
	if !strings.Contains(string(q.Body), `"max_deliveries":3`) {
		t.Fatalf("a refused create changed the queue: %s", q.Body)
	}
	if r := e.do("PUT", "/v1/queues/co", `{"max_deliveries":4}`); r.Status != 200 || !strings.Contains(string(r.Body), `"max_deliveries":4`) {
		t.Fatalf("a plain PUT updates: %v", r)
	}
}
