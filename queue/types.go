package queue

// Sink receives each record the machine emits, before the machine applies it. The
// broker appends to the write-ahead log; tests may just collect. Records must be stored
// in the order they are emitted.
type Sink interface {
	Emit(Record)
}

// Attr is a typed message attribute. Type is "String", "Number" or "Binary", optionally
// with a custom suffix (for example "Number.float"), as in SQS. Native headers are String
// attributes.
type Attr struct {
	Name  string
	Type  string
	Value []byte
}

// Payload is what a producer sent. The machine keeps none of it but its size, group and
// dedup key; the node's payload store keeps the bodies (see Bodies).
type Payload struct {
	Body    []byte
	Attrs   []Attr
	Group   string
	DedupID string
}

// Clone returns a copy of p that shares no bytes with it.
func (p *Payload) Clone() *Payload {
	c := *p
	c.Body = append([]byte{}, p.Body...)
	if p.Attrs != nil {
		c.Attrs = make([]Attr, len(p.Attrs))
		for i, a := range p.Attrs {
			a.Value = append([]byte(nil), a.Value...)
			c.Attrs[i] = a
		}
	}
	return &c
}

// Size is the size counted against max_message_size and max_bytes: body plus attribute
// names, types and values.
func (p *Payload) Size() int64 {
	n := int64(len(p.Body))
	for _, a := range p.Attrs {
		n += int64(len(a.Name) + len(a.Type) + len(a.Value))
	}
	return n
}

// State of a message within its queue.
type State uint8

const (
	StateReady    State = 1
	StateDelayed  State = 2
	StateInFlight State = 3
	// statePending marks a message whose lease ended while it must be dead-lettered; it is
	// transient (the dead-letter record follows in the same critical section).
	statePending State = 4
	// StateDeferred: a consumer set the message aside (Machine.Defer). No receive returns
	// it; only a fetch by id does (Machine.ReceiveDeferred), and retention still applies.
	StateDeferred State = 5
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateDelayed:
		return "delayed"
	case StateInFlight:
		return "in_flight"
	case statePending:
		return "pending"
	case StateDeferred:
		return "deferred"
	}
	return "unknown"
}

// Reasons the machine itself uses for dead letters.
const (
	ReasonMaxDeliveries = "max_deliveries"
	ReasonExpired       = "expired"
	// ReasonCorrupt marks a message quarantined because this node cannot read its body:
	// it failed its checksum (Machine.Quarantine). Consumers cannot give it
	// (CheckDeadLetter), so a dead letter with this reason is always the broker's, and a
	// redrive refuses or skips it (ErrMessageCorrupt).
	ReasonCorrupt = "corrupt"
)

// DeadInfo records why and from where a message was dead-lettered.
type DeadInfo struct {
	Source      uint64 // queue id
	SourceName  string
	Reason      string
	Description string
	At          int64
	Deliveries  uint32 // delivery count when it was dead-lettered
}

// SendInput is one message to send.
type SendInput struct {
	Payload Payload
	// Delay in milliseconds; negative means the queue's default delay.
	Delay int64
}

// SendResult is the outcome of one SendInput.
type SendResult struct {
	ID uint64
	// Seq is the message's sequence in its queue (the original's, for a duplicate).
	Seq       uint64
	Duplicate bool
	Err       error
}

// Lease identifies one delivery of one message: what a receipt encodes.
type Lease struct {
	QueueID uint64
	Seq     uint64
	MsgID   uint64
	Epoch   uint32 // the delivery count of this lease
}

// Delivery is a leased message handed to a consumer. Its body is the payload store's:
// Ref names it there while the caller still serialises the machine.
type Delivery struct {
	Lease
	Ref            Ref
	Deadline       int64
	EnqueuedAt     int64
	FirstDelivered int64
	Group          string
	Dead           *DeadInfo
}

// Candidate is a ready message a receive has selected to lease, as its admission filter
// sees it (ReceiveSpec.Admit): the body's name in the payload store, and enough to find
// the message again (Seq and MsgID: a Ref may name another message once this one is
// gone).
type Candidate struct {
	Ref   Ref
	Seq   uint64
	MsgID uint64
	Dead  *DeadInfo
}

// Admission is an admission filter's answer about one candidate of a receive
// (ReceiveSpec.Admit).
type Admission uint8

const (
	// Admit: lease it.
	Admit Admission = iota
	// Defer: not yet; the caller must prepare it first (the broker reads its body). It
	// and everything selected after it are reported instead of leased, so that a later
	// call, once they are prepared, leases what this one would have: deferring delays
	// what a receive takes, it does not change it.
	Defer
	// Skip: leave it where it is and select as if it were not ready: a skipped head
	// holds its group for this call, a skipped follower ends its group's run (the
	// broker skips a message whose body it failed to read).
	Skip
)

// ReceiveSpec shapes one call of Machine.ReceiveWith.
type ReceiveSpec struct {
	// Max messages to select (leased and deferred together).
	Max int
	// Visibility is the lease length in milliseconds; negative means the queue's
	// visibility timeout.
	Visibility int64
	// MaxBytes caps the payload bytes selected (0: no cap). Unless Continued, one message
	// is selected even if it alone is over the cap.
	MaxBytes int64
	// Delete makes it a receive-and-delete (at-most-once on purpose): what is selected is
	// settled as it is returned, by one record that delivers and settles it (a
	// DeliverDeleteRecord), with no lease: a Delivery's Deadline is 0 and its Lease names
	// no live lease. An ordered group moves on at once. The in-flight limit does not
	// apply (nothing stays in flight) and Visibility is ignored.
	Delete bool
	// Continued says that this call continues a receive that leased messages in an
	// earlier call: Max and MaxBytes are what remains, and the cap is never exceeded.
	Continued bool
	// Admit, when set, is asked about each candidate as it is selected, once the limits
	// above let it in; for an ordered group, about each message of the run (the head and
	// the consecutive ready followers) before any of it is leased, so that a run is leased
	// whole or deferred whole. An admitted candidate may still be deferred (a later one of
	// its run, or an earlier candidate, was deferred): a caller that notes what it
	// admitted matches the deliveries to its notes by Ref and id, which come in the same
	// order. It must not call the machine. Nil admits everything.
	Admit func(Candidate) Admission
}

// NackInput ends one lease early.
type NackInput struct {
	Lease Lease
	// Delay in milliseconds before the message is visible again; negative means the
	// queue's exponential backoff.
	Delay int64
	// Jitter is a random value chosen by the caller (outside the machine, so that the
	// machine stays deterministic) that picks the backoff within its range.
	Jitter uint64
	// Error is the handler's error, as the consumer reports it (at most MaxHandlerErrorLen
	// bytes of UTF-8; "" for none): stored with the message for explain, and the dead
	// letter's description when the message is dead-lettered for max_deliveries.
	Error string
}

// ExtendInput changes one lease's deadline to now + Visibility (milliseconds).
type ExtendInput struct {
	Lease      Lease
	Visibility int64
}

// MessageInfo describes a message for peek and operators.
type MessageInfo struct {
	ID             uint64
	Seq            uint64
	State          State
	Deliveries     uint32
	EnqueuedAt     int64
	EnteredAt      int64
	VisibleAt      int64 // for delayed and in-flight: when it becomes visible
	FirstDelivered int64
	Size           int64
	Group          string
	Ref            Ref // the body's name in the payload store (see Delivery)
	Dead           *DeadInfo
}

// RedriveFilter selects messages for a redrive. Zero fields select everything.
type RedriveFilter struct {
	// From selects dead letters from one source queue (by id; 0 = any).
	From      uint64
	Reason    string
	Group     string
	OlderThan int64 // milliseconds since the original enqueue
	IDs       []uint64
}

// TaskState is the state of a redrive task.
type TaskState uint8

const (
	TaskRunning   TaskState = 1
	TaskCompleted TaskState = 2
	TaskCancelled TaskState = 3
	TaskFailed    TaskState = 4
)

func (s TaskState) String() string {
	switch s {
	case TaskRunning:
		return "running"
	case TaskCompleted:
		return "completed"
	case TaskCancelled:
		return "cancelled"
	case TaskFailed:
		return "failed"
	}
	return "unknown"
}

// Task is a redrive task: a durable, resumable move of messages out of a queue.
type Task struct {
	ID         uint64
	Source     uint64
	SourceName string
	Target     uint64 // 0: back to each message's recorded source
	TargetName string
	FromName   string // name of Filter.From
	Filter     RedriveFilter
	MaxSeq     uint64
	Cursor     uint64
	State      TaskState
	Total      int64
	Moved      int64
	Skipped    int64
	Rate       int
	CreatedAt  int64
	UpdatedAt  int64
	Message    string
}

// Counters are the durable per-queue totals. They are rebuilt exactly by replay.
type Counters struct {
	Sent           uint64
	Acked          uint64
	Nacked         uint64
	Delivered      uint64
	Redelivered    uint64
	Extended       uint64
	DeadLettered   uint64 // moved out of this queue as dead letters (every reason)
	Expired        uint64 // reached retention (dead-lettered or, without DLQ, removed)
	DeadLetteredIn uint64 // dead letters received by this queue
	Overflow       uint64 // dead letters received beyond max_messages/max_bytes
	RedrivenIn     uint64
	RedrivenOut    uint64
	Purged         uint64
	Deleted        uint64
	// WaitSum/WaitCount: enqueue → first delivery, in ms (Little's law, "waiting").
	WaitSum   uint64
	WaitCount uint64
	// SojournSum/SojournCount: enqueue → ack, in ms (Little's law, "in system").
	SojournSum   uint64
	SojournCount uint64
	// ReceivedAndDeleted counts messages settled by a receive-and-delete (also counted in
	// Delivered, never in Acked).
	ReceivedAndDeleted uint64
	// Deferrals counts messages a consumer deferred (each time).
	Deferrals uint64
	// ByReason counts dead letters out of this queue per reason.
	ByReason map[string]uint64
	// DedupEvictedEarly counts dedup entries dropped before their window ended because
	// the per-queue cap was reached.
	DedupEvictedEarly uint64
}

// Stats is a point-in-time view of one queue.
type Stats struct {
	Counters
	Ready       int64
	Delayed     int64
	InFlight    int64
	Deferred    int64 // set aside by a consumer, fetched only by id (those fetched and leased again count in InFlight)
	Bytes       int64
	OldestReady int64 // enqueue time of the oldest ready message, 0 if none
	Groups      int
	DedupIDs    int
	// ParkedGroups: ordered groups waiting for a dead letter (on_dead_letter park_group).
	ParkedGroups int
}

// QueueInfo describes a queue.
type QueueInfo struct {
	ID        uint64
	Name      string
	Config    Config
	CreatedAt int64
	UpdatedAt int64
	Stats     Stats
	// DeadLetterSources names the queues that use this queue as their DLQ.
	DeadLetterSources []string
}
