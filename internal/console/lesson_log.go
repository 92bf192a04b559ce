package console

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// Lesson 5: the log as a broker. A queue hands each message to one consumer and forgets
// it once acked; a topic keeps every record, in order, and each reader only moves its own
// offset through it. The lesson publishes order events to a topic of one partition (one
// line of offsets to look at) and shows three readers of it:
//
//   - two consumer groups, billing and analytics, read the same records independently:
//     each commits its own offset, one can be far behind the other, and neither takes
//     anything away from the other;
//   - analytics then seeks back to the first offset and reads the whole history again — a
//     replay, which a queue cannot do, since what it delivered and saw acked is gone;
//   - a subscription with a filter fans the paid orders out into a work queue, where a
//     worker takes each job once and acks it, and the queue forgets it, while the record
//     stays in the log.
//
// It is scripted, not timed: each step waits for the one before it, so the outcome is
// the same on every run (billing reads 8 records, analytics 16 with the replay, the
// worker 3 jobs) whatever the machine's speed; the pace only slows it for the eye.
// After the script, the page may publish more or replay either group.
type logLesson struct {
	pace time.Duration
	c    *client.Client // the run's

	topic, queue string
	actions      chan string

	mu         sync.Mutex
	phase      int
	busy       bool
	events     []logEvent
	readers    []*logReader
	jobs       []logJob
	depth      int64
	delivered  uint64
	retained   int64
	scriptDone bool
	failure    string
}

// The script's phases, as the page numbers them.
const (
	logPhasePublish     = 1 // five events published; the subscription copies the paid one(s)
	logPhaseRead        = 2 // billing reads all there is, analytics two
	logPhasePublishMore = 3 // three more events
	logPhaseCatchUp     = 4 // both groups read on from their own offsets to the end
	logPhaseReplay      = 5 // analytics seeks to the first offset and reads it all again
	logPhaseDone        = 6 // the page's own actions from here on
)

// logMaxEvents bounds what the page may publish into one run.
const logMaxEvents = 40

type logEvent struct {
	Offset uint64 `json:"offset"`
	Order  string `json:"order"`
	Event  string `json:"event"`
	Job    bool   `json:"job,omitempty"` // the subscription's filter passes it
}

// logReader is one consumer group of the lesson, with its one member.
type logReader struct {
	Name      string     `json:"name"`
	Committed uint64     `json:"committed"`
	Read      []logEntry `json:"read"`
	Replays   int        `json:"replays"`

	member  string
	session string
	epoch   uint64
	highest uint64 // one past the highest offset ever handled: below it, a read is a replay
}

type logEntry struct {
	Offset uint64 `json:"o"`
	Replay bool   `json:"r,omitempty"`
}

type logJob struct {
	Offset uint64 `json:"offset"`
	Order  string `json:"order"`
}

func newLogLesson(p map[string]float64) (lesson, error) {
	pace, err := param(p, "pace_ms", 350, 0, 1500)
	if err != nil {
		return nil, err
	}
	return &logLesson{pace: time.Duration(pace) * time.Millisecond, actions: make(chan string, 4)}, nil
}

// logScript is the events the script publishes; later ones come from logEventAt.
var logScript = [][2]string{
	{"A", "placed"}, {"B", "placed"}, {"A", "paid"}, {"C", "placed"}, {"B", "paid"},
	{"A", "shipped"}, {"C", "paid"}, {"B", "shipped"},
}

// logEventAt is the order and event published at offset i: the script's, then C's
// shipment, then new orders D, E, … each placed, paid and shipped.
func logEventAt(i int) (order, event string) {
	if i < len(logScript) {
		return logScript[i][0], logScript[i][1]
	}
	j := i - len(logScript)
	if j == 0 {
		return "C", "shipped"
	}
	j--
	return string(rune('D' + (j/3)%23)), [...]string{"placed", "paid", "shipped"}[j%3]
}

// logType is the record's type header, which the subscription filters on.
func logType(event string) string {
	return map[string]string{"placed": "OrderPlaced", "paid": "OrderPaid", "shipped": "OrderShipped"}[event]
}

func (l *logLesson) start(r *run) error {
	l.c = r.c
	var err error
	if l.topic, err = r.topic("orders", api.TopicConfig{Partitions: ptr(1), Retention: &api.Retention{Age: time.Hour}}); err != nil {
		return err
	}
	if l.queue, err = r.queue("shipping"); err != nil {
		return err
	}
	if _, err := r.c.Subscribe(r.ctx, l.topic, "shipping", api.SubscriptionRequest{Queue: l.queue,
		Filter: json.RawMessage(`{"type":["OrderPaid"]}`)}); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	for _, name := range []string{"billing", "analytics"} {
		// The longest lease there is (a run ends long before): a member that waits for the
		// page's next action keeps its partition.
		if _, err := l.c.PutGroup(r.ctx, l.topic, name, api.GroupConfig{Start: ptr("first"), MemberLease: api.Ptr(5 * time.Minute)}); err != nil {
			return fmt.Errorf("create group %s: %w", name, err)
		}
		l.readers = append(l.readers, &logReader{Name: name, Read: []logEntry{}, member: name + "-1"})
	}
	r.spawn(l.script(r))
	r.spawn(l.work(r))
	r.spawn(l.watch(r))
	return nil
}

func (l *logLesson) control(r *run, req controlRequest) error {
	switch req.Action {
	case "publish", "replay_billing", "replay_analytics":
	default:
		return fmt.Errorf("unknown action %q: publish, replay_billing, replay_analytics", req.Action)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.scriptDone {
		return fmt.Errorf("the lesson is still playing its script: wait for it to finish")
	}
	if req.Action == "publish" && len(l.events) >= logMaxEvents {
		return fmt.Errorf("this run has published %d events, its most: start a new run", logMaxEvents)
	}
	select {
	case l.actions <- req.Action:
		l.busy = true
		return nil
	default:
		return fmt.Errorf("busy with the actions asked for already")
	}
}

// script plays the lesson, then the page's actions, one at a time.
func (l *logLesson) script(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		billing, analytics := l.readers[0], l.readers[1]
		steps := []struct {
			phase int
			do    func() error
		}{
			{logPhasePublish, func() error { return l.publish(ctx, r, 5) }},
			{logPhaseRead, func() error {
				if err := l.read(ctx, billing, 5); err != nil {
					return err
				}
				return l.read(ctx, analytics, 2)
			}},
			{logPhasePublishMore, func() error { return l.publish(ctx, r, 3) }},
			{logPhaseCatchUp, func() error {
				if err := l.read(ctx, billing, l.end()); err != nil {
					return err
				}
				return l.read(ctx, analytics, l.end())
			}},
			{logPhaseReplay, func() error { return l.replay(ctx, analytics) }},
		}
		for _, s := range steps {
			l.mu.Lock()
			l.phase = s.phase
			l.mu.Unlock()
			if err := s.do(); err != nil {
				l.fail(ctx, err)
				return
			}
		}
		l.mu.Lock()
		l.phase, l.scriptDone = logPhaseDone, true
		l.mu.Unlock()
		for {
			var action string
			select {
			case <-ctx.Done():
				return
			case action = <-l.actions:
			}
			var err error
			switch action {
			case "publish":
				if err = l.publish(ctx, r, 1); err == nil {
					if err = l.read(ctx, billing, l.end()); err == nil {
						err = l.read(ctx, analytics, l.end())
					}
				}
			case "replay_billing":
				err = l.replay(ctx, billing)
			case "replay_analytics":
				err = l.replay(ctx, analytics)
			}
			if err != nil {
				l.fail(ctx, err)
				return
			}
			l.mu.Lock()
			l.busy = len(l.actions) > 0
			l.mu.Unlock()
		}
	}
}

// fail notes why the script stopped, unless the run is ending anyway.
func (l *logLesson) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	l.mu.Lock()
	l.failure = err.Error()
	l.mu.Unlock()
}

func (l *logLesson) end() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.events))
}

// publish appends n events to the topic, one at a time at the lesson's pace.
func (l *logLesson) publish(ctx context.Context, r *run, n int) error {
	for range n {
		if !wait(ctx, l.pace) {
			return ctx.Err()
		}
		i := int(l.end())
		order, event := logEventAt(i)
		body := fmt.Sprintf(`{"order":%q,"event":%q}`, order, logType(event))
		res, err := r.c.PublishRecords(ctx, l.topic, []client.Record{{Key: []byte("order-" + order), HasKey: true,
			Headers: map[string]string{"type": logType(event)}, Body: []byte(body)}})
		if err == nil && res[0].Err != nil {
			err = res[0].Err
		}
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		l.mu.Lock()
		l.events = append(l.events, logEvent{Offset: res[0].Offset, Order: order, Event: event, Job: event == "paid"})
		l.mu.Unlock()
	}
	return nil
}

// read has rd's member handle records up to offset upTo, one at a time, committing each
// as it is done: the committed offset is the next record to read. A pull that hands out
// nothing yet (the record is not durable, or the group is rebalancing) is tried again.
func (l *logLesson) read(ctx context.Context, rd *logReader, upTo uint64) error {
	for empty := 0; ; {
		l.mu.Lock()
		committed := rd.Committed
		l.mu.Unlock()
		if committed >= upTo {
			return nil
		}
		pr, err := l.c.Pull(ctx, l.topic, rd.Name, client.Member{Name: rd.member, Session: rd.session}, client.PullOptions{Max: int(upTo - committed)})
		if client.IsCode(err, api.CodeMemberUnknown) && rd.session != "" {
			rd.session = "" // rejoin: the partition starts again from the committed offset
			continue
		}
		if err != nil {
			return fmt.Errorf("%s pulls: %w", rd.Name, err)
		}
		rd.session = pr.Session
		for _, a := range pr.Assignment {
			rd.epoch = a.Epoch
		}
		if len(pr.Records) == 0 {
			if empty++; empty > 200 {
				return fmt.Errorf("%s was handed nothing at offset %d, 200 times", rd.Name, committed)
			}
			if !wait(ctx, 25*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		empty = 0
		for _, rec := range pr.Records {
			if !wait(ctx, l.pace/2) {
				return ctx.Err()
			}
			errs, err := l.c.Commit(ctx, l.topic, rd.Name, client.Member{Name: rd.member, Session: rd.session},
				api.CommitOffset{Partition: rec.Partition, Offset: rec.Offset + 1, Epoch: rd.epoch})
			if err == nil && len(errs) > 0 {
				err = errs[0]
			}
			if err != nil {
				return fmt.Errorf("%s commits offset %d: %w", rd.Name, rec.Offset+1, err)
			}
			l.mu.Lock()
			replay := rec.Offset < rd.highest
			rd.Read = append(rd.Read, logEntry{Offset: rec.Offset, Replay: replay})
			if replay {
				rd.Replays++
			}
			rd.highest = max(rd.highest, rec.Offset+1)
			rd.Committed = rec.Offset + 1
			l.mu.Unlock()
		}
	}
}

// replay seeks rd back to the first retained offset and reads everything again.
func (l *logLesson) replay(ctx context.Context, rd *logReader) error {
	if !wait(ctx, l.pace) {
		return ctx.Err()
	}
	g, err := l.c.Seek(ctx, l.topic, rd.Name, api.SeekRequest{To: "first"})
	if err != nil {
		return fmt.Errorf("%s seeks: %w", rd.Name, err)
	}
	l.mu.Lock()
	rd.Committed = 0
	if len(g.Partitions) > 0 {
		rd.Committed = g.Partitions[0].Committed
	}
	l.mu.Unlock()
	return l.read(ctx, rd, l.end())
}

// work is the shipping worker: it takes each job the subscription put into the queue,
// handles it and acks it, and the queue forgets it.
func (l *logLesson) work(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			m, err := r.receiveOne(ctx, l.queue, 30*time.Second)
			if err != nil || m == nil {
				continue
			}
			if !wait(ctx, l.pace/2) {
				return
			}
			if r.c.AckOne(ctx, l.queue, m.Receipt) != nil {
				continue
			}
			off, _ := strconv.ParseUint(m.Headers["okiba-offset"], 10, 64)
			var body struct{ Order string }
			_ = json.Unmarshal(m.Body, &body)
			l.mu.Lock()
			l.jobs = append(l.jobs, logJob{Offset: off, Order: body.Order})
			l.mu.Unlock()
		}
	}
}

// watch keeps the queue's depth, the subscription's count and the topic's retained
// records for the page, read as any program would.
func (l *logLesson) watch(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for wait(ctx, 150*time.Millisecond) {
			depth := r.depth(ctx, l.queue)
			var delivered uint64
			if s, err := r.c.Subscription(ctx, l.topic, "shipping"); err == nil {
				delivered = s.Delivered
			}
			var retained int64
			if t, err := r.c.Topic(ctx, l.topic); err == nil {
				retained = t.Stats.Records
			}
			l.mu.Lock()
			l.depth, l.delivered, l.retained = depth, delivered, retained
			l.mu.Unlock()
		}
	}
}

func (l *logLesson) state(r *run) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	jobsDue := 0
	for _, e := range l.events {
		if e.Job {
			jobsDue++
		}
	}
	readers := make([]logReader, len(l.readers))
	for i, rd := range l.readers {
		readers[i] = logReader{Name: rd.Name, Committed: rd.Committed, Read: append([]logEntry{}, rd.Read...), Replays: rd.Replays}
	}
	// Done once the page shows it all: the watcher samples the topic apart from the
	// subscription, so its retained count may lag the last publish by one sample.
	done := l.scriptDone && !l.busy && len(l.jobs) == jobsDue && l.delivered == uint64(jobsDue) && l.depth == 0 &&
		l.retained == int64(len(l.events))
	return map[string]any{
		"pace_ms": l.pace.Milliseconds(), "phase": l.phase, "done": done, "busy": l.busy, "failure": l.failure,
		"topic": l.topic, "queue": l.queue, "events": append([]logEvent{}, l.events...), "end": len(l.events),
		"retained": l.retained, "groups": readers,
		"subscription": map[string]any{"delivered": l.delivered, "due": jobsDue},
		"jobs":         append([]logJob{}, l.jobs...), "queue_depth": l.depth,
	}
}
