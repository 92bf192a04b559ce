package main

import (
	"net"
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
	contains(t, "--json", h.ok("health", "--server", srv.URL, "--json"), `"status": "ok"`)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	contains(t, "stderr", h.fails(1, "health", "--server", dead).err, "cannot reach")
}
