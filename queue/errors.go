package queue

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for the expected outcomes callers branch on. The edge (api package)
// maps each to a stable code.
var (
	ErrQueueNotFound = errors.New("queue not found")
	ErrReceiptStale  = errors.New("receipt is stale: the lease it names has ended (expired, settled, redelivered, or the queue was recreated)")
	// ErrAlreadySettled: the receipt's message is no longer in its queue at all (acked,
	// dead-lettered, deleted, purged, expired or redriven away), as opposed to a lease
	// that ended while the message stays. It is also ErrReceiptStale (errors.Is), so
	// that a caller who only knows of stale receipts (the SQS front) answers both alike.
	ErrAlreadySettled  error = settledError{}
	ErrQueueFull             = errors.New("queue is full")
	ErrMessageTooLarge       = errors.New("message too large")
	ErrInvalidDelay          = errors.New("invalid delay")
	ErrMessageNotFound       = errors.New("message not found")
	ErrTaskNotFound          = errors.New("redrive task not found")
	ErrTaskFinished          = errors.New("redrive task already finished")
	ErrNoDeadLetter          = errors.New("queue has no dead-letter queue")
	ErrQueueInUse            = errors.New("queue is in use")
	ErrInvalidMessage        = errors.New("invalid message")
	// ErrMessageCorrupt: a redrive named dead letters of reason corrupt, whose bodies
	// this node cannot read (ReasonCorrupt): moving them would deliver nothing.
	ErrMessageCorrupt = errors.New("message is corrupt: its body failed its checksum on this node")
	// ErrNotDeferred: a fetch by id named a message that is not deferred in the queue
	// (never deferred, fetched already and leased, settled, or gone).
	ErrNotDeferred = errors.New("message is not deferred in this queue")
)

// ExistsError refuses a create-only request (PUT with If-None-Match: *) for a queue that
// exists with another configuration: Fields names what differs, by its API name.
type ExistsError struct {
	Name   string
	Fields []string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("queue %s exists with another %s (update it with okiba queue update, or PUT without If-None-Match)",
		e.Name, strings.Join(e.Fields, ", "))
}

// NameError reports a queue or topic name outside a naming rule: the core's, or a
// front's grammar (internal/names), which Rule then states.
type NameError struct {
	Name string
	// Rule is the rule the name breaks, as the message quotes it; empty means the core's.
	Rule string
	// Of is what the name names: "queue" (the default, when empty) or "topic".
	Of string
}

func (e *NameError) Error() string {
	rule := e.Rule
	if rule == "" {
		rule = nameRule
	}
	of := e.Of
	if of == "" {
		of = "queue"
	}
	return fmt.Sprintf("invalid %s name %q: a name is %s", of, e.Name, rule)
}

// ConfigError reports a configuration field out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason }

// CycleError reports a dead-letter chain that would loop.
type CycleError struct {
	Queue string
	Chain []string
}

func (e *CycleError) Error() string {
	return fmt.Sprintf("dead-letter queues of %q would form a cycle: %s", e.Queue, strings.Join(e.Chain, " -> "))
}

// InUseError reports a queue that cannot be deleted because others use it: queues as
// their DLQ, or (Subscribed) topics' subscriptions, named "topic/subscription", feeding it.
type InUseError struct {
	Queue      string
	By         []string
	Subscribed bool
}

func (e *InUseError) Error() string {
	if e.Subscribed {
		return fmt.Sprintf("queue %q is fed by the subscriptions %s; delete them first or delete with force (which deletes them)", e.Queue, strings.Join(e.By, ", "))
	}
	return fmt.Sprintf("queue %q is the dead-letter queue of %s; change their dead_letter_queue first or delete with force", e.Queue, strings.Join(e.By, ", "))
}

func (e *InUseError) Unwrap() error { return ErrQueueInUse }

// FullError reports a send refused by backpressure (max_messages or max_bytes).
type FullError struct {
	Queue string
	Limit string // "max_messages" or "max_bytes"
	Value int64
}

func (e *FullError) Error() string {
	return fmt.Sprintf("queue %q is full (%s = %d): retry later or consume faster", e.Queue, e.Limit, e.Value)
}

func (e *FullError) Unwrap() error { return ErrQueueFull }

// TooLargeError reports a message over the queue's max_message_size.
type TooLargeError struct {
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message is %d bytes (body plus attribute names, types and values); the queue allows at most %d", e.Size, e.Limit)
}

func (e *TooLargeError) Unwrap() error { return ErrMessageTooLarge }

// InvalidError reports a malformed message field (group, dedup id, attribute, reason).
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

func (e *InvalidError) Unwrap() error { return ErrInvalidMessage }

// ErrLimit is wrapped by LimitError.
var ErrLimit = errors.New("limit exceeded")

// LimitError reports a broker-wide or per-queue limit reached (max_queues, max_in_flight).
type LimitError struct {
	Limit string
	Value int
	What  string
}

func (e *LimitError) Error() string { return fmt.Sprintf("%s (%s = %d)", e.What, e.Limit, e.Value) }

func (e *LimitError) Unwrap() error { return ErrLimit }

// ErrInvalidParameter is wrapped by ParamError.
var ErrInvalidParameter = errors.New("invalid parameter")

// ParamError reports a parameter of one request out of range: a receive's max, wait or
// visibility, a peek's limit. Unlike a ConfigError it is about nothing stored: the
// request is wrong, not the queue, and nothing changed. Field is the parameter's name
// in the native API.
type ParamError struct {
	Field  string
	Reason string
}

func (e *ParamError) Error() string { return e.Field + " " + e.Reason }

func (e *ParamError) Unwrap() error { return ErrInvalidParameter }

// DelayError reports a delay out of range.
type DelayError struct{ Reason string }

func (e *DelayError) Error() string { return "invalid delay: " + e.Reason }

func (e *DelayError) Unwrap() error { return ErrInvalidDelay }

type settledError struct{}

func (settledError) Error() string {
	return "already settled: the receipt's message is no longer in the queue (acked, dead-lettered, deleted, purged, expired or redriven away); a retried ack of your own has succeeded"
}

// Is makes an already-settled receipt a stale one too.
func (settledError) Is(target error) bool { return target == ErrReceiptStale }
