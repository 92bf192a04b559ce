package systems

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/okiba/okiba/bench/harness"
)

// pgServer is Debian's PostgreSQL, a fresh cluster under the run directory started as
// the postgres user (the harness's child, not the package's service) with fsync on
// and synchronous_commit on: a commit returns after its WAL is flushed. The
// PostgreSQL table queue and River share it.
type pgServer struct {
	env     *harness.Env
	bin     string
	dir     string
	port    int
	version string

	mu   sync.Mutex
	proc *harness.Proc
	pool *pgxpool.Pool
}

func pgBin() (string, error) {
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(ms) == 0 {
		return "", errors.New("PostgreSQL not installed (make bench-setup installs Debian's postgresql)")
	}
	sort.Strings(ms)
	return filepath.Dir(ms[len(ms)-1]), nil
}

func startPG(ctx context.Context, env *harness.Env) (*pgServer, error) {
	s, err := env.Shared("postgres", func() (any, func(), error) {
		bin, err := pgBin()
		if err != nil {
			return nil, nil, err
		}
		dir, err := env.DataDir("postgres")
		if err != nil {
			return nil, nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		if out, err := exec.Command("chown", "postgres:postgres", dir).CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("chown %s: %v: %s", dir, err, out)
		}
		_ = os.Chmod(dir, 0o700)
		initdb := exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", filepath.Join(bin, "initdb"),
			"-D", dir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale")
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("initdb: %v: %s", err, out)
		}
		s := &pgServer{env: env, bin: bin, dir: dir, port: port}
		if err := s.start(ctx); err != nil {
			s.stop()
			return nil, nil, err
		}
		s.version = "PostgreSQL " + output("dpkg-query", "-W", "-f=${Version}", "postgresql-"+filepath.Base(filepath.Dir(bin))) + " (Debian)"
		return s, s.stop, nil
	})
	if err != nil {
		return nil, err
	}
	return s.(*pgServer), nil
}

func (s *pgServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *pgServer) start(ctx context.Context) error {
	// After a kill -9 the old postmaster may linger as a zombie whose pid PostgreSQL
	// would take for a running server; a lock file of a pid that is not running goes.
	locks, _ := filepath.Glob(filepath.Join(s.dir, ".s.PGSQL.*.lock"))
	for _, lock := range append(locks, filepath.Join(s.dir, "postmaster.pid")) {
		if b, err := os.ReadFile(lock); err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && !harness.Alive(pid) {
				_ = os.Remove(lock)
			}
		}
	}
	cmd := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(s.bin, "postgres"), "-D", s.dir,
		"-p", strconv.Itoa(s.port), "-k", s.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", "max_connections=300", "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB",
		"-c", "track_wal_io_timing=off")
	p, err := s.env.StartProc("postgres", cmd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return harness.WaitFor(ctx, p, 2*time.Minute, "postgres", func(ctx context.Context) error {
		cfg, err := pgxpool.ParseConfig(s.url())
		if err != nil {
			return err
		}
		cfg.MaxConns = 200
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return err
		}
		s.mu.Lock()
		s.pool = pool
		s.mu.Unlock()
		return nil
	})
}

func (s *pgServer) db() *pgxpool.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool
}

func (s *pgServer) stop() {
	s.mu.Lock()
	p, pool := s.proc, s.pool
	s.mu.Unlock()
	if pool != nil {
		pool.Close()
	}
	if p != nil {
		_ = p.Stop(syscall.SIGINT, 60*time.Second) // fast shutdown
	}
}

func (s *pgServer) kill() error {
	s.mu.Lock()
	p, pool := s.proc, s.pool
	s.mu.Unlock()
	pool.Close()
	return p.Kill()
}

func (s *pgServer) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return procPids(s.proc)
}

// fsyncs is pg_stat_wal.wal_sync: WAL flushes to disk (flushed into the statistics
// about once a second, so short windows undercount slightly).
func (s *pgServer) fsyncs(ctx context.Context) (uint64, error) {
	var n int64
	err := s.db().QueryRow(ctx, "SELECT wal_sync FROM pg_stat_wal").Scan(&n)
	return uint64(n), err
}

// PGQueue is the table queue Go teams on PostgreSQL write themselves: batch INSERT
// (one statement per window), lease a batch with UPDATE … WHERE id IN (SELECT …
// FOR UPDATE SKIP LOCKED) RETURNING, ack with DELETE … WHERE id = ANY($1); polling
// every 10 ms when empty.
type PGQueue struct {
	srv *pgServer
	ver string
}

func NewPGQueue() *PGQueue { return &PGQueue{} }

func (p *PGQueue) Info() harness.Info {
	return harness.Info{
		Name: "postgres-queue", Label: "PostgreSQL table queue (SKIP LOCKED)", Peer: "postgres", Durability: harness.Durable,
		Version:  p.ver,
		Settings: "fsync on, synchronous_commit on; batch INSERT of a window, lease with FOR UPDATE SKIP LOCKED, DELETE to ack; one connection per producer",
		Caps:     harness.Caps{Consume: true, Visibility: true, Restart: true},
	}
}

func (p *PGQueue) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startPG(ctx, env)
	if err != nil {
		return err
	}
	p.srv = srv
	p.ver = srv.version + ", pgx " + moduleVersion("github.com/jackc/pgx/v5")
	return nil
}

func (p *PGQueue) Pids() []int                                { return p.srv.pids() }
func (p *PGQueue) DataDirs() []string                         { return []string{p.srv.dir} }
func (p *PGQueue) Close() error                               { return nil }
func (p *PGQueue) Fsyncs(ctx context.Context) (uint64, error) { return p.srv.fsyncs(ctx) }
func (p *PGQueue) Kill(ctx context.Context) error             { return p.srv.kill() }
func (p *PGQueue) Restart(ctx context.Context) error          { return p.srv.start(ctx) }

func (p *PGQueue) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	table := pgx.Identifier{"q_" + sanitize(spec.Name)}.Sanitize()
	_, err := p.srv.db().Exec(ctx, `CREATE TABLE `+table+` (
		id bigserial PRIMARY KEY,
		body bytea NOT NULL,
		visible_at timestamptz NOT NULL DEFAULT now(),
		deliveries int NOT NULL DEFAULT 0)`)
	if err != nil {
		return nil, err
	}
	return &pgQueue{srv: p.srv, table: table, vis: spec.Lease()}, nil
}

type pgQueue struct {
	srv   *pgServer
	table string
	vis   time.Duration
}

func (q *pgQueue) Delete(ctx context.Context) error {
	_, err := q.srv.db().Exec(ctx, "DROP TABLE "+q.table)
	return err
}

func (q *pgQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	sql := "INSERT INTO " + q.table + " (body) SELECT unnest($1::bytea[])"
	return harness.NewBatcher(max(window, 1), 1, func(ctx context.Context, msgs []harness.Msg) error {
		bodies := make([][]byte, len(msgs))
		for i, m := range msgs {
			bodies[i] = m.Body
		}
		_, err := q.srv.db().Exec(ctx, sql, bodies)
		return err
	}), nil
}

func (q *pgQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	return &pgConsumer{q: q, lease: fmt.Sprintf(`UPDATE %[1]s SET visible_at = now() + $2::interval, deliveries = deliveries + 1
		WHERE id IN (SELECT id FROM %[1]s WHERE visible_at <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING id, body`, q.table)}, nil
}

type pgConsumer struct {
	q     *pgQueue
	lease string
}

func (c *pgConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	return pollLeases(ctx, func() ([]harness.Delivery, error) {
		rows, err := c.q.srv.db().Query(ctx, c.lease, max, c.q.vis.String())
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanLeases(rows)
	})
}

func (c *pgConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	_, err := c.q.srv.db().Exec(ctx, "DELETE FROM "+c.q.table+" WHERE id = ANY($1)", leaseIDs(ds))
	return err
}

func (c *pgConsumer) Close() error { return nil }
