package harness

import (
	"context"
	"sync"
)

// Batcher turns Publish calls into batches for clients that send a batch per round
// trip (a Redis pipeline, a multi-row INSERT, an SQS SendMessageBatch): whatever has
// gathered while the previous batches were out leaves as the next one, as a
// pipelining client does, with no timer. It implements Producer.
type Batcher struct {
	send  func(ctx context.Context, msgs []Msg) error
	max   int
	slots chan struct{}
	in    chan pending
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

type pending struct {
	m    Msg
	done func(error)
}

// NewBatcher starts a batcher that sends at most maxBatch messages per call of send and
// has at most concurrent calls outstanding. An error from send fails its whole batch.
func NewBatcher(maxBatch, concurrent int, send func(ctx context.Context, msgs []Msg) error) *Batcher {
	b := &Batcher{
		send: send, max: maxBatch,
		slots: make(chan struct{}, max(concurrent, 1)),
		in:    make(chan pending, maxBatch*max(concurrent, 1)),
		done:  make(chan struct{}),
	}
	go b.run()
	return b
}

// Publish queues m; done is called with the outcome of its batch.
func (b *Batcher) Publish(m Msg, done func(error)) { b.in <- pending{m, done} }

func (b *Batcher) run() {
	defer close(b.done)
	for {
		b.slots <- struct{}{} // a batch may leave: take what is there
		first, ok := <-b.in
		if !ok {
			<-b.slots
			b.wg.Wait()
			return
		}
		batch := []pending{first}
	gather:
		for len(batch) < b.max {
			select {
			case p, ok := <-b.in:
				if !ok {
					break gather
				}
				batch = append(batch, p)
			default:
				break gather
			}
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			msgs := make([]Msg, len(batch))
			for i, p := range batch {
				msgs[i] = p.m
			}
			err := b.send(context.Background(), msgs)
			<-b.slots
			for _, p := range batch {
				p.done(err)
			}
		}()
	}
}

// Close waits for every queued publish to be sent and answered.
func (b *Batcher) Close() error {
	b.once.Do(func() { close(b.in) })
	<-b.done
	return nil
}
