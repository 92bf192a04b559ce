package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/dialect"
	"github.com/okiba/okiba/internal/testkit"
)

// A bounded, faulty CampusCafe run passes its checks; reconcile then repairs the naive
// projections' drift.
func TestDemoCampusCafeCheckAndReconcile(t *testing.T) {
	// Not parallel: the scenarios run on the real clock with 150ms leases. A consumer that
	// other tests starve of processor time lets its leases end, the messages come back,
	// and that is more work: run beside the other tests (and split in two to run beside
	// each other), they made this package take minutes in the unit tier.
	h := &harness{t: t, env: map[string]string{}}
	dir := t.TempDir()
	out := h.ok("demo", "campuscafe", "--orders", "40", "--check", "--data", dir, "--broker-addr", "127.0.0.1:0",
		"--ack-fail-rate", "0.6", "--crash-rate", "0.05", "--duplicate-rate", "0.3", "--lease", "150ms", "--seed", "3")
	contains(t, "summary", out, "40 placed", "inventory (naive)", "result: every invariant holds")
	matches(t, "summary", out, `inventory\s+0 missing, 0 extra, 0 different`)

	out = h.ok("demo", "campuscafe", "reconcile", "--data", dir, "--dry-run")
	contains(t, "dry run", out, "inventory: 0 missing, 0 extra, 0 different")
	matches(t, "dry run", out, `inventory \(naive\): 0 missing, 0 extra, [1-9]\d* different`)
	out = h.ok("demo", "campuscafe", "reconcile", "--data", dir)
	contains(t, "reconcile", out, "rebuilt from the source of truth", "after:  0 missing, 0 extra, 0 different")
	out = h.ok("demo", "campuscafe", "reconcile", "--data", dir, "--dry-run")
	if strings.Count(out, " 0 missing, 0 extra, 0 different") != 4 {
		t.Fatalf("drift remains after reconcile:\n%s", out)
	}

	// The topic, replayed from offset 0 with the run's duplicates in it, rebuilds the
	// inventory the orders say; once an order disagrees with its events, the check fails
	// and names the row.
	out = h.ok("demo", "campuscafe", "rebuild", "--data", dir, "--check")
	contains(t, "rebuild", out, "from offset 0 into table inventory_rebuild", "40 OrderPlaced applied",
		"inventory_rebuild: 0 missing, 0 extra, 0 different", "the rebuilt inventory agrees with the orders")
	corruptOrder(t, filepath.Join(dir, "campuscafe.db"))
	r := h.fails(1, "demo", "campuscafe", "rebuild", "--data", dir, "--check")
	contains(t, "rebuild --check after an order changed", r.out, "inventory_rebuild: 0 missing, 0 extra, 1 different", "DISAGREE")
	matches(t, "rebuild --check after an order changed", r.out, `different +\w+: want \d+, got \d+`)

	// Against a running server instead of the embedded broker (OKIBA_SERVER).
	srv := newHarness(t)
	sdir := t.TempDir()
	out = srv.ok("demo", "campuscafe", "--orders", "15", "--check", "--data", sdir,
		"--ack-fail-rate", "0.3", "--duplicate-rate", "0.3", "--lease", "150ms")
	contains(t, "summary with --server", out, "broker "+srv.srv.URL, "result: every invariant holds")
	out = srv.ok("demo", "campuscafe", "rebuild", "--data", sdir, "--check")
	contains(t, "rebuild with --server", out, "broker "+srv.srv.URL, "15 OrderPlaced applied", "the rebuilt inventory agrees with the orders")
	srv.fails(2, "demo", "campuscafe", "--restart-every", "1s")

	r = h.fails(2, "demo", "campuscafe", "--check")
	contains(t, "stderr", r.err, "--check needs --orders N")
	r = h.fails(1, "demo", "campuscafe", "reconcile", "--data", t.TempDir())
	contains(t, "stderr", r.err, "no CampusCafe database")
	r = h.fails(1, "demo", "campuscafe", "rebuild", "--db", filepath.Join(dir, "campuscafe.db"), "--data", t.TempDir())
	contains(t, "stderr", r.err, "no broker data in")
}

// corruptOrder changes the quantity of one order in a CampusCafe SQLite database, so
// that the orders and the events in the topic disagree.
func corruptOrder(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", dialect.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE orders SET qty = qty + 1 WHERE id = (SELECT MIN(id) FROM orders)`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("changed %d orders, want 1", n)
	}
}

// The interactive demo serves its orders API until interrupted.
func TestDemoCampusCafeServes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stdout testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	a := &app{Stdout: &stdout, Stderr: io.Discard, Stdin: strings.NewReader(""), Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() {
		done <- a.run(ctx, []string{"demo", "campuscafe", "--data", dir, "--addr", "127.0.0.1:0", "--broker-addr", "127.0.0.1:0", "--lease", "200ms"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d\n%s", code, stdout.String())
		}
	}()
	re := regexp.MustCompile(`orders API\s+(http://\S+)`)
	testkit.Eventually(t, 15*time.Second, func() bool { return re.MatchString(stdout.String()) }, "the orders API")
	api := re.FindStringSubmatch(stdout.String())[1]
	contains(t, "banner", stdout.String(), "okiba broker", "campuscafe.db (SQLite)")

	post := func(path, body string) map[string]any {
		resp, err := http.Post(api+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %v", path, resp.StatusCode, v)
		}
		return v
	}
	get := func(path string) map[string]any {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return v
	}
	o := post("/orders", `{"id":"o-1","customer":"aiko","item":"latte","qty":2}`)
	if o["status"] != "placed" || o["amount_cents"] != 840.0 {
		t.Fatalf("order %v", o)
	}
	if p := post("/orders/o-1/pay", ""); p["paid"] != true {
		t.Fatalf("pay %v", p)
	}
	if p := post("/orders/o-1/pay", ""); p["paid"] != false {
		t.Fatalf("second payment %v: must change nothing", p)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		inv := get("/inventory")["idempotent"].(map[string]any)
		pts := get("/points")["idempotent"].(map[string]any)
		return inv["latte"] == 2.0 && pts["aiko"] == 8.0
	}, "inventory and points")
	req, _ := http.NewRequest(http.MethodPut, api+"/chaos", strings.NewReader(`{"ack_fail_rate":0.5}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := get("/status")["chaos"].(map[string]any); ch["ack_fail_rate"] != 0.5 || ch["crash_rate"] != 0.0 {
		t.Fatalf("chaos knobs after PUT /chaos: %v", ch)
	}
}

// The demo's default addresses give way to a free port when taken — by the broker the
// README started, typically — and say so, with how to use that broker instead.
func TestDemoAddrOrFree(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	var w strings.Builder
	if got := addrOrFree(&w, taken, "the embedded broker", "use it: --server http://"+taken); got != "127.0.0.1:0" {
		t.Errorf("a taken address gave %q, want 127.0.0.1:0", got)
	}
	contains(t, "the note", w.String(), taken+" is in use: the embedded broker listens on a free port instead (use it: --server http://"+taken+")")

	free := freePort(t)
	w.Reset()
	if got := addrOrFree(&w, "127.0.0.1:"+free, "the orders API", ""); got != "127.0.0.1:"+free || w.Len() != 0 {
		t.Errorf("a free address gave %q and %q", got, w.String())
	}
}
