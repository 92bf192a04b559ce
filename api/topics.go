package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Topics: a topic is a named, partitioned, append-only log of records with dense offsets
// per partition (docs/semantics.md "Topics").

// Limits of topics in the native API.
const (
	MaxPublishBatch = 1000   // records in one publish
	MaxReadRecords  = 10_000 // records in one read
)

var retentionType = reflect.TypeFor[Retention]()

// Retention is a topic's age limit on the wire: a duration, or "forever" for none.
type Retention struct {
	Forever bool
	Age     time.Duration
}

func (r Retention) MarshalJSON() ([]byte, error) {
	if r.Forever || r.Age == 0 {
		return []byte(`"forever"`), nil
	}
	return json.Marshal(r.Age.String())
}

func (r *Retention) UnmarshalJSON(b []byte) error {
	if strings.TrimSpace(string(b)) == `"forever"` {
		*r = Retention{Forever: true}
		return nil
	}
	var d Duration
	if err := d.UnmarshalJSON(b); err != nil {
		// An UnmarshalTypeError lets encoding/json add the field's name.
		return &json.UnmarshalTypeError{Value: string(b), Type: retentionType}
	}
	*r = Retention{Age: d.D()}
	return nil
}

// TopicConfig is a topic's configuration. On PUT every field is optional: a missing field
// keeps its current value, or okiba's default when the topic is created. Partitions and
// hash are fixed at creation. Responses carry every field.
type TopicConfig struct {
	Partitions       *int              `json:"partitions,omitempty"`
	Retention        *Retention        `json:"retention,omitempty"`
	RetentionBytes   *int64            `json:"retention_bytes,omitempty"`
	RetentionRecords *int64            `json:"retention_records,omitempty"`
	Discard          *string           `json:"discard,omitempty"`
	MaxRecordSize    *int64            `json:"max_record_size,omitempty"`
	DedupWindow      *Duration         `json:"dedup_window,omitempty"`
	SegmentBytes     *int64            `json:"segment_bytes,omitempty"`
	SegmentAge       *Duration         `json:"segment_age,omitempty"`
	Hash             *string           `json:"hash,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
}

// Topic is a topic with its configuration, partitions and counters.
type Topic struct {
	Name       string      `json:"name"`
	CreatedAt  time.Time   `json:"created_at"`
	UpdatedAt  time.Time   `json:"updated_at"`
	Config     TopicConfig `json:"config"`
	Partitions []Partition `json:"partitions"`
	Stats      TopicStats  `json:"stats"`
}

// Partition describes one partition: it retains offsets start to end-1 (end is the high
// watermark, the offset the next record gets).
type Partition struct {
	Partition int        `json:"partition"`
	Start     uint64     `json:"start"`
	End       uint64     `json:"end"`
	Records   int64      `json:"records"`
	Bytes     int64      `json:"bytes"`
	Segments  int        `json:"segments"`
	FirstTime *time.Time `json:"first_time,omitempty"` // publish time of the oldest retained record
	LastTime  *time.Time `json:"last_time,omitempty"`  // and of the newest
}

// TopicStats are a topic's counters.
type TopicStats struct {
	Records      int64  `json:"records"`   // retained
	Bytes        int64  `json:"bytes"`     // retained
	Published    uint64 `json:"published"` // ever
	Truncated    uint64 `json:"truncated"` // deleted by retention
	DedupEntries int    `json:"dedup_entries"`
}

// TopicList answers GET /v1/topics.
type TopicList struct {
	Topics []Topic `json:"topics"`
}

// PublishRecord is one record of a publish. Without key or partition, records go
// round-robin over the partitions; with a key, to Kafka's partition for it (murmur2).
type PublishRecord struct {
	Key        *string           `json:"key,omitempty"`
	KeyBase64  *string           `json:"key_base64,omitempty"`
	Partition  *int              `json:"partition,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	DedupID    string            `json:"dedup_id,omitempty"`
}

// PublishRequest is the body of POST /v1/topics/{name}/records. A single PublishRecord
// object (without "records") is accepted too.
type PublishRequest struct {
	Records []PublishRecord `json:"records"`
}

// PublishResult is the outcome of one record of a publish.
type PublishResult struct {
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     *Error `json:"error,omitempty"`
}

// MarshalJSON leaves partition and offset out of a failed record's result: a record
// that was not appended has no place, and 0/0 would read as one.
func (r PublishResult) MarshalJSON() ([]byte, error) {
	if r.Error != nil {
		return json.Marshal(struct {
			Error *Error `json:"error"`
		}{r.Error})
	}
	type plain PublishResult
	return json.Marshal(plain(r))
}

// PublishResponse answers a publish, one result per record in request order.
type PublishResponse struct {
	Results []PublishResult `json:"results"`
	// Error repeats the common error when every record failed with the same code (the
	// response then has that error's status).
	Error *Error `json:"error,omitempty"`
}

// Record is one record read from a partition.
type Record struct {
	Partition  int               `json:"partition"`
	Offset     uint64            `json:"offset"`
	Time       time.Time         `json:"time"` // publish time
	Key        *string           `json:"key,omitempty"`
	KeyBase64  *string           `json:"key_base64,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
}

// ReadResponse answers GET /v1/topics/{name}/partitions/{p}/records: the records from the
// offset asked for, the partition's start and end as it was read, and the offset to read
// next.
type ReadResponse struct {
	Records []Record `json:"records"`
	Start   uint64   `json:"start"`
	End     uint64   `json:"end"`
	Next    uint64   `json:"next"`
}

// GroupConfig is a consumer group's configuration. On PUT every field is optional;
// start matters only at creation.
type GroupConfig struct {
	Start       *string   `json:"start,omitempty"`        // "first" (default) or "last"
	MemberLease *Duration `json:"member_lease,omitempty"` // 1s..5m, default 30s
	OnFailure   *string   `json:"on_failure,omitempty"`   // "dead_letter" (default) or "block"
	MaxFailures *int      `json:"max_failures,omitempty"` // 1..1000, default 10
}

// Group is a consumer group with its partitions, members and lag.
type Group struct {
	Topic      string           `json:"topic"`
	Name       string           `json:"name"`
	CreatedAt  time.Time        `json:"created_at"`
	Config     GroupConfig      `json:"config"`
	Partitions []GroupPartition `json:"partitions"`
	Members    []GroupMember    `json:"members"`
	// LagRecords sums the partitions' lag; LagSeconds is the largest partition's lag in
	// time: now − publish time of its first uncommitted record.
	LagRecords      uint64  `json:"lag_records"`
	LagSeconds      float64 `json:"lag_seconds"`
	LostToRetention uint64  `json:"lost_to_retention"`
	DeadLetterQueue string  `json:"dead_letter_queue"`
}

// GroupPartition is a group's state of one partition.
type GroupPartition struct {
	Partition       int     `json:"partition"`
	Committed       uint64  `json:"committed"` // the next offset to read
	Position        uint64  `json:"position"`  // offsets below were handed out
	End             uint64  `json:"end"`       // the partition's
	Owner           string  `json:"owner,omitempty"`
	Pending         string  `json:"pending,omitempty"` // the member it moves to when the owner lets go
	Epoch           uint64  `json:"epoch"`
	LagRecords      uint64  `json:"lag_records"`
	LagSeconds      float64 `json:"lag_seconds"`
	LostToRetention uint64  `json:"lost_to_retention"`
}

// GroupMember is one member of a group.
type GroupMember struct {
	Name    string    `json:"name"`
	Session string    `json:"session"`
	Joined  time.Time `json:"joined"`
	Expires time.Time `json:"expires"`
}

// GroupList answers GET /v1/topics/{topic}/groups.
type GroupList struct {
	Groups []Group `json:"groups"`
}

// MemberRequest names the calling member: its name and the session its last pull or
// heartbeat returned ("" to join).
type MemberRequest struct {
	Member  string `json:"member"`
	Session string `json:"session,omitempty"`
}

// PullRequest is the body of POST /v1/topics/{topic}/groups/{group}/pull.
type PullRequest struct {
	Member   string    `json:"member"`
	Session  string    `json:"session,omitempty"`
	Max      int       `json:"max,omitempty"`
	MaxBytes int       `json:"max_bytes,omitempty"`
	Wait     *Duration `json:"wait,omitempty"`
}

// Assignment is a partition a member holds.
type Assignment struct {
	Partition int    `json:"partition"`
	Epoch     uint64 `json:"epoch"`
	// Revoking: the partition moves at the member's next pull or heartbeat; finish and
	// commit what was handed out.
	Revoking  bool   `json:"revoking,omitempty"`
	Position  uint64 `json:"position"`
	Committed uint64 `json:"committed"`
	End       uint64 `json:"end"`
}

// PullResponse answers a pull (and, without records, a heartbeat).
type PullResponse struct {
	Session    string       `json:"session"`
	Expires    time.Time    `json:"expires"` // the member's lease
	Assignment []Assignment `json:"assignment"`
	Records    []Record     `json:"records,omitempty"`
}

// CommitOffset is one partition's commit: the next offset to read, under the epoch the
// records were handed out with.
type CommitOffset struct {
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
	Epoch     uint64 `json:"epoch"`
}

// CommitRequest is the body of POST /v1/topics/{topic}/groups/{group}/commit.
type CommitRequest struct {
	Member  string         `json:"member"`
	Session string         `json:"session"`
	Offsets []CommitOffset `json:"offsets"`
}

// SeekRequest is the body of POST /v1/topics/{topic}/groups/{group}/seek: one partition
// (or every one when partition is absent) to exactly one of first, last, an offset or a
// time (the first record published at or after it).
type SeekRequest struct {
	Partition *int       `json:"partition,omitempty"`
	To        string     `json:"to,omitempty"` // "first" or "last"
	Offset    *uint64    `json:"offset,omitempty"`
	Time      *time.Time `json:"time,omitempty"`
}

// GroupDeadLetterRequest is the body of POST /v1/topics/{topic}/groups/{group}/deadletter:
// a record the member was handed and cannot handle, which goes to the group's
// dead-letter queue with the reason while the group commits the offset after it.
type GroupDeadLetterRequest struct {
	Member      string `json:"member"`
	Session     string `json:"session"`
	Partition   int    `json:"partition"`
	Offset      uint64 `json:"offset"`
	Epoch       uint64 `json:"epoch"`
	Reason      string `json:"reason"`
	Description string `json:"description,omitempty"`
}

// SubscriptionRequest is the body of PUT /v1/topics/{topic}/subscriptions/{name}: the
// queue records go into (fixed at creation), an optional filter (an SNS filter policy,
// docs/filters.md) and its scope, and where a new subscription starts: "now" (the
// default), "first", a time, or one offset per partition.
type SubscriptionRequest struct {
	Queue       string          `json:"queue"`
	Filter      json.RawMessage `json:"filter,omitempty"`
	FilterScope string          `json:"filter_scope,omitempty"` // "attributes" (default) or "body"
	Start       string          `json:"start,omitempty"`        // "now" (default) or "first"
	StartTime   *time.Time      `json:"start_time,omitempty"`
	StartOffset []uint64        `json:"start_offsets,omitempty"`
}

// Subscription is a subscription with its progress.
type Subscription struct {
	Topic       string          `json:"topic"`
	Name        string          `json:"name"`
	Queue       string          `json:"queue"`
	Filter      json.RawMessage `json:"filter,omitempty"`
	FilterScope string          `json:"filter_scope"`
	CreatedAt   time.Time       `json:"created_at"`
	// Cursors are each partition's next offset to take; lag the records behind in all.
	// A subscription behind copies in the background; paused means its queue was full.
	Cursors         []uint64 `json:"cursors"`
	Lag             uint64   `json:"lag"`
	Paused          bool     `json:"paused"`
	Delivered       uint64   `json:"delivered"`
	Filtered        uint64   `json:"filtered"`
	LostToRetention uint64   `json:"lost_to_retention"`
}

// SubscriptionList answers GET /v1/topics/{topic}/subscriptions.
type SubscriptionList struct {
	Subscriptions []Subscription `json:"subscriptions"`
}
