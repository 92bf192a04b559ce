package nativeapi_test

import (
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

func TestSubscriptionsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.call("PUT", "/v1/topics/orders", `{"partitions":2}`, 201, nil)
	e.putQueue("points", `{"ordered_groups":false}`)
	e.putQueue("history", `{}`)
	var sub api.Subscription
	e.call("PUT", "/v1/topics/orders/subscriptions/points", `{"queue":"points","filter":{"type":["OrderPaid"]}}`, 201, &sub)
	if sub.Queue != "points" || string(sub.Filter) != `{"type":["OrderPaid"]}` || sub.FilterScope != "attributes" {
		t.Fatalf("created %+v", sub)
	}
	e.call("POST", "/v1/topics/orders/records", `{"records":[
		{"key":"o-1","body":"placed","headers":{"type":"OrderPlaced"}},
		{"key":"o-1","body":"paid","headers":{"type":"OrderPaid"}}]}`, 200, nil)
	ms := e.receive("points", 10, "")
	if len(ms) != 1 || *ms[0].Body != "paid" || ms[0].Headers["okiba-topic"] != "orders" || ms[0].Headers["type"] != "OrderPaid" {
		t.Fatalf("points received %+v", ms)
	}
	// A backfill from the first record, by body.
	e.call("PUT", "/v1/topics/orders/subscriptions/history", `{"queue":"history","start":"first"}`, 201, nil)
	testkit.Eventually(t, waitLong, func() bool {
		e.call("GET", "/v1/topics/orders/subscriptions/history", nil, 200, &sub)
		return sub.Lag == 0 && sub.Delivered == 2
	}, "history to catch up")
	if got := e.receive("history", 10, ""); len(got) != 2 || got[0].Group != "o-1" {
		t.Fatalf("history received %+v", got)
	}
	var list api.SubscriptionList
	e.call("GET", "/v1/topics/orders/subscriptions", nil, 200, &list)
	if len(list.Subscriptions) != 2 {
		t.Fatalf("list: %+v", list)
	}
	expectError(t, e.do("PUT", "/v1/topics/orders/subscriptions/points", `{"queue":"history"}`), api.CodeInvalidConfig, "fixed at creation")
	expectError(t, e.do("PUT", "/v1/topics/orders/subscriptions/x", `{"queue":"nope"}`), api.CodeQueueNotFound, "nope")
	expectError(t, e.do("PUT", "/v1/topics/orders/subscriptions/x", `{}`), api.CodeInvalidRequest, "queue")
	expectError(t, e.do("PUT", "/v1/topics/orders/subscriptions/x", `{"queue":"points","start":"then"}`), api.CodeInvalidRequest, "start")
	expectError(t, e.do("PUT", "/v1/topics/orders/subscriptions/x", `{"queue":"points","filter":{"a":"b"}}`), api.CodeInvalidFilter, "filter")
	e.call("GET", "/v1/topics/orders/subscriptions", nil, 200, &list)
	if len(list.Subscriptions) != 2 {
		t.Fatalf("rejected requests changed the subscriptions: %+v", list)
	}
	expectError(t, e.do("DELETE", "/v1/queues/points", nil), api.CodeQueueInUse, "orders/points")
	e.call("DELETE", "/v1/topics/orders/subscriptions/points", nil, 204, nil)
	e.call("DELETE", "/v1/queues/points", nil, 204, nil)
	e.call("DELETE", "/v1/topics/orders?force=true", nil, 204, nil)
	e.call("GET", "/v1/queues/history", nil, 200, nil) // the queue outlives its topic
}
