package topic

import (
	"fmt"
	"sort"
	"strings"

	"github.com/okiba/okiba/queue"
)

// Limits bound what a machine holds. Like queue.Limits they are replicated
// configuration: a LimitsRecord sets them and they are part of the snapshot. The zero
// value of a field means its default.
type Limits struct {
	// MaxTopics bounds how many topics may exist. Defaults to 10,000.
	MaxTopics int
	// DedupCap bounds dedup entries per topic; the oldest are evicted early beyond it.
	// Defaults to 1,000,000.
	DedupCap int
	// MaxSubscriptions bounds the subscriptions of one topic. Defaults to 100.
	MaxSubscriptions int
	// MaxGroups bounds the consumer groups of one topic. Defaults to 1,000.
	MaxGroups int
	// MaxMembers bounds the members of one consumer group. Defaults to 1,000.
	MaxMembers int
}

// Defaults of Limits.
const (
	DefaultMaxTopics        = 10_000
	DefaultDedupCap         = 1_000_000
	DefaultMaxSubscriptions = 100
	DefaultMaxGroups        = 1_000
	DefaultMaxMembers       = 1_000
	maxLimit                = 1 << 31
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxTopics, DefaultMaxTopics)
	def(&l.DedupCap, DefaultDedupCap)
	def(&l.MaxSubscriptions, DefaultMaxSubscriptions)
	def(&l.MaxGroups, DefaultMaxGroups)
	def(&l.MaxMembers, DefaultMaxMembers)
	return l
}

func (l Limits) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"max_topics", l.MaxTopics}, {"topic_dedup_cap", l.DedupCap}, {"max_subscriptions", l.MaxSubscriptions},
		{"max_groups", l.MaxGroups}, {"max_members", l.MaxMembers}} {
		if f.v < 1 || f.v > maxLimit {
			return &queue.ConfigError{Field: f.name, Reason: fmt.Sprintf("must be between 1 and %d, got %d", maxLimit, f.v)}
		}
	}
	return nil
}

// Sink receives the machine's records in emission order (the broker appends them to
// the write-ahead log).
type Sink interface {
	Emit(Record)
}

// Bodies is told where records' bodies are: the seam between the node-independent state
// and the node's payload store. Published is called as a publish record is applied (the
// record holds the body; r aliases the record being applied); Truncated when retention
// deletes a partition's records below start; Deleted when a topic goes. Calls happen
// inside the machine's commands and Apply.
type Bodies interface {
	Published(topicID uint64, partition int, offset uint64, newSegment bool, r *PublishRecord)
	Truncated(topicID uint64, partition int, start uint64)
	Deleted(topicID uint64)
}

// Machine is the topic semantics of a whole broker. The caller serialises calls.
type Machine struct {
	limits  Limits
	topics  map[string]*topicState
	byID    map[uint64]*topicState
	now     int64
	lastTID uint64
	lastGID uint64
	lastSID uint64
	bodies  Bodies
	queues  Queues // for records that put messages into queues; nil in tests of topics alone
}

type topicState struct {
	id        uint64
	name      string
	cfg       Config
	createdAt int64
	updatedAt int64
	parts     []partition
	rr        uint64 // publishes placed round-robin so far: the next goes to rr % partitions
	dedup     dedupTable
	bytes     int64 // retained, every partition
	records   int64
	stats     Counters
	groups    map[string]*group
	subs      map[string]*subscription
	// byID is subs sorted by id, made when first needed after subs changed (setSub,
	// dropSub): a publish walks it and its records find their subscriptions in it,
	// where building and sorting it per record was a tenth of a fan-out's cost.
	byID []*subscription
}

// partition is one partition's retained log: offsets start..next-1, in segments.
type partition struct {
	start, next uint64
	segs        []segment
}

// segment is the machine's whole knowledge of a run of records: no per-record state.
type segment struct {
	base  uint64 // first offset
	count int64
	bytes int64
	first int64 // publish time of its first record
	last  int64 // and of its newest
}

// Counters are a topic's lifetime counts.
type Counters struct {
	Published     uint64
	Bytes         uint64 // of published records
	Truncated     uint64 // records deleted by retention
	TruncatedSegs uint64 // whole segments deleted by retention
}

// New returns an empty machine with the default limits.
func New() *Machine {
	return &Machine{
		limits: Limits{}.WithDefaults(),
		topics: make(map[string]*topicState),
		byID:   make(map[uint64]*topicState),
	}
}

// SetBodies names the node's payload store; nil turns the calls off.
func (m *Machine) SetBodies(b Bodies) { m.bodies = b }

// Limits returns the limits in force.
func (m *Machine) Limits() Limits { return m.limits }

// Now is the latest logged time the machine has seen.
func (m *Machine) Now() int64 { return m.now }

func (m *Machine) clock(now int64) int64 {
	if now < m.now {
		return m.now
	}
	return now
}

func (m *Machine) emit(sink Sink, r Record) {
	sink.Emit(r)
	if err := m.Apply(r); err != nil {
		// A record the machine just built must apply; anything else is a bug.
		panic(fmt.Sprintf("topic: apply own %s record: %v", r.Kind(), err))
	}
}

// SetLimits changes the limits (zero fields: defaults), with a LimitsRecord, unless they
// are in force already. It reports whether it emitted one.
func (m *Machine) SetLimits(now int64, sink Sink, l Limits) (bool, error) {
	now = m.clock(now)
	l = l.WithDefaults()
	if err := l.validate(); err != nil {
		return false, err
	}
	if l == m.limits {
		return false, nil
	}
	m.emit(sink, &LimitsRecord{Now: now, Limits: l})
	return true, nil
}

func (m *Machine) topic(name string) (*topicState, error) {
	t, ok := m.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrTopicNotFound, name)
	}
	return t, nil
}

// CheckName checks that name is one the core can hold (the queues' rule: topics and
// queues are separate namespaces with one grammar).
func CheckName(name string) error {
	if err := queue.CheckName(name); err != nil {
		return &queue.NameError{Name: name, Of: "topic"}
	}
	return nil
}

// PutTopic creates a topic or changes its configuration. It reports whether the topic
// was created. An unchanged configuration emits nothing.
func (m *Machine) PutTopic(now int64, sink Sink, name string, cfg Config) (created bool, err error) {
	now = m.clock(now)
	if err := CheckName(name); err != nil {
		return false, err
	}
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	t := m.topics[name]
	if t == nil {
		if len(m.topics) >= m.limits.MaxTopics {
			return false, &queue.LimitError{Limit: "max_topics", Value: m.limits.MaxTopics, What: "too many topics: delete one first"}
		}
		m.emit(sink, &TopicPutRecord{Now: now, TopicID: m.lastTID + 1, Name: name, Config: cfg})
		m.enforceSize(now, sink, m.topics[name])
		return true, nil
	}
	if err := cfg.checkChange(&t.cfg); err != nil {
		return false, err
	}
	if cfg.Equal(t.cfg) {
		return false, nil
	}
	m.emit(sink, &TopicPutRecord{Now: now, TopicID: t.id, Name: name, Config: cfg})
	m.enforceSize(now, sink, t)
	m.expire(now, sink, t)
	return false, nil
}

// DeleteTopic deletes a topic and every record in it. A topic with subscriptions or
// consumer groups is refused with an *InUseError unless force (which deletes them too;
// what subscriptions put into queues stays there).
func (m *Machine) DeleteTopic(now int64, sink Sink, name string, force bool) error {
	now = m.clock(now)
	t, err := m.topic(name)
	if err != nil {
		return err
	}
	if (len(t.subs) > 0 || len(t.groups) > 0) && !force {
		return &InUseError{Topic: name, Subscriptions: sortedSubNames(t), Groups: sortedGroupNames(t)}
	}
	m.emit(sink, &TopicDeleteRecord{Now: now, TopicID: t.id})
	return nil
}

// AnyPartition lets a publish's key, or the round robin, choose its partition.
const AnyPartition = -1

// Header is one record header.
type Header struct {
	Name, Value string
}

// PublishInput is one record to publish.
type PublishInput struct {
	// Key decides the partition (KeyPartition) unless Partition is given; HasKey says
	// there is one (an empty key is a key). Without a key, records go round-robin.
	Key    []byte
	HasKey bool
	// Partition places the record explicitly, or AnyPartition.
	Partition int
	Headers   []Header
	// Body may be the caller's bytes, a slice of a whole request's even: the machine
	// keeps no reference to it once Publish returns (the log and the tail cache take
	// copies of the record's encoding), but for the messages a fan-out puts into queues,
	// which share a copy of their own (fanOut). So a publish need not copy its bodies
	// before it hands them over, as a send to a queue must.
	Body    []byte
	DedupID string
}

// Size is what counts against max_record_size and retention: body, key and header names
// and values.
func (in *PublishInput) Size() int64 {
	n := int64(len(in.Body) + len(in.Key))
	for _, h := range in.Headers {
		n += int64(len(h.Name) + len(h.Value))
	}
	return n
}

// PublishResult is the outcome of one record of a publish.
type PublishResult struct {
	Partition int
	Offset    uint64
	Time      int64 // publish time (Unix ms); for a duplicate, that of the original's answer
	Duplicate bool
	Err       error
}

// Publish appends records to a topic, each with its own result: a record that is
// invalid, too large or refused by a full topic fails alone. A duplicate (same dedup id
// within the window) is answered with the original's partition and offset and emits
// nothing. The topic not existing fails the whole call.
func (m *Machine) Publish(now int64, sink Sink, name string, in []PublishInput) ([]PublishResult, error) {
	now = m.clock(now)
	t, err := m.topic(name)
	if err != nil {
		return nil, err
	}
	out := make([]PublishResult, len(in))
	for i := range in {
		out[i] = m.publishOne(now, sink, t, &in[i])
	}
	m.enforceSize(now, sink, t)
	return out, nil
}

func (m *Machine) publishOne(now int64, sink Sink, t *topicState, in *PublishInput) PublishResult {
	if err := checkInput(t, in); err != nil {
		return PublishResult{Err: err}
	}
	if in.DedupID != "" && t.cfg.DedupWindow > 0 {
		if e, ok := t.dedup.get(in.DedupID, now); ok {
			return PublishResult{Partition: int(e.partition), Offset: e.offset, Time: e.at, Duplicate: true}
		}
	}
	size := in.Size()
	if t.cfg.Discard == DiscardNew {
		if l := t.cfg.RetentionBytes; l > 0 && t.bytes+size > l {
			return PublishResult{Err: &FullError{Topic: t.name, Limit: "retention_bytes", Value: l}}
		}
		if l := t.cfg.RetentionRecords; l > 0 && t.records+1 > l {
			return PublishResult{Err: &FullError{Topic: t.name, Limit: "retention_records", Value: l}}
		}
	}
	p, rr := in.Partition, false
	switch {
	case p != AnyPartition:
	case in.HasKey:
		p = KeyPartition(in.Key, len(t.parts))
	default:
		p, rr = int(t.rr%uint64(len(t.parts))), true
	}
	r := &PublishRecord{
		Now: now, TopicID: t.id, Partition: p, Offset: t.parts[p].next, RoundRobin: rr,
		HasKey: in.HasKey, Key: in.Key, Headers: in.Headers, Body: in.Body, DedupID: in.DedupID,
	}
	if targets, base := m.fanOut(now, t, r); len(targets) > 0 {
		m.emit(sink, &PublishFanoutRecord{PublishRecord: *r, Topic: t.name, BaseMsgID: base, Targets: targets})
	} else {
		m.emit(sink, r)
	}
	return PublishResult{Partition: p, Offset: r.Offset, Time: now}
}

func checkInput(t *topicState, in *PublishInput) error {
	if in.Partition != AnyPartition && (in.Partition < 0 || in.Partition >= len(t.parts)) {
		return &PartitionError{Topic: t.name, Partition: in.Partition, Partitions: len(t.parts)}
	}
	if len(in.Key) > MaxKeyLen {
		return &queue.InvalidError{Field: "key", Reason: fmt.Sprintf("at most %d bytes, got %d", MaxKeyLen, len(in.Key))}
	}
	if !in.HasKey && len(in.Key) > 0 {
		return &queue.InvalidError{Field: "key", Reason: "a key was given without HasKey"}
	}
	if len(in.DedupID) > MaxDedupIDLen {
		return &queue.InvalidError{Field: "dedup_id", Reason: fmt.Sprintf("at most %d bytes, got %d", MaxDedupIDLen, len(in.DedupID))}
	}
	if len(in.Headers) > MaxHeaders {
		return &queue.InvalidError{Field: "headers", Reason: fmt.Sprintf("at most %d headers, got %d", MaxHeaders, len(in.Headers))}
	}
	for i, h := range in.Headers {
		if h.Name == "" || len(h.Name) > MaxHeaderNameLen {
			return &queue.InvalidError{Field: "headers", Reason: fmt.Sprintf("header names are 1 to %d bytes (%q)", MaxHeaderNameLen, h.Name)}
		}
		if strings.HasPrefix(strings.ToLower(h.Name), "okiba-") {
			return &queue.InvalidError{Field: "headers", Reason: fmt.Sprintf("%q: names beginning okiba- are okiba's own", h.Name)}
		}
		if i > 0 && in.Headers[i-1].Name >= h.Name {
			return &queue.InvalidError{Field: "headers", Reason: "headers must be sorted by name, each name once"}
		}
	}
	if size := in.Size(); size > t.cfg.MaxRecordSize {
		return &TooLargeError{Size: size, Limit: t.cfg.MaxRecordSize}
	}
	return nil
}

// SortHeaders sorts headers by name, as a PublishInput needs them.
func SortHeaders(h []Header) {
	sort.Slice(h, func(i, j int) bool { return h[i].Name < h[j].Name })
}

// enforceSize deletes the oldest whole segments while the topic holds more than its
// retention_bytes or retention_records without them (discard old). A partition's newest
// segment is never deleted for size, only for age: the record a publish just wrote is
// never the one it pushes out.
func (m *Machine) enforceSize(now int64, sink Sink, t *topicState) {
	c := &t.cfg
	if c.Discard != DiscardOld || (c.RetentionBytes == 0 && c.RetentionRecords == 0) {
		return
	}
	for {
		p := t.oldestClosed()
		if p < 0 {
			return
		}
		s := &t.parts[p].segs[0]
		over := c.RetentionBytes > 0 && t.bytes-s.bytes >= c.RetentionBytes ||
			c.RetentionRecords > 0 && t.records-s.count >= c.RetentionRecords
		if !over {
			return
		}
		m.emit(sink, &TruncateRecord{Now: now, TopicID: t.id, Partition: p, Start: t.parts[p].segs[1].base})
	}
}

// oldestClosed returns the partition whose oldest segment is the topic's oldest among
// segments that are not their partition's newest, or -1.
func (t *topicState) oldestClosed() int {
	best := -1
	for i := range t.parts {
		ss := t.parts[i].segs
		if len(ss) < 2 {
			continue
		}
		if best < 0 || ss[0].first < t.parts[best].segs[0].first {
			best = i
		}
	}
	return best
}

// expire deletes the segments whose newest record is past the topic's retention age.
func (m *Machine) expire(now int64, sink Sink, t *topicState) {
	age := t.cfg.RetentionAge.Milliseconds()
	if age == 0 {
		return
	}
	for i := range t.parts {
		p := &t.parts[i]
		n := 0
		for n < len(p.segs) && p.segs[n].last+age <= now {
			n++
		}
		if n == 0 {
			continue
		}
		start := p.next
		if n < len(p.segs) {
			start = p.segs[n].base
		}
		m.emit(sink, &TruncateRecord{Now: now, TopicID: t.id, Partition: i, Start: start})
	}
}

// NextEvent returns the earliest time at which some topic has a segment to expire.
func (m *Machine) NextEvent() (int64, bool) {
	var next int64
	ok := false
	for _, t := range m.byID {
		for _, g := range t.groups {
			for _, x := range g.members {
				if !ok || x.expires < next {
					next, ok = x.expires, true
				}
			}
		}
		age := t.cfg.RetentionAge.Milliseconds()
		if age == 0 {
			continue
		}
		for i := range t.parts {
			if ss := t.parts[i].segs; len(ss) > 0 {
				if at := ss[0].last + age; !ok || at < next {
					next, ok = at, true
				}
			}
		}
	}
	return next, ok
}

// Tick applies retention by age, and ends the members whose lease passed, as of now.
func (m *Machine) Tick(now int64, sink Sink) {
	now = m.clock(now)
	for _, id := range m.topicIDs() {
		m.expire(now, sink, m.byID[id])
		m.expireMembers(now, sink, m.byID[id])
	}
}

// topicIDs returns every topic's id in ascending order: commands that visit every
// topic visit them in one order on every replica.
func (m *Machine) topicIDs() []uint64 {
	ids := make([]uint64, 0, len(m.byID))
	for id := range m.byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
