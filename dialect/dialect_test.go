package dialect_test

import (
	"testing"

	"github.com/okiba/okiba/dialect"
	"github.com/okiba/okiba/internal/dbtest"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	q := "SELECT a FROM t WHERE x = ? AND y IN (?, ?)"
	if got := dialect.Postgres.Rebind(q); got != "SELECT a FROM t WHERE x = $1 AND y IN ($2, $3)" {
		t.Errorf("postgres: %s", got)
	}
	if got := dialect.SQLite.Rebind(q); got != q {
		t.Errorf("sqlite: %s", got)
	}
	if got := dialect.T(dialect.Postgres, "DELETE FROM {t} WHERE id = ?", "box"); got != "DELETE FROM box WHERE id = $1" {
		t.Errorf("T: %s", got)
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		d, err := dialect.Detect(db.DB)
		if err != nil || d != db.Dialect {
			t.Fatalf("Detect = %v, %v; want %s", d, err, db.Dialect.Name())
		}
	})
}

func TestCheckIdent(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"okiba_inbox": true, "_x9": true, "9x": false, "a.b": false, "a;drop": false, "": false} {
		if err := dialect.CheckIdent("table", name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
}
