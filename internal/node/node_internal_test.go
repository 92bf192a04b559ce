package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/console"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/sqs"
	"github.com/okiba/okiba/internal/testkit"
)

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.1.2.3:1": true, "[::1]:7070": true, "localhost:7070": true,
		"0.0.0.0:7070": false, ":7070": false, "[::]:7070": false, "10.0.0.1:7070": false, "example.com:80": false,
	} {
		if got, err := isLoopback(addr); err != nil || got != want {
			t.Errorf("isLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
}

func TestAddrName(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{"broker.lan:7070": "broker.lan", "Broker.LAN.:1": "broker.lan", "localhost:7070": "localhost",
		"127.0.0.1:7070": "", "[::1]:7070": "", ":7070": "", "0.0.0.0:7070": "", "nonsense": ""} {
		if got := strings.Join(addrName(addr), ","); got != want {
			t.Errorf("addrName(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestEndLongPollsOnShutdown(t *testing.T) {
	t.Parallel()
	shutdown, begin := context.WithCancel(context.Background())
	ended := make(chan string, 2)
	h := endWaitsAtShutdown(shutdown, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/receive") {
			<-r.Context().Done() // a long poll: ends when its context does
			ended <- "receive"
			return
		}
		ended <- fmt.Sprintf("send: %v", r.Context().Err())
	}))
	recv := make(chan struct{})
	go func() {
		defer close(recv)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/queues/q/receive", nil))
	}()
	begin()
	if got := <-ended; got != "receive" {
		t.Fatalf("first to end: %s", got)
	}
	<-recv
	// Other requests keep their own context after shutdown began.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/queues/q/messages", nil).WithContext(context.Background()))
	if got := <-ended; got != "send: <nil>" {
		t.Fatalf("send: %s", got)
	}
}

// A node with a bearer token never serves SQS requests through a front that does not
// verify signatures: the token cannot be bypassed. (Config always gives the front the
// token's key, so the front is swapped here for one without.)
func TestNodeRefusesUnverifiedSQS(t *testing.T) {
	t.Parallel()
	n, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: t.TempDir(), AuthToken: "t-t-t-t-t-t-t-t-t-t-t-t-t",
		Console: ConsoleConfig{Disabled: true}}, Runtime{NoGCPace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	n.sqs = sqs.New(n.Broker(), sqs.Options{})
	req := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
	req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	rec := httptest.NewRecorder()
	n.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("got %d %s, want 401", rec.Code, rec.Body)
	}
}

// Close is idempotent, and a node that failed to open leaves nothing behind: its data
// directory can be opened again at once.
func TestCloseTwiceAndFailedOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: dir}, Runtime{NoGCPace: true})
	if err != nil {
		t.Fatal(err)
	}
	busy, dir2 := n.Addr().String(), t.TempDir()
	if _, err := Open(context.Background(), Config{Addr: busy, Data: dir2}, Runtime{NoGCPace: true}); err == nil ||
		!strings.Contains(err.Error(), "cannot listen") {
		t.Fatalf("a second node on a busy address: %v", err)
	}
	if m, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: dir2}, Runtime{NoGCPace: true}); err != nil {
		t.Fatalf("the failed Open kept its data directory: %v", err)
	} else {
		m.Close(context.Background())
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-n.Stopped():
	default:
		t.Fatal("Stopped not closed after Close")
	}
	// Close released the data directory.
	m, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: dir}, Runtime{NoGCPace: true})
	if err != nil {
		t.Fatalf("reopening the data directory: %v", err)
	}
	m.Close(context.Background())
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/okiba.json"
	if err := os.WriteFile(path, []byte(`{"storage": {"segment_size": "64MiB", "cache_bytes": 1048576, "min_free_disk": "off"},
		"shutdown_grace": "250ms", "limits": {"max_queues": 7}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.SegmentSize != 64<<20 || c.Storage.CacheBytes != 1<<20 || c.Storage.MinFreeDisk != SizeOff ||
		c.ShutdownGrace != Duration(250*time.Millisecond) || c.Limits.MaxQueues != 7 {
		t.Fatalf("loaded %+v", c)
	}
	for _, bad := range []string{`{"storage": {"segment_size": "lots"}}`, `{"shutdown_grace": 30}`, `{"addr": "x"} {}`, `{"nope": 1}`} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFile(path); err == nil {
			t.Errorf("%s loaded", bad)
		}
	}
}

// A playground lesson is traffic of the node's native API, like a user's program: its
// sends, receives and acks are requests the node authenticates and counts in its
// metrics. (The console holds no broker to do them in-process.)
func TestPlaygroundLessonsAreAPITraffic(t *testing.T) {
	t.Parallel()
	const token = "lesson-token-long-enough-yes"
	n, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: t.TempDir(), AuthToken: token},
		Runtime{NoGCPace: true, Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	runLesson(t, n, http.DefaultClient, token)
}

// runLesson runs the playground's delivery lesson through the console at n with hc, and
// checks that its calls were requests of the native API and that its queues are gone.
func runLesson(t *testing.T, n *Node, hc *http.Client, token string) {
	t.Helper()
	call := func(method, path string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, n.URL()+path, strings.NewReader(`{"loss": 0, "total": 4, "rate": 20}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	var run struct {
		ID    string `json:"id"`
		State struct {
			Done bool `json:"done"`
		} `json:"state"`
	}
	call("POST", "/ui/api/playground/delivery", &run)
	testkit.Eventually(t, 20*time.Second, func() bool {
		call("GET", "/ui/api/playground/runs/"+run.ID, &run)
		return run.State.Done
	}, "the delivery lesson to finish")
	call("DELETE", "/ui/api/playground/runs/"+run.ID, nil)

	var scrape strings.Builder
	req, _ := http.NewRequest("GET", n.URL()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&scrape, resp.Body)
	resp.Body.Close()
	for _, want := range []struct{ method, route string }{
		{"PUT", "/v1/queues/{name}"}, {"POST", "/v1/queues/{name}/messages"}, {"POST", "/v1/queues/{name}/receive"},
		{"POST", "/v1/queues/{name}/ack"}, {"GET", "/v1/queues/{name}"}, {"DELETE", "/v1/queues/{name}"},
	} {
		if requests(scrape.String(), want.method, want.route) == 0 {
			t.Errorf("no %s %s request counted while the lesson ran", want.method, want.route)
		}
	}
	if qs := n.Broker().Queues(console.PlaygroundPrefix); len(qs) != 0 {
		t.Fatalf("the lesson's queues are left: %d", len(qs))
	}
}

// requests is how many requests with method and route a Prometheus scrape counts.
func requests(scrape, method, route string) int {
	total := 0
	for line := range strings.Lines(scrape) {
		series, ok := strings.CutPrefix(line, "okiba_http_request_duration_seconds_count{")
		labels, value, found := strings.Cut(series, "} ")
		if !ok || !found || !strings.Contains(labels, `method="`+method+`"`) || !strings.Contains(labels, `route="`+route+`"`) {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSpace(value))
		total += n
	}
	return total
}
