package nativeapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

var discard = slog.New(slog.DiscardHandler)

func TestHTTPServerSettings(t *testing.T) {
	t.Parallel()
	hs := nativeapi.HTTPServer(http.NotFoundHandler(), discard)
	if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.WriteTimeout <= 0 || hs.IdleTimeout <= 0 || hs.MaxHeaderBytes <= 0 {
		t.Fatalf("unset limits: ReadHeaderTimeout %v ReadTimeout %v WriteTimeout %v IdleTimeout %v MaxHeaderBytes %d",
			hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout, hs.MaxHeaderBytes)
	}
	if hs.ReadHeaderTimeout > 30*time.Second {
		t.Errorf("ReadHeaderTimeout %v lets slow clients hold connections", hs.ReadHeaderTimeout)
	}
	// A long poll (up to api.MaxWait) must be answered before the write deadline.
	if hs.WriteTimeout <= api.MaxWait {
		t.Errorf("WriteTimeout %v does not leave room for a %v long poll", hs.WriteTimeout, api.MaxWait)
	}
	if hs.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes %d", hs.MaxHeaderBytes)
	}

	t.Run("nil logger", func(t *testing.T) {
		defer func() {
			r := recover()
			// server/server.go HTTPServer calls logger.Handler() without a nil check,
			// although Options.Logger documents nil as "discard".
			regression(t, r == nil, "HTTPServer(h, nil) panics: %v", r)
		}()
		nativeapi.HTTPServer(http.NotFoundHandler(), nil)
	})
}

// slowEnv serves the API with okiba's HTTPServer settings on a real listener, with the
// timeouts under test shortened so that the test is fast.
func slowEnv(t *testing.T, adjust func(*http.Server)) (*env, string) {
	t.Helper()
	e := newEnv(t, okibatest.Options{})
	hs := nativeapi.HTTPServer(nativeapi.New(e.srv.Broker, nativeapi.Options{}).Handler(), discard)
	adjust(hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return envAt(t, "http://"+ln.Addr().String()), ln.Addr().String()
}

// closedByServer reads from c until the server closes it and returns what it sent.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLong))
	data, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", waitLong)
	}
	return string(data)
}

func TestSlowHeadersAreCutOff(t *testing.T) {
	t.Parallel()
	e, addr := slowEnv(t, func(hs *http.Server) { hs.ReadHeaderTimeout = 200 * time.Millisecond })

	t.Run("stalled", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		begin := time.Now()
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: okiba\r\n") // and never the blank line
		if got := closedByServer(t, c); got != "" {
			t.Errorf("the server answered a request it never finished reading: %q", got)
		}
		if d := time.Since(begin); d < 150*time.Millisecond {
			t.Errorf("cut off after %v, before ReadHeaderTimeout", d)
		}
	})

	t.Run("trickling", func(t *testing.T) {
		// A slowloris client keeps sending header bytes; the timeout bounds the whole
		// header, not the gap between bytes.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: okiba\r\nX-Slow: ")
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
				}
			}
		}()
		closedByServer(t, c)
	})

	// Well-behaved clients are served meanwhile.
	if r := e.do("GET", "/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz: %v", r)
	}
}

func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	e, addr := slowEnv(t, func(hs *http.Server) { hs.ReadTimeout = 300 * time.Millisecond })
	e.putQueue("q", `{}`)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"body":"never finished"}`
	fmt.Fprintf(c, "POST /v1/queues/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	got := closedByServer(t, c)
	if got != "" && !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Fatalf("answer to a stalled body: %q", got)
	}
	if st := e.queue("q").Stats; st.Sent != 0 {
		t.Fatalf("a stalled request sent a message: %s", js(st))
	}
}

func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	_, addr := slowEnv(t, func(*http.Server) {})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: okiba\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 256<<10))
	c.SetReadDeadline(time.Now().Add(waitLong))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", res.StatusCode)
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- nativeapi.Serve(ctx, ln, nativeapi.New(e.srv.Broker, nativeapi.Options{}).Handler(), discard, 5*time.Second)
	}()
	se := envAt(t, "http://"+ln.Addr().String())
	if r := se.do("GET", "/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz: %v", r)
	}
	cancel()
	if err := testkit.Recv(t, errc, waitLong, "Serve to return"); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("still listening after shutdown")
	}
}
