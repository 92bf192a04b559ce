package nativeapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/okibatest"
)

// Abuse: the server stays up, keeps answering well-behaved clients, and loses nothing,
// under idle and half-open connections, floods of queue creation and huge bodies.

// realServer serves okiba with nativeapi.HTTPServer's settings (timeouts, header limit) on
// a loopback listener, as okiba serve does.
func realServer(t *testing.T, cfg broker.Config) (string, *okibatest.Server) {
	t.Helper()
	srv := okibatest.New(t, okibatest.Options{Broker: cfg})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nativeapi.Serve(ctx, ln, nativeapi.New(srv.Broker, nativeapi.Options{}).Handler(), discard, time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String(), srv
}

func TestThousandsOfIdleConnectionsDoNotStarveOthers(t *testing.T) {
	// Not parallel: it takes the process's file descriptors but for a margin, which
	// tests running beside it would need.
	url, _ := realServer(t, broker.Config{})
	e := envAt(t, url)
	e.putQueue("q", `{}`)
	addr := strings.TrimPrefix(url, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Both ends of every connection live in this process: stay inside its file limit.
	n := 2000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && int(lim.Cur) < 2*n+256 {
		n = (int(lim.Cur) - 256) / 2
	}
	t.Logf("%d idle connections", n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		switch i % 3 {
		case 1: // half a request line, then nothing
			c.Write([]byte("POST /v1/queues/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
		case 2: // headers promising a body that never comes
			c.Write([]byte("POST /v1/queues/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{\"body\":"))
		}
		conns = append(conns, c)
	}
	// Everybody else is still served, and the half-sent requests changed nothing.
	ids := e.send("q", "after the idle flood")
	ms := e.receive("q", 10, "")
	if len(ms) != 1 || ms[0].ID != ids[0] {
		t.Fatalf("after %d idle connections: %+v", n, ms)
	}
}

func TestQueueCreationFloodStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	url, srv := realServer(t, broker.Config{MaxQueues: 100})
	e := envAt(t, url)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				// Queues without DLQs, so that every created queue counts once.
				// Not e.do: only the test's own goroutine may end the test.
				r := <-e.doAsync("PUT", fmt.Sprintf("/v1/queues/flood-%d-%d", w, i), `{"dead_letter_queue":"none","max_deliveries":0}`)
				if r == nil {
					return
				}
				mu.Lock()
				codes[r.Status]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if codes[201] != 100 || codes[409] != 300 || len(codes) != 2 {
		t.Fatalf("400 creations against max_queues 100: statuses %v, want 100 × 201 and 300 × 409", codes)
	}
	if n := len(srv.Broker.Queues("flood-")); n != 100 {
		t.Fatalf("%d queues exist, want 100", n)
	}
	// The broker still works.
	e.send("flood-0-0", "hello")
}

func TestHugeBodiesAreRefusedWithoutHurtingOthers(t *testing.T) {
	t.Parallel()
	url, _ := realServer(t, broker.Config{})
	e := envAt(t, url)
	e.putQueue("q", `{}`)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 64 MiB of body, streamed: the server stops reading at its 16 MiB limit.
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte(`{"body":"`))
				chunk := []byte(strings.Repeat("x", 1<<20))
				for j := 0; j < 64; j++ {
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
				pw.Write([]byte(`"}`))
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", url+"/v1/queues/q/messages", pr)
			// The server may close the connection while the body is still being sent,
			// so a transport error is an acceptable answer here; that the limit answers
			// 413 request_too_large is checked in TestRejectedRequestsChangeNothing.
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				if resp.StatusCode != 413 {
					t.Errorf("64 MiB body: HTTP %d, want 413", resp.StatusCode)
				}
				resp.Body.Close()
			}
			pr.Close()
		}()
	}
	ids := e.send("q", "small")
	wg.Wait()
	ms := e.receive("q", 10, "")
	if len(ms) != 1 || ms[0].ID != ids[0] {
		t.Fatalf("after huge bodies the queue holds %+v, want only the small message", ms)
	}
}
