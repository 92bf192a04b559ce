// Package api holds the wire types of okiba's native HTTP/JSON API and its error codes,
// shared by the server and the Go client so that the client never imports the server.
// It holds no logic beyond encoding. docs/api.md documents every type and code.
package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes. They are stable: clients branch on them.
const (
	CodeInvalidRequest  = "invalid_request"      // malformed JSON, unknown field, bad parameter
	CodeInvalidName     = "invalid_name"         // queue name outside the naming rule
	CodeInvalidConfig   = "invalid_config"       // a queue configuration field out of range
	CodeInvalidMessage  = "invalid_message"      // bad group, dedup id or header
	CodeInvalidBody     = "invalid_body"         // both or neither of body/body_base64, bad base64
	CodeInvalidDelay    = "invalid_delay"        // delay out of range or beyond retention
	CodeInvalidReceipt  = "invalid_receipt"      // malformed, forged, or another queue's receipt
	CodeInvalidID       = "invalid_id"           // malformed message or task id
	CodeMessageTooLarge = "message_too_large"    // over the queue's max_message_size
	CodeBatchTooLarge   = "batch_too_large"      // too many entries in one request
	CodeRequestTooLarge = "request_too_large"    // request body over the limit
	CodeQueueNotFound   = "queue_not_found"      //
	CodeMessageNotFound = "message_not_found"    //
	CodeTaskNotFound    = "task_not_found"       //
	CodeNotFound        = "not_found"            // no such route
	CodeMethod          = "method_not_allowed"   //
	CodeReceiptStale    = "receipt_stale"        // the lease ended; nothing changed
	CodeAlreadySettled  = "already_settled"      // the receipt's message is no longer in the queue (a retried ack succeeded)
	CodeQueueInUse      = "queue_in_use"         // the queue is another queue's DLQ
	CodeQueueExists     = "queue_exists"         // a create-only PUT of a queue that exists otherwise
	CodeDLQCycle        = "dlq_cycle"            // dead-letter queues would form a cycle
	CodeNoDeadLetter    = "no_dead_letter_queue" // dead-letter on a queue with dead_letter_queue none
	CodeTaskFinished    = "task_finished"        // cancel of a finished redrive
	CodeMessageCorrupt  = "message_corrupt"      // a redrive of dead letters whose body failed its checksum
	CodeNotDeferred     = "not_deferred"         // a fetch by id of a message that is not deferred
	CodeNotParked       = "not_parked"           // a release of a group that is not parked
	CodeQueueFull       = "queue_full"           // backpressure: max_messages/max_bytes
	CodeTooManyQueues   = "too_many_queues"      // the broker's max_queues is reached
	CodeTooManyInFlight = "too_many_in_flight"   // the queue's leases are at max_in_flight
	CodeDiskFull        = "disk_full"            // free disk below the high-water mark
	CodeStorageFailed   = "storage_failed"       // a write or fsync failed; restart the broker
	CodeUnavailable     = "unavailable"          // shutting down
	CodeUnauthorized    = "unauthorized"         // missing or wrong bearer token
	CodeForbidden       = "forbidden"            // a permission the principal lacks; a browser request from another origin, or an unknown Host name
	CodeInternal        = "internal"             //

	CodeTopicNotFound        = "topic_not_found"        //
	CodeTopicFull            = "topic_full"             // discard new at retention_bytes or retention_records
	CodeOffsetOutOfRange     = "offset_out_of_range"    // below the partition's start (retention) or past its end
	CodePartitionOutOfRange  = "partition_out_of_range" // no such partition
	CodeRecordTooLarge       = "record_too_large"       // over the topic's max_record_size
	CodeTooManyTopics        = "too_many_topics"        // the broker's max_topics is reached
	CodeGroupNotFound        = "group_not_found"        //
	CodeGroupDeleted         = "group_deleted"          // the member's group was deleted
	CodeMemberUnknown        = "member_unknown"         // the member's lease ended, it left, or its session is not the current one
	CodeEpochStale           = "epoch_stale"            // a commit for a partition reassigned or sought since it was handed out
	CodeOffsetRegressed      = "offset_regressed"       // a commit below the committed offset
	CodeTooManyGroups        = "too_many_groups"        // the topic's max_groups is reached
	CodeTooManyMembers       = "too_many_members"       // the group's max_members is reached
	CodeTopicInUse           = "topic_in_use"           // deleting a topic with subscriptions or groups without force
	CodeSubscriptionNotFound = "subscription_not_found" //
	CodeInvalidFilter        = "invalid_filter"         // a subscription's filter policy that does not parse
	CodeTooManySubscriptions = "too_many_subscriptions" // the topic's max_subscriptions is reached

	CodeSequenceTooOld = "sequence_too_old" // a producer's retry older than the answers kept for it
	CodeSequenceReused = "sequence_reused"  // a producer's sequence already used for a send to another queue
	CodeNotRepeated    = "not_repeated"     // an entry that failed in the producer's original request: send it in a new one

	CodePrincipalNotFound = "principal_not_found" //
	CodePrincipalExists   = "principal_exists"    // create of a principal whose name is taken (or declared in the configuration)
	CodeTooManyPrincipals = "too_many_principals" // the broker holds its maximum of principals
)

// Status maps each code to its HTTP status.
var Status = map[string]int{
	CodeInvalidRequest: 400, CodeInvalidName: 400, CodeInvalidConfig: 400, CodeInvalidMessage: 400,
	CodeInvalidBody: 400, CodeInvalidDelay: 400, CodeInvalidReceipt: 400, CodeInvalidID: 400,
	CodeMessageTooLarge: 413, CodeBatchTooLarge: 400, CodeRequestTooLarge: 413,
	CodeQueueNotFound: 404, CodeMessageNotFound: 404, CodeTaskNotFound: 404, CodeNotFound: 404,
	CodeMethod: 405, CodeReceiptStale: 409, CodeAlreadySettled: 409, CodeQueueInUse: 409, CodeQueueExists: 409, CodeDLQCycle: 409,
	CodeNoDeadLetter: 409, CodeTaskFinished: 409, CodeMessageCorrupt: 409, CodeNotDeferred: 409, CodeNotParked: 409, CodeQueueFull: 429, CodeStorageFailed: 503,
	CodeTooManyQueues: 409, CodeTooManyInFlight: 429, CodeDiskFull: 507,
	CodeUnavailable: 503, CodeUnauthorized: 401, CodeForbidden: 403, CodeInternal: 500,
	CodeTopicNotFound: 404, CodeTopicFull: 429, CodeOffsetOutOfRange: 409,
	CodePartitionOutOfRange: 400, CodeRecordTooLarge: 413, CodeTooManyTopics: 409,
	CodeGroupNotFound: 404, CodeGroupDeleted: 410, CodeMemberUnknown: 409, CodeEpochStale: 409,
	CodeOffsetRegressed: 409, CodeTooManyGroups: 409, CodeTooManyMembers: 409,
	CodeTopicInUse: 409, CodeSubscriptionNotFound: 404, CodeInvalidFilter: 400, CodeTooManySubscriptions: 409,
	CodePrincipalNotFound: 404, CodePrincipalExists: 409, CodeTooManyPrincipals: 409,
	CodeSequenceTooOld: 409, CodeSequenceReused: 409, CodeNotRepeated: 409,
}

// Error is the error object of every failed request and every failed batch item:
// {"error":{"code":"…","message":"…"}}. It implements error, so the Go client returns it
// and callers can branch on Code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfter is set on queue_full, too_many_in_flight, disk_full, and unavailable for
	// a receive that could read no body: when to try again (also the Retry-After header).
	RetryAfter *Duration `json:"retry_after,omitempty"`
	// Status is the HTTP status the error came with (client side only).
	Status int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrorBody wraps an Error for the response body.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("30s", "250ms",
// "1h30m"). On input it also accepts a number of seconds.
type Duration time.Duration

var durationType = reflect.TypeFor[Duration]()

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Ptr returns a pointer to Duration(d).
func Ptr(d time.Duration) *Duration { x := Duration(d); return &x }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := time.ParseDuration(str)
		if err != nil {
			// An UnmarshalTypeError lets encoding/json add the field's name.
			return &json.UnmarshalTypeError{Value: fmt.Sprintf("%q", str), Type: durationType}
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil || secs > 1e9 || secs < -1e9 {
		return &json.UnmarshalTypeError{Value: s, Type: durationType}
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// QueueConfig is a queue's configuration. On PUT every field is optional: a missing
// field keeps its current value, or okiba's default when the queue is created. Responses
// carry every field.
type QueueConfig struct {
	VisibilityTimeout *Duration `json:"visibility_timeout,omitempty"`
	MaxDeliveries     *int      `json:"max_deliveries,omitempty"`
	DeadLetterQueue   *string   `json:"dead_letter_queue,omitempty"`
	BackoffBase       *Duration `json:"backoff_base,omitempty"`
	BackoffMax        *Duration `json:"backoff_max,omitempty"`
	Delay             *Duration `json:"delay,omitempty"`
	Retention         *Duration `json:"retention,omitempty"`
	DedupWindow       *Duration `json:"dedup_window,omitempty"`
	DedupScope        *string   `json:"dedup_scope,omitempty"`
	ContentDedup      *bool     `json:"content_dedup,omitempty"`
	MaxMessages       *int64    `json:"max_messages,omitempty"`
	MaxBytes          *int64    `json:"max_bytes,omitempty"`
	MaxMessageSize    *int64    `json:"max_message_size,omitempty"`
	ReceiveWait       *Duration `json:"receive_wait,omitempty"`
	OrderedGroups     *bool     `json:"ordered_groups,omitempty"`
	// OnDeadLetter: move_on (default) or park_group — dead-lettering an ordered group's
	// head parks the rest of the group until the dead letter is back or released (an
	// ordered queue with a dead-letter queue only).
	OnDeadLetter *string           `json:"on_dead_letter,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
}

// ParkedGroup is one parked group of a queue: GET /v1/queues/{name}/parked.
type ParkedGroup struct {
	Group           string    `json:"group"`
	Blocker         string    `json:"blocker"`           // the dead letter's id
	DeadLetterQueue string    `json:"dead_letter_queue"` // where the blocker is
	Since           time.Time `json:"since"`
	Messages        int       `json:"messages"` // of the group, waiting in the queue
}

// ParkedResponse lists a queue's parked groups, by group.
type ParkedResponse struct {
	Groups []ParkedGroup `json:"groups"`
}

// ReleaseResponse answers POST /v1/queues/{name}/groups/{group}/release.
type ReleaseResponse struct {
	Released string `json:"released"` // the group
}

// Queue is a queue with its configuration and statistics.
type Queue struct {
	Name              string      `json:"name"`
	CreatedAt         time.Time   `json:"created_at"`
	UpdatedAt         time.Time   `json:"updated_at"`
	Config            QueueConfig `json:"config"`
	Stats             Stats       `json:"stats"`
	DeadLetterSources []string    `json:"dead_letter_sources,omitempty"`
}

// Stats are a queue's statistics. Times are in milliseconds.
type Stats struct {
	Ready    int64 `json:"ready"`
	Delayed  int64 `json:"delayed"`
	InFlight int64 `json:"in_flight"`
	// Deferred counts messages a consumer set aside, fetched only by id (a fetched one
	// counts in in_flight while it is leased).
	Deferred int64 `json:"deferred"`
	// ParkedGroups counts ordered groups waiting for a dead letter (on_dead_letter
	// park_group).
	ParkedGroups int   `json:"parked_groups"`
	Bytes        int64 `json:"bytes"`
	DeadLetters  int64 `json:"dead_letters"` // messages in this queue's dead-letter queue
	Groups       int   `json:"groups"`
	// OldestReadyAgeMS is the age of the oldest ready message, 0 when none.
	OldestReadyAgeMS int64 `json:"oldest_ready_age_ms"`
	// OldestReadyAt is when the oldest ready message entered the queue, zero when none.
	// Server side only, as Error.Status is client side only: the JSON carries the age.
	// The console's overview sends this time instead, since its answer must stay the
	// same from one poll to the next while the queue does.
	OldestReadyAt time.Time `json:"-"`

	Sent              uint64            `json:"sent"`
	Acked             uint64            `json:"acked"`
	Nacked            uint64            `json:"nacked"`
	Delivered         uint64            `json:"delivered"`
	Redelivered       uint64            `json:"redelivered"`
	Extended          uint64            `json:"extended"`
	DeadLettered      uint64            `json:"dead_lettered"`
	DeadLetteredBy    map[string]uint64 `json:"dead_lettered_by_reason,omitempty"`
	DeadLetteredIn    uint64            `json:"dead_lettered_in"`
	Expired           uint64            `json:"expired"`
	RedrivenIn        uint64            `json:"redriven_in"`
	RedrivenOut       uint64            `json:"redriven_out"`
	Purged            uint64            `json:"purged"`
	Deleted           uint64            `json:"deleted"`
	Overflow          uint64            `json:"overflow"`
	DedupHits         uint64            `json:"dedup_hits"`
	Refused           uint64            `json:"refused"`
	DedupEvictedEarly uint64            `json:"dedup_evicted_early"`
	// ReceivedAndDeleted counts messages settled by receive-and-delete receives (they
	// count in delivered too, never in acked).
	ReceivedAndDeleted uint64 `json:"received_and_deleted"`
	// Deferrals counts how often a consumer deferred a message of the queue.
	Deferrals uint64 `json:"deferrals"`
	// DedupIDs is how many dedup ids the queue remembers (the server bounds them all
	// together: limits.max_dedup_ids).
	DedupIDs int `json:"dedup_ids"`

	// Rates per second over the last minute (RateWindowMS says how much was covered).
	Rates Rates `json:"rates"`
	// Little's law, L = λW, for waiting (ready → first delivery) and in system
	// (enqueue → ack): W measured over the last minute and estimated as L/λ.
	Waiting  LittlesLaw `json:"waiting"`
	InSystem LittlesLaw `json:"in_system"`
}

// Rates are per-second rates over the last minute.
type Rates struct {
	WindowMS     int64   `json:"window_ms"`
	Sent         float64 `json:"sent"`
	Acked        float64 `json:"acked"`
	Nacked       float64 `json:"nacked"`
	Delivered    float64 `json:"delivered"`
	DeadLettered float64 `json:"dead_lettered"`
	Expired      float64 `json:"expired"`
}

// LittlesLaw reports L, λ and W two ways.
type LittlesLaw struct {
	L           int64   `json:"l"`
	Lambda      float64 `json:"lambda"`
	MeasuredMS  float64 `json:"measured_ms"`
	EstimatedMS float64 `json:"estimated_ms"`
}

// QueueList is the answer to GET /v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// SendMessage is one message to send. Exactly one of Body (UTF-8 text) and BodyBase64
// must be given.
type SendMessage struct {
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Group      string            `json:"group,omitempty"`
	DedupID    string            `json:"dedup_id,omitempty"`
	Delay      *Duration         `json:"delay,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
}

// SendRequest is the body of POST /v1/queues/{name}/messages. A single SendMessage object
// (without "messages") is accepted too.
type SendRequest struct {
	Messages []SendMessage `json:"messages"`
	// ProducerID and Sequence make the send idempotent: a request a producer numbered
	// once is answered with the same ids however often it arrives (docs/api.md, "Idempotent
	// sends"). The id comes from POST /v1/producers; sequences start at 1.
	ProducerID string `json:"producer_id,omitempty"`
	Sequence   uint64 `json:"sequence,omitempty"`
}

// Producer answers POST /v1/producers: a fresh producer id.
type Producer struct {
	ProducerID string `json:"producer_id"`
}

// ProducersPath hands out producer ids (POST).
const ProducersPath = "/v1/producers"

// SendResult is the outcome of one message of a send.
type SendResult struct {
	ID        string `json:"id,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     *Error `json:"error,omitempty"`
}

// SendResponse answers a send, one result per message in request order.
type SendResponse struct {
	Results []SendResult `json:"results"`
	// Repeated says a producer's request was answered before: these are that answer's
	// ids, and nothing was sent again.
	Repeated bool `json:"repeated,omitempty"`
	// Error repeats the common error when every message failed with the same code (the
	// HTTP status is then that error's).
	Error *Error `json:"error,omitempty"`
}

// ReceiveRequest is the body of POST /v1/queues/{name}/receive.
type ReceiveRequest struct {
	Max        int       `json:"max,omitempty"`        // 1..1000, default 1
	Wait       *Duration `json:"wait,omitempty"`       // long-poll wait up to 60s, default the queue's receive_wait
	Visibility *Duration `json:"visibility,omitempty"` // lease length, default the queue's visibility_timeout
	// ReceiveAndDelete settles the messages as they are returned (at-most-once on
	// purpose): one durable record delivers and deletes them, there is no lease and no
	// receipt, and a message whose answer is lost is lost. Visibility must not be given.
	ReceiveAndDelete bool `json:"receive_and_delete,omitempty"`
}

// Message is a received or peeked message. The body is in Body when it is valid UTF-8,
// otherwise in BodyBase64.
type Message struct {
	ID               string            `json:"id"`
	Receipt          string            `json:"receipt,omitempty"`
	Body             *string           `json:"body,omitempty"`
	BodyBase64       *string           `json:"body_base64,omitempty"`
	Group            string            `json:"group,omitempty"`
	DedupID          string            `json:"dedup_id,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	Deliveries       uint32            `json:"deliveries"`
	State            string            `json:"state,omitempty"` // peek only
	Seq              uint64            `json:"seq,omitempty"`
	EnqueuedAt       time.Time         `json:"enqueued_at"`
	FirstDeliveredAt *time.Time        `json:"first_delivered_at,omitempty"`
	VisibleAt        *time.Time        `json:"visible_at,omitempty"` // lease deadline or end of delay
	DeadLetter       *DeadLetter       `json:"dead_letter,omitempty"`
}

// Explanation answers GET /v1/queues/{name}/messages/{id}/explain (and
// /v1/queues/{name}/explain?dedup_id=…): why a message is or is not being delivered now,
// in words (Summary) and fields. State is one of ready, delayed, leased,
// waiting_for_group, deferred, dead_lettered, gone, deduplicated, unknown; the fields
// after it are those of its state.
type Explanation struct {
	Queue   string `json:"queue"`
	ID      string `json:"id,omitempty"`
	State   string `json:"state"`
	Summary string `json:"summary"`
	Seq     uint64 `json:"seq,omitempty"`
	Group   string `json:"group,omitempty"`
	// ready: how many others a receive serves first, exact unless AheadExact is false
	// (more than 10000, or at least Ahead where the count stopped at its bound).
	Ahead      *int `json:"ahead,omitempty"`
	AheadExact bool `json:"ahead_exact,omitempty"`
	// FairGroups: on an unordered queue, the groups with ready messages that fair
	// delivery serves in turn with this message's.
	FairGroups int `json:"fair_groups,omitempty"`
	// delayed, leased: until when; leased: the lease's delivery number, and whether
	// max_deliveries makes it the last.
	Until        *time.Time `json:"until,omitempty"`
	Delivery     uint32     `json:"delivery,omitempty"`
	LastDelivery bool       `json:"last_delivery,omitempty"`
	// waiting_for_group: the message of its ordered group it waits for.
	Blocker *Blocker `json:"blocker,omitempty"`
	// gone, dead_lettered: when and how it left (acked, received_and_deleted,
	// dead_lettered, expired, deleted, purged, redriven) and where to. deferred: when a
	// consumer deferred it.
	At  *time.Time `json:"at,omitempty"`
	How string     `json:"how,omitempty"`
	To  string     `json:"to,omitempty"`
	// DeadLetter: why it was dead-lettered (a dead letter here, or in To).
	DeadLetter *DeadLetter `json:"dead_letter,omitempty"`
	// deduplicated: the dedup id asked about, the message it names and its explanation.
	DedupID string       `json:"dedup_id,omitempty"`
	Into    string       `json:"into,omitempty"`
	Target  *Explanation `json:"target,omitempty"`
	History *History     `json:"history,omitempty"`
}

// Blocker is the message of an ordered group another waits for.
type Blocker struct {
	ID    string     `json:"id"`
	State string     `json:"state"` // ready, delayed or leased
	Until *time.Time `json:"until,omitempty"`
}

// History is what the broker keeps of a message's past in its queue. Partial: the log's
// records of the message are not searched, only what the index keeps.
type History struct {
	EnqueuedAt       time.Time  `json:"enqueued_at"`
	EnteredAt        time.Time  `json:"entered_at"`
	Deliveries       uint32     `json:"deliveries"`
	FirstDeliveredAt *time.Time `json:"first_delivered_at,omitempty"`
	LastDeliveredAt  *time.Time `json:"last_delivered_at,omitempty"`
	Nacks            uint32     `json:"nacks,omitempty"`
	LastNackDelay    *Duration  `json:"last_nack_delay,omitempty"`
	LastError        string     `json:"last_error,omitempty"`
	Partial          bool       `json:"partial"`
}

// DeadLetter says why and from where a message was dead-lettered.
type DeadLetter struct {
	Source      string    `json:"source"`
	Reason      string    `json:"reason"`
	Description string    `json:"description,omitempty"`
	At          time.Time `json:"at"`
	Deliveries  uint32    `json:"deliveries"`
}

// ReceiveResponse answers a receive (an empty list when nothing arrived in time).
type ReceiveResponse struct {
	Messages []Message `json:"messages"`
}

// ReceiptsRequest is the body of ack, nack, extend and deadletter.
type ReceiptsRequest struct {
	Receipts []string `json:"receipts"`
	// Delay (nack): when the message becomes visible again; default the queue's backoff.
	Delay *Duration `json:"delay,omitempty"`
	// Visibility (extend, required): the lease's new length from now.
	Visibility *Duration `json:"visibility,omitempty"`
	// Reason and Description (deadletter).
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
	// Error (nack): the handler's error, at most 1024 bytes, stored with each message
	// for explain and made the description of its dead letter if max_deliveries ends it.
	Error string `json:"error,omitempty"`
}

// DeferredReceiveRequest is the body of POST /v1/queues/{name}/deferred/receive: the ids
// of deferred messages to fetch, each leased for Visibility (default the queue's
// visibility_timeout).
type DeferredReceiveRequest struct {
	IDs        []string  `json:"ids"`
	Visibility *Duration `json:"visibility,omitempty"`
}

// DeferredResult is the outcome of one id of a fetch of deferred messages: the message,
// leased, or the error (not_deferred when the id names no deferred message).
type DeferredResult struct {
	ID      string   `json:"id"`
	Message *Message `json:"message,omitempty"`
	Error   *Error   `json:"error,omitempty"`
}

// DeferredReceiveResponse answers a fetch of deferred messages, one result per id in
// request order; Error repeats the common error when every id failed alike.
type DeferredReceiveResponse struct {
	Results []DeferredResult `json:"results"`
	Error   *Error           `json:"error,omitempty"`
}

// ItemResult is the outcome of one receipt.
type ItemResult struct {
	OK    bool   `json:"ok"`
	Error *Error `json:"error,omitempty"`
}

// ReceiptsResponse answers ack, nack, extend and deadletter, one result per receipt.
type ReceiptsResponse struct {
	Results []ItemResult `json:"results"`
	Error   *Error       `json:"error,omitempty"`
}

// PeekResponse answers GET /v1/queues/{name}/messages. Next is the cursor for the next
// page (pass it as after=), empty at the end.
type PeekResponse struct {
	Messages []Message `json:"messages"`
	Next     string    `json:"next,omitempty"`
}

// PurgeResponse answers a purge.
type PurgeResponse struct {
	Purged int64 `json:"purged"`
}

// RedriveRequest is the body of POST /v1/queues/{name}/redrive, where name is the queue
// to move messages out of (usually a dead-letter queue).
type RedriveRequest struct {
	// To is the destination; empty sends each message back to the queue it was
	// dead-lettered from.
	To string `json:"to,omitempty"`
	// From selects only messages dead-lettered from this queue (for a DLQ shared by
	// several queues).
	From      string    `json:"from,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Group     string    `json:"group,omitempty"`
	IDs       []string  `json:"ids,omitempty"`
	OlderThan *Duration `json:"older_than,omitempty"`
	// Rate caps messages per second; 0 is as fast as possible.
	Rate int `json:"rate,omitempty"`
}

// RedriveTask is a redrive's state and progress.
type RedriveTask struct {
	ID        string    `json:"id"`
	Source    string    `json:"source"`
	To        string    `json:"to,omitempty"`
	From      string    `json:"from,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Group     string    `json:"group,omitempty"`
	IDs       []string  `json:"ids,omitempty"`
	OlderThan *Duration `json:"older_than,omitempty"`
	Rate      int       `json:"rate,omitempty"`
	State     string    `json:"state"` // running, completed, cancelled, failed
	Total     int64     `json:"total"`
	Moved     int64     `json:"moved"`
	Skipped   int64     `json:"skipped"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RedriveList answers GET /v1/redrives.
type RedriveList struct {
	Tasks []RedriveTask `json:"tasks"`
}

// Health answers GET /healthz: 200 with status "ok", or "degraded" and its reason (the
// broker serves, but reads of message bodies failed in the last minute); 503 with status
// "failed" and the error (the broker refuses writes until restarted, or shuts down).
type Health struct {
	Status string `json:"status"` // "ok", "degraded" or "failed"
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Cluster is this node's view of its cluster; absent on a single node.
	Cluster *ClusterHealth `json:"cluster,omitempty"`
	// Build says which okiba answers, so that a fleet's versions can be read without a
	// token (the version is no secret: the console's sign-in page is just as open).
	Build *Build `json:"build,omitempty"`
}

// ClusterHealth is what a node of a cluster knows of it (GET /healthz).
type ClusterHealth struct {
	Node string `json:"node"`
	// Role is "leader" (it takes commands), "follower" (it knows a leader and forwards
	// to it) or "no_leader" (an election, or no quorum: writes and reads answer 503).
	Role    string   `json:"role"`
	Leader  string   `json:"leader,omitempty"`
	Term    uint64   `json:"term"`
	Commit  uint64   `json:"commit_index"`
	Applied uint64   `json:"applied_index"`
	Members []string `json:"members"`
	// Lag is, on the leader, how many committed entries each follower has yet to store.
	Lag map[string]uint64 `json:"lag,omitempty"`
	// Snapshot is the index of this node's raft log snapshot: its entries start after it.
	Snapshot uint64 `json:"snapshot_index,omitempty"`
}

// Build is which okiba a binary is (okiba version, /healthz): the commit's time rather
// than the build's, so that building one commit twice gives the same binary.
type Build struct {
	Version    string `json:"version"`               // the release ("v1.2.3"), or "devel"
	Commit     string `json:"commit,omitempty"`      // the full hash of the commit built
	CommitTime string `json:"commit_time,omitempty"` // RFC 3339, UTC
	Modified   bool   `json:"modified,omitempty"`    // built with uncommitted changes
	GoVersion  string `json:"go_version"`            // "go1.26.1"
}

// Limits of the native API (docs/api.md "Limits"). They are defined here, in the package
// the Go client imports, and the broker applies MaxBatch and MaxWait to in-process
// callers too (broker.CheckReceive, queue.MaxReceiveWait).
const (
	MaxBatch       = 1000             // entries in one send, receive, ack, nack, extend or deadletter; messages in one peek page
	MaxRequestBody = 16 << 20         // bytes in one request body
	MaxWait        = 60 * time.Second // the long poll of one receive
	MaxRedriveIDs  = 100_000          // message ids in one redrive
)

// EncodeBody puts message bytes on the wire: as text when they are valid UTF-8, else as
// base64 (exactly one of the results is set).
func EncodeBody(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// DecodeBody returns the bytes of a body given as text or base64. Neither given is an
// empty body.
func DecodeBody(text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, errors.New("give body or body_base64, not both")
	case text != nil:
		return []byte(*text), nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("body_base64 is not valid standard base64: %w", err)
		}
		return b, nil
	}
	return []byte{}, nil
}

// ClusterMember is one member of a replicated cluster (GET /v1/cluster/members).
type ClusterMember struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"`
	URL  string `json:"url"`
	// Learner: it receives the log but does not vote yet (it is catching up).
	Learner bool `json:"learner,omitempty"`
}

// ClusterMembers answers the members' API.
type ClusterMembers struct {
	Members []ClusterMember `json:"members"`
}
