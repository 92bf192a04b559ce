package broker

import (
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/queue"
)

// Bounds and defaults of Config that okiba serve's flags share (the others are package
// queue's limits, queue.DefaultDedupCap, …, the payload store's
// payload.DefaultCacheBytes, and wal.DefaultSegmentSize).
const (
	// MinSegmentSize is the smallest SegmentSize: a segment holds the largest message
	// (queue.MaxMessageSizeLimit) with room to spare.
	MinSegmentSize = 2 << 20
	// DefaultCheckpointBytes is the default of CheckpointBytes.
	DefaultCheckpointBytes = 128 << 20
)

// The parameters of a receive and of a peek are checked here and only here. Receive and
// Peek check their own, so an in-process caller gets the same *queue.ParamError as a
// client of the native API (code invalid_request); the native front checks what it
// decoded first, because ReceiveOptions spends negative durations on "the queue's
// default" and a negative value sent on the wire must be refused, not taken for that.
// The bounds are the native API's (api.MaxBatch, api.MaxWait): the broker applies them
// to every caller.

// CheckReceive reports the first receive parameter out of range, in this order: max
// messages (1..api.MaxBatch), the long-poll wait (0..60s) and the lease length, the
// visibility (whole milliseconds, 0..12h). The error is a *queue.ParamError.
func CheckReceive(max int, wait, visibility time.Duration) error {
	switch {
	case max < 1 || max > api.MaxBatch:
		return &queue.ParamError{Field: "max", Reason: fmt.Sprintf("must be between 1 and %d, got %d", api.MaxBatch, max)}
	case wait < 0 || wait > queue.MaxReceiveWait:
		return &queue.ParamError{Field: "wait", Reason: fmt.Sprintf("must be between 0 and 60s, got %v", wait)}
	case visibility < 0 || visibility > queue.MaxVisibilityTimeout || visibility%time.Millisecond != 0:
		return &queue.ParamError{Field: "visibility", Reason: fmt.Sprintf("must be a whole number of milliseconds between 0 and 12h, got %v", visibility)}
	}
	return nil
}

// CheckPeek reports a peek page size out of range (1..api.MaxBatch) as a
// *queue.ParamError.
func CheckPeek(limit int) error {
	if limit < 1 || limit > api.MaxBatch {
		return &queue.ParamError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d, got %d", api.MaxBatch, limit)}
	}
	return nil
}

// check applies CheckReceive to o; a negative Wait or Visibility, the queue's default,
// is always good.
func (o *ReceiveOptions) check() error {
	return CheckReceive(o.Max, max(o.Wait, 0), max(o.Visibility, 0))
}
