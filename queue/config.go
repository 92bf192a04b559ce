package queue

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/okiba/okiba/api"
)

// Limits on queue configuration. They are part of the contract (docs/api.md).
// MaxReceiveWait is the longest wait a receive may ask for (api.MaxWait, which the Go
// client shares without importing this package): receive_wait cannot ask for more.
const (
	MaxNameLen           = 80
	MaxVisibilityTimeout = 12 * time.Hour
	MaxDelay             = 7 * 24 * time.Hour
	MaxRetention         = 10 * 365 * 24 * time.Hour
	MinRetention         = time.Second
	MaxDedupWindow       = 7 * 24 * time.Hour
	MaxBackoff           = 12 * time.Hour
	MaxMaxDeliveries     = 1_000_000
	MaxMessageSizeLimit  = 1 << 20 // 1 MiB, as SQS
	MaxReceiveWait       = api.MaxWait
	MaxGroupLen          = 128
	MaxDedupIDLen        = 128
	MaxReasonLen         = 128
	MaxDescriptionLen    = 1024
	// MaxHandlerErrorLen bounds the handler's error a nack carries (NackInput.Error): it
	// becomes a dead letter's description, so it fits one.
	MaxHandlerErrorLen = MaxDescriptionLen
	MaxAttrNameLen     = 256
	MaxAttrs           = 64
	MaxTags            = 50
)

// DedupScope says which messages share a dedup id namespace.
type DedupScope uint8

const (
	// DedupQueue: a dedup id is unique across the whole queue (the default, SQS's "queue").
	DedupQueue DedupScope = 0
	// DedupGroup: a dedup id is unique within its message group (SQS's "messageGroup").
	DedupGroup DedupScope = 1
)

func (s DedupScope) String() string {
	if s == DedupGroup {
		return "group"
	}
	return "queue"
}

// ParseDedupScope accepts "queue" and "group".
func ParseDedupScope(s string) (DedupScope, error) {
	switch s {
	case "queue", "":
		return DedupQueue, nil
	case "group":
		return DedupGroup, nil
	}
	return 0, &ConfigError{Field: "dedup_scope", Reason: fmt.Sprintf("%q is not one of queue, group", s)}
}

// NoDeadLetterQueue is the DeadLetterQueue value that turns dead-lettering off.
const NoDeadLetterQueue = "none"

// Config is the complete, explicit configuration of a queue. Every field is stored at
// creation (docs/semantics.md "Queues"), so a later change of defaults never changes an existing
// queue. DefaultConfig gives okiba's defaults; the SQS front starts from SQS's.
//
// The kind of a queue is OrderedGroups: an ordered queue's dead-letter queue is ordered,
// and redrive moves messages only between queues of the same kind. What a name says
// about the kind (SQS's suffix) is the fronts' business, not this package's.
type Config struct {
	// VisibilityTimeout is the lease length on receive (0..12h). 0 releases at once.
	VisibilityTimeout time.Duration
	// MaxDeliveries: after this many deliveries that end without an ack, the message is
	// dead-lettered with reason max_deliveries. 0 = never.
	MaxDeliveries int
	// DeadLetterQueue names the queue that receives dead letters, or "none". A named
	// queue that does not exist is created with the queue (with DeadLetterConfig), and
	// again when a dead letter needs it if it was deleted since. An ordered queue's
	// dead-letter queue must be ordered.
	DeadLetterQueue string
	// BackoffBase and BackoffMax shape the retry delay of a nack without its own delay:
	// a uniform random delay in [0, min(BackoffMax, BackoffBase·2^(deliveries-1))].
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Delay is the initial invisibility of new messages (0..7d).
	Delay time.Duration
	// Retention: an unsettled message older than this (since it entered the queue) is
	// dead-lettered with reason expired. 0 = unlimited.
	Retention time.Duration
	// DedupWindow: a send whose dedup id was first accepted less than this long ago is a
	// duplicate. 0 disables dedup.
	DedupWindow time.Duration
	// DedupScope chooses queue-wide or per-group dedup ids.
	DedupScope DedupScope
	// ContentDedup derives a missing dedup id from the SHA-256 of the body.
	ContentDedup bool
	// MaxMessages and MaxBytes bound ready + delayed + in-flight messages; 0 = unlimited.
	MaxMessages int64
	MaxBytes    int64
	// MaxMessageSize bounds body + attribute names, types and values (1 B .. 1 MiB).
	MaxMessageSize int64
	// ReceiveWait is the long-poll wait of a receive that does not give its own (0..60s).
	ReceiveWait time.Duration
	// OrderedGroups: messages sharing a group key are delivered strictly in order.
	// True for native queues; false for SQS standard queues (group ids are carried only).
	// Fixed at creation.
	OrderedGroups bool
	// OnDeadLetter: what dead-lettering an ordered group's head does to the rest of the
	// group — moves on (MoveOn, the default) or parks it until the dead letter is back
	// (ParkGroup, park.go). ParkGroup needs OrderedGroups and a dead-letter queue.
	OnDeadLetter DeadLetterAction
	// Tags are user labels (SQS TagQueue).
	Tags map[string]string
	// Front holds the attributes a front end keeps with the queue (SQS's Policy and the
	// like). The machine stores and compares them and never reads them.
	Front FrontAttributes
}

// FrontAttributes are queue attributes that belong to a front end rather than to the
// semantics: they are stored and replicated with the queue's configuration, compared by
// Equal, and interpreted only by the front that owns them (all of these are the SQS
// front's; okiba enforces none of them). An empty string means not set.
type FrontAttributes struct {
	// Policy is SQS's access policy, a JSON document (shown, not enforced).
	Policy string
	// RedriveAllowPolicy is SQS's rule for which queues may use this one as their
	// dead-letter queue, a JSON document.
	RedriveAllowPolicy string
	// KMSMasterKeyID, KMSDataKeyReusePeriod (seconds) and SQSManagedSSE ("true" or
	// "false") are SQS's encryption settings, as given; okiba does not encrypt.
	KMSMasterKeyID        string
	KMSDataKeyReusePeriod string
	SQSManagedSSE         string
	// FIFOThroughputLimit is SQS's perQueue or perMessageGroupId; it has no effect.
	FIFOThroughputLimit string
	// Unknown is for preservation only. On disk these attributes are one string map, as
	// they were before they had fields (records_queue.go), and an in-process user of an
	// older okiba could have stored any key in it. Entries that no field takes are kept
	// here so that opening such a data directory neither fails nor loses them, and they
	// are written back exactly as they were read. Nothing interprets them; new
	// attributes get a field.
	Unknown map[string]string
}

// DefaultConfig returns okiba's defaults (docs/semantics.md "Queues"), but for
// DeadLetterQueue, which it leaves empty: the default dead-letter queue is named after
// the queue by the fronts' rule (internal/names.DeadLetterName, which the broker
// applies), and this package does not name queues. A configuration whose caller forgets
// to name one is refused by Validate rather than given a name no front would accept.
func DefaultConfig() Config {
	return Config{
		VisibilityTimeout: 30 * time.Second,
		MaxDeliveries:     10,
		BackoffBase:       time.Second,
		BackoffMax:        5 * time.Minute,
		Retention:         14 * 24 * time.Hour,
		DedupWindow:       5 * time.Minute,
		MaxMessageSize:    MaxMessageSizeLimit,
		OrderedGroups:     true,
	}
}

// DeadLetterConfig is the configuration of an auto-created dead-letter queue: no DLQ of
// its own, no delivery limit, unlimited retention, and the source's kind.
func DeadLetterConfig(source Config) Config {
	c := DefaultConfig()
	c.DeadLetterQueue = NoDeadLetterQueue
	c.MaxDeliveries = 0
	c.Retention = 0
	c.OrderedGroups = source.OrderedGroups
	c.MaxMessageSize = MaxMessageSizeLimit
	return c
}

// CheckName checks that name is one the core can hold: 1 to MaxNameLen bytes from
// A-Z a-z 0-9 _ . - (no control characters, no separators, nothing that needs escaping
// in a path or a log line). It is not a grammar: each front has its own, stricter one
// (internal/names is the native API's and SQS's), and every front's must be a subset
// of this, so that the core accepts every name a front accepts.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return &NameError{Name: name}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return &NameError{Name: name}
		}
	}
	return nil
}

// Validate checks every field's range; the error names the field.
func (c *Config) Validate(name string) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > MaxVisibilityTimeout {
		return bad("visibility_timeout", "must be between 0 and 12h, got %v", c.VisibilityTimeout)
	}
	if c.VisibilityTimeout%time.Millisecond != 0 {
		return bad("visibility_timeout", "must be a whole number of milliseconds")
	}
	if c.MaxDeliveries < 0 || c.MaxDeliveries > MaxMaxDeliveries {
		return bad("max_deliveries", "must be between 0 (never) and %d, got %d", MaxMaxDeliveries, c.MaxDeliveries)
	}
	if c.DeadLetterQueue == "" {
		return bad("dead_letter_queue", "must name a queue or be %q", NoDeadLetterQueue)
	}
	if c.DeadLetterQueue != NoDeadLetterQueue {
		if err := CheckName(c.DeadLetterQueue); err != nil {
			return bad("dead_letter_queue", "%q is not a valid queue name (%s)", c.DeadLetterQueue, nameRule)
		}
		if c.DeadLetterQueue == name {
			return &CycleError{Queue: name, Chain: []string{name, name}}
		}
	} else if c.MaxDeliveries > 0 {
		return bad("max_deliveries", "needs a dead_letter_queue: set max_deliveries to 0 or name a dead-letter queue")
	}
	switch c.OnDeadLetter {
	case MoveOn:
	case ParkGroup:
		if !c.OrderedGroups {
			return bad("on_dead_letter", "park_group needs an ordered queue (ordered_groups): an unordered queue has no order to keep")
		}
		if c.DeadLetterQueue == NoDeadLetterQueue {
			return bad("on_dead_letter", "park_group needs a dead_letter_queue: the group waits for its dead letter there")
		}
	default:
		return bad("on_dead_letter", "must be move_on or park_group")
	}
	if c.BackoffBase < 0 || c.BackoffBase > MaxBackoff {
		return bad("backoff_base", "must be between 0 and 12h, got %v", c.BackoffBase)
	}
	if c.BackoffMax < c.BackoffBase || c.BackoffMax > MaxBackoff {
		return bad("backoff_max", "must be between backoff_base (%v) and 12h, got %v", c.BackoffBase, c.BackoffMax)
	}
	if c.Delay < 0 || c.Delay > MaxDelay {
		return bad("delay", "must be between 0 and 168h (7 days), got %v", c.Delay)
	}
	if c.Retention != 0 && (c.Retention < MinRetention || c.Retention > MaxRetention) {
		return bad("retention", "must be 0 (unlimited) or between 1s and 87600h, got %v", c.Retention)
	}
	if c.Retention != 0 && c.Delay >= c.Retention {
		return bad("delay", "must be shorter than retention (%v), got %v", c.Retention, c.Delay)
	}
	if c.DedupWindow < 0 || c.DedupWindow > MaxDedupWindow {
		return bad("dedup_window", "must be between 0 (off) and 168h, got %v", c.DedupWindow)
	}
	if c.DedupScope > DedupGroup {
		return bad("dedup_scope", "must be queue or group")
	}
	if c.MaxMessages < 0 {
		return bad("max_messages", "must be 0 (unlimited) or positive, got %d", c.MaxMessages)
	}
	if c.MaxBytes < 0 {
		return bad("max_bytes", "must be 0 (unlimited) or positive, got %d", c.MaxBytes)
	}
	if c.MaxMessageSize < 1 || c.MaxMessageSize > MaxMessageSizeLimit {
		return bad("max_message_size", "must be between 1 and %d bytes, got %d", MaxMessageSizeLimit, c.MaxMessageSize)
	}
	if c.ReceiveWait < 0 || c.ReceiveWait > MaxReceiveWait {
		return bad("receive_wait", "must be between 0 and 60s, got %v", c.ReceiveWait)
	}
	if len(c.Tags) > MaxTags {
		return bad("tags", "at most %d tags, got %d", MaxTags, len(c.Tags))
	}
	for k, v := range c.Tags {
		if k == "" || len(k) > 128 || len(v) > 256 {
			return bad("tags", "tag keys must be 1..128 bytes and values at most 256 bytes (%q)", k)
		}
	}
	for k := range c.Front.Unknown {
		if k == "" || len(k) > 256 {
			return bad("attributes", "attribute names must be 1..256 bytes")
		}
		if frontKey(k) {
			return bad("attributes", "%q is stored from its field of FrontAttributes, not from Unknown", k)
		}
	}
	return nil
}

// nameRule states CheckName's rule, as messages quote it.
const nameRule = "1 to 80 characters from A-Z a-z 0-9 _ . -"

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// Clone returns a deep copy (maps are copied).
func (c Config) Clone() Config {
	c.Tags = cloneMap(c.Tags)
	c.Front.Unknown = cloneMap(c.Front.Unknown)
	return c
}

// Equal reports whether two configurations are identical.
func (c Config) Equal(o Config) bool {
	type plain struct {
		VisibilityTimeout, BackoffBase, BackoffMax, Delay, Retention, DedupWindow, ReceiveWait time.Duration
		MaxDeliveries                                                                          int
		DeadLetterQueue                                                                        string
		DedupScope                                                                             DedupScope
		OnDeadLetter                                                                           DeadLetterAction
		ContentDedup, OrderedGroups                                                            bool
		MaxMessages, MaxBytes, MaxMessageSize                                                  int64
	}
	flat := func(c *Config) plain {
		return plain{c.VisibilityTimeout, c.BackoffBase, c.BackoffMax, c.Delay, c.Retention, c.DedupWindow, c.ReceiveWait,
			c.MaxDeliveries, c.DeadLetterQueue, c.DedupScope, c.OnDeadLetter, c.ContentDedup, c.OrderedGroups,
			c.MaxMessages, c.MaxBytes, c.MaxMessageSize}
	}
	return flat(&c) == flat(&o) && maps.Equal(c.Tags, o.Tags) && c.Front.Equal(o.Front)
}

// Equal reports whether two sets of front attributes are identical.
func (a FrontAttributes) Equal(o FrontAttributes) bool {
	for _, f := range frontFields {
		if *f.field(&a) != *f.field(&o) {
			return false
		}
	}
	return maps.Equal(a.Unknown, o.Unknown)
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
