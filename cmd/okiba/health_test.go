package main

import (
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"

	"github.com/okiba/okiba/okibatest"
)

// okiba health exits 0 against a serving broker (no token needed) and 1 against an
// address where none answers.
func TestHealth(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{Token: "health-token-health-token"})
	h := &harness{t: t, env: map[string]string{}}
	if out := h.ok("health", "--server", srv.URL); out != "ok\n" {
		t.Fatalf("health: %q", out)
	}
	// /healthz and /metrics say which okiba answers, as okiba version does.
	contains(t, "--json", h.ok("health", "--server", srv.URL, "--json"), `"status": "ok"`,
		`"version": "devel"`, `"go_version": "`+runtime.Version()+`"`)
	contains(t, "version", h.ok("version"), "okiba devel", runtime.Version())
	req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer health-token-health-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	contains(t, "/metrics", string(metrics), `okiba_build_info{commit="",go_version="`+runtime.Version()+`",version="devel"} 1`)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	contains(t, "stderr", h.fails(1, "health", "--server", dead).err, "cannot reach")
}

// okiba cluster status says so when its server is a single node.
func TestClusterStatusOfASingleNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	contains(t, "stderr", h.fails(1, "cluster", "status").err, "single node")
	contains(t, "usage", h.fails(2, "cluster").err, "status")
}
