// Package dbtest gives the toolkit's tests real databases: a fresh SQLite file always,
// and a fresh PostgreSQL schema when OKIBA_TEST_POSTGRES_URL points at a server.
//
// Without OKIBA_TEST_POSTGRES_URL it tries the server that `make deps` starts
// (DefaultPostgres). Locally an unreachable PostgreSQL skips its tests with a SKIP line
// that `make test` lists in its summary; under CI (CI=true), where .ci/run starts
// PostgreSQL, it fails them instead, so that a broken set-up cannot pass as green.
package dbtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver

	"github.com/okiba/okiba/dialect"
	"github.com/okiba/okiba/internal/testkit"
)

// EnvPostgres names the environment variable with the PostgreSQL URL for tests.
const EnvPostgres = "OKIBA_TEST_POSTGRES_URL"

// DefaultPostgres is the server `make deps` (.ci/postgres.sh) starts, used when
// EnvPostgres is empty.
const DefaultPostgres = "postgres://okiba:okiba@127.0.0.1:54329/okiba_test?sslmode=disable"

// DB is a test database with its dialect.
type DB struct {
	*sql.DB
	Dialect dialect.Dialect
	// Path is the SQLite file (empty for PostgreSQL).
	Path string
	// URL is the PostgreSQL connection URL of the test's schema (empty for SQLite).
	URL string
}

// Each runs fn as a subtest on every dialect: "sqlite" always, "postgres" when a server
// is reachable (see Postgres). The subtests run in parallel, each on a database of its
// own, so fn must not share anything else between them.
func Each(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, Postgres(t)) })
}

// EachInTurn is Each with the dialects one after the other: for a test that keeps the
// machine busy on the real clock against a deadline, which two runs at once would miss.
func EachInTurn(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// SQLite opens a fresh SQLite database in a temporary directory, closed at cleanup.
func SQLite(t testing.TB) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", dialect.SQLiteDSN(path))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	return &DB{DB: db, Dialect: dialect.SQLite, Path: path}
}

// Postgres connects to OKIBA_TEST_POSTGRES_URL and gives the test a schema of its own,
// dropped at cleanup. Without a reachable server it skips the test (fails it under CI).
func Postgres(t testing.TB) *DB {
	t.Helper()
	base := cmp.Or(os.Getenv(EnvPostgres), DefaultPostgres)
	// The error goes to the test's log; the skip message is the same for every case, so
	// that make test's summary counts them under one reason.
	unreachable := func(err error) {
		t.Helper()
		t.Logf("postgres at %s: %v", show(base), err)
		testkit.Missing(t, "PostgreSQL tests", "no server answers at "+show(base),
			testkit.Deps+" (or set "+EnvPostgres+"=postgres://USER@HOST:PORT/DB)")
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		unreachable(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		unreachable(err)
	}
	schema := "okiba_test_" + randHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	u, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		a, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("open postgres schema: %v", err)
	}
	return &DB{DB: db, Dialect: dialect.Postgres, URL: u}
}

// withSearchPath adds search_path=schema to a PostgreSQL URL (pgx passes unknown
// parameters to the server as run-time settings).
func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// show hides a password in a URL for messages.
func show(raw string) string {
	if raw == "" {
		return "(no URL)"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
