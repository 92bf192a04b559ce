package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/node"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

const token = "metrics-test-token-long-enough"

type env struct {
	b   *broker.Broker
	c   *client.Client
	url string
}

func start(t *testing.T, opts metrics.Options) *env { return startWith(t, opts, t.TempDir(), nil) }

// startWith starts a node on data whose broker's configuration edit changes.
func startWith(t *testing.T, opts metrics.Options, data string, edit func(*broker.Config)) *env {
	t.Helper()
	if opts.ScrapeCache == 0 {
		opts.ScrapeCache = -1 // these tests scrape right after what they change
	}
	m := metrics.New(opts)
	n, err := node.Open(context.Background(), node.Config{
		Addr: "127.0.0.1:0", Data: data, AuthToken: token,
		SQS: node.SQSConfig{Disabled: true}, Console: node.ConsoleConfig{Disabled: true},
	}, node.Runtime{Metrics: m, NoGCPace: true, Broker: func(c *broker.Config) {
		c.CheckpointBytes = 64 << 10
		if edit != nil {
			edit(c)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n.Close(ctx)
	})
	c, err := client.New(n.URL(), client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return &env{b: n.Broker(), c: c, url: n.URL()}
}

func (e *env) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", e.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	v, ok := lookup(fams, name, want...)
	if !ok {
		t.Fatalf("%s%v: no such sample", name, want)
	}
	return v
}

func lookup(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// must returns v, or panics (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestMetricsMatchTheAPIStatsWhenQuiet(t *testing.T) {
	t.Parallel()
	e := start(t, metrics.Options{})
	ctx := context.Background()
	must(e.c.PutQueue(ctx, "orders", api.QueueConfig{MaxDeliveries: ptr(2)}))
	must(e.c.PutQueue(ctx, "small", api.QueueConfig{MaxMessages: ptr(int64(3))}))

	var msgs []client.Message
	for i := range 20 {
		msgs = append(msgs, client.Message{Body: []byte(fmt.Sprintf("order %d", i)), DedupID: fmt.Sprint(i)})
	}
	must(e.c.SendBatch(ctx, "orders", msgs))
	must(e.c.SendBatch(ctx, "orders", msgs[:2])) // two dedup hits
	for i := range 5 {
		_, err := e.c.Send(ctx, "small", client.Message{Body: []byte{byte('a' + i)}})
		if i >= 3 && !client.IsCode(err, api.CodeQueueFull) {
			t.Fatalf("send %d to a full queue: %v, want queue_full", i, err)
		}
	}
	vis := 30 * time.Second
	ds := must(e.c.Receive(ctx, "orders", client.ReceiveOptions{Max: 12, Visibility: &vis}))
	if len(ds) != 12 {
		t.Fatalf("received %d, want 12", len(ds))
	}
	rc := func(ds []client.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Receipt)
		}
		return out
	}
	must(e.c.Ack(ctx, "orders", rc(ds[:5])...))
	must(e.c.Extend(ctx, "orders", time.Minute, rc(ds[5:7])...))
	delay := time.Hour
	must(e.c.Nack(ctx, "orders", &delay, rc(ds[7:9])...))
	must(e.c.DeadLetter(ctx, "orders", "invalid-card", "card number fails Luhn", rc(ds[9:11])...))
	must(e.c.DeadLetter(ctx, "orders", "", "", rc(ds[11:12])...))
	// Two failed deliveries of one message: max_deliveries.
	zero := time.Duration(0)
	for range 2 {
		d := must(e.c.Receive(ctx, "orders", client.ReceiveOptions{Max: 1, Visibility: &zero}))
		if len(d) != 1 {
			t.Fatal("no message to fail")
		}
	}

	// Quiet: wait until the broker's own dead letter has happened, then compare.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return must(e.c.Queue(ctx, "orders")).Stats.DeadLetteredBy["max_deliveries"] == 1
	}, "the broker to dead-letter the message that failed twice")
	// One message set aside: deferred.
	dd := must(e.c.Receive(ctx, "orders", client.ReceiveOptions{Max: 1, Visibility: &vis}))
	if len(dd) != 1 {
		t.Fatal("no message to defer")
	}
	must(e.c.Defer(ctx, "orders", dd[0].Receipt))
	if st := must(e.c.Queue(ctx, "orders")).Stats; st.Deferred != 1 || st.Deferrals != 1 {
		t.Fatalf("orders after a defer: %+v", st)
	}

	// One group parked behind its dead letter.
	must(e.c.PutQueue(ctx, "parking", api.QueueConfig{OnDeadLetter: ptr("park_group")}))
	must(e.c.Send(ctx, "parking", client.Message{Body: []byte("p1"), Group: "g"}))
	must(e.c.Send(ctx, "parking", client.Message{Body: []byte("p2"), Group: "g"}))
	pd := must(e.c.Receive(ctx, "parking", client.ReceiveOptions{Max: 1, Visibility: &vis}))
	if len(pd) != 1 {
		t.Fatal("no message to dead-letter")
	}
	must(e.c.DeadLetter(ctx, "parking", "bad", "", pd[0].Receipt))
	if st := must(e.c.Queue(ctx, "parking")).Stats; st.ParkedGroups != 1 {
		t.Fatalf("parking after a dead-lettered head: %+v", st)
	}

	fams := e.scrape(t)
	qs := must(e.c.Queues(ctx, ""))
	if got := value(t, fams, "okiba_queues"); got != float64(len(qs)) {
		t.Errorf("okiba_queues = %v, want %d", got, len(qs))
	}
	for _, q := range qs {
		st := q.Stats
		check := func(name string, want float64, labels ...string) {
			t.Helper()
			got := value(t, fams, name, append([]string{"queue", q.Name}, labels...)...)
			if got != want {
				t.Errorf("%s{queue=%q %v} = %v, API says %v", name, q.Name, labels, got, want)
			}
		}
		check("okiba_queue_messages", float64(st.Ready), "state", "ready")
		check("okiba_queue_messages", float64(st.Delayed), "state", "delayed")
		check("okiba_queue_messages", float64(st.InFlight), "state", "in_flight")
		check("okiba_queue_messages", float64(st.Deferred), "state", "deferred")
		check("okiba_queue_deferrals_total", float64(st.Deferrals))
		check("okiba_parked_groups", float64(st.ParkedGroups))
		check("okiba_queue_bytes", float64(st.Bytes))
		check("okiba_queue_dead_letters", float64(st.DeadLetters))
		check("okiba_queue_sent_total", float64(st.Sent))
		check("okiba_queue_acked_total", float64(st.Acked))
		check("okiba_queue_nacked_total", float64(st.Nacked))
		check("okiba_queue_delivered_total", float64(st.Delivered))
		check("okiba_queue_redelivered_total", float64(st.Redelivered))
		check("okiba_queue_lease_extensions_total", float64(st.Extended))
		check("okiba_queue_expired_total", float64(st.Expired))
		check("okiba_queue_dead_lettered_in_total", float64(st.DeadLetteredIn))
		check("okiba_queue_dedup_hits_total", float64(st.DedupHits))
		check("okiba_queue_refused_total", float64(st.Refused))
		for reason, n := range st.DeadLetteredBy {
			check("okiba_queue_dead_lettered_total", float64(n), "reason", reason)
		}
	}
	// The scenario really exercised what it compares.
	o := must(e.c.Queue(ctx, "orders")).Stats
	if o.DedupHits != 2 || o.DeadLetteredBy["invalid-card"] != 2 || o.DeadLetteredBy["consumer"] != 1 || o.Extended != 2 || o.Nacked != 2 || o.Delayed != 2 {
		t.Errorf("scenario did not happen as planned: %+v", o)
	}
	if s := must(e.c.Queue(ctx, "small")).Stats; s.Refused != 2 {
		t.Errorf("small refused %d, want 2", s.Refused)
	}

	// Storage and HTTP measurements.
	for _, name := range []string{"okiba_wal_append_seconds", "okiba_wal_fsync_seconds", "okiba_wal_batch_records", "okiba_wal_batch_bytes"} {
		if n := value(t, fams, name); n == 0 {
			t.Errorf("%s has no observations", name)
		}
	}
	if n := value(t, fams, "okiba_wal_records_total"); n == 0 {
		t.Error("okiba_wal_records_total is 0")
	}
	if n := value(t, fams, "okiba_storage_healthy"); n != 1 {
		t.Errorf("okiba_storage_healthy = %v", n)
	}
	if n := value(t, fams, "okiba_http_request_duration_seconds", "route", "/v1/queues/{name}/messages", "method", "POST", "code", "200"); n < 2 {
		t.Errorf("send requests observed: %v", n)
	}
	if n := value(t, fams, "okiba_http_request_duration_seconds", "route", "/v1/queues/{name}/messages", "code", "429"); n != 2 {
		t.Errorf("refused sends observed: %v, want 2", n)
	}
	if err := e.b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if n := value(t, e.scrape(t), "okiba_checkpoint_seconds"); n == 0 {
		t.Error("okiba_checkpoint_seconds has no observations")
	}
}

func TestMetricsRefuseWithoutToken(t *testing.T) {
	t.Parallel()
	e := start(t, metrics.Options{NoRuntime: true})
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: %s", resp.Status)
	}
	// The refusal itself is measured, under its own route.
	fams := e.scrape(t)
	if n := value(t, fams, "okiba_http_request_duration_seconds", "route", "unauthorized", "code", "401"); n != 1 {
		t.Errorf("unauthorized requests observed: %v", n)
	}
	if _, ok := lookup(fams, "go_goroutines"); ok {
		t.Error("NoRuntime still exports go_* metrics")
	}
}

func TestDeadLetterReasonsAreBounded(t *testing.T) {
	t.Parallel()
	e := start(t, metrics.Options{MaxReasons: 3, NoRuntime: true})
	ctx := context.Background()
	must(e.c.PutQueue(ctx, "jobs", api.QueueConfig{}))
	// Reasons r0..r5 with r0 most frequent; then later r6.
	fail := func(reason string, n int) {
		t.Helper()
		for range n {
			must(e.c.Send(ctx, "jobs", client.Message{Body: []byte(reason)}))
		}
		ds := must(e.c.Receive(ctx, "jobs", client.ReceiveOptions{Max: n}))
		var rs []string
		for _, d := range ds {
			rs = append(rs, d.Receipt)
		}
		must(e.c.DeadLetter(ctx, "jobs", reason, "", rs...))
	}
	for i := range 6 {
		fail(fmt.Sprintf("r%d", i), 6-i)
	}
	fail("consumer", 1)
	fams := e.scrape(t)
	got := map[string]float64{}
	for _, m := range fams["okiba_queue_dead_lettered_total"].Metric {
		var q, r string
		for _, l := range m.Label {
			switch l.GetName() {
			case "queue":
				q = l.GetValue()
			case "reason":
				r = l.GetValue()
			}
		}
		if q == "jobs" {
			got[r] = m.Counter.GetValue()
		}
	}
	want := map[string]float64{"r0": 6, "r1": 5, "r2": 4, "other": 3 + 2 + 1, "consumer": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters by reason label = %v, want %v", got, want)
	}
	// A new reason that is frequent later still counts as other: labels stick, and
	// other only grows.
	fail("r6", 8)
	fail("r0", 1)
	fams = e.scrape(t)
	if v := value(t, fams, "okiba_queue_dead_lettered_total", "queue", "jobs", "reason", "other"); v != 14 {
		t.Errorf("other = %v, want 14", v)
	}
	if v := value(t, fams, "okiba_queue_dead_lettered_total", "queue", "jobs", "reason", "r0"); v != 7 {
		t.Errorf("r0 = %v, want 7", v)
	}
	if _, ok := lookup(fams, "okiba_queue_dead_lettered_total", "queue", "jobs", "reason", "r6"); ok {
		t.Error("r6 got its own series beyond MaxReasons")
	}
}

func TestMethodAndRouteLabelsStayBounded(t *testing.T) {
	t.Parallel()
	e := start(t, metrics.Options{NoRuntime: true})
	for i := range 5 {
		req, _ := http.NewRequest(fmt.Sprintf("BREW%d", i), e.url+fmt.Sprintf("/no/such/route/%d", i), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	fams := e.scrape(t)
	var series []string
	for _, m := range fams["okiba_http_request_duration_seconds"].Metric {
		var parts []string
		for _, l := range m.Label {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
		series = append(series, strings.Join(parts, ","))
	}
	if len(series) != 1 || series[0] != "code=404,method=other,route=/" {
		t.Fatalf("series = %v, want one for route / and method other", series)
	}
}

func ptr[T any](v T) *T { return &v }

// TestDocumentedMetricsExist keeps docs/operations.md honest: every okiba_* name in its
// metrics table, alert rules and Grafana dashboard is exported, and the dashboard is
// valid JSON.
func TestDocumentedMetricsExist(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	from, to := strings.Index(text, "### Metrics"), strings.Index(text, "### Logs")
	if from < 0 || to < from {
		t.Fatal("docs/operations.md lost its Metrics … Logs sections")
	}
	section := text[from:to]
	at := strings.Index(section, "```json\n")
	if at < 0 {
		t.Fatal("no dashboard JSON in docs/operations.md")
	}
	end := strings.Index(section[at+8:], "\n```")
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(section[at+8:at+8+end]), &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard JSON: %v", err)
	}

	// Make every family appear: sends, settles, dead letters, a checkpoint, requests, a
	// topic with a consumer group and a subscription.
	e := start(t, metrics.Options{})
	ctx := context.Background()
	must(e.c.PutQueue(ctx, "q", api.QueueConfig{}))
	must(e.c.Send(ctx, "q", client.Message{Body: []byte("x")}))
	ds := must(e.c.Receive(ctx, "q", client.ReceiveOptions{Max: 1}))
	must(e.c.DeadLetter(ctx, "q", "bad", "", ds[0].Receipt))
	must(e.c.PutTopic(ctx, "t", api.TopicConfig{}))
	must(e.c.Subscribe(ctx, "t", "s", api.SubscriptionRequest{Queue: "q"}))
	e.call(t, "PUT", "/v1/topics/t/groups/g", api.GroupConfig{}, nil)
	if err := e.b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Scrub(ctx); err != nil {
		t.Fatal(err)
	}
	fams := e.scrape(t)
	if v := value(t, fams, "okiba_scrub_last_ok"); v != 1 {
		t.Errorf("okiba_scrub_last_ok = %v after a clean scrub", v)
	}
	if v := value(t, fams, "okiba_disk_margin_bytes"); v <= 0 {
		t.Errorf("okiba_disk_margin_bytes = %v on a disk with room", v)
	}
	names := regexp.MustCompile(`okiba_[a-z_]+`).FindAllString(section, -1)
	if len(names) < 30 {
		t.Fatalf("only %d metric names found in the docs", len(names))
	}
	for _, n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if fams[base] == nil {
				base = strings.TrimSuffix(base, suffix)
			}
		}
		if fams[base] == nil {
			t.Errorf("docs/operations.md names %s, which /metrics does not export", n)
		}
	}
}

// TestBodyFailuresAreCounted: a body that fails its checksum moves
// okiba_corrupt_bodies_total and the dead letters of reason corrupt; a read that fails
// with an I/O error moves okiba_body_read_errors_total.
func TestBodyFailuresAreCounted(t *testing.T) {
	data := t.TempDir()
	var failing atomic.Bool
	fs := vfs.NewFaulty(vfs.OS, func(e vfs.Event) error {
		if e.Op == vfs.OpRead && failing.Load() && strings.HasSuffix(e.Name, ".wal") && e.Length > 8 {
			return vfs.ErrInjected
		}
		return nil
	})
	e := startWith(t, metrics.Options{}, data, func(c *broker.Config) { c.CacheBytes, c.FS = -1, fs })
	ctx := context.Background()
	must(e.c.PutQueue(ctx, "q", api.QueueConfig{}))
	must(e.c.Send(ctx, "q", client.Message{Body: []byte("this body will rot on disk")}))
	must(e.c.Send(ctx, "q", client.Message{Body: []byte("this one will not")}))
	seg := filepath.Join(data, "wal", "00000001.wal")
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := int64(bytes.Index(raw, []byte("will rot")))
	if _, err := f.WriteAt([]byte("WILL ROT"), at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if ds := must(e.c.Receive(ctx, "q", client.ReceiveOptions{Max: 10})); len(ds) != 1 || string(ds[0].Body) != "this one will not" {
		t.Fatalf("receive: %d messages", len(ds))
	}
	fams := e.scrape(t)
	if v := value(t, fams, "okiba_corrupt_bodies_total"); v != 1 {
		t.Fatalf("okiba_corrupt_bodies_total = %v, want 1", v)
	}
	if v := value(t, fams, "okiba_queue_dead_lettered_total", "queue", "q", "reason", "corrupt"); v != 1 {
		t.Fatalf("dead letters of reason corrupt = %v, want 1", v)
	}
	if v := value(t, fams, "okiba_body_read_errors_total"); v != 0 {
		t.Fatalf("okiba_body_read_errors_total = %v before any failed read", v)
	}
	must(e.c.Send(ctx, "q", client.Message{Body: []byte("unreadable for a moment")}))
	failing.Store(true)
	_, err = e.c.Receive(ctx, "q", client.ReceiveOptions{Max: 10})
	failing.Store(false)
	if err == nil {
		t.Fatal("a receive whose only body could not be read succeeded")
	}
	if v := value(t, e.scrape(t), "okiba_body_read_errors_total"); v != 1 {
		t.Fatalf("okiba_body_read_errors_total = %v, want 1", v)
	}
}

// call makes a request of the native API with the token and decodes the answer into out:
// the consumer-group calls, which this branch's Go client does not have.
func (e *env) call(t *testing.T, method, path string, in, out any) {
	t.Helper()
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, e.url+path, &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e api.ErrorBody
		json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("%s %s: %s %+v", method, path, resp.Status, e.Error)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// TestTopicGroupAndSubscriptionMetrics: after publishing, reading and committing, the
// topic, group and subscription series say what the API says, and move when the group
// commits the rest.
func TestTopicGroupAndSubscriptionMetrics(t *testing.T) {
	t.Parallel()
	e := start(t, metrics.Options{NoRuntime: true})
	ctx := context.Background()
	must(e.c.PutTopic(ctx, "orders", api.TopicConfig{Partitions: ptr(2)}))
	must(e.c.PutQueue(ctx, "small", api.QueueConfig{MaxMessages: ptr(int64(2))}))
	must(e.c.PutQueue(ctx, "paid", api.QueueConfig{}))
	must(e.c.Subscribe(ctx, "orders", "to-small", api.SubscriptionRequest{Queue: "small"}))
	must(e.c.Subscribe(ctx, "orders", "to-paid", api.SubscriptionRequest{Queue: "paid", Filter: json.RawMessage(`{"type":["paid"]}`)}))
	e.call(t, "PUT", "/v1/topics/orders/groups/billing", api.GroupConfig{}, nil)
	e.call(t, "PUT", "/v1/topics/orders/groups/audit", api.GroupConfig{}, nil)
	// Three records in each partition; two of them paid.
	var recs []client.Record
	for i := range 6 {
		kind := "placed"
		if i == 1 || i == 4 {
			kind = "paid"
		}
		recs = append(recs, client.Record{Partition: ptr(i / 3), Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: map[string]string{"type": kind}})
	}
	for _, p := range must(e.c.PublishRecords(ctx, "orders", recs)) {
		if p.Err != nil {
			t.Fatal(p.Err)
		}
	}
	// billing's one member is handed all six and commits partition 0 and one record of
	// partition 1; audit reads nothing.
	var pulled api.PullResponse
	e.call(t, "POST", "/v1/topics/orders/groups/billing/pull", api.PullRequest{Member: "b1"}, &pulled)
	if len(pulled.Records) != 6 || len(pulled.Assignment) != 2 {
		t.Fatalf("pull: %d records, assignment %+v", len(pulled.Records), pulled.Assignment)
	}
	epoch := map[int]uint64{}
	for _, a := range pulled.Assignment {
		epoch[a.Partition] = a.Epoch
	}
	commit := func(offs ...api.CommitOffset) {
		t.Helper()
		var res api.ReceiptsResponse
		e.call(t, "POST", "/v1/topics/orders/groups/billing/commit", api.CommitRequest{Member: "b1", Session: pulled.Session, Offsets: offs}, &res)
		for _, r := range res.Results {
			if r.Error != nil {
				t.Fatalf("commit %+v: %+v", offs, r.Error)
			}
		}
	}
	commit(api.CommitOffset{Partition: 0, Offset: 3, Epoch: epoch[0]}, api.CommitOffset{Partition: 1, Offset: 1, Epoch: epoch[1]})

	// The small queue holds two; its subscription pauses with the other four behind.
	testkit.Eventually(t, 10*time.Second, func() bool {
		s := must(e.c.Subscription(ctx, "orders", "to-small"))
		return s.Paused && s.Lag == 4
	}, "to-small to pause four records behind")
	// Lag in time is whole milliseconds of the broker's clock: wait until it is visible.
	var fams map[string]*dto.MetricFamily
	testkit.Eventually(t, 10*time.Second, func() bool {
		fams = e.scrape(t)
		v, _ := lookup(fams, "okiba_group_lag_seconds", "topic", "orders", "group", "audit")
		return v > 0
	}, "okiba_group_lag_seconds of audit above 0")

	top := must(e.c.Topic(ctx, "orders"))
	tl := []string{"topic", "orders"}
	for name, want := range map[string]float64{
		"okiba_topics":                        1,
		"okiba_topic_records_total":           6,
		"okiba_topic_truncated_records_total": 0,
		"okiba_topic_retained_records":        6,
		"okiba_topic_retained_bytes":          float64(top.Stats.Bytes),
	} {
		labels := tl
		if name == "okiba_topics" {
			labels = nil
		}
		if got := value(t, fams, name, labels...); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if top.Stats.Bytes <= 0 {
		t.Errorf("the topic retains %d bytes", top.Stats.Bytes)
	}
	for _, c := range []struct {
		name, group string
		want        float64
	}{
		{"okiba_group_lag_records", "billing", 2},
		{"okiba_group_lag_records", "audit", 6},
		{"okiba_group_members", "billing", 1},
		{"okiba_group_members", "audit", 0},
		{"okiba_group_lost_to_retention_total", "billing", 0},
	} {
		if got := value(t, fams, c.name, "topic", "orders", "group", c.group); got != c.want {
			t.Errorf("%s{group=%q} = %v, want %v", c.name, c.group, got, c.want)
		}
	}
	for _, c := range []struct {
		name, sub, queue string
		want             float64
	}{
		{"okiba_subscription_lag_records", "to-small", "small", 4},
		{"okiba_subscription_paused", "to-small", "small", 1},
		{"okiba_subscription_delivered_total", "to-small", "small", 2},
		{"okiba_subscription_lag_records", "to-paid", "paid", 0},
		{"okiba_subscription_paused", "to-paid", "paid", 0},
		{"okiba_subscription_delivered_total", "to-paid", "paid", 2},
		{"okiba_subscription_lost_to_retention_total", "to-paid", "paid", 0},
	} {
		if got := value(t, fams, c.name, "topic", "orders", "subscription", c.sub, "queue", c.queue); got != c.want {
			t.Errorf("%s{subscription=%q} = %v, want %v", c.name, c.sub, got, c.want)
		}
	}
	if got := value(t, fams, "okiba_group_lag_seconds", "topic", "orders", "group", "billing"); got <= 0 {
		t.Errorf("billing is two records behind, but okiba_group_lag_seconds = %v", got)
	}

	// billing commits the rest: caught up, in records and in time.
	commit(api.CommitOffset{Partition: 1, Offset: 3, Epoch: epoch[1]})
	fams = e.scrape(t)
	if got := value(t, fams, "okiba_group_lag_records", "topic", "orders", "group", "billing"); got != 0 {
		t.Errorf("billing's lag after committing everything: %v records", got)
	}
	if got := value(t, fams, "okiba_group_lag_seconds", "topic", "orders", "group", "billing"); got != 0 {
		t.Errorf("billing's lag after committing everything: %v s", got)
	}
	// A deleted topic takes its series with it.
	if err := e.c.DeleteTopic(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	fams = e.scrape(t)
	for _, name := range []string{"okiba_topic_records_total", "okiba_group_lag_records", "okiba_subscription_paused"} {
		if _, ok := lookup(fams, name, "topic", "orders"); ok {
			t.Errorf("%s still has a series for the deleted topic", name)
		}
	}
	if got := value(t, fams, "okiba_topics"); got != 0 {
		t.Errorf("okiba_topics = %v after the delete", got)
	}
}

// Scrapers in a loop cost the broker one visit of its queues per ScrapeCache: a scrape
// within it answers with the last one's series, and the next one after it sees changes.
func TestScrapesAreCachedForASecond(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := start(t, metrics.Options{NoRuntime: true, ScrapeCache: time.Second, Now: clk})
	must(e.c.PutQueue(context.Background(), "first", api.QueueConfig{}))
	has := func(q string) bool {
		for _, m := range e.scrape(t)["okiba_queue_messages"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == q {
					return true
				}
			}
		}
		return false
	}
	if !has("first") {
		t.Fatal("the first scrape misses the queue")
	}
	must(e.c.PutQueue(context.Background(), "second", api.QueueConfig{}))
	if has("second") {
		t.Fatal("a scrape within the second visited the broker again")
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if !has("second") {
		t.Fatal("a scrape after the second answered from the cache")
	}
}

// Dedup ids are visible per queue and for the server, with the server's bound.
func TestDedupIDsAreVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := start(t, metrics.Options{NoRuntime: true})
	win := api.Duration(time.Minute)
	must(e.c.PutQueue(ctx, "d", api.QueueConfig{DedupWindow: &win}))
	for _, id := range []string{"x", "y", "x"} {
		must(e.c.Send(ctx, "d", client.Message{Body: []byte(id), DedupID: id}))
	}
	fams := e.scrape(t)
	value := func(name string) float64 {
		ms := fams[name].GetMetric()
		if len(ms) != 1 {
			t.Fatalf("%s: %d series", name, len(ms))
		}
		return ms[0].GetGauge().GetValue()
	}
	if got := value("okiba_dedup_ids"); got != 2 {
		t.Errorf("okiba_dedup_ids = %v, want 2", got)
	}
	if got := value("okiba_dedup_ids_limit"); got != float64(queue.DefaultDedupTotal) {
		t.Errorf("okiba_dedup_ids_limit = %v", got)
	}
	for _, m := range fams["okiba_queue_dedup_ids"].GetMetric() {
		want := 0.0
		if m.GetLabel()[0].GetValue() == "d" {
			want = 2
		}
		if got := m.GetGauge().GetValue(); got != want {
			t.Errorf("okiba_queue_dedup_ids%v = %v, want %v", m.GetLabel(), got, want)
		}
	}
}
