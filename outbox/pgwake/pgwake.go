// Package pgwake wakes outbox relays on PostgreSQL: outbox.Add notifies the outbox's
// channel inside the business transaction, PostgreSQL delivers the notification when
// that transaction commits, and Listen turns it into a wake-up for the relay, so rows
// are published at once instead of at the next poll.
//
//	wake := make(chan struct{}, 1)
//	go pgwake.Listen(ctx, db, ob.Channel(), wake)
//	relay := ob.Relay(c, outbox.RelayOptions{Wake: wake})
//
// It needs the pgx database/sql driver (github.com/jackc/pgx/v5/stdlib).
package pgwake

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// Listen holds one connection of db, listens on channel, and sends to wake (without
// blocking: a full buffer means a wake-up is pending already) for every notification,
// and once after each (re)connection, since notifications sent while it was not
// listening are lost. It reconnects after errors and returns when ctx ends.
func Listen(ctx context.Context, db *sql.DB, channel string, wake chan<- struct{}) error {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, db, channel, wake)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // reconnect: the relay still polls meanwhile
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		delay = min(2*delay, 5*time.Second)
	}
	return nil
}

func listenOnce(ctx context.Context, db *sql.DB, channel string, wake chan<- struct{}) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgwake: the database is not opened with the pgx driver (got %T)", dc)
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+channel); err != nil {
			return err
		}
		defer func() {
			// Leave the pooled connection as it was found.
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			pc.Exec(c, "UNLISTEN "+channel)
		}()
		poke(wake)
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return err
			}
			poke(wake)
		}
	})
}

func poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
