package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// page GETs a console page and returns its status and HTML.
func page(t *testing.T, u string, hdr ...string) (int, string) {
	t.Helper()
	r := do(t, "GET", u, nil, hdr...)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r.StatusCode, string(b)
}

// region is the part of html from the element with id to the end of its first table (or
// to the end of the section when it has none): enough to tell one table's rows from
// another's.
func region(t *testing.T, html, id string) string {
	t.Helper()
	at := strings.Index(html, `id="`+id+`"`)
	if at < 0 {
		t.Fatalf("no element with id %q in the page", id)
	}
	rest := html[at:]
	if end := strings.Index(rest, "</table>"); end >= 0 {
		return rest[:end]
	}
	return rest
}

// cell is the text of the cell data-k=key in the row with attribute attr=value of html.
func cell(t *testing.T, html, attr, value, key string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(value) + `">.*?data-k="` + key + `">(.*?)</td>`)
	m := re.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no cell %s in the row %s=%q of\n%s", key, attr, value, html)
	}
	return strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

// topicFixture publishes to a topic "orders" of two partitions, fed to a subscription and
// read by a consumer group, with hostile and awkward records in partition 1.
func topicFixture(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.api.PutTopic(ctx, "orders", api.TopicConfig{Partitions: ptr(2), Retention: &api.Retention{Age: 48 * time.Hour},
		RetentionBytes: ptr(int64(1 << 30))}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.PutQueue(ctx, "paid", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Subscribe(ctx, "orders", "to-paid", api.SubscriptionRequest{Queue: "paid", Filter: json.RawMessage(`{"type":["paid"]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.PutGroup(ctx, "orders", "billing", api.GroupConfig{}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("0123456789", 200) // 2000 bytes, cut on the page
	recs := []client.Record{
		{Partition: ptr(0), Body: []byte(`{"order":1}`), Headers: map[string]string{"type": "placed"}},
		{Partition: ptr(0), Body: []byte(`{"order":1}`), Headers: map[string]string{"type": "paid"}},
		{Partition: ptr(0), Body: []byte(`{"order":2}`), Headers: map[string]string{"type": "placed"}},
		{Partition: ptr(1), Body: []byte(`<script>alert("body")</script>`), Key: []byte(`<b>key</b>`), HasKey: true,
			Headers: map[string]string{"type": `<img src=x onerror=alert(1)>`}},
		{Partition: ptr(1), Body: []byte(long)},
		{Partition: ptr(1), Body: []byte{0xff, 0xfe, 0x00, 0x01}},
	}
	res, err := e.api.PublishRecords(ctx, "orders", recs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res {
		if p.Err != nil {
			t.Fatal(p.Err)
		}
	}
	// billing's one member takes everything and commits partition 0 and one record of 1.
	pr, err := e.api.Pull(ctx, "orders", "billing", client.Member{Name: "worker-1"}, client.PullOptions{})
	if err != nil || len(pr.Records) != 6 {
		t.Fatalf("pull: %+v %v", pr, err)
	}
	epoch := map[int]uint64{}
	for _, a := range pr.Assignment {
		epoch[a.Partition] = a.Epoch
	}
	if errs, err := e.api.Commit(ctx, "orders", "billing", client.Member{Name: "worker-1", Session: pr.Session},
		api.CommitOffset{Partition: 0, Offset: 3, Epoch: epoch[0]}, api.CommitOffset{Partition: 1, Offset: 1, Epoch: epoch[1]}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
}

func TestTopicsPageListsTopicsAndHidesThePlaygrounds(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{SampleInterval: 20 * time.Millisecond})
	topicFixture(t, e)
	if _, err := e.api.PutTopic(context.Background(), PlaygroundPrefix+"0000-events", api.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + testToken}
	// Once the sampler knows the topic, four more publishes give it a rate, which the
	// list shows. (What was published before the topic's first sample has no time.)
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, ok := e.c.hist.publishRate("orders", rateWindow)
		return ok
	}, "the sampler to see orders twice")
	for range 4 {
		if _, err := e.api.PublishRecords(context.Background(), "orders", []client.Record{{Body: []byte("more")}}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r, ok := e.c.hist.publishRate("orders", rateWindow)
		return ok && r > 0
	}, "a publish rate for orders")

	status, html := page(t, e.url+"/topics", auth...)
	if status != 200 {
		t.Fatalf("GET /topics: %d", status)
	}
	row := region(t, html, "topics")
	if !strings.Contains(row, `<tr data-topic="orders">`) || !strings.Contains(row, `<a href="/topics/orders">orders</a>`) {
		t.Fatalf("orders is not listed:\n%s", row)
	}
	orders := row[strings.Index(row, `data-topic="orders"`):]
	for _, want := range []string{`<td class="num">2</td>`, "<td>2 d, 1 GiB</td>", `<td class="num">10</td>`} {
		if !strings.Contains(orders, want) {
			t.Errorf("the orders row lacks %s:\n%s", want, orders)
		}
	}
	if strings.Contains(orders[:strings.Index(orders, "</tr>")], "measured from the second sample on") {
		t.Errorf("the orders row shows no publish rate")
	}
	if strings.Contains(row, PlaygroundPrefix) || !strings.Contains(html, "Show playground topics (1)") {
		t.Errorf("playground topics are not hidden by default")
	}
	if _, html := page(t, e.url+"/topics?playground=show", auth...); !strings.Contains(region(t, html, "topics"), PlaygroundPrefix+"0000-events") {
		t.Errorf("playground topics are not shown when asked for")
	}
	if !strings.Contains(html, `<a href="/topics" aria-current="page">Topics</a>`) {
		t.Errorf("the navigation does not mark Topics")
	}
	// Without the token, a browser is sent to sign in.
	if r := do(t, "GET", e.url+"/topics/orders", nil, "Accept", "text/html"); r.StatusCode != http.StatusSeeOther {
		t.Errorf("the topic page without a session: %s", r.Status)
	}
}

func TestTopicPageShowsPartitionsSubscriptionsAndGroups(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	topicFixture(t, e)
	status, html := page(t, e.url+"/topics/orders")
	if status != 200 {
		t.Fatalf("GET /topics/orders: %d", status)
	}
	parts := region(t, html, "partitions")
	for p, want := range map[string][2]string{"0": {"0", "3"}, "1": {"0", "3"}} {
		if s, e := cell(t, parts, "data-partition", p, "start"), cell(t, parts, "data-partition", p, "end"); s != want[0] || e != want[1] {
			t.Errorf("partition %s: start %s end %s, want %v", p, s, e, want)
		}
	}
	subs := region(t, html, "subscriptions")
	if !strings.Contains(subs, `<a href="/queues/paid">paid</a>`) || !strings.Contains(subs, `{&#34;type&#34;:[&#34;paid&#34;]}`) {
		t.Errorf("the subscription's queue or filter is missing:\n%s", subs)
	}
	if lag, state := cell(t, subs, "data-subscription", "to-paid", "lag"), cell(t, subs, "data-subscription", "to-paid", "state"); lag != "0" || state != "live" {
		t.Errorf("to-paid: lag %s, state %s; want 0, live", lag, state)
	}
	grp := region(t, html, "group-billing")
	for p, want := range map[string][3]string{"0": {"3", "3", "0"}, "1": {"1", "3", "2"}} {
		got := [3]string{cell(t, grp, "data-partition", p, "committed"), cell(t, grp, "data-partition", p, "position"), cell(t, grp, "data-partition", p, "lag")}
		if got != want {
			t.Errorf("billing, partition %s: committed, position, lag = %v, want %v", p, got, want)
		}
	}
	if !strings.Contains(grp, "worker-1") || !strings.Contains(grp, `data-k="lag">2<`) {
		t.Errorf("billing's owner or lag is missing:\n%s", grp)
	}
	members := html[strings.Index(html, `id="group-billing"`):]
	if !strings.Contains(members, `<tr data-member="worker-1">`) {
		t.Errorf("billing's member is not listed")
	}
	// The record view shows the last records of partition 0 by default.
	rec := region(t, html, "read")
	for _, off := range []string{"0", "1", "2"} {
		if !strings.Contains(rec, `<tr data-offset="`+off+`">`) {
			t.Errorf("record %s of partition 0 is not shown", off)
		}
	}
	if !strings.Contains(html, `id="cards"`) || !strings.Contains(html, "Publish /s") {
		t.Errorf("no statistics cards")
	}

	// Unknown topics are 404.
	if status, html := page(t, e.url+"/topics/nope"); status != 404 || !strings.Contains(html, "No such topic") {
		t.Errorf("GET /topics/nope: %d", status)
	}
}

// TestTopicRecordsAreEscapedAndCut: a record's body, key and headers are whatever a
// publisher sent; the page shows them as text, never as markup, long bodies cut and
// binary ones as hex.
func TestTopicRecordsAreEscapedAndCut(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	topicFixture(t, e)
	status, html := page(t, e.url+"/topics/orders?partition=1&offset=0&max=10")
	if status != 200 {
		t.Fatalf("read: %d", status)
	}
	rec := region(t, html, "read")
	for _, hostile := range []string{`<script>alert("body")`, `<b>key</b>`, `<img src=x`} {
		if strings.Contains(html, hostile) {
			t.Errorf("the page carries %s unescaped", hostile)
		}
	}
	for _, escaped := range []string{`&lt;script&gt;alert(&#34;body&#34;)&lt;/script&gt;`, `&lt;b&gt;key&lt;/b&gt;`, `&lt;img src=x onerror=alert(1)&gt;`} {
		if !strings.Contains(rec, escaped) {
			t.Errorf("the record view lacks %s", escaped)
		}
	}
	long := rec[strings.Index(rec, `<tr data-offset="1">`):strings.Index(rec, `<tr data-offset="2">`)]
	if strings.Contains(long, strings.Repeat("0123456789", 60)) || !strings.Contains(long, "in all") {
		t.Errorf("the 2000-byte body is not cut:\n%s", long)
	}
	if bin := rec[strings.Index(rec, `<tr data-offset="2">`):]; !strings.Contains(bin, "binary, 4 bytes") || !strings.Contains(bin, "fffe0001") {
		t.Errorf("the binary body is not shown as hex:\n%s", bin)
	}

	// Offsets outside what is retained, and partitions that do not exist, are said.
	if _, html := page(t, e.url+"/topics/orders?partition=0&offset=99"); !strings.Contains(html, "offset 99 is not retained: partition 0 holds offsets 0 to 2") {
		t.Errorf("an offset past the end is not explained:\n%s", region(t, html, "records"))
	}
	if _, html := page(t, e.url+"/topics/orders?partition=7"); !strings.Contains(html, "there is no partition &#34;7&#34;") {
		t.Errorf("a partition that does not exist is not explained")
	}
	// At the end there is nothing yet, and the page says so.
	if _, html := page(t, e.url+"/topics/orders?partition=0&offset=3"); !strings.Contains(html, "it is the partition&#39;s end") {
		t.Errorf("a read at the end is not explained:\n%s", region(t, html, "records"))
	}
	// The live refresh leaves the record view out.
	if _, html := page(t, e.url+"/topics/orders?live=1"); strings.Contains(html, `id="read"`) || !strings.Contains(html, `id="partitions"`) {
		t.Errorf("?live=1 should render the live sections and not read")
	}
	// Paging: older and newer.
	_, html = page(t, e.url+"/topics/orders?partition=1&offset=1&max=1")
	if !strings.Contains(html, `href="?partition=1&amp;offset=0&amp;max=1#records"`) || !strings.Contains(html, `href="?partition=1&amp;offset=2&amp;max=1#records"`) {
		t.Errorf("no links to the older and newer records:\n%s", region(t, html, "records"))
	}
}

func TestTopicPageWithoutAClientStillShowsTheTopic(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	topicFixture(t, e)
	e.c.opts.Client = nil
	status, html := page(t, e.url+"/topics/orders")
	if status != 200 || !strings.Contains(html, "no client of the node") || !strings.Contains(html, `id="partitions"`) {
		t.Fatalf("without a client: %d\n%s", status, region(t, html, "records"))
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := fmtCount(in); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB", 1 << 30: "1 GiB"} {
		if got := fmtBytes(in); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{850 * time.Millisecond: "850 ms", 1500 * time.Millisecond: "1.5 s", 90 * time.Second: "1 min 30 s",
		time.Hour: "1 h", 168 * time.Hour: "7 d", 50 * time.Hour: "2 d 2 h"} {
		if got := fmtDur(in); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", in, got, want)
		}
	}
	if text, cut, bin := shown([]byte("héllo"), 2); text != "h" || !cut || bin {
		t.Errorf("shown(héllo, 2) = %q %v %v: cut mid-character?", text, cut, bin)
	}
}

func TestPublishRateIsOverTheLastMinute(t *testing.T) {
	t.Parallel()
	h := newHistory(5*time.Second, 10*time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	topic := func(published uint64) []api.Topic {
		return []api.Topic{{Name: "orders", Stats: api.TopicStats{Published: published}}}
	}
	h.sample(nil, topic(100), t0)
	if _, ok := h.publishRate("orders", time.Minute); ok {
		t.Fatal("a rate from one sample")
	}
	// 2 a second for two minutes, then 10 a second for the last minute.
	n := uint64(100)
	for i := 1; i <= 36; i++ {
		if i <= 24 {
			n += 10
		} else {
			n += 50
		}
		h.sample(nil, topic(n), t0.Add(time.Duration(i)*5*time.Second))
	}
	if r, ok := h.publishRate("orders", time.Minute); !ok || r != 10 {
		t.Fatalf("rate over the last minute = %v %v, want 10", r, ok)
	}
	// A topic deleted and created again starts over.
	h.sample(nil, topic(3), t0.Add(37*5*time.Second))
	if r, ok := h.publishRate("orders", time.Minute); ok {
		t.Fatalf("a rate of %v across a counter that went back", r)
	}
	h.sample(nil, nil, t0.Add(38*5*time.Second))
	if _, ok := h.publishRate("orders", time.Minute); ok {
		t.Fatal("a rate for a topic that is gone")
	}
}
