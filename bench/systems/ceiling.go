package systems

import (
	"context"
	"os"
	"sync"

	"github.com/okiba/okiba/bench/harness"
	"github.com/okiba/okiba/wal"
)

// Ceiling is the physical limit: okiba's own log (package wal) used in process, with
// its one flusher goroutine doing group commit on the same disk as every broker. A
// publish is an Append whose ticket completes after the batch's fdatasync. No network,
// no broker state, no consumers: what is left is the disk and the framing.
type Ceiling struct {
	env *harness.Env

	mu    sync.Mutex
	syncs uint64 // of logs already closed
	open  map[*wal.Log]bool
}

func NewCeiling() *Ceiling { return &Ceiling{open: map[*wal.Log]bool{}} }

func (c *Ceiling) Info() harness.Info {
	return harness.Info{
		Name: "log-ceiling", Label: "limit: in-process log, one flusher (okiba wal)", Peer: "limit", Durability: harness.Limit,
		Version:   "okiba wal package from the working tree",
		Settings:  "Append + wait for the group commit's fdatasync; 64 MiB preallocated segments",
		InProcess: true,
	}
}

func (c *Ceiling) Start(ctx context.Context, env *harness.Env) error { c.env = env; return nil }
func (c *Ceiling) Pids() []int                                       { return nil }
func (c *Ceiling) Close() error                                      { return nil }

// Fsyncs counts the fdatasyncs of every log this system opened.
func (c *Ceiling) Fsyncs(ctx context.Context) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.syncs
	for l := range c.open {
		n += l.Stats().Syncs
	}
	return n, nil
}

func (c *Ceiling) NewQueue(ctx context.Context, spec harness.QueueSpec) (harness.Queue, error) {
	dir, err := c.env.DataDir("ceiling")
	if err != nil {
		return nil, err
	}
	l, err := wal.Open(wal.Options{Dir: dir}, 0, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open[l] = true
	c.mu.Unlock()
	return &ceilingQueue{c: c, l: l, dir: dir}, nil
}

type ceilingQueue struct {
	c   *Ceiling
	l   *wal.Log
	dir string
}

func (q *ceilingQueue) Delete(ctx context.Context) error {
	err := q.l.Close()
	q.c.mu.Lock()
	q.c.syncs += q.l.Stats().Syncs
	delete(q.c.open, q.l)
	q.c.mu.Unlock()
	if rerr := os.RemoveAll(q.dir); err == nil {
		err = rerr
	}
	return err
}

func (q *ceilingQueue) NewConsumer(context.Context, harness.ConsumerOptions) (harness.Consumer, error) {
	return nil, harness.ErrUnsupported
}

// NewProducer: appends never block; one goroutine per producer waits on the tickets
// in order (batches complete in order) and reports each.
func (q *ceilingQueue) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return newAsyncProducer(window,
		func(m harness.Msg) (wal.Ticket, error) {
			_, t, err := q.l.Append(m.Body)
			return t, err
		},
		func(t wal.Ticket) error { return t.Wait(context.Background()) },
		nil), nil
}
