package systems

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/okiba/okiba/bench/harness"
)

// asyncProducer is the Producer of a client that publishes without waiting and is
// told later (RabbitMQ's publisher confirms, JetStream's PublishAsync, the log's
// tickets): publish hands back a token, and one goroutine waits on the tokens in
// publish order and reports each, so that no goroutine is started per message. Up to
// window tokens wait in line; Close waits for them all, then calls release.
type asyncProducer[T any] struct {
	publish func(harness.Msg) (T, error)
	wait    func(T) error
	release func() error // nil: nothing to release
	pending chan asyncPending[T]
	wg      sync.WaitGroup
}

type asyncPending[T any] struct {
	token T
	done  func(error)
}

func newAsyncProducer[T any](window int, publish func(harness.Msg) (T, error), wait func(T) error, release func() error) *asyncProducer[T] {
	p := &asyncProducer[T]{publish: publish, wait: wait, release: release, pending: make(chan asyncPending[T], max(window, 1))}
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *asyncProducer[T]) Publish(m harness.Msg, done func(error)) {
	t, err := p.publish(m)
	if err != nil {
		done(err)
		return
	}
	p.pending <- asyncPending[T]{t, done}
}

func (p *asyncProducer[T]) run() {
	defer p.wg.Done()
	for a := range p.pending {
		a.done(p.wait(a.token))
	}
}

func (p *asyncProducer[T]) Close() error {
	close(p.pending)
	p.wg.Wait()
	if p.release == nil {
		return nil
	}
	return p.release()
}

// receiveChan is Receive for a client that pushes deliveries into a channel
// (RabbitMQ's basic.consume, River's workers): it waits up to 500 ms (or until ctx
// ends) for the first, then takes what is already there, up to max.
func receiveChan[T any](ctx context.Context, ch <-chan T, max int, delivery func(T) harness.Delivery) ([]harness.Delivery, error) {
	var out []harness.Delivery
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case d, ok := <-ch:
		if !ok {
			return nil, errors.New("consumer channel closed")
		}
		out = append(out, delivery(d))
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
	for len(out) < max {
		select {
		case d, ok := <-ch:
			if !ok {
				return out, nil
			}
			out = append(out, delivery(d))
		default:
			return out, nil
		}
	}
	return out, nil
}

// The table queues (PostgreSQL, SQLite) lease with one UPDATE … RETURNING id, body
// and ack with one DELETE of the ids.

// sanitize makes s usable in a table or queue name.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// pollLeases runs lease until it returns deliveries, 500 ms have passed or ctx ends,
// polling every 10 ms while the table is empty.
func pollLeases(ctx context.Context, lease func() ([]harness.Delivery, error)) ([]harness.Delivery, error) {
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		out, err := lease()
		if err != nil {
			return nil, err
		}
		if len(out) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return out, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leaseRows is what scanLeases needs of pgx.Rows and *sql.Rows.
type leaseRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanLeases reads the (id, body) rows of a lease into deliveries whose handle is the
// id; the caller closes rows.
func scanLeases(rows leaseRows) ([]harness.Delivery, error) {
	var out []harness.Delivery
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		out = append(out, harness.Delivery{Body: body, Handle: id})
	}
	return out, rows.Err()
}

// leaseIDs are the ids of deliveries from scanLeases, for the DELETE of an ack.
func leaseIDs(ds []harness.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.Handle.(int64)
	}
	return ids
}

// procPids is the pid of a server process as Pids wants it: none before it started.
func procPids(p *harness.Proc) []int {
	if p == nil {
		return nil
	}
	return []int{p.Pid()}
}

// syncMode is SQLite's synchronous setting: FULL (an fsync at every commit) or NORMAL.
func syncMode(full bool) string {
	if full {
		return "FULL"
	}
	return "NORMAL"
}

// stopAll stops the processes of a cluster at once, each with SIGTERM and up to 30 s
// before SIGKILL, so that no node waits for an election it cannot win; it returns when
// all have exited.
func stopAll(procs []*harness.Proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { _ = p.Stop(syscall.SIGTERM, 30*time.Second) })
	}
	wg.Wait()
}

// pidsOf is the pids of a cluster's processes.
func pidsOf(procs []*harness.Proc) []int {
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, p.Pid())
	}
	return pids
}
