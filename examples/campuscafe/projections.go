package campuscafe

import (
	"context"
	"database/sql"
	"sort"

	"github.com/okiba/okiba/reconcile"
)

// Projections are the café's read models that reconciliation can check and rebuild
// from the orders table: the inventory and the points ledger, each kept by an
// idempotent consumer and by a naive one.
func (s *Store) Projections() []reconcile.Projection {
	inventory := func(label, table string) reconcile.Projection {
		return reconcile.Query{
			Label:       label,
			ExpectedSQL: `SELECT item, SUM(qty) FROM orders GROUP BY item`,
			ActualSQL:   `SELECT item, reserved FROM ` + table,
			ClearSQL:    `DELETE FROM ` + table,
			InsertSQL:   s.q(`INSERT INTO ` + table + ` (item, reserved) VALUES (?, CAST(? AS INTEGER))`),
		}
	}
	return []reconcile.Projection{
		inventory("inventory", "inventory"),
		s.ledger("points", "points_ledger"),
		inventory("inventory (naive)", "inventory_naive"),
		s.ledger("points (naive)", "points_ledger_naive"),
	}
}

// ledger is the points ledger as a projection: one award per paid order, keyed by order.
// Its rebuild writes one award per paid order (the Query form cannot: a row needs the
// order's customer too).
func (s *Store) ledger(label, table string) reconcile.Projection {
	return ledgerProjection{
		Query: reconcile.Query{
			Label:       label,
			ExpectedSQL: `SELECT id, amount_cents / 100 FROM orders WHERE status = 'paid'`,
			ActualSQL:   `SELECT order_id, SUM(points) FROM ` + table + ` GROUP BY order_id`,
			ClearSQL:    `DELETE FROM ` + table,
			InsertSQL: s.q(`INSERT INTO ` + table + ` (order_id, customer, points, event_id)
				SELECT id, customer, amount_cents / 100, 'reconciled' FROM orders WHERE id = ?`),
		},
	}
}

type ledgerProjection struct{ reconcile.Query }

func (p ledgerProjection) Replace(ctx context.Context, tx *sql.Tx, want reconcile.State) error {
	if _, err := tx.ExecContext(ctx, p.ClearSQL); err != nil {
		return err
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, p.InsertSQL, id); err != nil {
			return err
		}
	}
	return nil
}

// Awards counts, over the paid orders, how many have exactly one award in the ledger
// (naive: the naive ledger), and how many awards went to orders that are not paid.
func (s *Store) Awards(ctx context.Context, naive bool) (paid, exactlyOne, unpaidAwards int64, err error) {
	table := "points_ledger"
	if naive {
		table = "points_ledger_naive"
	}
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN n = 1 THEN 1 ELSE 0 END), 0) FROM (
		SELECT o.id, COUNT(p.order_id) AS n FROM orders o LEFT JOIN `+table+` p ON p.order_id = o.id
		WHERE o.status = 'paid' GROUP BY o.id) x`).Scan(&paid, &exactlyOne)
	if err != nil {
		return
	}
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+` p JOIN orders o ON o.id = p.order_id WHERE o.status <> 'paid'`).Scan(&unpaidAwards)
	return
}

// Notifications counts the events that should have been notified (one per order and
// one per payment), those recorded exactly once, and all records.
func (s *Store) Notifications(ctx context.Context) (events, once, records int64, err error) {
	err = s.DB.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM orders) + (SELECT COUNT(*) FROM orders WHERE status = 'paid'),
		(SELECT COUNT(*) FROM (SELECT order_id, kind FROM notifications GROUP BY order_id, kind HAVING COUNT(*) = 1) x),
		(SELECT COUNT(*) FROM notifications)`).Scan(&events, &once, &records)
	return
}
