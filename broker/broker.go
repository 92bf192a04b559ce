// Package broker owns okiba's queues and their log: it applies commands to the queue
// state machine, appends the records the machine emits to the write-ahead log, answers
// callers only once their records are durable, and runs the background work that time
// and storage need (lease expiry, redrive, checkpoints, segment garbage collection).
//
// A Broker is usable in-process as a library, "like an SQLite of queues": the HTTP server
// is one adapter over it, and okibatest gives users one on a temporary directory.
//
// The queue state machine (package queue) is node-independent; where its messages'
// bodies lie on this node is the business of the payload store (internal/payload), which
// the broker owns beside it: the machine tells the store which messages came and went,
// the broker tells it where each record lies, and the store reads bodies back, caches
// them, removes segments nothing needs and compacts sparse ones (docs/architecture.md).
//
// Locking: one mutex (mu) guards the machine, the sink and everything else mutable that
// commands touch; records are appended to the log under it, so log order is the order in
// which the machine applied them. Waiting for fsync happens outside it. The payload
// store has its own lock, taken after mu (never mu after it); readers pin the segments
// they read from, so no lock is held while bodies are read.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"crypto/hmac"
	"crypto/sha256"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/internal/receipt"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// Errors callers branch on, beyond those of package queue.
var (
	// ErrStorageFailed: a write or fsync failed; the broker refuses every mutating call
	// until it is restarted (docs/semantics.md "Durability").
	ErrStorageFailed = errors.New("storage failed: the broker stopped accepting writes; restart it to recover from what is durable on disk")
	// ErrInvalidReceipt: a receipt that is malformed, forged, or belongs to another queue.
	ErrInvalidReceipt = receipt.ErrInvalid
	// ErrClosed: the broker is shut down.
	ErrClosed = errors.New("broker is closed")
	// ErrNewerFormat: the data directory was written by a newer okiba.
	ErrNewerFormat = errors.New("data directory was written by a newer okiba")
	// ErrLocked: another process holds the data directory.
	ErrLocked = errors.New("data directory is in use by another okiba process")
	// ErrDiskFull: free space is below the high-water mark (Config.MinFreeBytes); sends
	// are refused until consumers settle messages or the operator makes room.
	ErrDiskFull = errors.New("disk is nearly full: sends are refused until there is room")
	// ErrReadFailed: a receive found messages to deliver but could not read one of their
	// bodies from disk (an I/O error, not a checksum mismatch), and had nothing else to
	// deliver. Nothing was leased and no delivery counted: retry. Reads that keep failing
	// become ErrStorageFailed.
	ErrReadFailed = errors.New("message bodies could not be read from disk; nothing was leased, retry")
)

// FormatVersion is the data directory format this binary writes. It reads every earlier
// one, and marks a directory it opens with this version before writing anything, so that
// an older okiba refuses it with ErrNewerFormat instead of failing on what it cannot read.
// Version 2: checkpoints hold the queue state and the payload store's section apart, and
// the log carries limits records and the payload store's relocation frames.
const FormatVersion = 2

const formatFile = "FORMAT"

// Config configures a Broker. The zero value of every field but Dir means its default.
type Config struct {
	// Dir is the data directory. Required; created if missing.
	Dir string
	// FS is the file system. Defaults to vfs.OS.
	FS vfs.FS
	// Clock tells the time. Defaults to clock.Real.
	Clock clock.Clock
	// Logger receives structured events. Defaults to discarding them.
	Logger *slog.Logger
	// SegmentSize is the size of log segment files. Defaults to 64 MiB
	// (wal.DefaultSegmentSize); at least MinSegmentSize, 2 MiB (a segment must hold the
	// largest message).
	SegmentSize int64
	// CheckpointBytes: a checkpoint is taken after this many bytes of log. With a deep
	// backlog it waits longer, until the log since the last checkpoint is also twice
	// that checkpoint's size and holds an eighth as many records as it had messages: a
	// checkpoint visits every message of the index (20–35 ns each with the broker's lock
	// held), so this bounds what checkpoints cost each logged record (~0.3 µs) and what
	// they write (half the log), while a restart replays at most an eighth of the backlog
	// in records after loading the checkpoint. Defaults to DefaultCheckpointBytes, 128 MiB.
	CheckpointBytes int64
	// CompactRatio: an old segment whose live payload bytes are below this fraction of
	// its size is compacted (its live messages are rewritten at the head of the log) so
	// that it can be deleted. Defaults to 0.25.
	CompactRatio float64
	// CacheBytes bounds message payloads kept in memory; the rest are read from the log.
	// Defaults to payload.DefaultCacheBytes (256 MiB); negative caches nothing.
	CacheBytes int64
	// DedupCap bounds dedup ids remembered per queue. Defaults to queue.DefaultDedupCap,
	// 1,000,000. With MaxQueues and MaxInFlight it is replicated configuration
	// (queue.Limits): the broker logs it when it differs from what the data directory
	// holds, and every replay applies what was logged.
	DedupCap int
	// DedupTotal bounds dedup ids remembered across every queue. Defaults to
	// queue.DefaultDedupTotal, 2,000,000; replicated configuration like DedupCap.
	DedupTotal int
	// MaxReceiveBytes caps the payload bytes of one receive. Defaults to 16 MiB.
	MaxReceiveBytes int64
	// RedriveBatch is the number of messages a redrive moves per committed step.
	// Defaults to 256.
	RedriveBatch int
	// NoPrecreate turns off creating log segments ahead of need (deterministic file
	// operations for crash tests).
	NoPrecreate bool
	// MaxQueues bounds the number of queues. Defaults to queue.DefaultMaxQueues, 10,000.
	MaxQueues int
	// MaxInFlight bounds leased messages per queue. Defaults to
	// queue.DefaultMaxInFlight, 120,000 (as SQS).
	MaxInFlight int
	// MaxTopics bounds the number of topics. Defaults to topic.DefaultMaxTopics, 10,000;
	// replicated configuration like MaxQueues (topic.Limits), as are the next two.
	MaxTopics int
	// MaxGroups bounds the consumer groups of one topic (default 1,000), MaxMembers the
	// members of one group (default 1,000), MaxSubscriptions the subscriptions of one
	// topic (default 100).
	MaxGroups        int
	MaxMembers       int
	MaxSubscriptions int
	// MinFreeBytes is the send mark: a send or publish that would bring the data
	// directory's free space below it is refused with ErrDiskFull, checked as its records
	// are appended against an estimate that statfs corrects (disk.go). Receives, acks,
	// nacks, dead letters, deletes and purges go on in the reserve below the mark — a
	// segment and the next checkpoint's size — and free space as messages are settled. It
	// is raised to at least the reserve plus a segment (room for the segment the log
	// creates ahead of need). Defaults to twice SegmentSize; a negative value turns the
	// check off.
	MinFreeBytes int64
	// FreeSpace reports the free bytes of the file system holding dir. Defaults to statfs;
	// tests replace it. It is called under the broker's lock: it must be quick.
	FreeSpace func(dir string) (int64, error)
	// ScrubEvery is how often the broker scrubs its storage (scrub.go): it reads back the
	// checkpoints, every live body and the log a restart replays, checking every
	// checksum, and logs what is damaged. Defaults to DefaultScrubEvery, a day, the first
	// a day after Open; negative turns it off.
	ScrubEvery time.Duration
	// ScrubRate bounds a scrub's reads, in bytes a second, so that it takes a little of
	// the disk for a long time rather than much of it at once. Defaults to
	// DefaultScrubRate, 20 MB/s; negative: no bound.
	ScrubRate int64
	// Observer, when set, receives storage measurements for metrics: every group commit
	// of the log and every checkpoint. Nil costs nothing.
	Observer Observer
	// Rand is the source of the jitter the broker chooses outside the state machine (the
	// spread of nack backoffs). Defaults to a PCG generator seeded from crypto/rand; tests
	// that compare brokers give each the same seed.
	Rand mrand.Source

	// Replication, when set, makes this broker one node of a replicated cluster: it runs
	// commands only while Replication's Term says it leads, proposes each command's
	// records and answers once they are committed, and applies the committed entries of
	// others (ApplyReplicated). See replication.go. Nil: a single node.
	Replication Replication

	// manual, for this package's tests, starts none of the background work that changes
	// state (ticks, redrive steps, checkpoints): the test drives each explicitly, so that
	// two brokers fed the same steps take them at the same logical moments.
	manual bool
	// smallSegments, for this package's tests, allows segments below 2 MiB (the test's
	// messages are small), so that a short test fills, compacts and removes many.
	smallSegments bool
}

// Observer receives the broker's storage measurements (package metrics implements it).
// Its methods are called from the broker's background goroutines, never under the
// broker's lock; they must be quick and safe for concurrent use.
type Observer interface {
	wal.Observer
	// Checkpointed is called after each checkpoint attempt with how long it took, the
	// size of the state it wrote, and its error (nil on success).
	Checkpointed(d time.Duration, bytes int, err error)
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("broker: Config.Dir is required")
	}
	if c.FS == nil {
		c.FS = vfs.OS
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = wal.DefaultSegmentSize
	}
	if c.SegmentSize < MinSegmentSize && !c.smallSegments {
		return c, fmt.Errorf("broker: SegmentSize %d is below %d MiB", c.SegmentSize, MinSegmentSize>>20)
	}
	if c.CheckpointBytes == 0 {
		c.CheckpointBytes = DefaultCheckpointBytes
	}
	if c.CompactRatio == 0 {
		c.CompactRatio = 0.25
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = payload.DefaultCacheBytes
	}
	if c.MaxReceiveBytes == 0 {
		c.MaxReceiveBytes = 16 << 20
	}
	if c.RedriveBatch == 0 {
		c.RedriveBatch = 256
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = 2 * c.SegmentSize
	}
	if c.FreeSpace == nil {
		c.FreeSpace = freeSpace
	}
	if c.Rand == nil {
		c.Rand = mrand.NewPCG(seed(), seed())
	}
	if c.ScrubEvery == 0 {
		c.ScrubEvery = DefaultScrubEvery
	}
	if c.ScrubRate == 0 {
		c.ScrubRate = DefaultScrubRate
	}
	return c, nil
}

// Broker is a running okiba broker over one data directory.
type Broker struct {
	cfg      Config
	fs       vfs.FS
	log      *wal.Log
	receipts *receipt.Codec
	secret   []byte // the data directory's secret (DeriveKey)
	dirLock  io.Closer
	clock    clock.Clock
	logger   *slog.Logger

	mu    sync.Mutex
	m     *queue.Machine
	t     *topic.Machine
	a     *access.Machine
	store *payload.Store
	sink  sink
	tsink topicSink
	asink accessSink
	// readers are channels of long-polling topic readers, closed at the topic's next
	// publish (or its deletion), by topic id.
	readers map[uint64]chan struct{}
	// paused says which subscriptions ("topic/name") the last copy found their queue
	// full for.
	paused     map[string]bool
	waiters    map[string]chan struct{}
	rng        *mrand.Rand
	lastTicket ticket
	// In a cluster (Config.Replication): the last committed entry the machines hold;
	// the term this node runs commands in and its proposals in it; the proposals not yet
	// known committed, with their records' end in the log; the mover's gate; and fenced,
	// set once the machines hold effects that will not commit, until Rebuild.
	repl    Replication
	applied uint64
	// replayedOwn is, after a replay, this node's proposal (term, seq) whose group the
	// replay applied last, at applied, if the last group was one (ReplayedOwn).
	replayedOwn [2]uint64
	term, seq   uint64
	proposed    []proposed
	commits     *commitGate
	fenced      bool
	limitsTerm  uint64
	ckptPos     wal.Pos
	// ckptApplied is the applied index of the last durable checkpoint: a cluster's raft
	// log may drop the entries up to it (CheckpointedApplied).
	ckptApplied uint64
	ckptSize    int64 // bytes of the last checkpoint
	ckptRecs    int64 // sink.total when the last checkpoint was taken
	ckptMsgs    int64 // messages the last checkpoint held
	// ckptEmptied is the payload store's Emptied when the last checkpoint was taken.
	ckptEmptied uint64
	// ckptWanted: compaction rewrote messages since the last checkpoint, and the next
	// one is wanted whether or not it is due.
	ckptWanted bool
	volatile   map[string]*Volatile
	closed     bool
	// reading holds the bodies receives have deferred and are reading from the log, by
	// the receive that claimed them: other receives pass over them, so that concurrent
	// receives of a deep backlog read and lease disjoint messages (ops.go, receive).
	reading map[bodyKey]*receive

	ckptMu sync.Mutex

	principalChanges atomic.Uint64 // PrincipalChanges
	nextTick         atomic.Int64  // when the ticker will next run (Unix ms); MaxInt64 if idle
	space            diskSpace     // free space, estimated on the write path (disk.go)
	scrub            scrubState    // the last scrub (scrub.go)
	kickTick         chan struct{}
	kickRedrive      chan struct{}
	kickCkpt         chan struct{}
	kickMove         chan struct{}
	kickCopy         chan struct{}
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	rates            *rates
	recovery         Recovery
	reads            bodyReads
}

// Volatile counts events that leave no record (so they restart from zero): dedup hits
// and backpressure refusals.
type Volatile struct {
	DedupHits uint64
	Refused   uint64
}

// Recovery summarises what Open found.
type Recovery struct {
	Queues     int
	Messages   int64
	Records    int64
	Checkpoint bool
	Duration   time.Duration
}

// sink appends the machine's records to the log in emission order, tells the payload
// store where each lies (the machine applies a record right after emitting it), and
// remembers the last ticket of the current command.
type sink struct {
	log     *wal.Log
	store   *payload.Store
	scratch []byte
	last    wal.Ticket
	lastPos wal.Pos
	// In a cluster: the proposal (term, seq) the current command's records make, whose
	// marker frame goes before its first record, and the records, for the entry.
	cluster   bool
	term, seq uint64
	recs      [][]byte
	n         int   // records of the current command
	total     int64 // records since Open
	err       error
	// published lists the topics the current command published to (with repeats), so
	// that afterLocked wakes their readers and the mover.
	published []uint64
}

// Emit appends one record of the queue machine.
func (s *sink) Emit(r queue.Record) { s.emit(r) }

// encoder is what the two machines' records have in common for the log.
type encoder interface{ AppendTo(b []byte) []byte }

// topicSink is the sink as the topic machine sees it: the same log, the same batch.
type topicSink struct{ *sink }

// Emit appends one record of the topic machine.
func (s topicSink) Emit(r topic.Record) {
	switch x := r.(type) {
	case *topic.PublishRecord:
		s.published = append(s.published, x.TopicID)
	case *topic.PublishFanoutRecord:
		s.published = append(s.published, x.TopicID)
	case *topic.AssignRecord: // a waiting member may have been granted a partition
		s.published = append(s.published, x.TopicID)
	case *topic.SeekRecord:
		s.published = append(s.published, x.TopicID)
	}
	s.emit(r)
}

// accessSink is the sink as the access machine sees it.
type accessSink struct {
	*sink
	changes *atomic.Uint64
}

// Emit appends one record of the access machine. The change count moves before the
// machine applies it, under the broker's lock, so that whoever sees the new count and
// then reads the principals (taking the lock) reads them changed.
func (s accessSink) Emit(r access.Record) {
	s.changes.Add(1)
	s.emit(r)
}

func (s *sink) emit(r encoder) {
	if s.cluster && s.n == 0 && s.err == nil {
		marker := binary.AppendUvarint(append(s.scratch[:0], frameGroupOwn), s.term)
		marker = binary.AppendUvarint(marker, s.seq)
		if _, _, err := s.log.Append(marker); err != nil {
			s.err = err
			return
		}
	}
	var raw []byte
	if s.cluster {
		// The entry keeps the record: encoded once into bytes of its own, which the log
		// copies as it copies the scratch.
		raw = r.AppendTo(nil)
		s.recs = append(s.recs, raw)
	} else {
		s.scratch = r.AppendTo(s.scratch[:0])
		raw = s.scratch
	}
	pos, t, err := s.log.Append(raw)
	s.store.At(pos, false)
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.last, s.lastPos = t, pos
	s.n++
	s.total++
	if cap(s.scratch) > 1<<20 {
		s.scratch = nil
	}
}

// Open opens (creating if needed) the data directory, recovers the state from the latest
// checkpoint and the log after it, and starts the background work.
func Open(cfg Config) (*Broker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	fs := cfg.FS
	if err := fs.MkdirAll(cfg.Dir, vfs.DirMode); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	lock, err := fs.Lock(filepath.Join(cfg.Dir, "LOCK"))
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, cfg.Dir)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	// Every message body is in here: only the owner may read it, including in a
	// directory an older okiba made readable to all.
	if err := vfs.Tighten(fs, cfg.Dir); err != nil {
		lock.Close()
		return nil, fmt.Errorf("make the data directory private: %w", err)
	}
	b := &Broker{cfg: cfg, fs: fs, dirLock: lock, clock: cfg.Clock, logger: cfg.Logger, repl: cfg.Replication}
	b.reset()
	if err := b.open(start, false); err != nil {
		if b.log != nil {
			b.log.Close()
		}
		lock.Close()
		return nil, err
	}
	return b, nil
}

// reset gives the broker the empty state open fills: at Open, and when Rebuild starts
// again from the data directory.
func (b *Broker) reset() {
	cfg := b.cfg
	// Field by field, not a new struct: Rebuild calls this with ckptMu held, and the
	// atomics and the body-read counters carry on.
	b.waiters = make(map[string]chan struct{})
	b.reading = make(map[bodyKey]*receive)
	b.volatile = make(map[string]*Volatile)
	b.kickTick = make(chan struct{}, 1)
	b.kickRedrive = make(chan struct{}, 1)
	b.kickCkpt = make(chan struct{}, 1)
	b.kickMove = make(chan struct{}, 1)
	b.kickCopy = make(chan struct{}, 1)
	b.paused = make(map[string]bool)
	b.readers = make(map[uint64]chan struct{})
	if b.rng == nil {
		b.rng = mrand.New(cfg.Rand)
	}
	b.store = payload.New(payload.Config{CacheBytes: cfg.CacheBytes, FS: b.fs, TopicsDir: filepath.Join(cfg.Dir, "topics")})
	b.commits = &commitGate{}
	b.m, b.t, b.a, b.log = nil, nil, nil, nil
	b.lastTicket = ticket{}
	b.ckptPos, b.ckptSize, b.ckptRecs, b.ckptMsgs, b.ckptWanted, b.ckptEmptied = 0, 0, 0, 0, false, 0
	b.ckptApplied = 0
	b.closed = false
	b.applied, b.term, b.seq, b.proposed, b.limitsTerm = 0, 0, 0, nil, 0
	b.replayedOwn = [2]uint64{}
	b.recovery = Recovery{}
	b.sink = sink{store: b.store, cluster: b.repl != nil}
	b.tsink = topicSink{&b.sink}
	b.asink = accessSink{&b.sink, &b.principalChanges}
	if b.repl != nil {
		b.store.SetGate(b.commits.wait)
	}
}

func seed() uint64 {
	var buf [8]byte
	_, _ = rand.Read(buf[:])
	var v uint64
	for _, c := range buf {
		v = v<<8 | uint64(c)
	}
	return v
}

// open fills the broker from its data directory. held says the caller holds b.mu
// throughout (a reopen: readers wait rather than see machines half replayed).
func (b *Broker) open(start time.Time, held bool) error {
	if err := finishInstall(b.fs, b.cfg.Dir); err != nil {
		return err
	}
	if err := b.checkFormat(); err != nil {
		return err
	}
	secret, err := b.loadSecret()
	if err != nil {
		return err
	}
	b.secret = secret
	if b.receipts, err = receipt.New(secret); err != nil {
		return err
	}
	ckptDir := filepath.Join(b.cfg.Dir, "checkpoints")
	if err := b.fs.MkdirAll(ckptDir, vfs.DirMode); err != nil {
		return fmt.Errorf("create checkpoint directory: %w", err)
	}
	pos, ckpt, ok, err := wal.LoadCheckpoint(b.fs, ckptDir)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	if ok {
		if b.m, b.t, b.a, err = b.restore(ckpt); err != nil {
			return fmt.Errorf("restore checkpoint at %v: %w", pos, err)
		}
		b.ckptPos, b.ckptSize, b.ckptMsgs = pos, int64(len(ckpt)), b.m.MessageCount()
		b.ckptApplied = b.applied
		b.recovery.Checkpoint = true
		// The log may create a segment at Open: only beside room for the next checkpoint.
		b.space.mu.Lock()
		b.space.reserve = b.reserveLocked()
		b.space.mu.Unlock()
	} else {
		b.m, b.t, b.a = queue.New(), topic.New(), access.New()
	}
	b.m.SetBodies(b.store)
	b.t.SetBodies(b.store)
	b.t.SetQueues(b.m)
	var records int64
	var groups *groupReplay
	if b.repl != nil {
		// A cluster node's log holds groups of records, each an entry: only the committed
		// ones are applied, in order (replication.go).
		groups = &groupReplay{repl: b.repl, applied: b.applied}
	}
	own := func(p wal.Pos, raw []byte) error {
		records++
		if groups != nil {
			if isGroupFrame(raw) {
				return groups.marker(raw)
			}
			if groups.skip && !payload.IsFrame(raw) {
				return nil
			}
		} else if isGroupFrame(raw) || IsSharedRecord(raw) {
			return fmt.Errorf("record at %v: the log is a cluster node's: open it as one (--node and --peers)", p)
		}
		return b.replay(p, raw)
	}
	walDir := filepath.Join(b.cfg.Dir, "wal")
	replay, at := own, pos
	shared, _ := b.repl.(SharedLog)
	if shared != nil {
		// One log holds the broker's records and the replication's (raft's): it opens
		// where the segments both need begin, the replication's records replayed now, the
		// broker's once the replication is attached and can say what is committed.
		cs, err := wal.ContiguousStart(b.fs, walDir)
		if err != nil {
			return fmt.Errorf("recover log: %w", err)
		}
		from, theirs := shared.Replayer(walDir)
		// Without a checkpoint the broker replays everything there is. With one, before
		// it the broker needs only bodies (read by position), and the replication may say
		// where its own records begin: the log opens at whichever comes first.
		at = cs
		if pos != 0 {
			at = min(pos, max(cs, from))
		}
		replay = func(p wal.Pos, raw []byte) error {
			if IsSharedRecord(raw) {
				return theirs(p, raw)
			}
			return nil
		}
	}
	b.log, err = wal.Open(wal.Options{
		FS: b.fs, Dir: walDir, SegmentSize: b.cfg.SegmentSize,
		Logger: b.logger, NoPrecreate: b.cfg.NoPrecreate, Observer: b.cfg.Observer, Room: b.segmentRoom,
	}, at, replay)
	if err != nil {
		return fmt.Errorf("recover log: %w", err)
	}
	if shared != nil {
		mine, theirs := b.log.Hold(), b.log.Hold()
		b.store.SetRemover(mine)
		if err := shared.Attach(b.log, theirs); err != nil {
			return fmt.Errorf("recover log: %w", err)
		}
		if err := b.log.Scan(pos, func(p wal.Pos, raw []byte) error {
			if IsSharedRecord(raw) {
				return nil
			}
			return own(p, raw)
		}); err != nil {
			return fmt.Errorf("recover log: %w", err)
		}
	}
	b.store.FinishReplay()
	b.store.SetLog(b.log)
	b.sink.log = b.log
	if !held {
		b.mu.Lock()
	}
	var lerr error
	if groups != nil {
		// A cluster's leader brings time and limits up to date, through the log, once
		// it leads (tickLocked); a follower only applies.
		b.applied, b.replayedOwn = groups.applied, groups.own
		b.commits.advance(b.log.End())
	} else {
		b.m.AdvanceAll(b.nowLocked(), &b.sink)
		b.t.Tick(b.nowLocked(), b.tsink)
		lerr = b.setLimitsLocked()
	}
	b.sink.published = b.sink.published[:0]
	b.lastTicket = ticket{w: b.sink.last}
	t, serr := b.lastTicket, b.sink.err
	infos := b.m.Queues("")
	deadSeen := make(map[string]autoDead) // dead letters from before this start are not news
	autoDeadLocked(b.m.AllCounters(), deadSeen)
	if !held {
		b.mu.Unlock()
	}
	if lerr != nil {
		return fmt.Errorf("broker: %w", lerr)
	}
	if serr != nil {
		return fmt.Errorf("recover: %w", serr)
	}
	if err := t.Wait(context.Background()); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	b.recovery.Queues = len(infos)
	for _, qi := range infos {
		b.recovery.Messages += qi.Stats.Ready + qi.Stats.Delayed + qi.Stats.InFlight
	}
	b.recovery.Records = records
	b.recovery.Duration = time.Since(start)

	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.rates = newRates()
	b.nextTick.Store(0)
	if !b.cfg.manual {
		b.goBackground(ctx, b.tickLoop)
		b.goBackground(ctx, b.redriveLoop)
		b.goBackground(ctx, b.checkpointLoop)
		b.goBackground(ctx, b.moveLoop)
		b.goBackground(ctx, b.copyLoop)
	}
	b.goBackground(ctx, func(ctx context.Context) { b.sampleLoop(ctx, deadSeen) })
	if !held {
		b.correctSpace()
	}
	b.goBackground(ctx, b.diskLoop)
	b.goBackground(ctx, b.scrubLoop)
	b.m.SetReleaseLog(b.logRelease)
	b.logger.Debug("recovered", "queues", b.recovery.Queues, "messages", b.recovery.Messages,
		"records_replayed", records, "from_checkpoint", b.recovery.Checkpoint, "duration", b.recovery.Duration)
	return nil
}

func (b *Broker) goBackground(ctx context.Context, fn func(context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn(ctx)
	}()
}

// setLimitsLocked logs the limits the configuration asks for where they differ from
// the logged ones.
func (b *Broker) setLimitsLocked() error {
	_, err := b.m.SetLimits(b.nowLocked(), &b.sink, queue.Limits{DedupCap: b.cfg.DedupCap, DedupTotal: b.cfg.DedupTotal, MaxQueues: b.cfg.MaxQueues, MaxInFlight: b.cfg.MaxInFlight})
	if err == nil {
		_, err = b.t.SetLimits(b.nowLocked(), b.tsink, topic.Limits{MaxTopics: b.cfg.MaxTopics, MaxGroups: b.cfg.MaxGroups, MaxMembers: b.cfg.MaxMembers, MaxSubscriptions: b.cfg.MaxSubscriptions})
	}
	return err
}

// Recovery reports what Open found.
func (b *Broker) Recovery() Recovery { return b.recovery }

// LogStats returns the log's counters since Open (group commits, fsyncs, records, bytes).
func (b *Broker) LogStats() wal.Stats { return b.log.Stats() }

// MoveStats returns the topic mover's counters since Open: its partition steps, the
// records it moved into partition files and the fsyncs of those files.
func (b *Broker) MoveStats() payload.MoveStats { return b.store.MoveStats() }

func (b *Broker) checkFormat() error {
	path := filepath.Join(b.cfg.Dir, formatFile)
	data, err := vfs.ReadFile(b.fs, path)
	if errors.Is(err, os.ErrNotExist) {
		return vfs.WriteFile(b.fs, path, vfs.FileMode, []byte(fmt.Sprintf("okiba data directory format %d\n", FormatVersion)))
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return fmt.Errorf("%s is not an okiba format file", path)
	}
	v, err := strconv.Atoi(fields[len(fields)-1])
	if err != nil {
		return fmt.Errorf("%s is not an okiba format file", path)
	}
	if v > FormatVersion {
		return fmt.Errorf("%w: %s says format %d; this okiba reads format %d: upgrade okiba", ErrNewerFormat, path, v, FormatVersion)
	}
	if v < FormatVersion {
		b.logger.Info("data directory upgraded", "from_format", v, "to_format", FormatVersion)
		return vfs.WriteFile(b.fs, path, vfs.FileMode, []byte(fmt.Sprintf("okiba data directory format %d\n", FormatVersion)))
	}
	return nil
}

func (b *Broker) loadSecret() ([]byte, error) {
	path := filepath.Join(b.cfg.Dir, "secret")
	data, err := vfs.ReadFile(b.fs, path)
	if err == nil && len(data) >= 32 {
		return data, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read receipt secret: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	if err := vfs.WriteFile(b.fs, path, vfs.FileMode, secret); err != nil {
		return nil, fmt.Errorf("write receipt secret: %w", err)
	}
	return secret, nil
}

// DeriveKey returns a 32-byte key for one purpose, derived from the data directory's
// secret (a random 32 bytes kept 0600 beside the log, which receipts are signed with):
// the node seals principals' secrets and signs console sessions with keys derived here,
// so that every key lives and dies with the data it protects.
func (b *Broker) DeriveKey(purpose string) []byte {
	mac := hmac.New(sha256.New, b.secret)
	mac.Write([]byte("okiba key\x00" + purpose))
	return mac.Sum(nil)
}

// DedupIDs is how many dedup ids every queue remembers together, and the bound on them
// (Config.DedupTotal).
func (b *Broker) DedupIDs() (live, limit int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m.DedupIDs()
}

// Close stops the background work, takes a final checkpoint (so the next start is quick)
// and closes the log. In-flight leases stay in flight; they are restored on restart.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for name, ch := range b.waiters {
		close(ch)
		delete(b.waiters, name)
	}
	for id, ch := range b.readers {
		close(ch)
		delete(b.readers, id)
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	var errs []error
	b.mu.Lock()
	fenced := b.fenced
	b.mu.Unlock()
	if b.log.Err() == nil && !fenced {
		if err := b.checkpoint(context.Background(), ckptFinal); err != nil {
			errs = append(errs, fmt.Errorf("final checkpoint: %w", err))
		}
	}
	errs = append(errs, b.log.Close(), b.dirLock.Close())
	return errors.Join(errs...)
}

// Healthy returns nil while the broker accepts writes, and the storage failure otherwise.
func (b *Broker) Healthy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usableLocked()
}

func (b *Broker) usableLocked() error {
	if b.closed {
		return ErrClosed
	}
	if b.fenced {
		return ErrRebuilding
	}
	if err := b.log.Err(); err != nil {
		return fmt.Errorf("%w (%v)", ErrStorageFailed, err)
	}
	return nil
}

// nowLocked is the time commands run at, in Unix milliseconds: never earlier than the
// latest logged time, so a wall clock that steps back stalls nothing (docs/semantics.md "Time").
func (b *Broker) nowLocked() int64 {
	return max(b.clock.Now().UnixMilli(), b.m.Now(), b.t.Now())
}

// do runs one command under the lock and waits, outside it, until its records (or, if it
// wrote none, everything it could have observed) are durable.
func (b *Broker) do(ctx context.Context, fn func(now int64) error) error {
	t, err, stop := b.begin(fn)
	if stop != nil {
		return stop
	}
	if werr := b.wait(ctx, t); werr != nil {
		return werr
	}
	return err
}

// begin runs one command under the lock, as do does, without waiting: it returns the
// ticket do would wait for and fn's error, which the caller must not act on before the
// ticket is durable. stop is set, and nothing is to be waited for, when the broker is
// not usable or the command's records could not be appended (ErrStorageFailed). A
// caller that runs several commands for one answer (a receive's rounds) waits once, on
// the last ticket: batches complete in order.
func (b *Broker) begin(fn func(now int64) error) (t ticket, err, stop error) {
	b.mu.Lock()
	if err := b.usableLocked(); err != nil {
		b.mu.Unlock()
		return ticket{}, nil, err
	}
	if err := b.startCommandLocked(); err != nil {
		b.mu.Unlock()
		return ticket{}, nil, err
	}
	now := b.nowLocked()
	err = fn(now)
	b.endCommandLocked(now)
	t, serr := b.lastTicket, b.sink.err
	b.afterLocked()
	b.mu.Unlock()
	if serr != nil {
		return ticket{}, nil, fmt.Errorf("%w (%v)", ErrStorageFailed, serr)
	}
	return t, err, nil
}

// startCommandLocked readies the sink for one command. In a cluster, only a leader runs
// commands, each one the next proposal of its term.
func (b *Broker) startCommandLocked() error {
	b.sink.n, b.sink.err = 0, nil
	if b.repl == nil {
		return nil
	}
	term := b.repl.Term()
	if term == 0 {
		return ErrNotLeader
	}
	if term != b.term {
		b.term, b.seq = term, 0
	}
	b.sink.term, b.sink.seq, b.sink.recs = term, b.seq+1, b.sink.recs[:0]
	return nil
}

// endCommandLocked makes what the command wrote the ticket its answer waits for: in a
// cluster, its records proposed (the Replication may coalesce them with the next
// commands' into one entry).
func (b *Broker) endCommandLocked(now int64) {
	if b.sink.n == 0 || b.sink.err != nil {
		return
	}
	t := ticket{w: b.sink.last}
	if b.repl != nil {
		b.seq++
		t.p = b.repl.Propose(b.sink.term, b.sink.seq, now, b.sink.recs)
		b.sink.recs = nil
		b.proposed = append(b.proposed, proposed{p: t.p, end: b.sink.lastPos})
	}
	b.lastTicket = t
}

// wait waits for t as do does: a failed log is ErrStorageFailed.
func (b *Broker) wait(ctx context.Context, t ticket) error {
	if werr := t.Wait(ctx); werr != nil {
		if errors.Is(werr, wal.ErrFailed) {
			return fmt.Errorf("%w (%v)", ErrStorageFailed, werr)
		}
		return werr
	}
	return nil
}

// afterLocked runs after every command: wake receivers that can now get messages, move
// the ticker earlier if the command created an earlier deadline, and ask for a
// checkpoint when enough log has accumulated.
func (b *Broker) afterLocked() {
	for name, ch := range b.waiters {
		if b.m.ReadyCount(name) > 0 {
			close(ch)
			delete(b.waiters, name)
		} else if _, err := b.m.Queue(name); err != nil {
			close(ch) // deleted: let waiters see queue_not_found
			delete(b.waiters, name)
		}
	}
	if next, ok := b.nextEventLocked(); ok && next < b.nextTick.Load() {
		kick(b.kickTick)
	}
	if len(b.sink.published) > 0 {
		for _, id := range b.sink.published {
			if ch := b.readers[id]; ch != nil {
				close(ch)
				delete(b.readers, id)
			}
		}
		b.sink.published = b.sink.published[:0]
		kick(b.kickMove)
		kick(b.kickCopy) // a subscription behind may have more to copy
	}
	if b.sink.n > 0 && b.checkpointDueLocked() {
		kick(b.kickCkpt)
	}
}

// checkpointDueLocked applies Config.CheckpointBytes's rule to the log since the last
// checkpoint.
func (b *Broker) checkpointDueLocked() bool {
	since := b.logBytesSince(b.ckptPos)
	if b.space.low.Load() && (since >= b.cfg.SegmentSize/2 || b.store.Emptied() != b.ckptEmptied) {
		return true // sends are refused for space: let what consumers settled free it soon
	}
	return since >= max(b.cfg.CheckpointBytes, 2*b.ckptSize) &&
		b.sink.total-b.ckptRecs >= b.ckptMsgs/8
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (b *Broker) logBytesSince(p wal.Pos) int64 {
	end := b.log.End()
	return int64(end.Segment()-p.Segment())*b.cfg.SegmentSize + int64(end.Offset()) - int64(p.Offset())
}

func (b *Broker) volatileLocked(name string) *Volatile {
	v := b.volatile[name]
	if v == nil {
		v = &Volatile{}
		b.volatile[name] = v
	}
	return v
}

// waiterLocked returns a channel closed when queue name may have deliverable messages.
func (b *Broker) waiterLocked(name string) chan struct{} {
	ch := b.waiters[name]
	if ch == nil {
		ch = make(chan struct{})
		b.waiters[name] = ch
	}
	return ch
}
