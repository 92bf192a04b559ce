package nativeapi_test

import (
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

func (e *env) explain(path string) api.Explanation {
	e.t.Helper()
	var ex api.Explanation
	e.call("GET", path, nil, 200, &ex)
	if ex.Summary == "" {
		e.t.Fatalf("GET %s: no summary", path)
	}
	return ex
}

// Explain through a real server: a message's place in line, its lease, the handler's
// error a nack carries into its history and into its dead letter, an ack answered
// already_settled when repeated, and the gone message explained as acked.
func TestExplainOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("ex", `{"max_deliveries":2,"backoff_base":"0s"}`)
	ids := e.send("ex", "a", "b")
	path := func(id string) string { return "/v1/queues/ex/messages/" + id + "/explain" }

	if ex := e.explain(path(ids[0])); ex.State != "ready" || ex.Ahead == nil || *ex.Ahead != 0 || !ex.AheadExact || ex.History == nil || !ex.History.Partial {
		t.Fatalf("a: %+v", ex)
	}
	if ex := e.explain(path(ids[1])); ex.State != "ready" || *ex.Ahead != 1 || !strings.Contains(ex.Summary, "behind 1 other") {
		t.Fatalf("b: %+v", ex)
	}
	ms := e.receive("ex", 1, `,"visibility":"30s"`)
	if ex := e.explain(path(ids[0])); ex.State != "leased" || ex.Delivery != 1 || ex.Until == nil {
		t.Fatalf("a leased: %+v", ex)
	}
	// An error over the bound is refused, and the lease is untouched.
	r, _ := e.settle("ex", "nack", receiptsOf(ms), `,"error":"`+strings.Repeat("x", 1025)+`"`)
	expectError(t, r, api.CodeInvalidRequest, "1024")
	if ex := e.explain(path(ids[0])); ex.State != "leased" {
		t.Fatalf("a after a refused nack: %+v", ex)
	}
	if r, out := e.settle("ex", "nack", receiptsOf(ms), `,"delay":"0s","error":"parse error: line 3"`); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("nack: %v", r)
	}
	ex := e.explain(path(ids[0]))
	if ex.State != "ready" || ex.History.Nacks != 1 || ex.History.LastError != "parse error: line 3" || ex.History.Deliveries != 1 || ex.History.LastNackDelay == nil {
		t.Fatalf("a nacked: %+v %+v", ex, ex.History)
	}
	// Its second and last delivery, nacked with another error: dead-lettered, described
	// by that error.
	ms = e.receive("ex", 1, "")
	if len(ms) != 1 || ms[0].ID != ids[0] {
		t.Fatalf("second receive: %+v", ms)
	}
	if r, _ := e.settle("ex", "nack", receiptsOf(ms), `,"error":"still broken"`); r.Status != 200 {
		t.Fatalf("nack: %v", r)
	}
	ex = e.explain(path(ids[0]))
	if ex.State != "dead_lettered" || ex.To != "ex-dlq" || ex.DeadLetter == nil || ex.DeadLetter.Reason != "max_deliveries" || ex.DeadLetter.Description != "still broken" {
		t.Fatalf("a dead-lettered: %+v", ex)
	}
	if ex := e.explain("/v1/queues/ex-dlq/messages/" + ids[0] + "/explain"); ex.State != "ready" || ex.DeadLetter == nil || ex.DeadLetter.Source != "ex" {
		t.Fatalf("a in the DLQ: %+v", ex)
	}
	// b: acked, then acked again: already_settled (409), and explained as gone.
	ms = e.receive("ex", 1, "")
	if r, out := e.settle("ex", "ack", receiptsOf(ms), ""); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("ack: %v", r)
	}
	r, out := e.settle("ex", "ack", receiptsOf(ms), "")
	expectError(t, r, api.CodeAlreadySettled)
	if r.Status != 409 || out.Results[0].Error == nil || out.Results[0].Error.Code != api.CodeAlreadySettled {
		t.Fatalf("second ack: %v", r)
	}
	if ex := e.explain(path(ids[1])); ex.State != "gone" || ex.How != "acked" || ex.At == nil {
		t.Fatalf("b acked: %+v", ex)
	}
	// By dedup id; and requests that are wrong.
	if ex := e.explain("/v1/queues/ex/explain?dedup_id=nope"); ex.State != "unknown" {
		t.Fatalf("dedup id: %+v", ex)
	}
	expectError(t, e.do("GET", "/v1/queues/ex/explain", nil), api.CodeInvalidRequest, "dedup_id")
	expectError(t, e.do("GET", path("xyz"), nil), api.CodeInvalidID)
	expectError(t, e.do("GET", "/v1/queues/nope/messages/"+ids[0]+"/explain", nil), api.CodeQueueNotFound)
}
