// Package reconcile rebuilds projections from their source of truth and reports drift.
//
// An at-least-once world has a third failure besides duplicates and delays: loss that
// nobody noticed — an event dropped by an auto-ack, a consumer that ran without an inbox,
// a bug fixed last week. A projection (a read model kept up to date by events: stock
// reserved per item, points per customer) can then drift from the facts it is derived
// from. Reconciliation computes what the projection should be from the source of truth,
// compares it with what it is, reports the difference — rows missing, extra, or
// different — and can rebuild it, reporting the drift before and after.
//
//	inv := reconcile.Query{
//		Label:       "inventory",
//		ExpectedSQL: "SELECT item, SUM(qty) FROM orders GROUP BY item",
//		ActualSQL:   "SELECT item, reserved FROM inventory",
//		ClearSQL:    "DELETE FROM inventory",
//		InsertSQL:   "INSERT INTO inventory (item, reserved) VALUES ($1, CAST($2 AS INTEGER))",
//	}
//	report, err := reconcile.Rebuild(ctx, db, inv)
//	report.Write(os.Stdout, 10)
//
// Rebuild while nothing else writes the projection (consumers paused, or their queues
// drained): an event still in flight would land on top of the rebuilt rows. For a live
// system, rebuild into a new table and switch, or make the projection's consumer skip
// events the rebuild already covered.
package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"sort"
	"strings"
)

// State is a projection's rows: each key with the canonical text of its value.
type State map[string]string

// Projection is a read model that can be derived from a source of truth.
type Projection interface {
	// Name names the projection in reports.
	Name() string
	// Expected computes the rows the projection should have, from the source of truth.
	Expected(ctx context.Context, tx *sql.Tx) (State, error)
	// Actual reads the rows the projection has.
	Actual(ctx context.Context, tx *sql.Tx) (State, error)
	// Replace makes the projection's rows exactly want.
	Replace(ctx context.Context, tx *sql.Tx, want State) error
}

// Diff is one row that differs. Want is empty for an extra row, Got for a missing one.
type Diff struct {
	Key, Want, Got string
}

// Drift is how a projection differs from what its source says it should be.
type Drift struct {
	Projection string
	// Rows is the number of keys expected or present.
	Rows      int
	Missing   []Diff // expected, absent
	Extra     []Diff // present, not expected
	Different []Diff // present with another value
}

// None reports whether there is no drift.
func (d Drift) None() bool { return d.Total() == 0 }

// Total counts the rows that differ.
func (d Drift) Total() int { return len(d.Missing) + len(d.Extra) + len(d.Different) }

// String summarises the drift in one line.
func (d Drift) String() string {
	return fmt.Sprintf("%d missing, %d extra, %d different (of %d rows)", len(d.Missing), len(d.Extra), len(d.Different), d.Rows)
}

// Compare returns the drift of got from want, with each list sorted by key.
func Compare(name string, want, got State) Drift {
	d := Drift{Projection: name}
	keys := map[string]bool{}
	for k, w := range want {
		keys[k] = true
		g, ok := got[k]
		switch {
		case !ok:
			d.Missing = append(d.Missing, Diff{Key: k, Want: w})
		case g != w:
			d.Different = append(d.Different, Diff{Key: k, Want: w, Got: g})
		}
	}
	for k, g := range got {
		keys[k] = true
		if _, ok := want[k]; !ok {
			d.Extra = append(d.Extra, Diff{Key: k, Got: g})
		}
	}
	d.Rows = len(keys)
	for _, l := range [][]Diff{d.Missing, d.Extra, d.Different} {
		sort.Slice(l, func(i, j int) bool { return l[i].Key < l[j].Key })
	}
	return d
}

// Check reports p's drift, reading source and projection in one transaction (rolled
// back: it changes nothing).
func Check(ctx context.Context, db *sql.DB, p Projection) (Drift, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Drift{}, fmt.Errorf("reconcile %s: %w", p.Name(), err)
	}
	defer tx.Rollback()
	return check(ctx, tx, p)
}

func check(ctx context.Context, tx *sql.Tx, p Projection) (Drift, error) {
	want, err := p.Expected(ctx, tx)
	if err != nil {
		return Drift{}, fmt.Errorf("reconcile %s: expected rows: %w", p.Name(), err)
	}
	got, err := p.Actual(ctx, tx)
	if err != nil {
		return Drift{}, fmt.Errorf("reconcile %s: actual rows: %w", p.Name(), err)
	}
	return Compare(p.Name(), want, got), nil
}

// Report is the outcome of Rebuild.
type Report struct {
	Projection string
	Before     Drift
	// Rebuilt is false when there was no drift to repair.
	Rebuilt bool
	After   Drift
}

// Rebuild checks p's drift and, if there is any, replaces its rows with the expected
// ones and checks again, all in one transaction: either the projection is rebuilt and
// the report says so, or nothing changed.
func Rebuild(ctx context.Context, db *sql.DB, p Projection) (Report, error) {
	r := Report{Projection: p.Name()}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: %w", p.Name(), err)
	}
	defer tx.Rollback()
	want, err := p.Expected(ctx, tx)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: expected rows: %w", p.Name(), err)
	}
	got, err := p.Actual(ctx, tx)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: actual rows: %w", p.Name(), err)
	}
	r.Before = Compare(p.Name(), want, got)
	if r.Before.None() {
		r.After = r.Before
		return r, tx.Commit()
	}
	if err := p.Replace(ctx, tx, want); err != nil {
		return r, fmt.Errorf("reconcile %s: rebuild: %w", p.Name(), err)
	}
	if r.After, err = check(ctx, tx, p); err != nil {
		return r, err
	}
	if err := tx.Commit(); err != nil {
		return r, fmt.Errorf("reconcile %s: commit: %w", p.Name(), err)
	}
	r.Rebuilt = true
	return r, nil
}

// Write prints the report: the drift before and after, with up to maxRows differing
// rows of each kind.
func (r Report) Write(w io.Writer, maxRows int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  before: %s\n", r.Projection, r.Before)
	writeRows(&b, r.Before, maxRows)
	switch {
	case !r.Rebuilt:
		b.WriteString("  no drift: nothing rebuilt\n")
	default:
		fmt.Fprintf(&b, "  rebuilt from the source of truth\n  after:  %s\n", r.After)
		writeRows(&b, r.After, maxRows)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDrift prints a drift with up to maxRows differing rows of each kind.
func WriteDrift(w io.Writer, d Drift, maxRows int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", d.Projection, d)
	writeRows(&b, d, maxRows)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRows(b *strings.Builder, d Drift, maxRows int) {
	show := func(kind string, l []Diff, line func(Diff) string) {
		for i, x := range l {
			if i == maxRows {
				fmt.Fprintf(b, "    … and %d more %s\n", len(l)-maxRows, kind)
				return
			}
			fmt.Fprintf(b, "    %-9s %s\n", kind, line(x))
		}
	}
	show("missing", d.Missing, func(x Diff) string { return fmt.Sprintf("%s: want %s", x.Key, x.Want) })
	show("extra", d.Extra, func(x Diff) string { return fmt.Sprintf("%s: got %s", x.Key, x.Got) })
	show("different", d.Different, func(x Diff) string { return fmt.Sprintf("%s: want %s, got %s", x.Key, x.Want, x.Got) })
}

// Query is a Projection given by SQL statements, in the database's own placeholder
// style. ExpectedSQL and ActualSQL return two columns, key and value (of any type,
// compared as text); ClearSQL empties the projection and InsertSQL adds one row from a
// key and a value, both given as text (cast in SQL where a column is not text).
type Query struct {
	Label       string
	ExpectedSQL string
	ActualSQL   string
	ClearSQL    string
	InsertSQL   string
}

// Name returns the label.
func (q Query) Name() string { return q.Label }

// Expected runs ExpectedSQL.
func (q Query) Expected(ctx context.Context, tx *sql.Tx) (State, error) {
	return readState(ctx, tx, q.ExpectedSQL)
}

// Actual runs ActualSQL.
func (q Query) Actual(ctx context.Context, tx *sql.Tx) (State, error) {
	return readState(ctx, tx, q.ActualSQL)
}

// Replace runs ClearSQL, then InsertSQL for every row of want, in key order.
func (q Query) Replace(ctx context.Context, tx *sql.Tx, want State) error {
	if _, err := tx.ExecContext(ctx, q.ClearSQL); err != nil {
		return err
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, q.InsertSQL, k, want[k]); err != nil {
			return err
		}
	}
	return nil
}

func readState(ctx context.Context, tx *sql.Tx, query string) (State, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := State{}
	for rows.Next() {
		var k, v sql.NullString
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		s[k.String] = v.String
	}
	return s, rows.Err()
}
