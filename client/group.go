package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/clock"
)

// RecordHandler handles one record of a consumer group's topic (see ConsumeGroup). What
// it returns decides what becomes of the record:
//
//   - nil: the record is done; the offset after it is committed soon, with others.
//   - an error made by DeadLetter (possibly wrapped): the record is written to the
//     group's dead-letter queue with that reason at once, whatever the group's
//     on_failure, and the partition moves on.
//   - any other error, or a panic (recovered and logged): the record failed. It is
//     retried in place — the rest of its partition waits behind it — after a backoff
//     (RetryAfter sets it), until it has failed MaxFailures times; then, when the
//     group's on_failure is dead_letter, it is dead-lettered with reason
//     "max_failures" and the partition moves on. With on_failure block it is retried
//     for ever.
//
// ctx is cancelled when the handler must stop early: its partition moved to another
// member (which handles the record again: the outcome is ignored), or the consumer stops
// hard (HardStop, or the DrainTimeout passed). It carries the values of ConsumeGroup's
// context. The record is the handler's own; records of one partition come one at a time,
// in offset order.
type RecordHandler func(ctx context.Context, r TopicRecord) error

// ConsumeGroupOptions configure ConsumeGroup. The zero value means the defaults.
type ConsumeGroupOptions struct {
	// Member is the name the consumer joins the group under: printable ASCII without
	// spaces, at most 128 bytes. Defaults to hostname-pid-random, so that each process
	// is a member of its own. A process restarting under a fixed name takes over what
	// its previous life held at once, instead of after the member lease.
	Member string
	// Concurrency bounds how many handlers run at once. Records of one partition always
	// run one at a time, so more than the partitions held is no use. Defaults to one per
	// partition held.
	Concurrency int
	// MaxRecords is the most records held at once, waiting or running, and so the
	// largest pull (up to 10 000). The consumer pulls again when half of them are done.
	// Defaults to 1000.
	MaxRecords int
	// PollWait is how long one pull waits for records (long poll). Defaults to 20s; at
	// most 60s and a third of the group's member lease, so that pulls renew the lease.
	PollWait time.Duration
	// CommitInterval and CommitRecords say when handled records are committed: at most
	// CommitInterval after the first of them was handled, or as soon as CommitRecords
	// of them are. Defaults to 100ms and 1000. Whatever they say, the consumer also
	// commits before each pull and heartbeat, when a partition is revoked, and when it
	// stops.
	CommitInterval time.Duration
	CommitRecords  int
	// MaxFailures is how many times a record may fail before it is dead-lettered (with
	// on_failure dead_letter). Defaults to the group's max_failures.
	MaxFailures int
	// RetryDelay and MaxRetryDelay are the backoff between a record's tries: doubling
	// from RetryDelay up to MaxRetryDelay, with jitter. Default 100ms and 10s; a
	// negative RetryDelay retries at once.
	RetryDelay, MaxRetryDelay time.Duration
	// DrainTimeout bounds a graceful stop: after ConsumeGroup's context is cancelled,
	// running handlers get this long to finish before their contexts are cancelled.
	// Defaults to 30s; a negative value cancels them at once.
	DrainTimeout time.Duration
	// HardStop, when closed, stops the consumer at once: pulling stops and every running
	// handler's context is cancelled. ConsumeGroup still waits for the handlers to
	// return, commits what they finished and leaves the group. Nil means never.
	HardStop <-chan struct{}
	// Logger receives what the runtime has to say, as ConsumeOptions.Logger does for
	// queues: every handler failure (rate-limited by the client's clock, the first 10
	// of each 10s one by one), dead letters, partitions lost, rejoins and retried
	// errors. Defaults to slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxRecords     = 1000
	defaultCommitInterval = 100 * time.Millisecond
	defaultCommitRecords  = 1000
	defaultRetryDelay     = 100 * time.Millisecond
	defaultMaxRetryDelay  = 10 * time.Second
	// maxReason and maxDescription are the longest dead-letter reason and description
	// the broker takes (queue.MaxReasonLen, queue.MaxDescriptionLen).
	maxReason      = 128
	maxDescription = 1024
)

func (o ConsumeGroupOptions) withDefaults() (ConsumeGroupOptions, error) {
	if o.Member == "" {
		o.Member = defaultMemberName()
	}
	if o.Concurrency < 0 {
		return o, fmt.Errorf("client: ConsumeGroupOptions.Concurrency must not be negative, got %d", o.Concurrency)
	}
	switch {
	case o.MaxRecords == 0:
		o.MaxRecords = defaultMaxRecords
	case o.MaxRecords < 0 || o.MaxRecords > api.MaxReadRecords:
		return o, fmt.Errorf("client: ConsumeGroupOptions.MaxRecords must be between 1 and %d, got %d", api.MaxReadRecords, o.MaxRecords)
	}
	if o.PollWait <= 0 {
		o.PollWait = defaultPollWait
	}
	o.PollWait = min(o.PollWait, api.MaxWait).Truncate(time.Millisecond)
	if o.CommitInterval <= 0 {
		o.CommitInterval = defaultCommitInterval
	}
	if o.CommitRecords <= 0 {
		o.CommitRecords = defaultCommitRecords
	}
	if o.MaxFailures < 0 {
		return o, fmt.Errorf("client: ConsumeGroupOptions.MaxFailures must not be negative, got %d", o.MaxFailures)
	}
	switch {
	case o.RetryDelay == 0:
		o.RetryDelay = defaultRetryDelay
	case o.RetryDelay < 0:
		o.RetryDelay = 0
	}
	if o.MaxRetryDelay <= 0 {
		o.MaxRetryDelay = defaultMaxRetryDelay
	}
	o.MaxRetryDelay = max(o.MaxRetryDelay, o.RetryDelay)
	if o.DrainTimeout == 0 {
		o.DrainTimeout = defaultDrainTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// defaultMemberName is hostname-pid-random, reduced to what a member name may hold.
func defaultMemberName() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, host)
	if len(host) > 96 {
		host = host[:96]
	}
	if host == "" {
		host = "okiba"
	}
	return fmt.Sprintf("%s-%d-%06x", host, os.Getpid(), rand.Uint32()&0xffffff)
}

// ConsumeGroup joins a topic's consumer group as a member and runs handler on the
// records of the partitions the broker assigns it, until ctx is cancelled, HardStop is
// closed, or an error that retrying cannot fix occurs. The group must exist (PutGroup).
//
// Records. It pulls batches (up to MaxRecords held at once, long-polling) and hands each
// partition's records to the handler strictly in offset order, one at a time; different
// partitions run in parallel, up to Concurrency. A record that fails is retried in place
// with backoff on the client's clock, and after MaxFailures failures dead-lettered or, with
// the group's on_failure block, retried for ever (see RecordHandler).
//
// Commits. For each partition the offset after the last record handled (or
// dead-lettered) is committed, every CommitInterval or CommitRecords records, before each
// pull and heartbeat, when a partition is revoked, and when the consumer stops. A record
// is committed only after every record before it in its partition was handled: delivery
// is at least once, and a record handled but not yet committed when its partition moves
// is handled again by the next owner.
//
// Membership. Pulls renew the member's lease; while the handlers are too busy for
// another pull, heartbeats do (at a third of the group's member_lease). When the broker
// revokes a partition (another member joined) the consumer stops feeding it and drops
// what it buffered of it, lets its running handler finish — as a Kafka consumer finishes
// its record before it gives a partition up — commits, and calls again so that the
// broker lets go. It holds that call at most until the next heartbeat is due; a handler
// still running then has its context cancelled as the partition goes. A partition that
// moves away (it is missing from the assignment or has a new epoch — another member took
// it, or the group was sought) is dropped: what is buffered of it is never handled or
// committed here, and a running handler's context is cancelled. When the broker no
// longer knows the member (member_unknown: its lease ended) it rejoins with a new
// session, and what it had not committed is handed out again.
//
// Stopping. Cancelling ctx drains: pulling stops, records not yet started are dropped,
// running handlers finish (their contexts are cancelled after DrainTimeout; heartbeats go
// on meanwhile), what they handled is committed, and the member leaves the group so that
// its partitions move at once. ConsumeGroup returns only after every handler has
// returned, and then returns nil: a requested stop is not an error.
//
// Errors. Handler failures are logged (rate-limited) and retried. Network and server
// errors (5xx, storage_failed, unavailable) are retried with backoff and logged. Errors
// that retrying cannot fix — group_deleted, group_not_found, topic_not_found,
// unauthorized, too_many_members, an invalid option or member name — end ConsumeGroup
// (after the same drain) with that error, an *api.Error.
func (c *Client) ConsumeGroup(ctx context.Context, topic, group string, handler RecordHandler, opts ConsumeGroupOptions) error {
	if handler == nil {
		return errors.New("client: ConsumeGroup needs a handler")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	gc := newGroupConsumer(ctx, c, topic, group, handler, opts)
	g, err := gc.readGroup(ctx)
	if err != nil || g == nil { // g is nil when ctx ended first
		return err
	}
	gc.configure(g)
	return gc.run(ctx)
}

// groupConsumer is the runtime behind one ConsumeGroup call.
//
// Goroutines: the caller's (run, which starts and joins all the others), the member loop
// (groupmember.go: pulls, heartbeats, rejoins), the committer (groupcommit.go: commits
// when they are due), the handler log's, and one worker per partition held
// (groupwork.go), which runs that partition's records in order.
//
// The decisions are in groupBook (groupbook.go), which keeps the partitions held, what
// is buffered and what is to be committed; it does no I/O, reads no clock and starts no
// goroutine. The goroutines call it under mu and do the requests.
//
// Locking: wire serializes commits and dead letters, so that a commit computed before a
// dead letter never arrives after it (the dead letter commits past the record itself,
// and the older commit would then regress). mu guards book, session and the failure
// counts. Lock order: wire, then mu. No function holds mu while it does a request, waits
// on a channel or calls the handler; functions named …Locked need mu held.
type groupConsumer struct {
	c       *Client
	topic   string
	group   string
	name    string
	handler RecordHandler
	opts    ConsumeGroupOptions
	log     *slog.Logger
	clock   clock.Clock
	retry   backoff // of requests
	records backoff // between a record's tries
	hlog    *handlerLog
	sem     chan struct{} // handler slots when Concurrency is set

	// From the group's configuration, read when the consumer starts and rejoins.
	cfgMu       sync.Mutex
	lease       time.Duration
	deadLetter  bool // on_failure dead_letter (else block)
	maxFailures int

	life  groupLife
	kicks groupKicks
	wire  sync.Mutex

	mu             sync.Mutex
	book           groupBook
	commitFailures int       // commits failed in a row, for the backoff
	commitRetryAt  time.Time // no commit before this, after a failure
}

// groupLife is how the consumer's parts learn that it stops, and how it waits for them.
type groupLife struct {
	// hctx is the parent of every handler's context: it keeps the values of
	// ConsumeGroup's context but not its cancellation (which drains). hcancel stops hard.
	hctx    context.Context
	hcancel context.CancelFunc
	workers sync.WaitGroup

	fatalOnce sync.Once
	fatalErr  error
	fatal     chan struct{} // closed by fail
}

// groupKicks wake a goroutine when there may be work for it; each holds one kick.
type groupKicks struct {
	member chan struct{} // room, a revoke that may be complete, a lost session, the drain
	commit chan struct{} // CommitRecords records were handled
}

func newGroupConsumer(ctx context.Context, c *Client, topic, group string, handler RecordHandler, opts ConsumeGroupOptions) *groupConsumer {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	gc := &groupConsumer{
		c: c, topic: topic, group: group, name: opts.Member, handler: handler, opts: opts, log: opts.Logger,
		clock: c.clock, retry: retryBackoff(),
		records: backoff{first: opts.RetryDelay, limit: opts.MaxRetryDelay},
		hlog:    newHandlerLog(opts.Logger, c.clock, slog.String("topic", topic), slog.String("group", group)),
		life:    groupLife{hctx: hctx, hcancel: hcancel, fatal: make(chan struct{})},
		kicks:   groupKicks{member: make(chan struct{}, 1), commit: make(chan struct{}, 1)},
		book:    newGroupBook(),
	}
	gc.log = gc.log.With("topic", topic, "group", group, "member", opts.Member)
	if opts.Concurrency > 0 {
		gc.sem = make(chan struct{}, opts.Concurrency)
	}
	return gc
}

// readGroup reads the group's configuration, retrying transient errors. It returns nil,
// nil when ctx ends first.
func (gc *groupConsumer) readGroup(ctx context.Context) (*api.Group, error) {
	for failures := 1; ; failures++ {
		rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
		g, err := gc.c.Group(rctx, gc.topic, gc.group)
		cancel()
		if err == nil {
			return g, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if !transient(err) {
			return nil, fmt.Errorf("client: consume group %s of topic %s: %w", gc.group, gc.topic, err)
		}
		gc.log.Warn("okiba: cannot read the consumer group; retrying", "error", err)
		if !sleep(ctx, gc.clock, gc.retry.delay(failures)) {
			return nil, nil
		}
	}
}

// configure takes in the group's configuration.
func (gc *groupConsumer) configure(g *api.Group) {
	gc.cfgMu.Lock()
	defer gc.cfgMu.Unlock()
	gc.lease = 30 * time.Second
	if d := g.Config.MemberLease; d != nil && d.D() > 0 {
		gc.lease = d.D()
	}
	gc.deadLetter = g.Config.OnFailure == nil || *g.Config.OnFailure != "block"
	gc.maxFailures = 10
	if n := g.Config.MaxFailures; n != nil && *n > 0 {
		gc.maxFailures = *n
	}
	if gc.opts.MaxFailures > 0 {
		gc.maxFailures = gc.opts.MaxFailures
	}
}

// policy returns the member lease and the failure policy as last read.
func (gc *groupConsumer) policy() (lease time.Duration, deadLetter bool, maxFailures int) {
	gc.cfgMu.Lock()
	defer gc.cfgMu.Unlock()
	return gc.lease, gc.deadLetter, gc.maxFailures
}

// run starts the consumer's goroutines, waits for the reason to stop, drains, commits,
// leaves and joins.
func (gc *groupConsumer) run(ctx context.Context) error {
	defer gc.life.hcancel()
	// The member loop outlives the drain (its heartbeats keep the partitions while the
	// handlers finish); pulls end when the drain begins.
	memberCtx, stopMember := context.WithCancel(context.Background())
	defer stopMember()
	pullCtx, stopPulls := context.WithCancel(memberCtx)
	defer stopPulls()
	logCtx, stopLog := context.WithCancel(context.Background())
	defer stopLog()
	commitStop := make(chan struct{})
	memberDone, commitDone, logDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { defer close(memberDone); gc.member(memberCtx, pullCtx) }()
	go func() { defer close(commitDone); gc.committer(commitStop) }()
	go func() { defer close(logDone); gc.hlog.run(logCtx) }()

	hard := gc.opts.HardStop
	hardNow := false
	select {
	case <-ctx.Done():
	case <-hard:
		hardNow, hard = true, nil
	case <-gc.life.fatal:
	}

	// Drain: stop pulling, drop what has not started, let the rest finish.
	gc.mu.Lock()
	gc.book.beginDrain()
	gc.mu.Unlock()
	stopPulls()
	kick(gc.kicks.member)
	if hardNow {
		gc.life.hcancel()
	}
	idle := make(chan struct{})
	go func() { gc.life.workers.Wait(); close(idle) }() // no worker starts once draining
	var drainC <-chan time.Time
	if gc.opts.DrainTimeout > 0 {
		t := gc.clock.NewTimer(gc.opts.DrainTimeout)
		defer t.Stop()
		drainC = t.C()
	} else {
		gc.life.hcancel()
	}
	for done := false; !done; {
		select {
		case <-idle:
			done = true
		case <-drainC:
			gc.life.hcancel()
			drainC = nil
		case <-hard:
			gc.life.hcancel()
			hard = nil
		}
	}
	close(commitStop)
	<-commitDone
	gc.commitPending()
	stopMember()
	<-memberDone
	gc.leave()
	stopLog()
	<-logDone
	gc.hlog.flush()
	select {
	case <-gc.life.fatal:
		return gc.life.fatalErr
	default:
		return nil
	}
}

// leave leaves the group, so that the member's partitions move at once rather than
// when its lease ends.
func (gc *groupConsumer) leave() {
	gc.mu.Lock()
	m := gc.memberLocked()
	gc.mu.Unlock()
	if m.Session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), consumerRequestTimeout)
	defer cancel()
	if err := gc.c.Leave(ctx, gc.topic, gc.group, m); err != nil && !IsCode(err, api.CodeMemberUnknown) {
		gc.log.Warn("okiba: leaving the consumer group failed; its partitions move when the member lease ends", "error", err)
	}
}

// memberLocked is the member as the broker knows it now.
func (gc *groupConsumer) memberLocked() Member {
	return Member{Name: gc.name, Session: gc.book.session}
}

// fail records an error that ends ConsumeGroup; the first one wins.
func (gc *groupConsumer) fail(err error) {
	gc.life.fatalOnce.Do(func() {
		gc.life.fatalErr = err
		close(gc.life.fatal)
	})
}

// failRequestLocked ends ConsumeGroup with an error a request answered. When the group (or
// its topic) is gone, so is the member: nothing is committed or left after.
func (gc *groupConsumer) failRequestLocked(what string, err error) {
	if IsCode(err, api.CodeGroupDeleted) || IsCode(err, api.CodeGroupNotFound) || IsCode(err, api.CodeTopicNotFound) {
		gc.book.sessionLost()
	}
	gc.fail(fmt.Errorf("client: consume group %s of topic %s: %s: %w", gc.group, gc.topic, what, err))
}

// startLocked starts a worker for each partition the book took in.
func (gc *groupConsumer) startLocked(ps []*gpart) {
	for _, p := range ps {
		p.ctx, p.cancel = context.WithCancel(gc.life.hctx)
		gc.life.workers.Add(1)
		go gc.work(p)
	}
}
