package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/buildinfo"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

var hexID = regexp.MustCompile(`^[0-9a-f]{16}$`)

func dur(s string) *api.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return api.Ptr(d)
}

func TestQueueCreateUpdateAndIdempotentPut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	clk := e.srv.Clock

	var q api.Queue
	e.call("PUT", "/v1/queues/orders", `{"visibility_timeout":"45s","tags":{"team":"cafe"}}`, 201, &q)
	want := api.QueueConfig{
		VisibilityTimeout: dur("45s"), MaxDeliveries: ptr(10), DeadLetterQueue: ptr("orders-dlq"),
		BackoffBase: dur("1s"), BackoffMax: dur("5m"), Delay: dur("0s"), Retention: dur("336h"),
		DedupWindow: dur("5m"), DedupScope: ptr("queue"), ContentDedup: ptr(false),
		MaxMessages: ptr[int64](0), MaxBytes: ptr[int64](0), MaxMessageSize: ptr[int64](1 << 20),
		ReceiveWait: dur("0s"), OrderedGroups: ptr(true), OnDeadLetter: ptr("move_on"), Tags: map[string]string{"team": "cafe"},
	}
	if !jsonEqual(q.Config, want) {
		t.Fatalf("created config\n got %s\nwant %s", js(q.Config), js(want))
	}
	if q.Name != "orders" || !q.CreatedAt.Equal(q.UpdatedAt) || !q.CreatedAt.Equal(clk.Now().Truncate(time.Millisecond)) {
		t.Fatalf("created queue %+v at %v", q, clk.Now())
	}
	if q.CreatedAt.Location() != time.UTC || !strings.Contains(string(e.do("GET", "/v1/queues/orders", nil).Body), `Z"`) {
		t.Errorf("times are not UTC: %v", q.CreatedAt)
	}

	// The dead-letter queue was created with dead-letter defaults.
	dlq := e.queue("orders-dlq")
	if *dlq.Config.DeadLetterQueue != "none" || *dlq.Config.MaxDeliveries != 0 || dlq.Config.Retention.D() != 0 ||
		!slices.Equal(dlq.DeadLetterSources, []string{"orders"}) {
		t.Fatalf("auto-created DLQ: %s sources %v", js(dlq.Config), dlq.DeadLetterSources)
	}
	if fifo := e.putQueue("jobs.fifo", `{}`); *fifo.Config.DeadLetterQueue != "jobs-dlq.fifo" {
		t.Fatalf("FIFO DLQ name %q", *fifo.Config.DeadLetterQueue)
	}
	e.queue("jobs-dlq.fifo")

	// Update: only the given fields change; numbers are seconds.
	clk.Advance(time.Second)
	var u api.Queue
	e.call("PUT", "/v1/queues/orders", `{"max_deliveries":3,"backoff_base":0.25}`, 200, &u)
	want.MaxDeliveries, want.BackoffBase = ptr(3), dur("250ms")
	if !jsonEqual(u.Config, want) {
		t.Fatalf("updated config\n got %s\nwant %s", js(u.Config), js(want))
	}
	if !u.CreatedAt.Equal(q.CreatedAt) || !u.UpdatedAt.Equal(q.CreatedAt.Add(time.Second)) {
		t.Fatalf("update times: created %v updated %v", u.CreatedAt, u.UpdatedAt)
	}

	// Idempotent: the same fields again, or none, change nothing.
	clk.Advance(time.Second)
	for _, body := range []any{`{"max_deliveries":3}`, `{}`, nil, `{"visibility_timeout":45}`} {
		var again api.Queue
		r := e.do("PUT", "/v1/queues/orders", body)
		if r.Status != 200 {
			t.Fatalf("PUT %v again: %v", body, r)
		}
		json.Unmarshal(r.Body, &again)
		if !jsonEqual(again.Config, want) || !again.UpdatedAt.Equal(u.UpdatedAt) {
			t.Fatalf("PUT %v again changed the queue: %s updated %v", body, js(again.Config), again.UpdatedAt)
		}
	}

	// Tags are replaced as a whole; {} clears them.
	if q := e.putQueue("orders", `{"tags":{"tier":"gold"}}`); !jsonEqual(q.Config.Tags, map[string]string{"tier": "gold"}) {
		t.Fatalf("tags %v", q.Config.Tags)
	}
	if q := e.putQueue("orders", `{"tags":{}}`); len(q.Config.Tags) != 0 {
		t.Fatalf("tags after {}: %v", q.Config.Tags)
	}
	// dead_letter_queue none turns max_deliveries off unless it is given.
	if q := e.putQueue("plain", `{"dead_letter_queue":"none"}`); *q.Config.MaxDeliveries != 0 || *q.Config.DeadLetterQueue != "none" {
		t.Fatalf("none: %s", js(q.Config))
	}
	if r := e.do("GET", "/v1/queues/plain-dlq", nil); r.Status != 404 {
		t.Fatalf("a queue with dead_letter_queue none got a DLQ: %v", r)
	}
	// A named DLQ is created if missing.
	e.putQueue("billing", `{"dead_letter_queue":"billing-errors"}`)
	if got := e.queue("billing-errors"); !slices.Equal(got.DeadLetterSources, []string{"billing"}) {
		t.Fatalf("named DLQ sources %v", got.DeadLetterSources)
	}
}

func TestListQueuesAndStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("a-1", `{}`)
	e.putQueue("a-2", `{"dead_letter_queue":"none"}`)
	e.putQueue("b", `{}`)
	var list api.QueueList
	e.call("GET", "/v1/queues", nil, 200, &list)
	if got := queueNames(list); !slices.Equal(got, []string{"a-1", "a-1-dlq", "a-2", "b", "b-dlq"}) {
		t.Fatalf("list %v", got)
	}
	e.call("GET", "/v1/queues?prefix=a-1", nil, 200, &list)
	if got := queueNames(list); !slices.Equal(got, []string{"a-1", "a-1-dlq"}) {
		t.Fatalf("prefix a-1: %v", got)
	}
	e.call("GET", "/v1/queues?prefix=zzz", nil, 200, &list)
	if list.Queues == nil || len(list.Queues) != 0 {
		t.Fatalf("empty list must be [] not null: %s", e.do("GET", "/v1/queues?prefix=zzz", nil).Body)
	}
	e.call("GET", "/v1/stats", nil, 200, &list)
	if len(list.Queues) != 5 {
		t.Fatalf("/v1/stats: %v", queueNames(list))
	}

	// Counts and counters after sends, receives, acks.
	e.call("POST", "/v1/queues/b/messages", `{"messages":[{"body":"1","group":"g"},{"body":"22","group":"g"},{"body":"333"},{"body":"4444","delay":"1m"}]}`, 200, nil)
	ms := e.receive("b", 1, "")
	st := e.queue("b").Stats
	if st.Ready != 2 || st.InFlight != 1 || st.Delayed != 1 || st.Sent != 4 || st.Delivered != 1 || st.Acked != 0 || st.Bytes != 10 || st.Groups != 1 {
		t.Fatalf("stats after 4 sends and 1 receive: %s", js(st))
	}
	e.settle("b", "ack", receiptsOf(ms), "")
	e.srv.Clock.Advance(1500 * time.Millisecond)
	st = e.queue("b").Stats
	if st.Ready != 2 || st.InFlight != 0 || st.Acked != 1 || st.Bytes != 10-int64(len(bodyOf(ms[0]))) {
		t.Fatalf("stats after ack: %s", js(st))
	}
	if st.OldestReadyAgeMS != 1500 {
		t.Fatalf("oldest_ready_age_ms %d, want 1500", st.OldestReadyAgeMS)
	}
	// A queue's stats count the messages in its DLQ.
	ms = e.receive("b", 1, "")
	e.settle("b", "deadletter", receiptsOf(ms), `,"reason":"bad"`)
	if st := e.queue("b").Stats; st.DeadLetters != 1 || st.DeadLettered != 1 || st.DeadLetteredBy["bad"] != 1 {
		t.Fatalf("stats after dead-letter: %s", js(st))
	}
	if st := e.queue("b-dlq").Stats; st.DeadLetteredIn != 1 || st.Ready != 1 {
		t.Fatalf("DLQ stats: %s", js(st))
	}
}

// TestRatesAndLittlesLaw checks the rates and both Little's-law blocks with a fake clock,
// where every time is exact.
func TestRatesAndLittlesLaw(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	clk := e.srv.Clock
	e.putQueue("st", `{}`)
	// Rates need a first once-a-second sample.
	testkit.Eventually(t, waitLong, func() bool {
		clk.Advance(100 * time.Millisecond)
		return e.queue("st").Stats.Rates.WindowMS > 0
	}, "a rate sample")
	e.send("st", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	clk.Advance(3 * time.Second)
	ms := e.receive("st", 4, "")
	clk.Advance(time.Second)
	e.settle("st", "ack", receiptsOf(ms), "")
	st := e.queue("st").Stats
	if st.Ready != 6 || st.InFlight != 0 || st.Sent != 10 || st.Delivered != 4 || st.Acked != 4 || st.OldestReadyAgeMS != 4000 {
		t.Fatalf("stats: %s", js(st))
	}
	r := st.Rates
	span := float64(r.WindowMS) / 1000
	if !near(r.Sent, 10/span) || !near(r.Delivered, 4/span) || !near(r.Acked, 4/span) || r.Nacked != 0 {
		t.Fatalf("rates over %.3fs: %s", span, js(r))
	}
	w, s := st.Waiting, st.InSystem
	if w.L != 6 || w.Lambda != r.Sent || w.MeasuredMS != 3000 || !near(w.EstimatedMS, 6/r.Sent*1000) {
		t.Fatalf("waiting: %s", js(w))
	}
	if s.L != 6 || s.Lambda != r.Sent || s.MeasuredMS != 4000 || !near(s.EstimatedMS, 6/r.Sent*1000) {
		t.Fatalf("in_system: %s", js(s))
	}
}

func TestSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("s", `{}`)

	// A single message object, and a batch, both answer with results.
	var one api.SendResponse
	e.call("POST", "/v1/queues/s/messages", "{\"body\":\"hello\",\"headers\":{\"content-type\":\"text/plain\"}}\n", 200, &one)
	if len(one.Results) != 1 || !hexID.MatchString(one.Results[0].ID) || one.Results[0].Duplicate || one.Error != nil {
		t.Fatalf("single send: %+v", one)
	}
	var batch api.SendResponse
	e.call("POST", "/v1/queues/s/messages", `{"messages":[
		{"body":"{\"n\":1}","group":"cust-7","dedup_id":"order-1"},
		{"body_base64":"AAEC/w=="},
		{"body_base64":"aGVsbG8="},
		{"body":"later","delay":"2s"},
		{"body":"soon","delay":0.25}]}`, 200, &batch)
	if len(batch.Results) != 5 {
		t.Fatalf("batch: %+v", batch)
	}
	got := []string{one.Results[0].ID}
	for _, r := range batch.Results {
		if r.Error != nil || !hexID.MatchString(r.ID) {
			t.Fatalf("batch result %+v", r)
		}
		got = append(got, r.ID)
	}
	if !slices.IsSorted(got) {
		t.Errorf("ids do not sort in send order: %v", got)
	}

	// Bodies come back as text when they are UTF-8, else base64; fields round-trip.
	p := e.peek("s", "")
	if len(p.Messages) != 6 || !slices.Equal(ids(p.Messages), got) {
		t.Fatalf("peek ids %v, want %v", ids(p.Messages), got)
	}
	m := p.Messages
	if bodyOf(m[0]) != "hello" || m[0].Headers["content-type"] != "text/plain" {
		t.Errorf("message 0: %s", js(m[0]))
	}
	if bodyOf(m[1]) != `{"n":1}` || m[1].Group != "cust-7" || m[1].DedupID != "order-1" {
		t.Errorf("message 1: %s", js(m[1]))
	}
	if bodyOf(m[2]) != "base64:AAEC/w==" || m[2].Body != nil {
		t.Errorf("binary body: %s", js(m[2]))
	}
	if bodyOf(m[3]) != "hello" {
		t.Errorf("UTF-8 sent as base64 comes back as body: %s", js(m[3]))
	}
	now := e.srv.Clock.Now()
	if m[4].State != "delayed" || !m[4].VisibleAt.Equal(now.Add(2*time.Second)) || m[5].State != "delayed" || !m[5].VisibleAt.Equal(now.Add(250*time.Millisecond)) {
		t.Errorf("delayed: %s %s", js(m[4]), js(m[5]))
	}
	for _, x := range m {
		if !x.EnqueuedAt.Equal(now) || x.Deliveries != 0 || x.Receipt != "" {
			t.Errorf("peeked %s", js(x))
		}
	}

	// A duplicate dedup id returns the first id, duplicate:true, and enqueues nothing.
	var dup, dup2 api.SendResponse
	e.call("POST", "/v1/queues/s/messages", `{"body":"other body","dedup_id":"order-1"}`, 200, &dup)
	if dup.Results[0].ID != got[1] || !dup.Results[0].Duplicate {
		t.Fatalf("duplicate: %+v, want id %s", dup.Results[0], got[1])
	}
	e.call("POST", "/v1/queues/s/messages", `{"messages":[{"body":"x","dedup_id":"k"},{"body":"y","dedup_id":"k"}]}`, 200, &dup2)
	if dup2.Results[0].Duplicate || !dup2.Results[1].Duplicate || dup2.Results[1].ID != dup2.Results[0].ID {
		t.Fatalf("duplicate within a batch: %+v", dup2.Results)
	}
	if st := e.queue("s").Stats; st.Sent != 7 || st.DedupHits != 2 || st.Ready+st.Delayed != 7 {
		t.Fatalf("stats after duplicates: %s", js(st))
	}

	// content_dedup derives the id from the body; dedup_scope group keys it by group.
	e.putQueue("c", `{"content_dedup":true}`)
	var c1, c2 api.SendResponse
	e.call("POST", "/v1/queues/c/messages", `{"body":"same"}`, 200, &c1)
	e.call("POST", "/v1/queues/c/messages", `{"body":"same"}`, 200, &c2)
	if !c2.Results[0].Duplicate || c2.Results[0].ID != c1.Results[0].ID {
		t.Fatalf("content dedup: %+v %+v", c1, c2)
	}
	e.putQueue("g", `{"dedup_scope":"group"}`)
	var g api.SendResponse
	e.call("POST", "/v1/queues/g/messages", `{"messages":[{"body":"a","group":"1","dedup_id":"k"},{"body":"b","group":"2","dedup_id":"k"},{"body":"c","group":"1","dedup_id":"k"}]}`, 200, &g)
	if g.Results[0].Duplicate || g.Results[1].Duplicate || !g.Results[2].Duplicate {
		t.Fatalf("group dedup: %+v", g.Results)
	}

	// A queue's delay applies to messages that give none.
	e.putQueue("d", `{"delay":"5s"}`)
	e.send("d", "x")
	if p := e.peek("d", ""); p.Messages[0].State != "delayed" || !p.Messages[0].VisibleAt.Equal(now.Add(5*time.Second)) {
		t.Fatalf("queue delay: %s", js(p.Messages[0]))
	}

	// 1000 messages in one request is the limit, not over it.
	msgs := make([]api.SendMessage, api.MaxBatch)
	for i := range msgs {
		b := fmt.Sprint(i)
		msgs[i] = api.SendMessage{Body: &b}
	}
	var big api.SendResponse
	e.call("POST", "/v1/queues/d/messages", api.SendRequest{Messages: msgs}, 200, &big)
	if len(big.Results) != api.MaxBatch {
		t.Fatalf("%d results", len(big.Results))
	}

	// A message of exactly max_message_size is accepted (body plus header names,
	// types and values count).
	e.putQueue("m", `{"max_message_size":20}`)
	e.call("POST", "/v1/queues/m/messages", `{"body":"0123456789","headers":{"ab":"cd"}}`, 200, nil) // 10+2+6+2
	expectError(t, e.do("POST", "/v1/queues/m/messages", `{"body":"0123456789","headers":{"ab":"cde"}}`), api.CodeMessageTooLarge, "21")

	// Entry-level errors fail only their entry.
	var mixed api.SendResponse
	e.call("POST", "/v1/queues/m/messages", `{"messages":[{"body":"ok"},{"body":"x","group":"tab\there"},{"body":"012345678901234567890"}]}`, 200, &mixed)
	if mixed.Error != nil || mixed.Results[0].Error != nil || mixed.Results[1].Error.Code != api.CodeInvalidMessage || mixed.Results[2].Error.Code != api.CodeMessageTooLarge {
		t.Fatalf("mixed batch: %s", js(mixed))
	}
	// A delay at or beyond the queue's retention is refused per entry.
	e.putQueue("r", `{"retention":"1h"}`)
	expectError(t, e.do("POST", "/v1/queues/r/messages", `{"body":"x","delay":"1h"}`), api.CodeInvalidDelay, "retention")
}

// TestLongPoll: a receive that waits returns as soon as a message is sent, and empty when
// its wait ends. The fake clock proves it is the send, not time, that wakes it.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	clk := e.srv.Clock
	e.putQueue("lp", `{"receive_wait":"20s"}`)

	type result struct {
		r  *response
		ms []api.Message
	}
	// start begins a receive and returns once it waits on the (fake) clock.
	start := func(body string) chan result {
		t.Helper()
		parked := clk.Timers()
		ch := make(chan result, 1)
		var done atomic.Bool
		answer := e.doAsync("POST", "/v1/queues/lp/receive", body)
		go func() {
			r := <-answer
			var out api.ReceiveResponse
			if r != nil {
				json.Unmarshal(r.Body, &out)
			}
			done.Store(true)
			ch <- result{r, out.Messages}
		}()
		testkit.Eventually(t, waitLong, func() bool {
			if done.Load() {
				t.Fatalf("the receive returned at once: %v", (<-ch).r)
			}
			return clk.Timers() > parked
		}, "the receive to wait")
		return ch
	}
	wait := func(ch chan result) result {
		t.Helper()
		res := testkit.Recv(t, ch, waitLong, "the receive to return")
		if res.r == nil || res.r.Status != 200 {
			t.Fatalf("receive: %v", res.r)
		}
		return res
	}

	ch := start(`{"wait":"30s","max":10}`)
	id := e.send("lp", "wake up")[0]
	res := wait(ch)
	if len(res.ms) != 1 || res.ms[0].ID != id || bodyOf(res.ms[0]) != "wake up" {
		t.Fatalf("long poll got %s", js(res.ms))
	}
	e.settle("lp", "ack", receiptsOf(res.ms), "")

	ch = start(`{"wait":"30s"}`)
	clk.Advance(30 * time.Second)
	if res := wait(ch); res.ms == nil || len(res.ms) != 0 || !strings.Contains(string(res.r.Body), `"messages":[]`) {
		t.Fatalf("empty long poll: %v", res.r)
	}

	// Without "wait" the queue's receive_wait applies; "wait":0 never waits.
	ch = start(`{}`)
	clk.Advance(20 * time.Second)
	if res := wait(ch); len(res.ms) != 0 {
		t.Fatalf("receive_wait: %v", res.r)
	}
	if ms := e.receive("lp", 1, ""); len(ms) != 0 {
		t.Fatalf("wait 0: %v", ms)
	}

	// A message that becomes visible (delay ends) wakes a waiting receive too.
	e.call("POST", "/v1/queues/lp/messages", `{"body":"delayed","delay":"5s"}`, 200, nil)
	ch = start(`{"wait":"30s"}`)
	clk.Advance(5 * time.Second)
	if res := wait(ch); len(res.ms) != 1 || bodyOf(res.ms[0]) != "delayed" {
		t.Fatalf("delayed message: %v", res.r)
	}
}

// TestLongPollRealClock: the same on the real clock, as a user sees it.
func TestLongPollRealClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("lp", `{}`)
	begin := time.Now()
	ch := e.doAsync("POST", "/v1/queues/lp/receive", `{"wait":"30s"}`)
	e.send("lp", "hi")
	r := testkit.Recv(t, ch, waitLong, "the receive to return")
	if r == nil || r.Status != 200 || !strings.Contains(string(r.Body), `"body":"hi"`) {
		t.Fatalf("receive: %v", r)
	}
	if time.Since(begin) > 20*time.Second {
		t.Fatalf("receive waited %v", time.Since(begin))
	}
	// A short wait on an empty queue ends empty.
	var out api.ReceiveResponse
	e.call("POST", "/v1/queues/lp/receive", `{"wait":"50ms"}`, 200, &out)
	if len(out.Messages) != 0 {
		t.Fatalf("got %v", out.Messages)
	}
}

func TestVisibility(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	clk := e.srv.Clock
	e.putQueue("v", `{"visibility_timeout":"45s"}`)
	e.send("v", "a", "b", "c")
	now := clk.Now()

	a := e.receive("v", 1, "")[0]
	if !a.VisibleAt.Equal(now.Add(45*time.Second)) || a.Deliveries != 1 || !a.EnqueuedAt.Equal(now) ||
		a.FirstDeliveredAt == nil || !a.FirstDeliveredAt.Equal(now) || a.Receipt == "" {
		t.Fatalf("default visibility: %s", js(a))
	}
	b := e.receive("v", 1, `,"visibility":"5s"`)[0]
	if !b.VisibleAt.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("visibility override: %s", js(b))
	}
	var pk api.Message
	e.call("GET", "/v1/queues/v/messages/"+b.ID, nil, 200, &pk)
	if pk.State != "in_flight" || !pk.VisibleAt.Equal(*b.VisibleAt) {
		t.Fatalf("peek of a leased message: %s", js(pk))
	}

	// The lease ends: the message is visible again and the old receipt is stale.
	clk.Advance(5 * time.Second)
	e.call("GET", "/v1/queues/v/messages/"+b.ID, nil, 200, &pk)
	if pk.State != "ready" {
		t.Fatalf("after the lease: %s", js(pk))
	}
	r, _ := e.settle("v", "ack", []string{b.Receipt}, "")
	expectError(t, r, api.CodeReceiptStale)
	again := e.receive("v", 2, "")
	if len(again) != 2 || again[0].ID != b.ID || again[0].Deliveries != 2 || again[0].Receipt == b.Receipt ||
		!again[0].FirstDeliveredAt.Equal(now) {
		t.Fatalf("redelivery: %s", js(again))
	}
	if st := e.queue("v").Stats; st.Delivered != 4 || st.Redelivered != 1 {
		t.Fatalf("stats: %s", js(st))
	}

	// visibility 0 releases at once.
	e.send("v", "d")
	d := e.receive("v", 1, `,"visibility":"0s"`)
	if len(d) != 1 {
		t.Fatal("nothing received")
	}
	e.call("GET", "/v1/queues/v/messages/"+d[0].ID, nil, 200, &pk)
	if pk.State != "ready" {
		t.Fatalf("visibility 0: %s", js(pk))
	}
}

// TestSettleMixedReceipts sends ack, nack, extend and deadletter requests that mix good,
// stale, duplicate, foreign and undecodable receipts: each gets its own result.
func TestSettleMixedReceipts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	clk := e.srv.Clock
	e.putQueue("s", `{"backoff_base":"2s","backoff_max":"2s"}`)
	e.putQueue("o", `{}`)
	e.send("s", "m0", "m1", "m2", "m3", "m4", "m5")
	e.send("o", "other")
	ms := e.receive("s", 6, "")
	if len(ms) != 6 {
		t.Fatalf("received %d", len(ms))
	}
	r := receiptsOf(ms)
	foreign := e.receive("o", 1, "")[0].Receipt

	check := func(op string, receipts []string, extra string, want ...string) {
		t.Helper()
		res, out := e.settle("s", op, receipts, extra)
		if res.Status != 200 || out.Error != nil || len(out.Results) != len(want) {
			t.Fatalf("%s: %v", op, res)
		}
		for i, w := range want {
			got := "ok"
			if !out.Results[i].OK {
				got = out.Results[i].Error.Code
				if out.Results[i].Error.Message == "" {
					t.Errorf("%s result %d: no message", op, i)
				}
			}
			if got != w {
				t.Errorf("%s result %d: %s, want %s (%v)", op, i, got, w, res)
			}
		}
	}
	// A receipt whose message was settled by an earlier call is already_settled; the
	// same receipt twice in one call is stale the second time.
	const ok, stale, settled, invalid = "ok", api.CodeReceiptStale, api.CodeAlreadySettled, api.CodeInvalidReceipt

	check("ack", []string{r[0], r[0], "garbage", foreign, r[1]}, "", ok, stale, invalid, invalid, ok)
	if _, out := e.settle("s", "ack", []string{foreign}, ""); !strings.Contains(out.Results[0].Error.Message, `"o"`) {
		t.Errorf("foreign receipt message does not name its queue: %s", out.Results[0].Error.Message)
	}

	now := clk.Now()
	check("nack", []string{r[2], r[0], "garbage"}, `,"delay":"10s"`, ok, settled, invalid)
	var pk api.Message
	e.call("GET", "/v1/queues/s/messages/"+ms[2].ID, nil, 200, &pk)
	if pk.State != "delayed" || !pk.VisibleAt.Equal(now.Add(10*time.Second)) || pk.Deliveries != 1 {
		t.Fatalf("nacked with delay: %s", js(pk))
	}
	check("nack", []string{r[5]}, "", ok) // the queue's backoff: up to 2s
	e.call("GET", "/v1/queues/s/messages/"+ms[5].ID, nil, 200, &pk)
	if pk.State == "delayed" && (pk.VisibleAt.Before(now) || pk.VisibleAt.After(now.Add(2*time.Second))) || pk.State == "in_flight" {
		t.Fatalf("nacked with backoff: %s", js(pk))
	}

	check("extend", []string{r[3], r[1], "garbage"}, `,"visibility":"2m"`, ok, settled, invalid)
	e.call("GET", "/v1/queues/s/messages/"+ms[3].ID, nil, 200, &pk)
	if !pk.VisibleAt.Equal(now.Add(2 * time.Minute)) {
		t.Fatalf("extended: %s", js(pk))
	}
	check("deadletter", []string{r[4], r[1], "garbage"}, `,"reason":"bad_payload","description":"not JSON"`, ok, settled, invalid)
	dl := e.peek("s-dlq", "")
	if len(dl.Messages) != 1 || dl.Messages[0].ID != ms[4].ID || dl.Messages[0].DeadLetter == nil {
		t.Fatalf("DLQ: %s", js(dl))
	}
	d := dl.Messages[0].DeadLetter
	if d.Source != "s" || d.Reason != "bad_payload" || d.Description != "not JSON" || d.Deliveries != 1 || !d.At.Equal(clk.Now()) {
		t.Fatalf("dead letter: %s", js(d))
	}

	clk.Advance(time.Minute) // past the queue's 30s visibility, within the extension
	check("ack", []string{r[3]}, "", ok)

	// Without a reason, a dead letter's reason is "consumer"; extend 0 ends a lease now.
	e.send("s", "m6", "m7")
	clk.Advance(time.Minute)
	more := e.receive("s", 10, "")
	var m6, m7 api.Message
	for _, m := range more {
		switch bodyOf(m) {
		case "m6":
			m6 = m
		case "m7":
			m7 = m
		}
	}
	check("deadletter", []string{m6.Receipt}, "", ok)
	if dl := e.peek("s-dlq", ""); dl.Messages[1].DeadLetter.Reason != "consumer" {
		t.Fatalf("default reason: %s", js(dl.Messages[1]))
	}
	check("extend", []string{m7.Receipt}, `,"visibility":0`, ok)
	e.call("GET", "/v1/queues/s/messages/"+m7.ID, nil, 200, &pk)
	if pk.State != "ready" {
		t.Fatalf("extend 0: %s", js(pk))
	}

	// When every item fails alike the status is that code's and the error is repeated.
	res, out := e.settle("s", "nack", []string{"garbage", "junk"}, "")
	expectError(t, res, api.CodeInvalidReceipt)
	if len(out.Results) != 2 || out.Results[1].Error.Code != invalid {
		t.Fatalf("all invalid: %v", res)
	}
	// Mixed failures without a success: 200 and no top-level error.
	res, out = e.settle("s", "ack", []string{"garbage", r[0]}, "")
	if res.Status != 200 || out.Error != nil {
		t.Fatalf("mixed failures: %v", res)
	}
	if st := e.queue("s").Stats; st.Acked != 3 || st.Nacked != 2 || st.Extended != 2 || st.DeadLettered != 2 {
		t.Fatalf("stats: %s", js(st))
	}
}

// TestMaxDeliveries: the Nth lease that ends without an ack dead-letters the message.
func TestMaxDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("md", `{"max_deliveries":2,"visibility_timeout":"1s"}`)
	id := e.send("md", "poison")[0]
	e.receive("md", 1, "")
	e.srv.Clock.Advance(time.Second) // first lease expires
	second := e.receive("md", 1, "")
	if len(second) != 1 || second[0].Deliveries != 2 {
		t.Fatalf("second delivery: %s", js(second))
	}
	e.settle("md", "nack", receiptsOf(second), "")
	p := e.peek("md-dlq", "")
	if len(p.Messages) != 1 || p.Messages[0].ID != id || p.Messages[0].DeadLetter.Reason != "max_deliveries" || p.Messages[0].DeadLetter.Deliveries != 2 {
		t.Fatalf("DLQ: %s", js(p))
	}
	if st := e.queue("md").Stats; st.Ready+st.InFlight+st.Delayed != 0 || st.DeadLetteredBy["max_deliveries"] != 1 {
		t.Fatalf("stats: %s", js(st))
	}
}

func TestPeekPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("p", `{}`)
	sent := e.send("p", "0", "1", "2", "3", "4", "5", "6")

	var all []api.Message
	var pages []int
	for after := ""; ; {
		pg := e.peek("p", "?limit=3"+after)
		all = append(all, pg.Messages...)
		pages = append(pages, len(pg.Messages))
		if pg.Next == "" {
			break
		}
		if want := fmt.Sprint(pg.Messages[len(pg.Messages)-1].Seq); pg.Next != want {
			t.Fatalf("next %q, want the last seq %s", pg.Next, want)
		}
		after = "&after=" + pg.Next
	}
	if !slices.Equal(pages, []int{3, 3, 1}) || !slices.Equal(ids(all), sent) {
		t.Fatalf("pages %v ids %v, want %v", pages, ids(all), sent)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatalf("seqs not increasing: %d then %d", all[i-1].Seq, all[i].Seq)
		}
	}
	// A page that is exactly full has a next cursor; the page after it is empty.
	pg := e.peek("p", "?limit=7")
	if pg.Next == "" {
		t.Fatal("a full page has no next cursor")
	}
	if last := e.peek("p", "?limit=7&after="+pg.Next); len(last.Messages) != 0 || last.Next != "" || last.Messages == nil {
		t.Fatalf("page after the end: %s", js(last))
	}

	// Peek never leases: filter by state after a receive.
	leased := e.receive("p", 2, "")
	e.call("POST", "/v1/queues/p/messages", `{"body":"later","delay":"1h"}`, 200, nil)
	count := func(q string) int { return len(e.peek("p", q).Messages) }
	if n := count("?state=in_flight"); n != 2 {
		t.Fatalf("in_flight: %d", n)
	}
	if n := count("?state=ready"); n != 5 {
		t.Fatalf("ready: %d", n)
	}
	if n := count("?state=delayed"); n != 1 {
		t.Fatalf("delayed: %d", n)
	}
	if n := count("?state=ready&state=in_flight"); n != 7 {
		t.Fatalf("ready+in_flight: %d", n)
	}
	if n := count(""); n != 8 {
		t.Fatalf("all: %d", n)
	}
	inFlight := e.peek("p", "?state=in_flight").Messages
	if !sameSet(ids(inFlight), ids(leased)) || inFlight[0].Receipt != "" || inFlight[0].VisibleAt == nil {
		t.Fatalf("in flight: %s", js(inFlight))
	}
	if st := e.queue("p").Stats; st.Delivered != 2 {
		t.Fatalf("peek delivered messages: %s", js(st))
	}
}

func TestMessageByID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("q", `{}`)
	e.putQueue("other", `{}`)
	msgIDs := e.send("q", "a", "b")
	var m api.Message
	e.call("GET", "/v1/queues/q/messages/"+msgIDs[0], nil, 200, &m)
	if m.ID != msgIDs[0] || bodyOf(m) != "a" || m.State != "ready" || m.Seq == 0 || m.Deliveries != 0 {
		t.Fatalf("get: %s", js(m))
	}
	e.call("GET", "/v1/queues/q/messages/"+strings.ToUpper(msgIDs[0]), nil, 200, &m) // hex is case-insensitive
	expectError(t, e.do("GET", "/v1/queues/other/messages/"+msgIDs[0], nil), api.CodeMessageNotFound, msgIDs[0])

	leased := e.receive("q", 1, "")
	e.call("GET", "/v1/queues/q/messages/"+leased[0].ID, nil, 200, &m)
	if m.State != "in_flight" || m.Deliveries != 1 || !m.VisibleAt.Equal(*leased[0].VisibleAt) {
		t.Fatalf("get leased: %s", js(m))
	}
	// Deleting removes a message in any state; its receipt is already settled.
	r := e.do("DELETE", "/v1/queues/q/messages/"+leased[0].ID, nil)
	if r.Status != 204 || len(r.Body) != 0 {
		t.Fatalf("delete: %v", r)
	}
	expectError(t, e.do("GET", "/v1/queues/q/messages/"+leased[0].ID, nil), api.CodeMessageNotFound)
	expectError(t, e.do("DELETE", "/v1/queues/q/messages/"+leased[0].ID, nil), api.CodeMessageNotFound)
	res, _ := e.settle("q", "ack", receiptsOf(leased), "")
	expectError(t, res, api.CodeAlreadySettled)
	if st := e.queue("q").Stats; st.Deleted != 1 || st.InFlight != 0 || st.Ready != 1 {
		t.Fatalf("stats: %s", js(st))
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("q", `{}`)
	e.call("POST", "/v1/queues/q/messages", `{"messages":[{"body":"a","dedup_id":"k"},{"body":"b"},{"body":"c"},{"body":"d","delay":"1h"}]}`, 200, nil)
	leased := e.receive("q", 1, "")
	var out api.PurgeResponse
	e.call("POST", "/v1/queues/q/purge", nil, 200, &out)
	if out.Purged != 4 {
		t.Fatalf("purged %d", out.Purged)
	}
	st := e.queue("q").Stats
	if st.Ready != 0 || st.Delayed != 0 || st.InFlight != 0 || st.Bytes != 0 || st.Purged != 4 {
		t.Fatalf("stats after purge: %s", js(st))
	}
	if p := e.peek("q", ""); len(p.Messages) != 0 {
		t.Fatalf("peek after purge: %s", js(p))
	}
	res, _ := e.settle("q", "ack", receiptsOf(leased), "")
	expectError(t, res, api.CodeAlreadySettled)
	// Dedup entries outlive a purge.
	var dup api.SendResponse
	e.call("POST", "/v1/queues/q/messages", `{"body":"again","dedup_id":"k"}`, 200, &dup)
	if !dup.Results[0].Duplicate {
		t.Fatalf("dedup after purge: %+v", dup)
	}
	e.call("POST", "/v1/queues/q/purge", "", 200, &out)
	if out.Purged != 0 {
		t.Fatalf("purge of an empty queue: %d", out.Purged)
	}
}

func TestDeleteQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("dq", `{}`)
	e.send("dq", "x")
	leased := e.receive("dq", 1, "")
	expectError(t, e.do("DELETE", "/v1/queues/dq-dlq", nil), api.CodeQueueInUse, "dq")
	if r := e.do("DELETE", "/v1/queues/dq", nil); r.Status != 204 {
		t.Fatalf("delete: %v", r)
	}
	expectError(t, e.do("GET", "/v1/queues/dq", nil), api.CodeQueueNotFound)
	if q := e.queue("dq-dlq"); len(q.DeadLetterSources) != 0 {
		t.Fatalf("DLQ still referenced: %v", q.DeadLetterSources)
	}
	// The name can be reused at once; receipts of the old queue are stale.
	e.call("PUT", "/v1/queues/dq", `{}`, 201, nil)
	res, _ := e.settle("dq", "ack", receiptsOf(leased), "")
	expectError(t, res, api.CodeReceiptStale)

	// force deletes a DLQ in use; it is created again when next needed.
	if r := e.do("DELETE", "/v1/queues/dq-dlq?force=true", nil); r.Status != 204 {
		t.Fatalf("forced delete: %v", r)
	}
	e.send("dq", "y")
	ms := e.receive("dq", 1, "")
	if r, out := e.settle("dq", "deadletter", receiptsOf(ms), `,"reason":"r"`); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("dead-letter after the DLQ was deleted: %v", r)
	}
	if q := e.queue("dq-dlq"); q.Stats.Ready != 1 || *q.Config.DeadLetterQueue != "none" {
		t.Fatalf("recreated DLQ: %s", js(q))
	}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("src", `{}`)
	e.putQueue("dst", `{}`)
	e.call("POST", "/v1/queues/src/messages", `{"messages":[{"body":"a","group":"g","dedup_id":"da","headers":{"h":"1"}},{"body":"b"},{"body":"c"},{"body":"d"}]}`, 200, nil)
	ms := e.receive("src", 4, "")
	byBody := map[string]api.Message{}
	for _, m := range ms {
		byBody[bodyOf(m)] = m
	}
	e.settle("src", "deadletter", []string{byBody["a"].Receipt, byBody["b"].Receipt}, `,"reason":"bad"`)
	e.settle("src", "deadletter", []string{byBody["c"].Receipt}, `,"reason":"other"`)
	e.settle("src", "ack", []string{byBody["d"].Receipt}, "")

	run := func(from, body string) api.RedriveTask {
		t.Helper()
		var task api.RedriveTask
		r := e.call("POST", "/v1/queues/"+from+"/redrive", body, 202, &task)
		if r.Header.Get("Location") != "/v1/redrives/"+task.ID || task.Source != from || task.ID == "" {
			t.Fatalf("redrive answer: %v Location %q", r, r.Header.Get("Location"))
		}
		testkit.Eventually(t, waitLong, func() bool {
			e.call("GET", "/v1/redrives/"+task.ID, nil, 200, &task)
			return task.State != "running"
		}, "the redrive to finish")
		return task
	}

	// To another queue, filtered by reason.
	task := run("src-dlq", `{"to":"dst","reason":"other"}`)
	if task.State != "completed" || task.Total != 1 || task.Moved != 1 || task.To != "dst" || task.Reason != "other" {
		t.Fatalf("task: %s", js(task))
	}
	p := e.peek("dst", "")
	if len(p.Messages) != 1 || p.Messages[0].ID != byBody["c"].ID || p.Messages[0].Deliveries != 0 {
		t.Fatalf("dst: %s", js(p))
	}

	// Back to the source (the default): ids, groups, dedup ids and headers are kept.
	task = run("src-dlq", `{}`)
	if task.State != "completed" || task.Total != 2 || task.Moved != 2 || task.To != "" {
		t.Fatalf("task: %s", js(task))
	}
	p = e.peek("src", "")
	if !sameSet(ids(p.Messages), []string{byBody["a"].ID, byBody["b"].ID}) {
		t.Fatalf("src: %s", js(p))
	}
	for _, m := range p.Messages {
		if m.State != "ready" || m.Deliveries != 0 {
			t.Fatalf("redriven: %s", js(m))
		}
		if bodyOf(m) == "a" && (m.Group != "g" || m.DedupID != "da" || m.Headers["h"] != "1") {
			t.Fatalf("redriven message lost its fields: %s", js(m))
		}
	}
	if n := len(e.peek("src-dlq", "").Messages); n != 0 {
		t.Fatalf("DLQ still holds %d", n)
	}
	if st := e.queue("src-dlq").Stats; st.RedrivenOut != 3 {
		t.Fatalf("DLQ stats: %s", js(st))
	}
	if st := e.queue("src").Stats; st.RedrivenIn != 2 {
		t.Fatalf("src stats: %s", js(st))
	}
	if st := e.queue("dst").Stats; st.RedrivenIn != 1 {
		t.Fatalf("dst stats: %s", js(st))
	}
	// Redelivered messages start counting again.
	if again := e.receive("src", 2, ""); len(again) != 2 || again[0].Deliveries != 1 {
		t.Fatalf("receive after redrive: %s", js(again))
	}

	// By ids.
	e.send("src", "e")
	em := e.receive("src", 10, "")
	var eID string
	for _, m := range em {
		if bodyOf(m) == "e" {
			eID = m.ID
		}
	}
	e.settle("src", "deadletter", receiptsOf(em), `,"reason":"bulk"`)
	task = run("src-dlq", `{"ids":["`+eID+`"],"to":"dst"}`)
	if task.Moved != 1 || !slices.Equal(task.IDs, []string{eID}) {
		t.Fatalf("by ids: %s", js(task))
	}

	// From one source of a shared dead-letter queue.
	e.putQueue("a", `{"dead_letter_queue":"shared"}`)
	e.putQueue("b", `{"dead_letter_queue":"shared"}`)
	idA, idB := e.send("a", "from a")[0], e.send("b", "from b")[0]
	e.settle("a", "deadletter", receiptsOf(e.receive("a", 1, "")), "")
	e.settle("b", "deadletter", receiptsOf(e.receive("b", 1, "")), "")
	expectError(t, e.do("POST", "/v1/queues/shared/redrive", `{"from":"nope"}`), api.CodeQueueNotFound, "nope")
	task = run("shared", `{"from":"a"}`)
	if task.Moved != 1 || task.From != "a" {
		t.Fatalf("from: %s", js(task))
	}
	if got := ids(e.peek("a", "").Messages); !slices.Equal(got, []string{idA}) {
		t.Fatalf("a holds %v", got)
	}
	if got := ids(e.peek("shared", "").Messages); !slices.Equal(got, []string{idB}) {
		t.Fatalf("shared holds %v", got)
	}

	var list api.RedriveList
	e.call("GET", "/v1/redrives", nil, 200, &list)
	if len(list.Tasks) != 4 || list.Tasks[0].ID != task.ID {
		t.Fatalf("tasks (newest first): %s", js(list))
	}
	expectError(t, e.do("DELETE", "/v1/redrives/"+task.ID, nil), api.CodeTaskFinished)
}

// TestRedriveCancel: a rate-limited redrive on a fake clock moves one message and waits;
// cancelling it stops it there.
func TestRedriveCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("slow", `{}`)
	e.send("slow", "1", "2", "3")
	e.settle("slow", "deadletter", receiptsOf(e.receive("slow", 3, "")), `,"reason":"x"`)
	var task api.RedriveTask
	e.call("POST", "/v1/queues/slow-dlq/redrive", `{"rate":1}`, 202, &task)
	if task.Rate != 1 || task.Total != 3 {
		t.Fatalf("task: %s", js(task))
	}
	testkit.Eventually(t, waitLong, func() bool {
		e.call("GET", "/v1/redrives/"+task.ID, nil, 200, &task)
		return task.Moved == 1
	}, "the first message to move")
	var cancelled api.RedriveTask
	e.call("DELETE", "/v1/redrives/"+task.ID, nil, 200, &cancelled)
	if cancelled.State != "cancelled" || cancelled.Moved != 1 {
		t.Fatalf("cancelled: %s", js(cancelled))
	}
	e.srv.Clock.Advance(10 * time.Second)
	e.call("GET", "/v1/redrives/"+task.ID, nil, 200, &task)
	if task.State != "cancelled" || task.Moved != 1 {
		t.Fatalf("after cancel: %s", js(task))
	}
	if n := len(e.peek("slow-dlq", "").Messages); n != 2 {
		t.Fatalf("DLQ holds %d, want 2", n)
	}
	expectError(t, e.do("DELETE", "/v1/redrives/"+task.ID, nil), api.CodeTaskFinished, "cancelled")
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("full", `{"max_messages":2}`)
	e.send("full", "1")
	// A batch that only partly fits: per-item results, HTTP 200.
	var out api.SendResponse
	r := e.call("POST", "/v1/queues/full/messages", `{"messages":[{"body":"2"},{"body":"3"}]}`, 200, &out)
	if out.Error != nil || out.Results[0].Error != nil || out.Results[1].Error.Code != api.CodeQueueFull || r.Header.Get("Retry-After") != "" {
		t.Fatalf("partial batch: %v", r)
	}
	r = e.do("POST", "/v1/queues/full/messages", `{"body":"4"}`)
	er := expectError(t, r, api.CodeQueueFull, "max_messages", "2")
	if r.Header.Get("Retry-After") != "1" || er.RetryAfter == nil || er.RetryAfter.D() != time.Second {
		t.Fatalf("Retry-After %q retry_after %v", r.Header.Get("Retry-After"), er.RetryAfter)
	}
	if st := e.queue("full").Stats; st.Refused != 2 || st.Ready != 2 {
		t.Fatalf("stats: %s", js(st))
	}
	// In-flight messages count; an ack makes room.
	ms := e.receive("full", 1, "")
	expectError(t, e.do("POST", "/v1/queues/full/messages", `{"body":"5"}`), api.CodeQueueFull)
	e.settle("full", "ack", receiptsOf(ms), "")
	e.send("full", "6")

	e.putQueue("fullb", `{"max_bytes":10}`)
	e.send("fullb", "123456")
	expectError(t, e.do("POST", "/v1/queues/fullb/messages", `{"body":"123456"}`), api.CodeQueueFull, "max_bytes", "10")
}

func TestReceiveByteCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{Broker: broker.Config{MaxReceiveBytes: 2500}})
	e.putQueue("q", `{}`)
	k := strings.Repeat("k", 1000)
	e.send("q", k, k, k, k, k)
	var got []int
	for i := 0; i < 3; i++ {
		got = append(got, len(e.receive("q", 10, "")))
	}
	if !slices.Equal(got, []int{2, 2, 1}) {
		t.Fatalf("receives of 1000-byte messages under a 2500-byte cap: %v", got)
	}
	// One message larger than the cap still comes, alone.
	e.send("q", strings.Repeat("L", 3000), "small")
	if ms := e.receive("q", 10, ""); len(ms) != 1 || len(bodyOf(ms[0])) != 3000 {
		t.Fatalf("large message: %d messages", len(ms))
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	r := e.do("GET", "/healthz", nil)
	var h api.Health
	if r.Status != 200 || json.Unmarshal(r.Body, &h) != nil || h.Status != "ok" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("healthz: %v", r)
	}
	if h.Build == nil || *h.Build != buildinfo.Get() {
		t.Errorf("healthz's build %+v, want %+v", h.Build, buildinfo.Get())
	}
	expectError(t, e.do("POST", "/healthz", ""), api.CodeMethod)
}

// TestOrderedGroups: a group's messages come in send order, one lease of a group at a
// time; a nacked head keeps its place.
func TestOrderedGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("o", `{}`)
	e.call("POST", "/v1/queues/o/messages", `{"messages":[{"body":"g1-a","group":"g1"},{"body":"g1-b","group":"g1"},{"body":"free"},{"body":"g1-c","group":"g1"}]}`, 200, nil)
	first := e.receive("o", 1, "")
	if len(first) != 1 || bodyOf(first[0]) != "g1-a" {
		t.Fatalf("first: %v", bodies(first))
	}
	// While g1 is leased only the ungrouped message is deliverable.
	if ms := e.receive("o", 10, ""); !slices.Equal(bodies(ms), []string{"free"}) {
		t.Fatalf("while g1 is leased: %v", bodies(ms))
	}
	e.settle("o", "nack", receiptsOf(first), `,"delay":0`)
	// The nacked head comes first again, with the rest of its group, in order.
	ms := e.receive("o", 10, "")
	if !slices.Equal(bodies(ms), []string{"g1-a", "g1-b", "g1-c"}) || ms[0].Deliveries != 2 {
		t.Fatalf("after nack: %v", js(ms))
	}
}

// TestRetention: an unsettled message past retention is dead-lettered with reason expired
// (removed and counted, without a DLQ); a live lease is not cut short.
func TestRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("r", `{"retention":"10s","visibility_timeout":"1m"}`)
	e.putQueue("rn", `{"retention":"10s","dead_letter_queue":"none"}`)
	idR := e.send("r", "old", "leased")
	e.send("rn", "old")
	leased := e.receive("r", 1, "")
	if bodyOf(leased[0]) != "old" {
		leased = e.receive("r", 1, "")
	}
	e.srv.Clock.Advance(10 * time.Second)
	testkit.Eventually(t, waitLong, func() bool {
		return len(e.peek("r-dlq", "").Messages) == 1 && e.queue("rn").Stats.Expired == 1
	}, "expiry")
	dl := e.peek("r-dlq", "").Messages[0]
	if dl.DeadLetter.Reason != "expired" || !slices.Contains(idR, dl.ID) {
		t.Fatalf("expired dead letter: %s", js(dl))
	}
	st := e.queue("rn").Stats
	if st.Ready != 0 || st.Expired != 1 {
		t.Fatalf("expiry without a DLQ: %s", js(st))
	}
	// The leased one is still leased, and its ack still settles it.
	if r, out := e.settle("r", "ack", receiptsOf(leased), ""); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("late ack: %v", r)
	}
	t.Run("expiry without a DLQ is not a dead letter", func(t *testing.T) {
		// queue/apply.go applyDeadLetter counts dead_lettered and dead_lettered_by_reason
		// before it knows whether there is a target; with dead_letter_queue none the
		// message is removed, not dead-lettered.
		regression(t, st.DeadLettered == 0 && st.DeadLetteredBy["expired"] == 0,
			"a queue with dead_letter_queue none reports dead_lettered %d, dead_lettered_by_reason %v for a message that expired and was removed",
			st.DeadLettered, st.DeadLetteredBy)
	})
}

// TestRestartKeepsLeasesAndReceipts: a receipt stays valid across a restart until its
// deadline, and counters and messages survive.
func TestRestartKeepsLeasesAndReceipts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, okibatest.Options{Dir: dir})
	e.putQueue("q", `{"visibility_timeout":"10m"}`)
	sent := e.send("q", "a", "b")
	leased := e.receive("q", 1, "")
	e.srv.Close()

	e = newEnv(t, okibatest.Options{Dir: dir})
	p := e.peek("q", "")
	if !slices.Equal(ids(p.Messages), sent) || p.Messages[0].State != "in_flight" || p.Messages[0].Deliveries != 1 {
		t.Fatalf("after restart: %s", js(p))
	}
	if r, out := e.settle("q", "ack", receiptsOf(leased), ""); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("ack of a pre-restart receipt: %v", r)
	}
	if st := e.queue("q").Stats; st.Sent != 2 || st.Delivered != 1 || st.Acked != 1 || st.Ready != 1 {
		t.Fatalf("stats after restart: %s", js(st))
	}
}

// ---------------------------------------------------------------------------------------

func ptr[T any](v T) *T { return &v }

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonEqual(a, b any) bool { return js(a) == js(b) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func queueNames(l api.QueueList) []string {
	out := make([]string, len(l.Queues))
	for i, q := range l.Queues {
		out[i] = q.Name
	}
	return out
}
