package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/okiba/okiba/client"
)

// Execer is what Apply needs: a *sql.Tx, *sql.DB or *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Apply runs a naturally idempotent statement — an upsert that changes nothing the
// second time, or a conditional update such as
//
//	UPDATE orders SET status = 'paid' WHERE id = ? AND status = 'placed'
//
// — and reports whether it changed a row. false means the effect was there already:
// this delivery is a repeat (or arrived out of order), and the handler may stop.
// Queries use the database's own placeholders.
func Apply(ctx context.Context, db Execer, query string, args ...any) (changed bool, err error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: rows affected: %w", err)
	}
	return n > 0, nil
}

// Natural wraps a handler whose effects are idempotent by nature (see Apply) for
// client.Consume: it runs h in a transaction that commits before the ack, and records
// nothing. Use it when every write of the handler is an upsert or a conditional update
// keyed by the message's content, so a repeat changes nothing; otherwise use an Inbox.
func Natural(db *sql.DB, h Handler) client.Handler {
	return func(ctx context.Context, d *client.Delivery) (err error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: begin: %w", err)
		}
		if err := h(ctx, tx, d); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("inbox: commit: %w", err)
		}
		return nil
	}
}
