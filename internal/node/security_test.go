package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/audit"
	"github.com/okiba/okiba/internal/testkit"
)

const adminToken = "admin-token-admin-token-1"

func open(t *testing.T, cfg Config, rt Runtime) *Node {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Data == "" {
		cfg.Data = t.TempDir()
	}
	rt.NoGCPace = true
	n, err := Open(context.Background(), cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func call(t *testing.T, n *Node, method, path, token, body string) (int, api.Error) {
	t.Helper()
	req, err := http.NewRequest(method, n.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error api.Error }
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error
}

// Weak or mistyped tokens are refused at start, saying the minimum, rather than
// accepted (a 1-character token) or silently unusable (surrounding whitespace).
func TestWeakTokensAreRefusedAtStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ token, want string }{
		{"a", "at least 22"},
		{"short-token", "at least 22"},
		{" " + adminToken, "whitespace"},
		{adminToken + "\n", "whitespace"},
		{"admin token with spaces inside", "whitespace"},
	} {
		_, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: t.TempDir(), AuthToken: c.token}, Runtime{NoGCPace: true})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "auth_token" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token %q: %v, want a ConfigError on auth_token saying %q", c.token, err, c.want)
		}
	}
	// A token file's trailing newline is not part of the token.
	f := filepath.Join(t.TempDir(), "token")
	os.WriteFile(f, []byte(adminToken+"\n"), 0o600)
	n := open(t, Config{AuthTokenFile: f, Console: ConsoleConfig{Disabled: true}}, Runtime{})
	if st, _ := call(t, n, "GET", "/v1/queues", adminToken, ""); st != 200 {
		t.Fatalf("with the file's token: %d", st)
	}
}

// Declared principals get what their grants say and nothing more; a refusal is 403
// forbidden naming the permission; /metrics needs the metrics permission or browse on *.
func TestDeclaredPrincipalsAndMetrics(t *testing.T) {
	t.Parallel()
	n := open(t, Config{AuthToken: adminToken, Console: ConsoleConfig{Disabled: true}, Principals: []PrincipalConfig{
		{Name: "producer", Secret: "producer-secret-producer-1", Grants: []string{"send queue:orders-*"}},
		{Name: "prometheus", Secret: "prometheus-secret-prometheus", Grants: []string{"metrics"}},
		{Name: "viewer", Secret: "viewer-secret-viewer-secret", Grants: []string{"browse *"}},
	}}, Runtime{})
	if st, e := call(t, n, "PUT", "/v1/queues/orders-eu", adminToken, "{}"); st >= 300 {
		t.Fatalf("admin creates: %d %v", st, e)
	}
	if st, e := call(t, n, "POST", "/v1/queues/orders-eu/messages", "producer-secret-producer-1", `{"messages":[{"body":"x"}]}`); st != 200 {
		t.Fatalf("producer sends: %d %v", st, e)
	}
	st, e := call(t, n, "POST", "/v1/queues/orders-eu/purge", "producer-secret-producer-1", "")
	if st != 403 || e.Code != api.CodeForbidden || !strings.Contains(e.Message, "manage") || !strings.Contains(e.Message, "queue:orders-eu") {
		t.Fatalf("producer purges: %d %+v", st, e)
	}
	if st, _ := call(t, n, "GET", "/v1/queues/orders-eu", "producer-secret-producer-1", ""); st != 403 {
		t.Fatalf("producer browses: %d", st)
	}
	for token, want := range map[string]int{"prometheus-secret-prometheus": 200, "viewer-secret-viewer-secret": 200, "producer-secret-producer-1": 403, adminToken: 200, "": 401} {
		if st, _ := call(t, n, "GET", "/metrics", token, ""); st != want {
			t.Errorf("/metrics with %q: %d, want %d", token, st, want)
		}
	}
	if st, _ := call(t, n, "GET", "/v1/queues", "prometheus-secret-prometheus", ""); st != 200 {
		t.Errorf("a list is filtered, not refused: %d", st)
	}
	if st, _ := call(t, n, "GET", "/healthz", "", ""); st != 200 {
		t.Errorf("/healthz without a token: %d", st)
	}
}

// Management actions and refusals reach the audit file: who, what, from where, outcome.
func TestAuditLogOfAServer(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "audit.log")
	n := open(t, Config{AuthToken: adminToken, AuditLog: file, Console: ConsoleConfig{Disabled: true}, Principals: []PrincipalConfig{
		{Name: "producer", Secret: "producer-secret-producer-1", Grants: []string{"send queue:*"}},
	}}, Runtime{})
	call(t, n, "PUT", "/v1/queues/orders", adminToken, "{}")
	call(t, n, "POST", "/v1/queues/orders/messages", "producer-secret-producer-1", `{"messages":[{"body":"x"}]}`) // not management
	call(t, n, "DELETE", "/v1/queues/orders", "producer-secret-producer-1", "")
	call(t, n, "DELETE", "/v1/queues/orders", "producer-secret-producer-1", "")
	call(t, n, "GET", "/v1/queues", "wrong-token-wrong-token-wrong", "")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit file: %v %v", fi, err)
	}
	var got []audit.Event
	testkit.Eventually(t, 5*time.Second, func() bool {
		got = got[:0]
		f, _ := os.Open(file)
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e audit.Event
			json.Unmarshal(sc.Bytes(), &e)
			got = append(got, e)
		}
		return len(got) >= 2
	}, "two audit lines")
	if a := got[0]; a.Kind != "action" || a.Principal != "admin" || a.Action != "PUT /v1/queues/orders" || a.Resource != "queue:orders" || a.Outcome != "ok" || a.Source != "127.0.0.1" {
		t.Errorf("the create: %+v", a)
	}
	if r := got[1]; r.Kind != "refused" || r.Principal != "producer" || r.Permission != "manage" || r.Outcome != "forbidden" {
		t.Errorf("the refused delete: %+v", r)
	}
	// The second refused delete and the wrong token come from the same source within the
	// minute: counted, not written (the summary comes at the window's end).
	if len(got) != 2 {
		t.Errorf("lines: %+v", got)
	}
}

// Wrong tokens are answered at once up to the burst, then only as the source's bucket
// refills, on the node's clock; the right token is never delayed.
func TestWrongTokensAreThrottled(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Now())
	n := open(t, Config{AuthToken: adminToken, Console: ConsoleConfig{Disabled: true}}, Runtime{Clock: fc})
	for i := range 10 {
		if st, _ := call(t, n, "GET", "/v1/queues", "wrong-token-wrong-token-wrong", ""); st != 401 {
			t.Fatalf("guess %d: %d", i, st)
		}
	}
	answered := make(chan int, 1)
	go func() {
		st, _ := call(t, n, "GET", "/v1/queues", "wrong-token-wrong-token-wrong", "")
		answered <- st
	}()
	if err := fc.WaitTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if st, _ := call(t, n, "GET", "/v1/queues", adminToken, ""); st != 200 {
		t.Fatalf("the right token while a guess waits: %d", st)
	}
	select {
	case st := <-answered:
		t.Fatalf("the eleventh guess was answered (%d) before its turn", st)
	default:
	}
	fc.Advance(time.Second)
	if st := testkit.Recv(t, (<-chan int)(answered), 5*time.Second, "the delayed answer"); st != 401 {
		t.Fatalf("the delayed answer: %d", st)
	}
}

// Headers are bounded at the documented 64 KiB, and a declared body over the limit is
// refused before it is read, even when the client waits for "100 Continue".
func TestHeaderAndBodyLimits(t *testing.T) {
	t.Parallel()
	n := open(t, Config{Console: ConsoleConfig{Disabled: true}}, Runtime{})
	headers := func(size int) int {
		conn, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := "GET /v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + strings.Repeat("a", size) + "\r\n\r\n"
		go conn.Write([]byte(req))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := headers(62 << 10); st != 200 {
		t.Errorf("62 KiB of headers: %d", st)
	}
	if st := headers(65 << 10); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("65 KiB of headers: %d, want 431", st)
	}

	conn, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/queues/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", api.MaxRequestBody+1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize body with Expect: 100-continue: %d, want 413 at once", resp.StatusCode)
	}
}
