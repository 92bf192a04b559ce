package topic

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on; internal/errcode maps each to a stable code.
var (
	ErrTopicNotFound       = errors.New("topic not found")
	ErrTopicFull           = errors.New("topic is full")
	ErrOffsetOutOfRange    = errors.New("offset out of range")
	ErrPartitionOutOfRange = errors.New("partition out of range")
	ErrRecordTooLarge      = errors.New("record too large")
)

// FullError reports a publish refused by a topic with discard new at a retention limit.
type FullError struct {
	Topic string
	Limit string // "retention_bytes" or "retention_records"
	Value int64
}

func (e *FullError) Error() string {
	return fmt.Sprintf("topic %q is full (%s = %d, discard new): retry later, raise the limit, or let age retention free space", e.Topic, e.Limit, e.Value)
}

func (e *FullError) Unwrap() error { return ErrTopicFull }

// TooLargeError reports a record over the topic's max_record_size.
type TooLargeError struct {
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("record is %d bytes (body, key and header names and values); the topic allows at most %d", e.Size, e.Limit)
}

func (e *TooLargeError) Unwrap() error { return ErrRecordTooLarge }

// OffsetError reports an offset outside a partition's retained records.
type OffsetError struct {
	Topic      string
	Partition  int
	Offset     uint64
	Start, End uint64 // the retained records are Start..End-1
	// Group, for a commit past what the group was handed: then Start is its committed
	// offset and End its position.
	Group string
}

func (e *OffsetError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("group %q partition %d: commit of %d is past what the group was handed (up to %d, committed %d): commit only offsets after records you were given", e.Group, e.Partition, e.Offset, e.End, e.Start)
	}
	holds := fmt.Sprintf("it holds offsets %d to %d", e.Start, e.End-1)
	if e.End <= e.Start {
		holds = fmt.Sprintf("it holds no records; the next is offset %d", e.End)
	}
	if e.Offset < e.Start {
		return fmt.Sprintf("offset %d of %s/%d is no longer retained (%s): read from %d or later", e.Offset, e.Topic, e.Partition, holds, e.Start)
	}
	return fmt.Sprintf("offset %d of %s/%d is past the partition's end %d (%s)", e.Offset, e.Topic, e.Partition, e.End, holds)
}

func (e *OffsetError) Unwrap() error { return ErrOffsetOutOfRange }

// PartitionError reports a partition number the topic does not have.
type PartitionError struct {
	Topic      string
	Partition  int
	Partitions int
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("topic %q has partitions 0 to %d, not %d", e.Topic, e.Partitions-1, e.Partition)
}

func (e *PartitionError) Unwrap() error { return ErrPartitionOutOfRange }
