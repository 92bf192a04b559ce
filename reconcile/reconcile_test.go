package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/reconcile"
)

func TestRebuildReportsDriftBeforeAndAfter(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		for _, q := range []string{
			`CREATE TABLE orders (id TEXT PRIMARY KEY, item TEXT NOT NULL, qty INTEGER NOT NULL)`,
			`CREATE TABLE inventory (item TEXT PRIMARY KEY, reserved INTEGER NOT NULL)`,
			`INSERT INTO orders VALUES ('o1', 'latte', 2), ('o2', 'latte', 1), ('o3', 'scone', 1), ('o4', 'bagel', 4)`,
			// latte counted twice (a duplicate), scone lost, muffin never ordered.
			`INSERT INTO inventory VALUES ('latte', 5), ('bagel', 4), ('muffin', 1)`,
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		p := reconcile.Query{
			Label:       "inventory",
			ExpectedSQL: `SELECT item, SUM(qty) FROM orders GROUP BY item`,
			ActualSQL:   `SELECT item, reserved FROM inventory`,
			ClearSQL:    `DELETE FROM inventory`,
			InsertSQL:   db.Dialect.Rebind(`INSERT INTO inventory (item, reserved) VALUES (?, CAST(? AS INTEGER))`),
		}
		d, err := reconcile.Check(ctx, db.DB, p)
		if err != nil {
			t.Fatal(err)
		}
		if d.String() != "1 missing, 1 extra, 1 different (of 4 rows)" ||
			d.Missing[0] != (reconcile.Diff{Key: "scone", Want: "1"}) ||
			d.Extra[0] != (reconcile.Diff{Key: "muffin", Got: "1"}) ||
			d.Different[0] != (reconcile.Diff{Key: "latte", Want: "3", Got: "5"}) {
			t.Fatalf("drift %s: %+v", d, d)
		}
		r, err := reconcile.Rebuild(ctx, db.DB, p)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Rebuilt || r.Before.Total() != 3 || !r.After.None() {
			t.Fatalf("report %+v", r)
		}
		var b strings.Builder
		r.Write(&b, 10)
		for _, want := range []string{"before: 1 missing, 1 extra, 1 different", "different latte: want 3, got 5", "after:  0 missing, 0 extra, 0 different (of 3 rows)"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("report lacks %q:\n%s", want, b.String())
			}
		}
		if r, err := reconcile.Rebuild(ctx, db.DB, p); err != nil || r.Rebuilt {
			t.Fatalf("second rebuild: %+v, %v; nothing to do", r, err)
		}
	})
}

func TestCompareLimitsRows(t *testing.T) {
	t.Parallel()
	want := reconcile.State{}
	for _, k := range []string{"a", "b", "c", "d"} {
		want[k] = "1"
	}
	d := reconcile.Compare("p", want, reconcile.State{})
	var b strings.Builder
	reconcile.WriteDrift(&b, d, 2)
	if !strings.Contains(b.String(), "… and 2 more missing") {
		t.Fatalf("%s", b.String())
	}
}
