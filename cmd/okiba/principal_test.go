package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/okibatest"
)

func TestPrincipalCommands(t *testing.T) {
	t.Parallel()
	const admin = "admin-token-0123456789abcdef"
	srv := okibatest.New(t, okibatest.Options{Token: admin})
	h := &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL, "OKIBA_TOKEN": admin}}
	h.ok("queue", "create", "orders-1")
	h.ok("queue", "create", "audit")

	r := h.run("principal", "create", "shop", "--grant", "send queue:orders-*", "--grant", "browse queue:*")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	secret := strings.TrimSpace(r.out)
	if !strings.HasPrefix(secret, "okiba_") || strings.Contains(secret, "\n") {
		t.Fatalf("create printed %q on stdout, want the secret alone", r.out)
	}
	contains(t, "create's stderr", r.err, "created principal shop with grants send queue:orders-*, browse queue:*", "will not be shown again")

	// The secret is the principal's token.
	as := func(token string) *harness {
		return &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL, "OKIBA_TOKEN": token}}
	}
	shop := as(secret)
	shop.ok("send", "orders-1", "hello")
	contains(t, "a send it was not granted", shop.fails(1, "send", "audit", "x").err,
		"forbidden", `principal "shop" lacks the send permission on queue:audit`)
	contains(t, "principals without admin", shop.fails(1, "principal", "list").err, "lacks the admin permission")

	list := h.ok("principal", "list")
	contains(t, "list", list, "NAME", "SOURCE", "shop", "api", "1", "send queue:orders-*, browse queue:*", "admin", "config")
	if strings.Contains(list, secret) || strings.Contains(list, admin) {
		t.Fatalf("list shows a secret:\n%s", list)
	}
	var pl api.PrincipalList
	if err := json.Unmarshal([]byte(h.ok("principal", "list", "--json")), &pl); err != nil || len(pl.Principals) != 2 {
		t.Fatalf("list --json: %+v, %v", pl, err)
	}
	contains(t, "show", h.ok("principal", "show", "shop"), "Principal  shop", "Grants", "send queue:orders-*, browse queue:*", "Secrets", "never")
	contains(t, "show declared", h.ok("principal", "show", "admin"), "the server's configuration", "admin *")

	contains(t, "grant", h.ok("principal", "grant", "shop", "send", "queue:audit"),
		"granted shop send queue:audit; its grants: send queue:audit, send queue:orders-*, browse queue:*")
	shop.ok("send", "audit", "now allowed")
	contains(t, "revoke", h.ok("principal", "revoke", "shop", "send", "queue:audit"), "revoked shop send queue:audit")
	shop.fails(1, "send", "audit", "x")
	contains(t, "grant without a pattern", h.ok("principal", "grant", "shop", "metrics"), "metrics *")

	r = h.run("principal", "rotate", "shop", "--keep", "1h")
	if r.code != 0 {
		t.Fatalf("rotate: %+v", r)
	}
	rotated := strings.TrimSpace(r.out)
	if !strings.HasPrefix(rotated, "okiba_") || rotated == secret {
		t.Fatalf("rotate printed %q", r.out)
	}
	contains(t, "rotate's stderr", r.err, "rotated principal shop (its old secret works until", "will not be shown again")
	shop.ok("send", "orders-1", "old secret, within keep")
	as(rotated).ok("send", "orders-1", "new secret")
	r = h.run("principal", "rotate", "shop", "--keep", "0s")
	contains(t, "rotate --keep 0s", r.err, "its old secret no longer works")
	contains(t, "the old secret after keep 0s", as(rotated).fails(1, "send", "orders-1", "x").err, "unauthorized")
	var issued api.IssuedSecret
	if err := json.Unmarshal([]byte(h.ok("principal", "rotate", "shop", "--json")), &issued); err != nil || !strings.HasPrefix(issued.Secret, "okiba_") {
		t.Fatalf("rotate --json: %+v, %v", issued, err)
	}

	// Mistakes: the server's words, or the command line's.
	contains(t, "bad grant", h.fails(1, "principal", "create", "x", "--grant", "write queue:a").err, "invalid_request", `"write" is not a permission`)
	contains(t, "taken", h.fails(1, "principal", "create", "shop").err, "principal_exists")
	contains(t, "declared", h.fails(1, "principal", "delete", "admin").err, "declared in the server's configuration")
	contains(t, "no name", h.fails(2, "principal", "create").err, "missing arguments")
	contains(t, "no permission", h.fails(2, "principal", "grant", "shop").err, "missing arguments")
	contains(t, "negative keep", h.fails(2, "principal", "rotate", "shop", "--keep", "-1s").err, "--keep must not be negative")

	contains(t, "delete", h.ok("principal", "delete", "shop"), "deleted principal shop")
	contains(t, "deleted", h.fails(1, "principal", "show", "shop").err, "principal_not_found")
	if strings.Contains(h.ok("principal", "list"), "shop") {
		t.Fatal("a deleted principal is listed")
	}
}

func TestTokenCommand(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	a, b := strings.TrimSpace(h.ok("token")), strings.TrimSpace(h.ok("token"))
	if a == b || !strings.HasPrefix(a, "okiba_") || auth.CheckSecret(a) != nil {
		t.Fatalf("token printed %q and %q", a, b)
	}
	// It is good as a server's token.
	srv := okibatest.New(t, okibatest.Options{Token: a})
	as := &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL, "OKIBA_TOKEN": a}}
	as.ok("queue", "create", "q")
	h.fails(2, "token", "extra")
}
