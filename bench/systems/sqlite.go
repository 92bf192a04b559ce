package systems

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"maragu.dev/goqite"
	_ "modernc.org/sqlite"

	"github.com/okiba/okiba/bench/harness"
)

// openSQLite opens a database file in WAL mode with the given synchronous setting,
// through one connection (SQLite has one writer; a pool would only add SQLITE_BUSY).
func openSQLite(path, synchronous string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+synchronous+")&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func sqliteVersion(db *sql.DB) string {
	var v string
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&v); err != nil {
		return "unknown"
	}
	return "SQLite " + v + " (modernc.org/sqlite " + moduleVersion("modernc.org/sqlite") + ")"
}

// SQLiteQueue is the table queue of the tutorials, in process: one transaction per
// window of inserts, lease with UPDATE … SET lease_until … RETURNING, ack with DELETE.
// Durable: synchronous=FULL (WAL mode, fsync at every commit). Relaxed: NORMAL.
type SQLiteQueue struct {
	full bool
	db   *sql.DB
	dir  string
	ver  string
}

func NewSQLiteQueue(full bool) *SQLiteQueue { return &SQLiteQueue{full: full} }

func (s *SQLiteQueue) Info() harness.Info {
	d := harness.Durable
	name := "sqlite-queue-full"
	if !s.full {
		d, name = harness.Relaxed, "sqlite-queue-normal"
	}
	return harness.Info{
		Name: name, Label: "SQLite table queue, synchronous=" + syncMode(s.full), Peer: "sqlite", Durability: d,
		Version:   s.ver,
		Settings:  "in process; WAL, synchronous=" + syncMode(s.full) + ", one connection; a transaction per window of inserts, UPDATE … RETURNING to lease, DELETE to ack",
		InProcess: true,
		Caps:      harness.Caps{Consume: true, Visibility: true},
	}
}

func (s *SQLiteQueue) Start(ctx context.Context, env *harness.Env) error {
	dir, err := env.DataDir(s.Info().Name)
	if err != nil {
		return err
	}
	s.dir = dir
	s.db, err = openSQLite(filepath.Join(dir, "queue.db"), syncMode(s.full))
	if err != nil {
		return err
	}
	s.ver = sqliteVersion(s.db)
	return nil
}

func (s *SQLiteQueue) Pids() []int        { return nil }
func (s *SQLiteQueue) DataDirs() []string { return []string{s.dir} }
func (s *SQLiteQueue) Close() error       { return s.db.Close() }

func (s *SQLiteQueue) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	vis := spec.Lease()
	t := `"q_` + sanitize(spec.Name) + `"`
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE `+t+` (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		body BLOB NOT NULL,
		lease_until INTEGER NOT NULL DEFAULT 0,
		deliveries INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return nil, err
	}
	return &sqliteQueue{db: s.db, table: t, vis: vis}, nil
}

type sqliteQueue struct {
	db    *sql.DB
	table string
	vis   time.Duration
}

func (q *sqliteQueue) Delete(ctx context.Context) error {
	_, err := q.db.ExecContext(ctx, "DROP TABLE "+q.table)
	return err
}

func (q *sqliteQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return harness.NewBatcher(max(window, 1), 1, func(ctx context.Context, msgs []harness.Msg) error {
		tx, err := q.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		stmt, err := tx.PrepareContext(ctx, "INSERT INTO "+q.table+" (body) VALUES (?)")
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if _, err := stmt.ExecContext(ctx, m.Body); err != nil {
				return err
			}
		}
		return tx.Commit()
	}), nil
}

func (q *sqliteQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return &sqliteConsumer{q: q, lease: fmt.Sprintf(`UPDATE %[1]s SET lease_until = ?, deliveries = deliveries + 1
		WHERE id IN (SELECT id FROM %[1]s WHERE lease_until <= ? ORDER BY id LIMIT ?) RETURNING id, body`, q.table)}, nil
}

type sqliteConsumer struct {
	q     *sqliteQueue
	lease string
}

func (c *sqliteConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	return pollLeases(ctx, func() ([]harness.Delivery, error) {
		now := time.Now()
		rows, err := c.q.db.QueryContext(ctx, c.lease, now.Add(c.q.vis).UnixMilli(), now.UnixMilli(), max)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanLeases(rows)
	})
}

func (c *sqliteConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	b, _ := json.Marshal(leaseIDs(ds))
	_, err := c.q.db.ExecContext(ctx, "DELETE FROM "+c.q.table+" WHERE id IN (SELECT value FROM json_each(?))", string(b))
	return err
}

func (c *sqliteConsumer) Close() error { return nil }

// Goqite is maragu.dev/goqite on SQLite in process, with synchronous=FULL (its README
// figures use the driver default, NORMAL): SendTx for a window in one transaction,
// Receive one message per transaction (its API), DeleteTx for a whole receive in one
// transaction.
type Goqite struct {
	full bool
	db   *sql.DB
	dir  string
	ver  string
}

func NewGoqite(full bool) *Goqite { return &Goqite{full: full} }

func (g *Goqite) Info() harness.Info {
	return harness.Info{
		Name: "goqite-full", Label: "goqite on SQLite, synchronous=FULL", Peer: "sqlite", Durability: harness.Durable,
		Version:   g.ver,
		Settings:  "in process; WAL, synchronous=FULL, one connection; SendTx per window in one transaction, Receive (one message per transaction; a receive gathers for at most 20 ms), DeleteTx per receive batch",
		InProcess: true,
		Caps:      harness.Caps{Consume: true, Visibility: true},
	}
}

// goqiteSchema is the table goqite's queries expect (its schema_sqlite.sql).
const goqiteSchema = `CREATE TABLE IF NOT EXISTS goqite (
  id text PRIMARY KEY DEFAULT ('m_' || lower(hex(randomblob(16)))),
  created text NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text NOT NULL,
  body blob NOT NULL,
  timeout text NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer NOT NULL DEFAULT 0,
  priority integer NOT NULL DEFAULT 0
) STRICT;
CREATE TRIGGER IF NOT EXISTS goqite_updated_timestamp AFTER UPDATE ON goqite BEGIN
  UPDATE goqite SET updated = strftime('%Y-%m-%dT%H:%M:%fZ') WHERE id = old.id;
END;
CREATE INDEX IF NOT EXISTS goqite_queue_priority_created_idx ON goqite (queue, priority DESC, created);`

func (g *Goqite) Start(ctx context.Context, env *harness.Env) error {
	dir, err := env.DataDir("goqite")
	if err != nil {
		return err
	}
	g.dir = dir
	g.db, err = openSQLite(filepath.Join(dir, "goqite.db"), syncMode(g.full))
	if err != nil {
		return err
	}
	if _, err := g.db.ExecContext(ctx, goqiteSchema); err != nil {
		return err
	}
	g.ver = "goqite " + moduleVersion("maragu.dev/goqite") + ", " + sqliteVersion(g.db)
	return nil
}

func (g *Goqite) Pids() []int        { return nil }
func (g *Goqite) DataDirs() []string { return []string{g.dir} }
func (g *Goqite) Close() error       { return g.db.Close() }

func (g *Goqite) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	vis := spec.Lease()
	q := goqite.New(goqite.NewOpts{DB: g.db, Name: spec.Name, Timeout: vis, MaxReceive: 1000})
	return &goqiteQueue{db: g.db, q: q, name: spec.Name}, nil
}

type goqiteQueue struct {
	db   *sql.DB
	q    *goqite.Queue
	name string
}

func (q *goqiteQueue) Delete(ctx context.Context) error {
	_, err := q.db.ExecContext(ctx, "DELETE FROM goqite WHERE queue = ?", q.name)
	return err
}

func (q *goqiteQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return harness.NewBatcher(max(window, 1), 1, func(ctx context.Context, msgs []harness.Msg) error {
		if len(msgs) == 1 {
			return q.q.Send(ctx, goqite.Message{Body: msgs[0].Body})
		}
		tx, err := q.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, m := range msgs {
			if err := q.q.SendTx(ctx, tx, goqite.Message{Body: m.Body}); err != nil {
				return err
			}
		}
		return tx.Commit()
	}), nil
}

func (q *goqiteQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return &goqiteConsumer{q: q}, nil
}

type goqiteConsumer struct{ q *goqiteQueue }

func (c *goqiteConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	deadline := time.Now().Add(500 * time.Millisecond)
	var out []harness.Delivery
	var batchEnd time.Time
	for len(out) < max {
		m, err := c.q.q.Receive(ctx)
		if err != nil {
			return out, err
		}
		if m == nil {
			if len(out) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
				return out, nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		out = append(out, harness.Delivery{Body: m.Body, Handle: m.ID})
		// goqite leases one message per transaction: gather for at most 20ms, so
		// that a consumer acks what it has instead of waiting for a full prefetch.
		if len(out) == 1 {
			batchEnd = time.Now().Add(20 * time.Millisecond)
		} else if time.Now().After(batchEnd) {
			break
		}
	}
	return out, nil
}

func (c *goqiteConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	if len(ds) == 1 {
		return c.q.q.Delete(ctx, ds[0].Handle.(goqite.ID))
	}
	tx, err := c.q.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, d := range ds {
		if err := c.q.q.DeleteTx(ctx, tx, d.Handle.(goqite.ID)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (c *goqiteConsumer) Close() error { return nil }
