package topic

import (
	"fmt"
	"maps"
	"time"

	"github.com/okiba/okiba/queue"
)

// Limits on topic configuration and on one publish. They are part of the contract
// (docs/api.md).
const (
	MaxPartitions       = 256
	MaxRecordSizeLimit  = queue.MaxMessageSizeLimit // a record must fit every queue a subscription feeds
	MaxKeyLen           = 1024
	MaxHeaders          = queue.MaxAttrs
	MaxHeaderNameLen    = queue.MaxAttrNameLen
	MaxDedupIDLen       = queue.MaxDedupIDLen
	MaxRetentionAge     = queue.MaxRetention
	MinRetentionAge     = time.Second
	MaxDedupWindow      = queue.MaxDedupWindow
	MinSegmentBytes     = 4 << 10
	MaxSegmentBytes     = 1 << 30
	MinSegmentAge       = time.Second
	MaxSegmentAge       = 30 * 24 * time.Hour
	MaxPublishBatch     = 1000
	DefaultRetentionAge = 7 * 24 * time.Hour
	DefaultSegmentBytes = 64 << 20
	DefaultSegmentAge   = time.Hour
)

// Discard says what a topic does when a retention limit of bytes or records would be
// passed by a publish.
type Discard uint8

const (
	// DiscardOld deletes the oldest whole segments (Kafka's behaviour, and the default).
	DiscardOld Discard = 0
	// DiscardNew refuses the publish with a *FullError and deletes nothing (JetStream's
	// discard new). Age retention still deletes on schedule.
	DiscardNew Discard = 1
)

func (d Discard) String() string {
	if d == DiscardNew {
		return "new"
	}
	return "old"
}

// ParseDiscard accepts "old" and "new".
func ParseDiscard(s string) (Discard, error) {
	switch s {
	case "old", "":
		return DiscardOld, nil
	case "new":
		return DiscardNew, nil
	}
	return 0, &queue.ConfigError{Field: "discard", Reason: fmt.Sprintf("%q is not one of old, new", s)}
}

// Hash names the function from a record's key to its partition. It is stored with the
// topic, so that a key's partition never changes.
type Hash uint8

const (
	// HashMurmur2 is Kafka's default partitioner: murmur2 of the key bytes, made
	// positive, modulo the partition count; a key lands where a Kafka producer puts it.
	HashMurmur2 Hash = 0
)

func (h Hash) String() string { return "murmur2" }

// Config is a topic's complete configuration, stored at creation like a queue's.
//
// What may change after creation: the retention (age, bytes, records, forever),
// discard, max_record_size, dedup_window, the segment size and age (for segments begun
// after the change), and tags. What may not: the partition count and the hash, which
// decide where every key's records are.
type Config struct {
	// Partitions is the number of partitions, 1..256, fixed at creation.
	Partitions int
	// RetentionAge: a segment whose newest record is older than this is deleted. 0 means
	// no age limit; with RetentionBytes and RetentionRecords also 0, records are kept
	// forever ("retention: forever").
	RetentionAge time.Duration
	// RetentionBytes and RetentionRecords bound the whole topic (every partition
	// together); 0 means no bound. Whole old segments are deleted while the topic holds
	// more than this without them (DiscardOld), or publishes are refused (DiscardNew).
	RetentionBytes   int64
	RetentionRecords int64
	// Discard is what happens at RetentionBytes or RetentionRecords.
	Discard Discard
	// MaxRecordSize bounds a record's body, key and header names and values (1 B ..
	// 1 MiB).
	MaxRecordSize int64
	// DedupWindow: a publish whose dedup id was accepted less than this long ago on
	// the same topic is a duplicate. 0 disables dedup.
	DedupWindow time.Duration
	// SegmentBytes and SegmentAge: a partition starts a new segment when its newest one
	// holds this many bytes or began this long ago. Retention deletes whole segments, so
	// a record may outlive its retention by up to one segment.
	SegmentBytes int64
	SegmentAge   time.Duration
	// Hash maps keys to partitions; fixed at creation.
	Hash Hash
	// Tags are user labels.
	Tags map[string]string
}

// DefaultConfig returns okiba's defaults for a topic: one partition, seven days of
// retention, discard old, 1 MiB records, a five-minute dedup window, 64 MiB or
// one-hour segments.
func DefaultConfig() Config {
	return Config{
		Partitions:    1,
		RetentionAge:  DefaultRetentionAge,
		MaxRecordSize: MaxRecordSizeLimit,
		DedupWindow:   5 * time.Minute,
		SegmentBytes:  DefaultSegmentBytes,
		SegmentAge:    DefaultSegmentAge,
	}
}

// Forever reports whether the topic keeps every record.
func (c *Config) Forever() bool {
	return c.RetentionAge == 0 && c.RetentionBytes == 0 && c.RetentionRecords == 0
}

// Validate checks every field's range; the error names the field.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &queue.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return bad("partitions", "must be between 1 and %d, got %d", MaxPartitions, c.Partitions)
	}
	if c.RetentionAge != 0 && (c.RetentionAge < MinRetentionAge || c.RetentionAge > MaxRetentionAge) {
		return bad("retention", "must be forever (or 0) or between 1s and 87600h, got %v", c.RetentionAge)
	}
	if c.RetentionAge%time.Millisecond != 0 {
		return bad("retention", "must be a whole number of milliseconds")
	}
	if c.RetentionBytes < 0 {
		return bad("retention_bytes", "must be 0 (no limit) or positive, got %d", c.RetentionBytes)
	}
	if c.RetentionRecords < 0 {
		return bad("retention_records", "must be 0 (no limit) or positive, got %d", c.RetentionRecords)
	}
	if c.Discard > DiscardNew {
		return bad("discard", "must be old or new")
	}
	if c.Discard == DiscardNew && c.RetentionBytes == 0 && c.RetentionRecords == 0 {
		return bad("discard", "new needs retention_bytes or retention_records: a topic is full only against one of them")
	}
	if c.MaxRecordSize < 1 || c.MaxRecordSize > MaxRecordSizeLimit {
		return bad("max_record_size", "must be between 1 and %d bytes, got %d", MaxRecordSizeLimit, c.MaxRecordSize)
	}
	if c.DedupWindow < 0 || c.DedupWindow > MaxDedupWindow || c.DedupWindow%time.Millisecond != 0 {
		return bad("dedup_window", "must be between 0 (off) and 168h in whole milliseconds, got %v", c.DedupWindow)
	}
	if c.SegmentBytes < MinSegmentBytes || c.SegmentBytes > MaxSegmentBytes {
		return bad("segment_bytes", "must be between %d and %d, got %d", MinSegmentBytes, MaxSegmentBytes, c.SegmentBytes)
	}
	if c.SegmentAge < MinSegmentAge || c.SegmentAge > MaxSegmentAge || c.SegmentAge%time.Millisecond != 0 {
		return bad("segment_age", "must be between 1s and 720h in whole milliseconds, got %v", c.SegmentAge)
	}
	if c.Hash != HashMurmur2 {
		return bad("hash", "must be murmur2")
	}
	if len(c.Tags) > queue.MaxTags {
		return bad("tags", "at most %d tags, got %d", queue.MaxTags, len(c.Tags))
	}
	for k, v := range c.Tags {
		if k == "" || len(k) > 128 || len(v) > 256 {
			return bad("tags", "tag keys must be 1..128 bytes and values at most 256 bytes (%q)", k)
		}
	}
	return nil
}

// checkChange refuses a change of what is fixed at creation.
func (c *Config) checkChange(old *Config) error {
	if c.Partitions != old.Partitions {
		return &queue.ConfigError{Field: "partitions", Reason: fmt.Sprintf("is fixed at creation (%d): a key's partition must never change; create a new topic", old.Partitions)}
	}
	if c.Hash != old.Hash {
		return &queue.ConfigError{Field: "hash", Reason: "is fixed at creation"}
	}
	return nil
}

// Clone returns a deep copy.
func (c Config) Clone() Config {
	if len(c.Tags) == 0 {
		c.Tags = nil
	} else {
		c.Tags = maps.Clone(c.Tags)
	}
	return c
}

// Equal reports whether two configurations are identical.
func (c Config) Equal(o Config) bool {
	return c.plain() == o.plain() && maps.Equal(c.Tags, o.Tags)
}

type plainConfig struct {
	partitions                          int
	age, dedup, segAge                  time.Duration
	bytes, records, maxRecord, segBytes int64
	discard                             Discard
	hash                                Hash
}

func (c *Config) plain() plainConfig {
	return plainConfig{c.Partitions, c.RetentionAge, c.DedupWindow, c.SegmentAge,
		c.RetentionBytes, c.RetentionRecords, c.MaxRecordSize, c.SegmentBytes, c.Discard, c.Hash}
}
