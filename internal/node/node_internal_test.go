package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/sqs"
)

func TestIsLoopback(t *testing.T) {
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
	for addr, want := range map[string]string{"broker.lan:7070": "broker.lan", "Broker.LAN.:1": "broker.lan", "localhost:7070": "localhost",
		"127.0.0.1:7070": "", "[::1]:7070": "", ":7070": "", "0.0.0.0:7070": "", "nonsense": ""} {
		if got := strings.Join(addrName(addr), ","); got != want {
			t.Errorf("addrName(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestEndLongPollsOnShutdown(t *testing.T) {
	shutdown, begin := context.WithCancel(context.Background())
	ended := make(chan string, 2)
	h := endLongPolls(shutdown, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	n, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: t.TempDir(), AuthToken: "t",
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
