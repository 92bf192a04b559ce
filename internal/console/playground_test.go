package console

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// runRef is a playground run driven through the console's HTTP endpoints.
type runRef struct {
	t   *testing.T
	e   *env
	id  string
	hdr []string // sent with every request (the token, when the console has one)
}

type jsonState = map[string]any

func (e *env) startRun(t *testing.T, lesson, params string, hdr ...string) *runRef {
	t.Helper()
	r := do(t, "POST", e.url+"/ui/api/playground/"+lesson, strings.NewReader(params), append([]string{"Content-Type", "application/json"}, hdr...)...)
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("start %s: %s", lesson, r.Status)
	}
	var rs struct {
		ID     string   `json:"id"`
		Queues []string `json:"queues"`
	}
	if err := json.NewDecoder(r.Body).Decode(&rs); err != nil {
		t.Fatal(err)
	}
	for _, q := range rs.Queues {
		if !strings.HasPrefix(q, PlaygroundPrefix+rs.ID+"-") {
			t.Fatalf("run queue %q lacks its prefix", q)
		}
	}
	return &runRef{t: t, e: e, id: rs.ID, hdr: hdr}
}

func (r *runRef) state() jsonState {
	r.t.Helper()
	resp := do(r.t, "GET", r.e.url+"/ui/api/playground/runs/"+r.id, nil, r.hdr...)
	if resp.StatusCode != 200 {
		r.t.Fatalf("run %s: %s", r.id, resp.Status)
	}
	var rs struct {
		State jsonState `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		r.t.Fatal(err)
	}
	return rs.State
}

func (r *runRef) control(body string) {
	r.t.Helper()
	if resp := do(r.t, "POST", r.e.url+"/ui/api/playground/runs/"+r.id, strings.NewReader(body), r.hdr...); resp.StatusCode != 200 {
		r.t.Fatalf("control %s: %s", body, resp.Status)
	}
}

func (r *runRef) until(what string, cond func(s jsonState) bool) jsonState {
	r.t.Helper()
	var s jsonState
	testkit.Eventually(r.t, 20*time.Second, func() bool { s = r.state(); return cond(s) },
		"run %s: %s; %s", r.id, what, testkit.Lazy(func() string { return fmt.Sprintf("state %v", s) }))
	return s
}

func (r *runRef) stop() {
	r.t.Helper()
	if resp := do(r.t, "DELETE", r.e.url+"/ui/api/playground/runs/"+r.id, nil, r.hdr...); resp.StatusCode != http.StatusNoContent {
		r.t.Fatalf("stop: %s", resp.Status)
	}
}

// num reads a number at a path of keys.
func num(s jsonState, path ...string) float64 {
	var v any = s
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	f, _ := v.(float64)
	return f
}

func (e *env) playgroundQueues(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, q := range e.b.Queues(PlaygroundPrefix) {
		out = append(out, q.Name)
	}
	return out
}

func TestLessonQueueAbsorbsWhileTheReceiverIsDown(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	r := e.startRun(t, "absorb", `{"rate": 25, "service": 25}`)
	r.until("processing", func(s jsonState) bool { return num(s, "queue", "processed") >= 3 })
	r.control(`{"action": "receiver_down"}`)
	down := r.until("calls failing and the queue growing", func(s jsonState) bool {
		return num(s, "rpc", "failed") >= 5 && num(s, "queue", "depth") >= 5
	})
	if num(down, "little", "lambda") <= 0 || num(down, "little", "w_s") <= 0 {
		t.Fatalf("Little's law not shown: %v", down["little"])
	}
	r.control(`{"action": "receiver_up", "params": {"rate": 2, "service": 40}}`)
	r.until("the queue draining", func(s jsonState) bool {
		return num(s, "queue", "processed") >= num(down, "queue", "sent") && num(s, "queue", "depth") <= 1
	})
	r.stop()
	if qs := e.playgroundQueues(t); len(qs) != 0 {
		t.Fatalf("queues left after stop: %v", qs)
	}
}

func TestLessonDeliveryLosesOrDuplicates(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	r := e.startRun(t, "delivery", `{"loss": 0, "total": 8, "rate": 20}`)
	r.control(`{"action": "lose_next"}`)
	s := r.until("done", func(s jsonState) bool { return s["done"] == true })
	if num(s, "at_most_once", "lost") != 1 || num(s, "at_most_once", "processed") != 7 {
		t.Errorf("at most once: %v", s["at_most_once"])
	}
	if num(s, "at_least_once", "duplicates") != 1 || num(s, "at_least_once", "lost") != 0 || num(s, "at_least_once", "processed") != 8 {
		t.Errorf("at least once: %v", s["at_least_once"])
	}
}

func TestLessonIdempotentConsumerKeepsTheBalance(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	r := e.startRun(t, "idempotent", `{"deposits": 12, "duplicates": 0.5, "rate": 100}`)
	s := r.until("done", func(s jsonState) bool { return s["done"] == true })
	expected, dups := num(s, "expected"), num(s, "duplicates")
	if expected != 1200 || dups < 1 {
		t.Fatalf("expected %v with %v duplicates", expected, dups)
	}
	if got := num(s, "naive", "balance"); got != expected+100*dups {
		t.Errorf("naive balance %v, want %v", got, expected+100*dups)
	}
	if got := num(s, "idempotent", "balance"); got != expected {
		t.Errorf("idempotent balance %v, want %v", got, expected)
	}
	if got := num(s, "idempotent", "skipped"); got != dups {
		t.Errorf("inbox skipped %v, want %v", got, dups)
	}
}

func TestLessonPartitionsKeepKeyOrder(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	r := e.startRun(t, "partitions", `{"keys": 6, "partitions": 3, "per_key": 6, "service_ms": 0}`)
	s := r.until("done", func(s jsonState) bool { return s["done"] == true })
	if s["all_ordered"] != true {
		t.Fatalf("a lane is out of order: %v", s["lanes"])
	}
	for _, ln := range s["lanes"].([]any) {
		last := map[string]float64{}
		for _, it := range ln.(map[string]any)["items"].([]any) {
			m := it.(map[string]any)
			k, seq := m["k"].(string), m["s"].(float64)
			if seq <= last[k] {
				t.Fatalf("key %s: %v after %v", k, seq, last[k])
			}
			last[k] = seq
		}
	}
	r = e.startRun(t, "partitions", `{"keys": 4, "partitions": 1, "per_key": 3, "service_ms": 0}`)
	s = r.until("done", func(s jsonState) bool { return s["done"] == true })
	if s["total_order"] != true {
		t.Fatalf("one partition is not in total order: %v", s["lanes"])
	}
}

func TestPlaygroundRunsEndAndCleanUp(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{MaxRuns: 2, RunIdle: 300 * time.Millisecond})
	a := e.startRun(t, "absorb", `{}`)
	e.startRun(t, "partitions", `{"service_ms": 0}`)
	if r := do(t, "POST", e.url+"/ui/api/playground/absorb", strings.NewReader(`{}`)); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third run: %s", r.Status)
	}
	if r := do(t, "POST", e.url+"/ui/api/playground/absorb", strings.NewReader(`{"rate": 1000}`)); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("out-of-range parameter: %s", r.Status)
	}
	if r := do(t, "POST", e.url+"/ui/api/playground/nope", strings.NewReader(`{}`)); r.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown lesson: %s", r.Status)
	}
	if r := do(t, "POST", e.url+"/ui/api/playground/runs/"+a.id, strings.NewReader(`{"action":"dance"}`)); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown action: %s", r.Status)
	}
	if len(e.playgroundQueues(t)) == 0 {
		t.Fatal("no playground queues while running")
	}
	// Nobody polls: the reaper ends both runs and deletes their queues.
	testkit.Eventually(t, 10*time.Second, func() bool { return e.c.play.count() == 0 && len(e.playgroundQueues(t)) == 0 }, "the reaper to end both runs and delete their queues")
	if r := do(t, "GET", e.url+"/ui/api/playground/runs/"+a.id, nil); r.StatusCode != http.StatusNotFound {
		t.Fatalf("ended run: %s", r.Status)
	}
	// Close ends what is left.
	e.startRun(t, "idempotent", `{}`)
	e.c.Close()
	if n, qs := e.c.play.count(), e.playgroundQueues(t); n != 0 || len(qs) != 0 {
		t.Fatalf("after Close: %d runs, queues %v", n, qs)
	}
}

// countingTransport counts the requests a client makes, by method and route.
type countingTransport struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	route := req.URL.Path
	if rest, ok := strings.CutPrefix(route, "/v1/queues/"); ok {
		name, op, _ := strings.Cut(rest, "/")
		if !strings.HasPrefix(name, PlaygroundPrefix) {
			return nil, fmt.Errorf("a lesson asked for %s, not a queue of its own", req.URL.Path)
		}
		route = "/v1/queues/{name}"
		if op != "" {
			route += "/" + op
		}
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (c *countingTransport) count(route string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[route]
}

// TestLessonsDriveOkibaOverHTTP: a lesson's producers and consumers use the console's
// client and nothing else. Every step they take is a request of the native API (the
// client here speaks plain HTTP, so each is seen), and a client addressed to nowhere
// leaves the lessons unable to start: there is no path to the broker beside it.
func TestLessonsDriveOkibaOverHTTP(t *testing.T) {
	t.Parallel()
	ct := &countingTransport{seen: map[string]int{}}
	counted := func(base string) *client.Client {
		c, err := client.New(base, client.Options{HTTPClient: &http.Client{Transport: ct}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The client must know the console's address before the console exists, as in the
	// node: reserve one, and let start serve on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := startOn(t, ln, "", Options{Client: counted("http://" + ln.Addr().String())})
	r := e.startRun(t, "delivery", `{"loss": 0, "total": 4, "rate": 20}`)
	r.control(`{"action": "lose_next"}`)
	r.until("done", func(s jsonState) bool { return s["done"] == true })
	r.stop()
	for _, route := range []string{
		"PUT /v1/queues/{name}", "POST /v1/queues/{name}/messages", "POST /v1/queues/{name}/receive",
		"POST /v1/queues/{name}/ack", "GET /v1/queues/{name}", "DELETE /v1/queues/{name}",
	} {
		if ct.count(route) == 0 {
			t.Errorf("the lesson made no %s request; it made %v", route, ct.seen)
		}
	}
	if qs := e.playgroundQueues(t); len(qs) != 0 {
		t.Fatalf("queues left after stop: %v", qs)
	}

	// Nowhere: a port that was just free.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "http://" + dead.Addr().String()
	dead.Close()
	e = start(t, "", Options{Client: counted(nowhere)})
	for name := range lessons {
		if r := do(t, "POST", e.url+"/ui/api/playground/"+name, strings.NewReader(`{}`)); r.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("lesson %s with its client addressed to nowhere: %s, want 503", name, r.Status)
		}
	}
	if qs := e.playgroundQueues(t); len(qs) != 0 {
		t.Fatalf("lessons made queues without their client: %v", qs)
	}
}
