package systems

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/bench/harness"
	"github.com/okiba/okiba/client"
)

// okiba's topics through the same Go client as its queues: client.TopicPublisher (the
// Producer's batching engine, with its defaults) to publish, and a consumer group's
// members pulling and committing with Client.Pull and Client.Commit — the calls
// client.ConsumeGroup makes — with commits handed to one committer goroutine per
// member that sends what has gathered, one request in flight (as ConsumeGroup's
// committer and the queue adapter's acker do).

func (o *OkibaHTTP) LogSettings() string {
	return "topic with retention forever; client.TopicPublisher.PublishAsync (defaults: batches ≤256, 8 requests in flight, adaptive linger; PublishRecords speaks JSON, where the Producer sends binary); a consumer group (start first), each member joins with a heartbeat, then Client.Pull (max = prefetch, wait 500 ms) and Client.Commit of the offset after the highest record per partition, on one committer goroutine per member"
}

// LogFanout and LogSegmentFiles: okiba's logs have subscriptions and partition files.
func (o *OkibaHTTP) LogFanout()       {}
func (o *OkibaHTTP) LogSegmentFiles() {}

func (o *OkibaHTTP) NewLog(ctx context.Context, spec harness.LogSpec) (harness.Log, error) {
	parts := spec.Partitions
	cfg := api.TopicConfig{Partitions: &parts, Retention: &api.Retention{Forever: true}}
	if _, err := o.c.PutTopic(ctx, spec.Name, cfg); err != nil {
		return nil, err
	}
	return &okibaLog{o: o, name: spec.Name}, nil
}

type okibaLog struct {
	o    *OkibaHTTP
	name string

	mu     sync.Mutex
	queues []string
}

func (l *okibaLog) Delete(ctx context.Context) error {
	err := l.o.c.DeleteTopic(ctx, l.name, true)
	l.mu.Lock()
	qs := l.queues
	l.mu.Unlock()
	for _, q := range qs {
		err = errors.Join(err, l.o.c.DeleteQueue(ctx, q, true))
	}
	return err
}

func (l *okibaLog) NewProducer(ctx context.Context, window int) (harness.Producer, error) {
	return &okibaTopicProducer{p: client.NewTopicPublisher(l.o.c, l.name, client.TopicPublisherOptions{})}, nil
}

type okibaTopicProducer struct{ p *client.TopicPublisher }

func (p *okibaTopicProducer) Publish(m harness.Msg, done func(error)) {
	p.p.PublishAsync(context.Background(), client.Record{Body: m.Body}, func(r client.Published) { done(r.Err) })
}

func (p *okibaTopicProducer) Close() error { return p.p.Close(context.Background()) }

func (l *okibaLog) NewGroup(ctx context.Context, group string) error {
	first := "first"
	_, err := l.o.c.PutGroup(ctx, l.name, group, api.GroupConfig{Start: &first})
	return err
}

// Subscribe adds n subscriptions of every record, each into a fresh queue.
func (l *okibaLog) Subscribe(ctx context.Context, n int) ([]harness.Queue, error) {
	var out []harness.Queue
	for i := 0; i < n; i++ {
		qn := fmt.Sprintf("%s-sub%d", l.name, i)
		if _, err := l.o.c.PutQueue(ctx, qn, api.QueueConfig{VisibilityTimeout: api.Ptr(30 * time.Second)}); err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.queues = append(l.queues, qn)
		l.mu.Unlock()
		if _, err := l.o.c.Subscribe(ctx, l.name, fmt.Sprintf("s%d", i), api.SubscriptionRequest{Queue: qn}); err != nil {
			return nil, err
		}
		out = append(out, &okibaQueue{c: l.o.c, name: qn})
	}
	return out, nil
}

// SegmentFiles are the .log files of the topic's partition directories: the newest
// topic directory under the data directory's topics/ (topics are numbered in creation
// order, and every cell makes its own).
func (l *okibaLog) SegmentFiles(ctx context.Context) ([]string, error) {
	root := filepath.Join(l.o.srv.dataDir, "topics")
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	best, bestID := "", uint64(0)
	for _, e := range ents {
		if id, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && e.IsDir() && (best == "" || id > bestID) {
			best, bestID = e.Name(), id
		}
	}
	if best == "" {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(root, best, "*", "*.log"))
	sort.Strings(files)
	return files, err
}

func (l *okibaLog) NewMember(ctx context.Context, group string, i int, opts harness.ConsumerOptions) (harness.Consumer, error) {
	m := &okibaMember{l: l, group: group, m: client.Member{Name: fmt.Sprintf("bench-%d", i)},
		epochs: map[int]uint64{}, commits: make(chan map[int]uint64, 1024), done: make(chan struct{})}
	// Join without taking records, so that every member holds its share before the
	// drain starts.
	hb, err := l.o.c.Heartbeat(ctx, l.name, group, m.m)
	if err != nil {
		return nil, err
	}
	m.take(hb)
	go m.committer()
	if opts.PullAhead {
		m.ahead = make(chan pulled, 1)
		m.stop = make(chan struct{})
		m.pulling = make(chan struct{})
		go m.puller(opts.Prefetch)
	}
	return m, nil
}

// pulled is one pull's outcome, for a member that pulls ahead.
type pulled struct {
	ds  []harness.Delivery
	err error
}

// puller pulls continuously, one pull ahead of Receive: the next pull is on its way
// while the harness handles the last one's records. A failed pull is handed on like
// records: the harness's pause after a failed Receive paces the retries, since the
// puller is never more than one pull ahead of Receive.
func (m *okibaMember) puller(max int) {
	defer close(m.pulling)
	for {
		ds, err := m.pull(context.Background(), max)
		select {
		case m.ahead <- pulled{ds, err}:
		case <-m.stop:
			return
		}
	}
}

type okibaMember struct {
	l     *okibaLog
	group string

	mu     sync.Mutex
	m      client.Member
	epochs map[int]uint64 // partition → epoch of the assignment held

	commits chan map[int]uint64 // partition → offset to commit
	done    chan struct{}
	// ahead, stop and pulling are the pull-ahead goroutine's (nil without PullAhead).
	ahead   chan pulled
	stop    chan struct{}
	pulling chan struct{}
	errMu   sync.Mutex
	err     error
}

func (m *okibaMember) take(p *client.PullResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m.Session = p.Session
	for _, a := range p.Assignment {
		m.epochs[a.Partition] = a.Epoch
	}
}

func (m *okibaMember) member() client.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m
}

func (m *okibaMember) Receive(ctx context.Context, max int) ([]harness.Delivery, error) {
	if m.ahead == nil {
		return m.pull(ctx, max)
	}
	select {
	case p := <-m.ahead:
		return p.ds, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *okibaMember) pull(ctx context.Context, max int) ([]harness.Delivery, error) {
	p, err := m.l.o.c.Pull(ctx, m.l.name, m.group, m.member(), client.PullOptions{Max: min(max, api.MaxReadRecords), Wait: 500 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	m.take(p)
	out := make([]harness.Delivery, len(p.Records))
	for i, r := range p.Records {
		out[i] = harness.Delivery{Body: r.Body, Handle: [2]uint64{uint64(r.Partition), r.Offset}}
	}
	return out, nil
}

func (m *okibaMember) Ack(ctx context.Context, ds []harness.Delivery) error {
	next := map[int]uint64{}
	for _, d := range ds {
		h := d.Handle.([2]uint64)
		p := int(h[0])
		next[p] = max(next[p], h[1]+1)
	}
	select {
	case m.commits <- next:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}

func (m *okibaMember) committer() {
	defer close(m.done)
	for first := range m.commits {
		next := first
	gather:
		for {
			select {
			case more, ok := <-m.commits:
				if !ok {
					break gather
				}
				for p, o := range more {
					next[p] = max(next[p], o)
				}
			default:
				break gather
			}
		}
		m.mu.Lock()
		var offs []api.CommitOffset
		for p, o := range next {
			offs = append(offs, api.CommitOffset{Partition: p, Offset: o, Epoch: m.epochs[p]})
		}
		mem := m.m
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs, err := m.l.o.c.Commit(ctx, m.l.name, m.group, mem, offs...)
		cancel()
		for _, e := range errs {
			// A partition that moved (epoch_stale) is handed again to its new owner;
			// the harness counts distinct records, so that is no error here.
			if e != nil && !client.IsCode(e, api.CodeEpochStale) && err == nil {
				err = e
			}
		}
		if err != nil {
			m.errMu.Lock()
			if m.err == nil {
				m.err = err
			}
			m.errMu.Unlock()
		}
	}
}

func (m *okibaMember) Close() error {
	if m.stop != nil {
		close(m.stop)
		<-m.pulling
	}
	close(m.commits)
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.l.o.c.Leave(ctx, m.l.name, m.group, m.member())
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}
