package topic

import (
	"sort"
	"strings"
)

// TopicInfo describes a topic.
type TopicInfo struct {
	ID         uint64
	Name       string
	Config     Config
	CreatedAt  int64
	UpdatedAt  int64
	Partitions []PartitionInfo
	// Bytes and Records are what the topic retains, every partition together.
	Bytes   int64
	Records int64
	Stats   Counters
	// DedupEntries is how many dedup ids the topic remembers.
	DedupEntries int
}

// PartitionInfo describes one partition: it retains offsets Start to End-1.
type PartitionInfo struct {
	Partition int
	Start     uint64
	End       uint64
	Bytes     int64
	Records   int64
	Segments  int
	// FirstTime and LastTime are the publish times (Unix ms) of the oldest segment's
	// first record and of the newest record; 0 when the partition retains none.
	FirstTime int64
	LastTime  int64
}

// SegmentInfo describes one segment of a partition.
type SegmentInfo struct {
	Base  uint64 // first offset
	Count int64
	Bytes int64
	First int64 // publish time of the first record
	Last  int64 // and of the newest
}

// End is the offset after the segment's last record.
func (s SegmentInfo) End() uint64 { return s.Base + uint64(s.Count) }

// Topic describes one topic.
func (m *Machine) Topic(name string) (TopicInfo, error) {
	t, err := m.topic(name)
	if err != nil {
		return TopicInfo{}, err
	}
	return t.info(), nil
}

// TopicByID returns the name of the topic with this id.
func (m *Machine) TopicByID(id uint64) (string, bool) {
	if t := m.byID[id]; t != nil {
		return t.name, true
	}
	return "", false
}

// TopicID returns the id of the named topic.
func (m *Machine) TopicID(name string) (uint64, bool) {
	if t := m.topics[name]; t != nil {
		return t.id, true
	}
	return 0, false
}

// Topics describes every topic whose name begins with prefix, by name.
func (m *Machine) Topics(prefix string) []TopicInfo {
	out := make([]TopicInfo, 0, len(m.topics))
	for name, t := range m.topics {
		if strings.HasPrefix(name, prefix) {
			out = append(out, t.info())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TopicCount is how many topics there are.
func (m *Machine) TopicCount() int { return len(m.topics) }

func (t *topicState) info() TopicInfo {
	ti := TopicInfo{ID: t.id, Name: t.name, Config: t.cfg.Clone(), CreatedAt: t.createdAt, UpdatedAt: t.updatedAt,
		Bytes: t.bytes, Records: t.records, Stats: t.stats, DedupEntries: t.dedup.len(),
		Partitions: make([]PartitionInfo, len(t.parts))}
	for i := range t.parts {
		ti.Partitions[i] = t.parts[i].info(i)
	}
	return ti
}

func (p *partition) info(i int) PartitionInfo {
	pi := PartitionInfo{Partition: i, Start: p.start, End: p.next, Segments: len(p.segs)}
	for _, s := range p.segs {
		pi.Bytes += s.bytes
		pi.Records += s.count
	}
	if len(p.segs) > 0 {
		pi.FirstTime, pi.LastTime = p.segs[0].first, p.segs[len(p.segs)-1].last
	}
	return pi
}

// Segments describes a partition's segments, oldest first.
func (m *Machine) Segments(name string, partition int) ([]SegmentInfo, error) {
	_, p, err := m.partition(name, partition)
	if err != nil {
		return nil, err
	}
	out := make([]SegmentInfo, len(p.segs))
	for i, s := range p.segs {
		out[i] = SegmentInfo{Base: s.base, Count: s.count, Bytes: s.bytes, First: s.first, Last: s.last}
	}
	return out, nil
}

func (m *Machine) partition(name string, partition int) (*topicState, *partition, error) {
	t, err := m.topic(name)
	if err != nil {
		return nil, nil, err
	}
	if partition < 0 || partition >= len(t.parts) {
		return nil, nil, &PartitionError{Topic: name, Partition: partition, Partitions: len(t.parts)}
	}
	return t, &t.parts[partition], nil
}

// Range is what a reader of a partition may read: offsets From to End-1 of topic ID.
type Range struct {
	TopicID   uint64
	Partition int
	From, End uint64
}

// ReadRange checks that a read of a partition may start at offset — a retained offset,
// or the end (which reads nothing yet) — and returns what it may read.
func (m *Machine) ReadRange(name string, partition int, offset uint64) (Range, error) {
	t, p, err := m.partition(name, partition)
	if err != nil {
		return Range{}, err
	}
	if offset < p.start || offset > p.next {
		return Range{}, &OffsetError{Topic: name, Partition: partition, Offset: offset, Start: p.start, End: p.next}
	}
	return Range{TopicID: t.id, Partition: partition, From: offset, End: p.next}, nil
}

// SegmentAt returns the segment that holds offset, if it is retained.
func (m *Machine) SegmentAt(topicID uint64, partition int, offset uint64) (SegmentInfo, bool) {
	t := m.byID[topicID]
	if t == nil || partition < 0 || partition >= len(t.parts) {
		return SegmentInfo{}, false
	}
	ss := t.parts[partition].segs
	i := sort.Search(len(ss), func(i int) bool { return ss[i].base+uint64(ss[i].count) > offset })
	if i == len(ss) || ss[i].base > offset {
		return SegmentInfo{}, false
	}
	s := ss[i]
	return SegmentInfo{Base: s.base, Count: s.count, Bytes: s.bytes, First: s.first, Last: s.last}, true
}
