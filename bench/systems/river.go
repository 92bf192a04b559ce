package systems

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/okiba/okiba/bench/harness"
)

// River is riverqueue/river on the shared PostgreSQL (synchronous_commit on):
// InsertMany of a window per round trip from an insert-only client, and one River
// client per queue whose workers hand each job to the harness's consumers and finish
// when it is acked (River completes jobs in batches). Fetch cooldown 1 ms.
type River struct {
	srv *pgServer
	ver string
	ins *river.Client[pgx.Tx]
}

func NewRiver() *River { return &River{} }

func (r *River) Info() harness.Info {
	return harness.Info{
		Name: "river", Label: "River on PostgreSQL", Peer: "postgres", Durability: harness.Durable,
		Version:  r.ver,
		Settings: "fsync on, synchronous_commit on; InsertMany of a window; workers (MaxWorkers = prefetch × 4) finish a job when the harness acks it; FetchCooldown 1 ms, FetchPollInterval 50 ms",
		Caps:     harness.Caps{Consume: true},
	}
}

type benchArgs struct {
	B string `json:"b"`
}

func (benchArgs) Kind() string { return "okiba_bench" }

func (r *River) Start(ctx context.Context, env *harness.Env) error {
	srv, err := startPG(ctx, env)
	if err != nil {
		return err
	}
	r.srv = srv
	r.ver = srv.version + ", River " + moduleVersion("github.com/riverqueue/river")
	m, err := rivermigrate.New(riverpgxv5.New(srv.db()), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	r.ins, err = river.NewClient(riverpgxv5.New(srv.db()), &river.Config{})
	return err
}

func (r *River) Pids() []int                                { return r.srv.pids() }
func (r *River) DataDirs() []string                         { return []string{r.srv.dir} }
func (r *River) Close() error                               { return nil }
func (r *River) Fsyncs(ctx context.Context) (uint64, error) { return r.srv.fsyncs(ctx) }

func (r *River) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	return &riverQueue{r: r, name: sanitize(spec.Name), jobs: make(chan riverJob, 4096)}, nil
}

type riverQueue struct {
	r    *River
	name string
	jobs chan riverJob

	mu      sync.Mutex
	workers *river.Client[pgx.Tx]
}

type riverJob struct {
	body []byte
	done chan struct{}
}

func (q *riverQueue) Delete(ctx context.Context) error {
	q.mu.Lock()
	w := q.workers
	q.mu.Unlock()
	if w != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = w.StopAndCancel(sctx)
		cancel()
	}
	_, err := q.r.srv.db().Exec(ctx, "DELETE FROM river_job WHERE queue = $1", q.name)
	return err
}

func (q *riverQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return harness.NewBatcher(max(window, 1), 1, func(ctx context.Context, msgs []harness.Msg) error {
		params := make([]river.InsertManyParams, len(msgs))
		for i, m := range msgs {
			params[i] = river.InsertManyParams{Args: benchArgs{B: string(m.Body)}, InsertOpts: &river.InsertOpts{Queue: q.name}}
		}
		_, err := q.r.ins.InsertMany(ctx, params)
		return err
	}), nil
}

type riverWorker struct {
	river.WorkerDefaults[benchArgs]
	jobs chan<- riverJob
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	j := riverJob{body: []byte(job.Args.B), done: make(chan struct{})}
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *riverWorker) Timeout(*river.Job[benchArgs]) time.Duration { return -1 }

// NewConsumer starts the queue's River client with the first consumer; later
// consumers share its workers.
func (q *riverQueue) NewConsumer(ctx context.Context, opts harness.ConsumerOptions) (harness.Consumer, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.workers == nil {
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, &riverWorker{jobs: q.jobs}); err != nil {
			return nil, err
		}
		c, err := river.NewClient(riverpgxv5.New(q.r.srv.db()), &river.Config{
			Queues:            map[string]river.QueueConfig{q.name: {MaxWorkers: max(opts.Prefetch, 1) * 4}},
			Workers:           workers,
			FetchCooldown:     time.Millisecond,
			FetchPollInterval: 50 * time.Millisecond,
		})
		if err != nil {
			return nil, err
		}
		if err := c.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
		q.workers = c
	}
	return &riverConsumer{q: q}, nil
}

type riverConsumer struct{ q *riverQueue }

func (c *riverConsumer) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	return receiveChan(ctx, c.q.jobs, max, func(j riverJob) harness.Delivery {
		return harness.Delivery{Body: j.body, Handle: j.done}
	})
}

func (c *riverConsumer) Ack(ctx context.Context, ds []harness.Delivery) error {
	for _, d := range ds {
		ch, ok := d.Handle.(chan struct{})
		if !ok {
			return errors.New("not a River delivery")
		}
		close(ch)
	}
	return nil
}

func (c *riverConsumer) Close() error { return nil }
