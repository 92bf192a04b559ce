package nativeapi_test

import (
	"fmt"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// TestDeferAndFetchByID: through a real server, defer ends a lease and sets the message
// aside (peek ?state=deferred, stats deferred), a fetch by id leases it again with a
// result per id (not_deferred for the others, 409 when every id fails), and malformed
// requests are refused whole, changing nothing.
func TestDeferAndFetchByID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("df", `{}`)
	ids := e.send("df", "a", "b")
	ms := e.receive("df", 2, "")
	if len(ms) != 2 {
		t.Fatalf("receive: %+v", ms)
	}
	r, out := e.settle("df", "defer", []string{ms[0].Receipt, ms[0].Receipt}, "")
	if r.Status != 200 || !out.Results[0].OK || out.Results[1].Error == nil || out.Results[1].Error.Code != api.CodeReceiptStale {
		t.Fatalf("defer: %v", r)
	}
	expectError(t, e.do("POST", "/v1/queues/df/defer", receiptsBody([]string{ms[1].Receipt}, `,"delay":"1s"`)), api.CodeInvalidRequest, "receipts")
	if p := e.peek("df", "?state=deferred"); len(p.Messages) != 1 || p.Messages[0].ID != ids[0] || p.Messages[0].State != "deferred" {
		t.Fatalf("peek ?state=deferred: %+v", p)
	}
	if st := e.queue("df").Stats; st.Deferred != 1 || st.Deferrals != 1 || st.InFlight != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if got := e.receive("df", 10, ""); len(got) != 0 {
		t.Fatalf("a receive returned %+v", got)
	}

	before := e.snapshot()
	expectError(t, e.do("POST", "/v1/queues/df/deferred/receive", `{"ids":[]}`), api.CodeInvalidRequest, "ids")
	expectError(t, e.do("POST", "/v1/queues/df/deferred/receive", `{"ids":["xyz"]}`), api.CodeInvalidID, "ids[0]")
	expectError(t, e.do("POST", "/v1/queues/df/deferred/receive", fmt.Sprintf(`{"ids":[%q],"visibility":"13h"}`, ids[0])), api.CodeInvalidRequest, "visibility")
	expectError(t, e.do("POST", "/v1/queues/nope/deferred/receive", fmt.Sprintf(`{"ids":[%q]}`, ids[0])), api.CodeQueueNotFound)
	// Every id failing alike: 409 with the common error.
	expectError(t, e.do("POST", "/v1/queues/df/deferred/receive", fmt.Sprintf(`{"ids":[%q]}`, ids[1])), api.CodeNotDeferred, ids[1])
	e.unchanged(t, before, "refused fetches")

	var res api.DeferredReceiveResponse
	e.call("POST", "/v1/queues/df/deferred/receive", fmt.Sprintf(`{"ids":[%q,%q],"visibility":"30s"}`, ids[1], ids[0]), 200, &res)
	if len(res.Results) != 2 || res.Results[0].Error == nil || res.Results[0].Error.Code != api.CodeNotDeferred || res.Results[1].Message == nil {
		t.Fatalf("fetch: %+v", res)
	}
	m := res.Results[1].Message
	if m.ID != ids[0] || bodyOf(*m) != "a" || m.Deliveries != 2 || m.Receipt == "" || m.VisibleAt == nil {
		t.Fatalf("fetched message: %+v", m)
	}
	// A nack returns it to deferred, whatever its delay.
	if r, _ := e.settle("df", "nack", []string{m.Receipt}, `,"delay":"0s"`); r.Status != 200 {
		t.Fatalf("nack: %v", r)
	}
	if p := e.peek("df", "?state=deferred"); len(p.Messages) != 1 || p.Messages[0].Deliveries != 2 {
		t.Fatalf("after nack: %+v", p)
	}
	e.call("POST", "/v1/queues/df/deferred/receive", fmt.Sprintf(`{"ids":[%q]}`, ids[0]), 200, &res)
	if r, _ := e.settle("df", "ack", []string{res.Results[0].Message.Receipt}, ""); r.Status != 200 {
		t.Fatalf("ack: %v", r)
	}
	if st := e.queue("df").Stats; st.Deferred != 0 || st.Acked != 1 || st.Delivered != 4 {
		t.Fatalf("stats after ack: %+v", st)
	}
}
