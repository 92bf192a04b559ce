package topic

import (
	"fmt"
	"time"

	"github.com/okiba/okiba/internal/codec"
)

// Record encoding: the queue records' layout (package queue, record.go) — a kind byte,
// the logged time as a varint of Unix milliseconds, then the fields in the order of the
// record's struct, integers as varints, strings and bytes length-prefixed. A decoder
// refuses unknown kinds, truncated input and trailing bytes; new fields go into new
// kinds.

// Kind identifies a record type. Values are part of the on-disk format: never reuse one.
type Kind uint8

const (
	KindTopicPut        Kind = 64
	KindTopicDelete     Kind = 65
	KindPublish         Kind = 66
	KindTruncate        Kind = 67
	KindLimits          Kind = 68
	KindGroupPut        Kind = 69
	KindGroupDelete     Kind = 70
	KindMemberJoin      Kind = 71
	KindMemberRenew     Kind = 72
	KindMemberLeave     Kind = 73
	KindAssign          Kind = 74
	KindHanded          Kind = 75
	KindCommit          Kind = 76
	KindSeek            Kind = 77
	KindGroupDeadLetter Kind = 78
	KindSubPut          Kind = 79
	KindSubDelete       Kind = 80
	KindPublishFanout   Kind = 81
	KindSubCopy         Kind = 82
)

// MinKind and MaxKind bound this package's kinds: a log reader sends a record whose
// first byte lies between them here.
const (
	MinKind Kind = 64
	MaxKind Kind = 127
)

var kinds = [...]struct {
	name string
	new  func() Record
}{
	KindTopicPut - MinKind:        {"topic_put", func() Record { return new(TopicPutRecord) }},
	KindTopicDelete - MinKind:     {"topic_delete", func() Record { return new(TopicDeleteRecord) }},
	KindPublish - MinKind:         {"publish", func() Record { return new(PublishRecord) }},
	KindTruncate - MinKind:        {"truncate", func() Record { return new(TruncateRecord) }},
	KindLimits - MinKind:          {"topic_limits", func() Record { return new(LimitsRecord) }},
	KindGroupPut - MinKind:        {"group_put", func() Record { return new(GroupPutRecord) }},
	KindGroupDelete - MinKind:     {"group_delete", func() Record { return new(GroupDeleteRecord) }},
	KindMemberJoin - MinKind:      {"member_join", func() Record { return new(MemberJoinRecord) }},
	KindMemberRenew - MinKind:     {"member_renew", func() Record { return new(MemberRenewRecord) }},
	KindMemberLeave - MinKind:     {"member_leave", func() Record { return new(MemberLeaveRecord) }},
	KindAssign - MinKind:          {"assign", func() Record { return new(AssignRecord) }},
	KindHanded - MinKind:          {"handed", func() Record { return new(HandedRecord) }},
	KindCommit - MinKind:          {"commit", func() Record { return new(CommitRecord) }},
	KindSeek - MinKind:            {"seek", func() Record { return new(SeekRecord) }},
	KindGroupDeadLetter - MinKind: {"group_dead_letter", func() Record { return new(GroupDeadLetterRecord) }},
	KindSubPut - MinKind:          {"subscription_put", func() Record { return new(SubPutRecord) }},
	KindSubDelete - MinKind:       {"subscription_delete", func() Record { return new(SubDeleteRecord) }},
	KindPublishFanout - MinKind:   {"publish_fanout", func() Record { return new(PublishFanoutRecord) }},
	KindSubCopy - MinKind:         {"subscription_copy", func() Record { return new(SubCopyRecord) }},
}

func (k Kind) String() string {
	if i := int(k) - int(MinKind); i >= 0 && i < len(kinds) && kinds[i].new != nil {
		return kinds[i].name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one logged fact about topics; see queue.Record for what records promise.
type Record interface {
	Kind() Kind
	Time() int64
	AppendTo(b []byte) []byte
	decode(d *codec.Decoder, now int64)
	apply(m *Machine) error
}

func header(b []byte, k Kind, now int64) []byte {
	b = append(b, byte(k))
	return codec.AppendVarint(b, now)
}

// DecodeRecord decodes one record. The result does not alias b.
func DecodeRecord(b []byte) (Record, error) {
	return decodeRecord(&codec.Decoder{B: b})
}

// DecodeRecordShared decodes one record whose body, key and header values stay in b;
// the caller must not let the record outlive b's contents.
func DecodeRecordShared(b []byte) (Record, error) {
	return decodeRecord(&codec.Decoder{B: b, Shared: true})
}

func decodeRecord(d *codec.Decoder) (Record, error) {
	k := Kind(d.Byte())
	now := d.Varint()
	if d.Err != nil {
		return nil, fmt.Errorf("decode record: %w", d.Err)
	}
	i := int(k) - int(MinKind)
	if i < 0 || i >= len(kinds) || kinds[i].new == nil {
		return nil, fmt.Errorf("decode record: unknown topic kind %d", uint8(k))
	}
	r := kinds[i].new()
	r.decode(d, now)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("decode %s record: %w", k, err)
	}
	return r, nil
}

// Apply changes the machine's state as the record says. Replaying a log's records in
// order rebuilds the state they were emitted from.
func (m *Machine) Apply(r Record) error {
	if t := r.Time(); t > m.now {
		m.now = t
	}
	return r.apply(m)
}

// ---------------------------------------------------------------------------------------

// TopicPutRecord creates a topic or replaces its configuration.
type TopicPutRecord struct {
	Now     int64
	TopicID uint64
	Name    string
	Config  Config
}

func (r *TopicPutRecord) Kind() Kind  { return KindTopicPut }
func (r *TopicPutRecord) Time() int64 { return r.Now }

func (r *TopicPutRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTopicPut, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendString(b, r.Name)
	return appendConfig(b, &r.Config)
}

func (r *TopicPutRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.TopicID = d.Uvarint()
	r.Name = d.String()
	r.Config = decodeConfig(d)
}

func (r *TopicPutRecord) apply(m *Machine) error {
	if r.TopicID > m.lastTID {
		m.lastTID = r.TopicID
	}
	if t := m.byID[r.TopicID]; t != nil {
		if t.name != r.Name {
			return fmt.Errorf("topic id %d is %q, record says %q", r.TopicID, t.name, r.Name)
		}
		if err := r.Config.checkChange(&t.cfg); err != nil {
			return err
		}
		t.cfg = r.Config.Clone()
		t.updatedAt = r.Now
		return nil
	}
	if m.topics[r.Name] != nil {
		return fmt.Errorf("topic %q exists with another id", r.Name)
	}
	if r.Config.Partitions < 1 || r.Config.Partitions > MaxPartitions {
		return fmt.Errorf("topic %q: %d partitions", r.Name, r.Config.Partitions)
	}
	t := &topicState{id: r.TopicID, name: r.Name, cfg: r.Config.Clone(), createdAt: r.Now, updatedAt: r.Now,
		parts: make([]partition, r.Config.Partitions)}
	m.topics[r.Name] = t
	m.byID[r.TopicID] = t
	return nil
}

func appendConfig(b []byte, c *Config) []byte {
	b = codec.AppendUvarint(b, uint64(c.Partitions))
	b = codec.AppendVarint(b, c.RetentionAge.Milliseconds())
	b = codec.AppendVarint(b, c.RetentionBytes)
	b = codec.AppendVarint(b, c.RetentionRecords)
	b = append(b, byte(c.Discard))
	b = codec.AppendVarint(b, c.MaxRecordSize)
	b = codec.AppendVarint(b, c.DedupWindow.Milliseconds())
	b = codec.AppendVarint(b, c.SegmentBytes)
	b = codec.AppendVarint(b, c.SegmentAge.Milliseconds())
	b = append(b, byte(c.Hash))
	return codec.AppendStringMap(b, c.Tags)
}

func decodeConfig(d *codec.Decoder) Config {
	var c Config
	ms := func() time.Duration { return time.Duration(d.Varint()) * time.Millisecond }
	c.Partitions = int(d.Uvarint())
	c.RetentionAge = ms()
	c.RetentionBytes = d.Varint()
	c.RetentionRecords = d.Varint()
	c.Discard = Discard(d.Byte())
	c.MaxRecordSize = d.Varint()
	c.DedupWindow = ms()
	c.SegmentBytes = d.Varint()
	c.SegmentAge = ms()
	c.Hash = Hash(d.Byte())
	c.Tags = d.StringMap()
	return c
}

// TopicDeleteRecord deletes a topic and its records.
type TopicDeleteRecord struct {
	Now     int64
	TopicID uint64
}

func (r *TopicDeleteRecord) Kind() Kind  { return KindTopicDelete }
func (r *TopicDeleteRecord) Time() int64 { return r.Now }

func (r *TopicDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTopicDelete, r.Now)
	return codec.AppendUvarint(b, r.TopicID)
}

func (r *TopicDeleteRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.TopicID = d.Uvarint()
}

func (r *TopicDeleteRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("delete of unknown topic id %d", r.TopicID)
	}
	delete(m.topics, t.name)
	delete(m.byID, t.id)
	if m.bodies != nil {
		m.bodies.Deleted(t.id)
	}
	return nil
}

// PublishRecord appends one record to a partition. Offset is the partition's next
// offset when it was emitted; applying it anywhere else is an error (a log that does not
// match the state it is replayed onto).
type PublishRecord struct {
	Now        int64
	TopicID    uint64
	Partition  int
	Offset     uint64
	RoundRobin bool // placed by the round robin: the topic's counter moves on
	HasKey     bool
	Key        []byte
	Headers    []Header
	Body       []byte
	DedupID    string
}

func (r *PublishRecord) Kind() Kind  { return KindPublish }
func (r *PublishRecord) Time() int64 { return r.Now }

const (
	flagRoundRobin = 1 << iota
	flagHasKey
)

func (r *PublishRecord) AppendTo(b []byte) []byte {
	b = header(b, KindPublish, r.Now)
	return r.appendFields(b)
}

func (r *PublishRecord) appendFields(b []byte) []byte {
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, uint64(r.Partition))
	b = codec.AppendUvarint(b, r.Offset)
	var flags byte
	if r.RoundRobin {
		flags |= flagRoundRobin
	}
	if r.HasKey {
		flags |= flagHasKey
	}
	b = append(b, flags)
	b = codec.AppendBytes(b, r.Key)
	b = codec.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = codec.AppendString(b, h.Name)
		b = codec.AppendString(b, h.Value)
	}
	b = codec.AppendString(b, r.DedupID)
	return codec.AppendBytes(b, r.Body)
}

func (r *PublishRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.TopicID = d.Uvarint()
	r.Partition = int(d.Uvarint() & 0xffff)
	r.Offset = d.Uvarint()
	flags := d.Byte()
	if flags&^(flagRoundRobin|flagHasKey) != 0 {
		d.Fail(fmt.Errorf("unknown publish flags %#x", flags))
	}
	r.RoundRobin, r.HasKey = flags&flagRoundRobin != 0, flags&flagHasKey != 0
	r.Key = d.Bytes()
	if n := d.Count(); n > 0 {
		r.Headers = make([]Header, n)
		for i := range r.Headers {
			r.Headers[i] = Header{Name: d.String(), Value: d.String()}
		}
	}
	r.DedupID = d.String()
	r.Body = d.Bytes()
	if r.Body == nil && d.Err == nil {
		r.Body = []byte{}
	}
}

// Input returns the record as the input that published it (aliasing r).
func (r *PublishRecord) Input() PublishInput {
	return PublishInput{Key: r.Key, HasKey: r.HasKey, Partition: r.Partition, Headers: r.Headers, Body: r.Body, DedupID: r.DedupID}
}

func (r *PublishRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("publish to unknown topic id %d", r.TopicID)
	}
	if r.Partition < 0 || r.Partition >= len(t.parts) {
		return fmt.Errorf("publish to partition %d of topic %q with %d", r.Partition, t.name, len(t.parts))
	}
	p := &t.parts[r.Partition]
	if r.Offset != p.next {
		return fmt.Errorf("publish at offset %d of %s/%d, whose next offset is %d", r.Offset, t.name, r.Partition, p.next)
	}
	in := r.Input()
	size := in.Size()
	newSeg := len(p.segs) == 0
	if !newSeg {
		s := &p.segs[len(p.segs)-1]
		newSeg = s.bytes >= t.cfg.SegmentBytes || r.Now-s.first >= t.cfg.SegmentAge.Milliseconds()
	}
	if newSeg {
		if len(p.segs) == 0 {
			p.start = r.Offset
		}
		p.segs = append(p.segs, segment{base: r.Offset, first: r.Now})
	}
	s := &p.segs[len(p.segs)-1]
	s.count++
	s.bytes += size
	s.last = r.Now
	p.next++
	t.bytes += size
	t.records++
	t.stats.Published++
	t.stats.Bytes += uint64(size)
	if r.RoundRobin {
		t.rr++
	}
	// Expired dedup entries are dropped only here, at a record's time, never on a tick:
	// what the table holds is a function of the records alone.
	t.dedup.expire(r.Now)
	if r.DedupID != "" && t.cfg.DedupWindow > 0 {
		t.dedup.add(&dedupEntry{id: r.DedupID, partition: uint32(r.Partition), offset: r.Offset, at: r.Now,
			expires: r.Now + t.cfg.DedupWindow.Milliseconds()}, m.limits.DedupCap)
	}
	if m.bodies != nil {
		m.bodies.Published(t.id, r.Partition, r.Offset, newSeg, r)
	}
	return nil
}

// TruncateRecord deletes a partition's records below Start, which is a segment's first
// offset or the partition's end: retention deletes whole segments.
type TruncateRecord struct {
	Now       int64
	TopicID   uint64
	Partition int
	Start     uint64
}

func (r *TruncateRecord) Kind() Kind  { return KindTruncate }
func (r *TruncateRecord) Time() int64 { return r.Now }

func (r *TruncateRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTruncate, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, uint64(r.Partition))
	return codec.AppendUvarint(b, r.Start)
}

func (r *TruncateRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.TopicID = d.Uvarint()
	r.Partition = int(d.Uvarint() & 0xffff)
	r.Start = d.Uvarint()
}

func (r *TruncateRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("truncate of unknown topic id %d", r.TopicID)
	}
	if r.Partition < 0 || r.Partition >= len(t.parts) {
		return fmt.Errorf("truncate of partition %d of topic %q with %d", r.Partition, t.name, len(t.parts))
	}
	p := &t.parts[r.Partition]
	n := 0
	for n < len(p.segs) && p.segs[n].base < r.Start {
		n++
	}
	if r.Start > p.next || (n < len(p.segs) && p.segs[n].base != r.Start) || (n == len(p.segs) && r.Start != p.next) {
		return fmt.Errorf("truncate of %s/%d at %d, which begins no segment", t.name, r.Partition, r.Start)
	}
	for _, s := range p.segs[:n] {
		t.bytes -= s.bytes
		t.records -= s.count
		t.stats.Truncated += uint64(s.count)
		t.stats.TruncatedSegs++
	}
	p.segs = append(p.segs[:0:0], p.segs[n:]...)
	p.start = r.Start
	for _, s := range t.subs {
		if c := &s.cursors[r.Partition]; *c < r.Start {
			s.lost += r.Start - *c
			*c = r.Start
		}
	}
	for _, g := range t.groups {
		// Retention passed the group: it lost what it had not committed, and goes on
		// from the new start.
		if gp := &g.parts[r.Partition]; gp.committed < r.Start {
			gp.lost += r.Start - gp.committed
			gp.committed = r.Start
			gp.position = max(gp.position, r.Start)
		}
	}
	if m.bodies != nil {
		m.bodies.Truncated(t.id, r.Partition, r.Start)
	}
	return nil
}

// LimitsRecord sets the machine's limits.
type LimitsRecord struct {
	Now    int64
	Limits Limits
}

func (r *LimitsRecord) Kind() Kind  { return KindLimits }
func (r *LimitsRecord) Time() int64 { return r.Now }

func (r *LimitsRecord) AppendTo(b []byte) []byte {
	b = header(b, KindLimits, r.Now)
	return appendLimits(b, &r.Limits)
}

func appendLimits(b []byte, l *Limits) []byte {
	for _, v := range []int{l.MaxTopics, l.DedupCap, l.MaxSubscriptions, l.MaxGroups, l.MaxMembers} {
		b = codec.AppendUvarint(b, uint64(v))
	}
	return b
}

func decodeLimits(d *codec.Decoder) Limits {
	var l Limits
	for _, v := range []*int{&l.MaxTopics, &l.DedupCap, &l.MaxSubscriptions, &l.MaxGroups, &l.MaxMembers} {
		*v = int(d.Uvarint() & (maxLimit*2 - 1))
	}
	return l
}

func (r *LimitsRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.Limits = decodeLimits(d)
}

func (r *LimitsRecord) apply(m *Machine) error {
	if err := r.Limits.validate(); err != nil {
		return fmt.Errorf("topic limits record: %w", err)
	}
	m.limits = r.Limits
	return nil
}
