package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
