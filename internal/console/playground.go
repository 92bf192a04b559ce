package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/reply"
)

// The playground runs lessons of event-driven design on the real broker: each run makes
// its own temporary queues and topics (named playground-<run>-…), drives producers and
// consumers against them in goroutines it owns, and deletes them when it stops: when its page
// asks (DELETE), when the page stops polling (Options.RunIdle), after Options.RunMax,
// or when the console closes. The page polls the run's state a few times a second and
// draws it.
//
// A lesson's producers and consumers are what a user's would be: Go clients of the
// native API (Options.Client, addressed to this very node with its token), which
// create and delete queues and topics, send, receive, ack and nack, publish and
// subscribe, pull and commit over HTTP. Their traffic is the node's like anyone's:
// authenticated, counted in its metrics, and logged.
//
// That client is the node's own admin (the principal okiba-console), so who may play is
// the console's to decide: starting or driving a run needs manage on queue:playground-*
// and topic:playground-* (playgroundNames, the routes' rules), and a run answers only
// the principal that started it.

// PlaygroundPrefix starts the names of the playground's temporary queues and topics.
const PlaygroundPrefix = "playground-"

// lesson is one kind of playground run.
type lesson interface {
	// start makes the run's queues (r.queue) and starts its goroutines (r.spawn).
	start(r *run) error
	// control changes a parameter or acts (receiver down, lose the next message…).
	control(r *run, req controlRequest) error
	// state is what the page draws, as JSON.
	state(r *run) any
}

// controlRequest is the body of POST /ui/api/playground/runs/{id}.
type controlRequest struct {
	Action string             `json:"action,omitempty"`
	Params map[string]float64 `json:"params,omitempty"`
}

var lessons = map[string]func(p map[string]float64) (lesson, error){
	"absorb":     newAbsorbLesson,
	"delivery":   newDeliveryLesson,
	"idempotent": newIdempotentLesson,
	"partitions": newPartitionsLesson,
	"log":        newLogLesson,
}

type playground struct {
	c    *client.Client // nil: no lesson can start
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	runs   map[string]*run
	closed bool // stopAll ran: no run starts any more
}

func newPlayground(c *client.Client, opts Options, log *slog.Logger) *playground {
	return &playground{c: c, opts: opts, log: log, runs: make(map[string]*run)}
}

// run is one lesson being played.
type run struct {
	id, lesson, prefix string
	owner              string // the principal that started it, the only one it answers
	c                  *client.Client
	l                  lesson
	started            time.Time
	seen               atomic.Int64 // Unix ms of the page's last poll
	ctx                context.Context
	cancel             context.CancelFunc
	wg                 sync.WaitGroup

	mu     sync.Mutex
	queues []string
	topics []string
}

// spawn runs fn in a goroutine that the run owns: stopping the run cancels ctx and
// waits for it.
func (r *run) spawn(fn func(ctx context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(r.ctx)
	}()
}

// noDeadLetterQueue is the dead_letter_queue of a queue that has none.
const noDeadLetterQueue = "none"

// queue creates the run's queue called role: no dead-letter queue, no delivery limit,
// an hour of retention (it is deleted long before), a short backoff.
func (r *run) queue(role string) (string, error) {
	name := r.prefix + role
	_, err := r.c.PutQueue(r.ctx, name, api.QueueConfig{
		DeadLetterQueue: ptr(noDeadLetterQueue), MaxDeliveries: ptr(0), Retention: api.Ptr(time.Hour),
		BackoffBase: api.Ptr(100 * time.Millisecond), BackoffMax: api.Ptr(time.Second),
	})
	if err != nil {
		return "", fmt.Errorf("create playground queue %s: %w", name, err)
	}
	r.mu.Lock()
	r.queues = append(r.queues, name)
	r.mu.Unlock()
	return name, nil
}

// topic creates the run's topic called role with cfg. Finishing the run deletes it, with
// its subscriptions and consumer groups.
func (r *run) topic(role string, cfg api.TopicConfig) (string, error) {
	name := r.prefix + role
	if _, err := r.c.PutTopic(r.ctx, name, cfg); err != nil {
		return "", fmt.Errorf("create playground topic %s: %w", name, err)
	}
	r.mu.Lock()
	r.topics = append(r.topics, name)
	r.mu.Unlock()
	return name, nil
}

// receiveOne long-polls up to a second for one message with lease vis.
func (r *run) receiveOne(ctx context.Context, q string, vis time.Duration) (*client.Delivery, error) {
	ds, err := r.c.Receive(ctx, q, client.ReceiveOptions{Max: 1, Wait: ptr(time.Second), Visibility: &vis})
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return &ds[0], nil
}

// depth is ready + delayed + in flight of q.
func (r *run) depth(ctx context.Context, q string) int64 {
	qi, err := r.c.Queue(ctx, q)
	if err != nil {
		return 0
	}
	return qi.Stats.Ready + qi.Stats.Delayed + qi.Stats.InFlight
}

// wait waits d or until ctx ends; it reports whether the run goes on.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// rateGap is the time between events at rate per second.
func rateGap(rate float64) time.Duration {
	return time.Duration(float64(time.Second) / max(rate, 0.01))
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (p *playground) start(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("lesson")
	mk, ok := lessons[name]
	if !ok {
		apiError(w, http.StatusNotFound, "not_found", "no lesson %q; the lessons are absorb, delivery, idempotent, partitions and log", name)
		return
	}
	var params map[string]float64
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &params)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "the body must be a JSON object of numbers: %v", err)
		return
	}
	l, err := mk(params)
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "%v", err)
		return
	}
	if p.c == nil {
		apiError(w, http.StatusServiceUnavailable, "unavailable", "the playground is off: this console has no client of the node's API to run lessons with")
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		apiError(w, http.StatusServiceUnavailable, "unavailable", "the console is closing")
		return
	}
	if len(p.runs) >= p.opts.MaxRuns {
		p.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusTooManyRequests, "too_many_runs", "%d playground runs are going already; stop one (or close its page) and try again", p.opts.MaxRuns)
		return
	}
	id := newRunID()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &run{id: id, lesson: name, prefix: PlaygroundPrefix + id + "-", owner: principalName(r.Context()), c: p.c, l: l, started: time.Now(), ctx: ctx, cancel: cancel}
	rn.seen.Store(time.Now().UnixMilli())
	p.runs[id] = rn
	p.mu.Unlock()
	if err := l.start(rn); err != nil {
		p.finish(rn, "start failed")
		apiError(w, http.StatusServiceUnavailable, "unavailable", "cannot start the lesson: %v", err)
		return
	}
	p.log.Info("playground run started", "run", id, "lesson", name, "principal", rn.owner)
	reply.JSON(w, http.StatusCreated, p.snapshot(rn))
}

type runState struct {
	ID        string   `json:"id"`
	Lesson    string   `json:"lesson"`
	ElapsedMS int64    `json:"elapsed_ms"`
	Queues    []string `json:"queues"`
	Topics    []string `json:"topics,omitempty"`
	State     any      `json:"state"`
}

func (p *playground) snapshot(rn *run) runState {
	rn.mu.Lock()
	qs := append([]string(nil), rn.queues...)
	ts := append([]string(nil), rn.topics...)
	rn.mu.Unlock()
	return runState{ID: rn.id, Lesson: rn.lesson, ElapsedMS: time.Since(rn.started).Milliseconds(), Queues: qs, Topics: ts, State: rn.l.state(rn)}
}

func (p *playground) lookup(w http.ResponseWriter, r *http.Request) *run {
	p.mu.Lock()
	rn := p.runs[r.PathValue("id")]
	p.mu.Unlock()
	if rn == nil || rn.owner != principalName(r.Context()) { // another's run is none of its business
		apiError(w, http.StatusNotFound, "not_found", "no playground run %q: it ended (runs end when their page stops asking, and after a few minutes)", r.PathValue("id"))
		return nil
	}
	rn.seen.Store(time.Now().UnixMilli())
	return rn
}

// principalName is the name of the request's principal ("" when the console is open).
func principalName(ctx context.Context) string {
	p, _ := auth.From(ctx)
	return p.Name
}

func (p *playground) get(w http.ResponseWriter, r *http.Request) {
	if rn := p.lookup(w, r); rn != nil {
		reply.JSON(w, http.StatusOK, p.snapshot(rn))
	}
}

func (p *playground) control(w http.ResponseWriter, r *http.Request) {
	rn := p.lookup(w, r)
	if rn == nil {
		return
	}
	var req controlRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "malformed control request: %v", err)
		return
	}
	if err := rn.l.control(rn, req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "%v", err)
		return
	}
	reply.JSON(w, http.StatusOK, p.snapshot(rn))
}

func (p *playground) stop(w http.ResponseWriter, r *http.Request) {
	if rn := p.lookup(w, r); rn != nil {
		p.finish(rn, "stopped from its page")
		w.WriteHeader(http.StatusNoContent)
	}
}

// finish stops a run: cancels it, waits for its goroutines, deletes its topics (with
// their subscriptions and groups) and then its queues. Only the caller that removes the
// run from the table does the work.
func (p *playground) finish(rn *run, why string) {
	p.mu.Lock()
	if p.runs[rn.id] != rn {
		p.mu.Unlock()
		return
	}
	delete(p.runs, rn.id)
	p.mu.Unlock()
	rn.cancel()
	rn.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rn.mu.Lock()
	qs, ts := rn.queues, rn.topics
	rn.mu.Unlock()
	var errs []error
	for _, t := range ts {
		if err := p.c.DeleteTopic(ctx, t, true); err != nil && !client.IsCode(err, api.CodeTopicNotFound) {
			errs = append(errs, err)
		}
	}
	for _, q := range qs {
		if err := p.c.DeleteQueue(ctx, q, true); err != nil && !client.IsCode(err, api.CodeQueueNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		p.log.Warn("playground run left queues or topics behind", "run", rn.id, "error", err)
	}
	p.log.Info("playground run finished", "run", rn.id, "lesson", rn.lesson, "why", why, "deleted", len(qs)+len(ts)-len(errs))
}

// reap ends runs whose page went away or that ran too long, until ctx ends.
func (p *playground) reap(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var idle, old []*run
		p.mu.Lock()
		for _, rn := range p.runs {
			switch {
			case now.Sub(rn.started) > p.opts.RunMax:
				old = append(old, rn)
			case now.Sub(time.UnixMilli(rn.seen.Load())) > p.opts.RunIdle:
				idle = append(idle, rn)
			}
		}
		p.mu.Unlock()
		for _, rn := range idle {
			p.finish(rn, "its page stopped asking")
		}
		for _, rn := range old {
			p.finish(rn, "time is up")
		}
	}
}

// stopAll ends every run, and lets no other start.
func (p *playground) stopAll(why string) {
	p.mu.Lock()
	p.closed = true
	var all []*run
	for _, rn := range p.runs {
		all = append(all, rn)
	}
	p.mu.Unlock()
	for _, rn := range all {
		p.finish(rn, why)
	}
}

// count returns the runs going (tests).
func (p *playground) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.runs)
}

// param reads a parameter within [lo, hi], def when absent.
func param(p map[string]float64, name string, def, lo, hi float64) (float64, error) {
	v, ok := p[name]
	if !ok {
		return def, nil
	}
	if v < lo || v > hi || v != v {
		return 0, fmt.Errorf("%s must be between %g and %g, got %g", name, lo, hi, v)
	}
	return v, nil
}

func ptr[T any](v T) *T { return &v }

// tail keeps the last n elements of s.
func tail[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
