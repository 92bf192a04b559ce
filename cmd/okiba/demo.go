package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL for --postgres
	_ "modernc.org/sqlite"             // SQLite, the default

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/dialect"
	"github.com/okiba/okiba/examples/campuscafe"
	"github.com/okiba/okiba/okibatest/chaos"
	"github.com/okiba/okiba/reconcile"
)

func demoGroup(a *app) command {
	return &group{app: a, name: "demo", usage: `
Usage: okiba demo DEMO [flags]

Runs a demonstration system in one process.`,
		subs: []entry{
			{"campuscafe", "the effectively-once walkthrough: outbox, topic, inboxes, chaos, reconciliation, replay", func(a *app, n string) command { return &campusCafeCmd{app: a, name: n} }},
		}}
}

const campusCafeUsage = `
Usage: okiba demo campuscafe [flags]
       okiba demo campuscafe --orders N --check [chaos flags]
       okiba demo campuscafe reconcile [--data DIR | --db FILE | --postgres URL] [--dry-run]
       okiba demo campuscafe rebuild [--data DIR | --db FILE | --postgres URL] [--server URL] [--check]

CampusCafe is a café ordering system built on okiba's effectively-once toolkit. Its
orders API writes each order and, in the same transaction, its events to an outbox;
relays publish each event once to the topic campuscafe-orders; subscriptions fan the
events out into a queue per consumer, filtered by event type; consumers with inboxes
keep an inventory projection, a points ledger (one award per paid order) and
notifications (through a gateway, with idempotency keys); naive consumers without an
inbox keep the same projections beside them, so the difference shows in numbers.
Everything runs in this process, on an embedded broker (or on --server), with the
database in SQLite (or --postgres).

Without --orders it prints where the orders API and the broker are and runs until
Ctrl-C; examples/campuscafe/README.md walks through it with curl.

With --orders N it places N orders (paying about 80% of them), waits until every event
has been published and consumed, reconciles the projections against the orders and
prints a summary. With --check it then exits: non-zero if an invariant fails (drift in
an idempotent projection, a paid order without exactly one points award, a notification
sent twice). The chaos flags inject faults, each decided by a hash of --seed, the
message and the delivery, so a seed replays the same decisions:
  --ack-fail-rate   the ack is lost after processing ("processed, but the ACK never arrived")
  --crash-rate      the consumer crashes after its commit, before its ack
  --duplicate-rate  the producer sends an event twice, under another dedup id
  --restart-every   the embedded broker is closed and reopened on its data directory

'reconcile' rebuilds the projections of a CampusCafe database from its orders and shows
the drift before and after (stop the demo first, or let its queues drain: an event still
in flight would land on top of the rebuilt rows).

'rebuild' rebuilds the inventory projection from the topic alone: it reads every
partition of campuscafe-orders from offset 0, adds up each OrderPlaced once per event
id (the duplicates the log holds count once, as the inventory consumer's inbox counts
them), and writes the result into the table inventory_rebuild, leaving the live
inventory table to its consumer. The topic is read from the embedded broker's data in
DIR/broker (stop the demo first: the broker's directory is locked while it runs), or
from --server. With --check it then compares the rebuilt rows with what reconciliation
computes from the orders table, prints every difference, and exits non-zero if they
disagree.`

const campusCafeExamples = `
okiba demo campuscafe
okiba demo campuscafe --orders 500 --ack-fail-rate 0.8 --crash-rate 0.05 --duplicate-rate 0.2 --check
okiba demo campuscafe --orders 200 --restart-every 3s --postgres postgres://localhost/cafe --check
okiba demo campuscafe reconcile --dry-run
okiba demo campuscafe reconcile
okiba demo campuscafe rebuild --check`

type campusCafeCmd struct {
	app  *app
	name string
}

func (c *campusCafeCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.flags(c.name, campusCafeUsage, campusCafeExamples)
	data := f.String("data", "", "`DIR` for the embedded broker's data and the SQLite database (default ./campuscafe-data; with --check a temporary directory)")
	dbPath := f.String("db", "", "SQLite database `FILE` (default DIR/campuscafe.db)")
	pgURL := f.String("postgres", "", "use the PostgreSQL database at `URL` instead of SQLite")
	var cf clientFlags
	cf.register(f)
	addr := f.String("addr", "127.0.0.1:7080", "orders API address `HOST:PORT` (port 0 picks one, as does the default when it is taken)")
	brokerAddr := f.String("broker-addr", "", "embedded broker address `HOST:PORT` (default 127.0.0.1:7070, or a free port when that is taken, as by a broker already running — which --server URL uses instead; with --check a free port)")
	seed := f.Uint64("seed", 1, "seed of every fault decision")
	ackFail := f.Float64("ack-fail-rate", 0, "probability that an ack is lost after processing")
	crash := f.Float64("crash-rate", 0, "probability that a consumer crashes after its commit, before its ack")
	dup := f.Float64("duplicate-rate", 0, "probability that the producer sends an event twice")
	restart := f.Duration("restart-every", 0, "restart the embedded broker this often (0: never)")
	lease := f.Duration("lease", time.Second, "the consumers' lease (visibility timeout): a lost ack brings the message back after it")
	relays := f.Int("relays", 2, "number of outbox relays running at once")
	orders := f.Int("orders", 0, "place `N` orders, wait until everything settles, and print a summary")
	check := f.Bool("check", false, "with --orders: exit after the summary, non-zero if an invariant fails; with rebuild: compare the rebuilt inventory with the orders")
	timeout := f.Duration("timeout", 5*time.Minute, "with --orders: how long everything may take to settle")
	verbose := f.Bool("verbose", false, "log the consumer runtime's warnings (many under chaos) to stderr")
	dryRun := f.Bool("dry-run", false, "reconcile: report drift, change nothing")
	pos, err := f.parseArgs(args, 0, 1, "[reconcile | rebuild] [flags]")
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		switch pos[0] {
		case "reconcile":
			return c.reconcile(ctx, *data, *dbPath, *pgURL, *dryRun)
		case "rebuild":
			if *dryRun {
				return f.fail("--dry-run belongs to 'okiba demo campuscafe reconcile': rebuild writes only its own table")
			}
			return c.rebuild(ctx, *data, *dbPath, *pgURL, a.pick(cf.server, "OKIBA_SERVER", ""), a.pick(cf.token, "OKIBA_TOKEN", ""), *check)
		}
		return f.fail("unknown subcommand %q (there are: reconcile, rebuild)", pos[0])
	}
	for name, v := range map[string]float64{"ack-fail-rate": *ackFail, "crash-rate": *crash, "duplicate-rate": *dup} {
		if v < 0 || v > 1 {
			return f.fail("--%s must be between 0 and 1, got %v", name, v)
		}
	}
	switch {
	case *check && *orders <= 0:
		return f.fail("--check needs --orders N")
	case *orders < 0:
		return f.fail("--orders must be positive")
	case *lease < 10*time.Millisecond:
		return f.fail("--lease must be at least 10ms")
	case *dryRun:
		return f.fail("--dry-run belongs to 'okiba demo campuscafe reconcile'")
	}
	server := a.pick(cf.server, "OKIBA_SERVER", "")
	if server != "" && *restart > 0 {
		return f.fail("--restart-every needs the embedded broker (it cannot restart --server)")
	}

	dir := *data
	if dir == "" {
		if *check {
			if dir, err = os.MkdirTemp("", "campuscafe-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		} else {
			dir = "campuscafe-data"
		}
	}
	if *brokerAddr == "" {
		*brokerAddr = "127.0.0.1:7070"
		if *check {
			*brokerAddr = "127.0.0.1:0"
		} else if server == "" {
			*brokerAddr = addrOrFree(a.Stderr, *brokerAddr, "the embedded broker",
				"is a broker already running there? the demo can use it: --server http://"+*brokerAddr)
		}
	}
	if !f.given()["addr"] && !*check {
		*addr = addrOrFree(a.Stderr, *addr, "the orders API", "")
	}
	db, where, err := openCafeDB(dir, *dbPath, *pgURL)
	if err != nil {
		return err
	}
	defer db.Close()

	logger := slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := campuscafe.Options{
		Server: server, Token: a.pick(cf.token, "OKIBA_TOKEN", ""),
		DataDir: filepath.Join(dir, "broker"), BrokerAddr: *brokerAddr,
		Seed: *seed, AckFailRate: *ackFail, CrashRate: *crash, DuplicateRate: *dup, RestartEvery: *restart,
		Lease: *lease, Relays: *relays, Logger: logger,
	}
	if *verbose {
		opts.ClientLogger = logger
	}
	cafe, err := campuscafe.Start(ctx, db, opts)
	if err != nil {
		return err
	}
	defer cafe.Close()

	if *check {
		fmt.Fprintf(a.Stdout, "CampusCafe: %d orders on %s, broker %s\n", *orders, where, cafe.URL())
		s, err := cafe.RunScenario(ctx, campuscafe.ScenarioOptions{Orders: *orders, Timeout: *timeout, Progress: a.Stderr})
		if err != nil {
			return err
		}
		fmt.Fprintln(a.Stdout)
		s.Write(a.Stdout)
		if !s.OK() {
			return &exitError{code: 1}
		}
		return nil
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("cannot listen for the orders API: %w", err)
	}
	srv := &http.Server{Handler: cafe.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	api := "http://" + ln.Addr().String()
	broker := cafe.URL() + "  (embedded; data in " + opts.DataDir + ")"
	if server != "" {
		broker = cafe.URL()
	}
	restarts := "off"
	if *restart > 0 {
		restarts = "every " + restart.String()
	}
	fmt.Fprintf(a.Stdout, `CampusCafe is open (Ctrl-C closes it).
  orders API    %s
  okiba broker  %s
  database      %s
  chaos         ack-fail-rate %g, crash-rate %g, duplicate-rate %g, broker restarts %s, seed %d

Try:
  curl -X POST %s/orders -d '{"customer":"aiko","item":"latte","qty":2}'
  curl %s/inventory
  okiba stats --server %s
The walkthrough: examples/campuscafe/README.md
`, api, broker, where, *ackFail, *crash, *dup, restarts, *seed, api, api, cafe.URL())
	if *orders > 0 {
		s, err := cafe.RunScenario(ctx, campuscafe.ScenarioOptions{Orders: *orders, Timeout: *timeout, Progress: a.Stderr})
		if err != nil && ctx.Err() == nil {
			srv.Close()
			return err
		}
		if s != nil {
			fmt.Fprintln(a.Stdout)
			s.Write(a.Stdout)
		}
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("orders API: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	fmt.Fprintln(a.Stdout, "CampusCafe closed.")
	return nil
}

// openCafeDB opens the café's database: PostgreSQL at pgURL, else SQLite at dbPath
// (default DIR/campuscafe.db). It returns a description for people.
func openCafeDB(dir, dbPath, pgURL string) (*sql.DB, string, error) {
	if pgURL != "" {
		if dbPath != "" {
			return nil, "", &usageError{cmd: "demo campuscafe", msg: "give --db or --postgres, not both"}
		}
		db, err := sql.Open("pgx", pgURL)
		if err != nil {
			return nil, "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, "", fmt.Errorf("cannot reach PostgreSQL: %w", err)
		}
		return db, "PostgreSQL", nil
	}
	if dbPath == "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", err
		}
		dbPath = filepath.Join(dir, "campuscafe.db")
	}
	db, err := sql.Open("sqlite", dialect.SQLiteDSN(dbPath))
	if err != nil {
		return nil, "", err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, "", fmt.Errorf("cannot open %s: %w", dbPath, err)
	}
	return db, dbPath + " (SQLite)", nil
}

// openCafeStore opens the database of an earlier demo run for reconcile and rebuild:
// data defaults to the demo's own default, and a SQLite database must exist there.
func openCafeStore(ctx context.Context, data, dbPath, pgURL string) (*sql.DB, *campuscafe.Store, string, error) {
	if pgURL == "" && dbPath == "" {
		if _, err := os.Stat(filepath.Join(data, "campuscafe.db")); err != nil {
			return nil, nil, "", fmt.Errorf("no CampusCafe database in %s (run 'okiba demo campuscafe' first, or give --data, --db or --postgres)", data)
		}
	}
	db, where, err := openCafeDB(data, dbPath, pgURL)
	if err != nil {
		return nil, nil, "", err
	}
	store, err := campuscafe.OpenStore(ctx, db)
	if err != nil {
		db.Close()
		return nil, nil, "", err
	}
	return db, store, where, nil
}

// reconcile rebuilds (or, dry, checks) the café's projections from its orders.
func (c *campusCafeCmd) reconcile(ctx context.Context, data, dbPath, pgURL string, dry bool) error {
	if data == "" {
		data = "campuscafe-data"
	}
	db, store, where, err := openCafeStore(ctx, data, dbPath, pgURL)
	if err != nil {
		return err
	}
	defer db.Close()
	w := c.app.Stdout
	fmt.Fprintf(w, "Reconciling the CampusCafe projections in %s against its orders.\n\n", where)
	failed := false
	for _, p := range store.Projections() {
		if dry {
			d, err := reconcile.Check(ctx, db, p)
			if err != nil {
				return err
			}
			reconcile.WriteDrift(w, d, 5)
			continue
		}
		r, err := reconcile.Rebuild(ctx, db, p)
		if err != nil {
			return err
		}
		r.Write(w, 5)
		failed = failed || !r.After.None()
	}
	if failed {
		return errors.New("drift remains after the rebuild")
	}
	return nil
}

// rebuild replays the café's topic into the rebuild table and, with check, compares the
// result with the orders. Without a server it opens the embedded broker's data
// directory itself, on a free loopback port, for as long as the replay takes.
func (c *campusCafeCmd) rebuild(ctx context.Context, data, dbPath, pgURL, server, token string, check bool) error {
	if data == "" {
		data = "campuscafe-data"
	}
	db, store, where, err := openCafeStore(ctx, data, dbPath, pgURL)
	if err != nil {
		return err
	}
	defer db.Close()
	url, from := server, server
	if server == "" {
		dir := filepath.Join(data, "broker")
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("no broker data in %s: the demo's embedded broker keeps the topic there (give --data DIR of the demo run, or --server URL of the broker it used)", dir)
		}
		logger := slog.New(slog.NewTextHandler(c.app.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		b, err := chaos.StartBroker(broker.Config{Dir: dir, Logger: logger}, "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("cannot open the broker in %s (is the demo still running? stop it first, or give --server URL): %w", dir, err)
		}
		defer b.Close()
		url, from = b.URL, dir+" (embedded, opened for the rebuild)"
	}
	cl, err := client.New(url, client.Options{Token: token})
	if err != nil {
		return err
	}
	w := c.app.Stdout
	fmt.Fprintf(w, "Rebuilding the CampusCafe inventory in %s from topic %s, broker %s.\n\n", where, campuscafe.Topic, from)
	rep, err := store.RebuildInventory(ctx, cl)
	if err != nil {
		return err
	}
	rep.Write(w)
	if !check {
		return nil
	}
	d, err := store.CheckRebuild(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nchecked against the orders (reconciliation's expected inventory):\n")
	reconcile.WriteDrift(w, d, -1)
	if !d.None() {
		fmt.Fprintf(w, "the rebuilt inventory and the orders DISAGREE in %d of %d rows\n", d.Total(), d.Rows)
		return &exitError{code: 1}
	}
	fmt.Fprintln(w, "the rebuilt inventory agrees with the orders")
	return nil
}

// addrOrFree returns addr when it can be listened on now, and otherwise the same host with
// port 0 (a free port, printed once the demo listens), saying so on w with hint: the
// defaults of a demo must not fail next to the broker the README started.
func addrOrFree(w io.Writer, addr, what, hint string) string {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return addr
	}
	host, _, _ := net.SplitHostPort(addr)
	msg := fmt.Sprintf("%s is in use: %s listens on a free port instead", addr, what)
	if hint != "" {
		msg += " (" + hint + ")"
	}
	fmt.Fprintln(w, msg)
	return net.JoinHostPort(host, "0")
}
