package errcode

import (
	"context"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/crossorigin"
	"github.com/okiba/okiba/internal/filter"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// table maps every exported error of packages queue, topic, broker, receipt and
// internal/crossorigin, and the context errors a request may end with, to the wire. Of
// takes the first row that matches, so a typed error precedes the sentinel it wraps
// wherever the two are answered differently (a LimitError for max_in_flight before
// ErrLimit). errcode_test.go checks that nothing exported is missing and that every row
// wins for its own errors.
var table = []Row{
	// Requests that name or configure something wrongly.
	{match: errs(as[*queue.NameError]()), Code: api.CodeInvalidName, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.CycleError]()), Code: api.CodeDLQCycle, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.ConfigError]()), Code: api.CodeInvalidConfig, SQS: "InvalidAttributeValue"},
	{match: errs(as[*queue.ParamError](), is(queue.ErrInvalidParameter)), Code: api.CodeInvalidRequest, SQS: "InvalidParameterValue"},

	// Backpressure and limits: retryable. The SDKs retry RequestThrottled.
	{match: errs(as[*queue.FullError](), is(queue.ErrQueueFull)), Code: api.CodeQueueFull, RetryAfter: time.Second, SQS: "RequestThrottled"},
	// Idempotent sends (a producer's request numbered once).
	{match: errs(is(queue.ErrSequenceTooOld)), Code: api.CodeSequenceTooOld, SQS: "InvalidParameterValue"},
	{match: errs(is(queue.ErrSequenceReused)), Code: api.CodeSequenceReused, SQS: "InvalidParameterValue"},
	{match: errs(is(queue.ErrNotRepeated)), Code: api.CodeNotRepeated, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.LimitError](func(e *queue.LimitError) bool { return e.Limit == "max_in_flight" })),
		Code: api.CodeTooManyInFlight, RetryAfter: time.Second, SQS: "OverLimit"},
	{match: errs(as[*queue.LimitError](func(e *queue.LimitError) bool { return e.Limit == "max_topics" })),
		Code: api.CodeTooManyTopics, SQS: "OverLimit"},
	{match: errs(as[*queue.LimitError](func(e *queue.LimitError) bool { return e.Limit == "max_groups" })),
		Code: api.CodeTooManyGroups, SQS: "OverLimit"},
	{match: errs(as[*queue.LimitError](func(e *queue.LimitError) bool { return e.Limit == "max_members" })),
		Code: api.CodeTooManyMembers, SQS: "OverLimit"},
	{match: errs(as[*queue.LimitError](func(e *queue.LimitError) bool { return e.Limit == "max_subscriptions" })),
		Code: api.CodeTooManySubscriptions, SQS: "OverLimit"},
	// Every other limit is max_queues, the only other there is.
	{match: errs(as[*queue.LimitError](), is(queue.ErrLimit)), Code: api.CodeTooManyQueues, SQS: "OverLimit"},
	{match: errs(as[*topic.FullError](), is(topic.ErrTopicFull)), Code: api.CodeTopicFull, RetryAfter: time.Second, SQS: "RequestThrottled"},
	{match: errs(is(broker.ErrDiskFull)), Code: api.CodeDiskFull, RetryAfter: 10 * time.Second, SQS: "RequestThrottled"},

	// Things that are not there, or no longer.
	{match: errs(is(queue.ErrQueueNotFound)), Code: api.CodeQueueNotFound, SQS: "QueueDoesNotExist",
		SQSMessage: "The specified queue {queue} does not exist."},
	{match: errs(is(topic.ErrTopicNotFound)), Code: api.CodeTopicNotFound, SQS: "ResourceNotFoundException"},
	{match: errs(is(topic.ErrGroupNotFound)), Code: api.CodeGroupNotFound, SQS: "ResourceNotFoundException"},
	{match: errs(is(topic.ErrSubscriptionNotFound)), Code: api.CodeSubscriptionNotFound, SQS: "ResourceNotFoundException"},
	{match: errs(as[*topic.InUseError](), is(topic.ErrTopicInUse)), Code: api.CodeTopicInUse, SQS: "InvalidParameterValue"},
	{match: errs(as[*filter.Error]()), Code: api.CodeInvalidFilter, SQS: "InvalidParameterValue"},
	{match: errs(is(topic.ErrGroupDeleted)), Code: api.CodeGroupDeleted, SQS: "ResourceNotFoundException"},
	{match: errs(as[*topic.MemberError](), is(topic.ErrMemberUnknown)), Code: api.CodeMemberUnknown, SQS: "InvalidParameterValue"},
	{match: errs(as[*topic.EpochError](), is(topic.ErrEpochStale)), Code: api.CodeEpochStale, SQS: "InvalidParameterValue"},
	{match: errs(as[*topic.RegressError](), is(topic.ErrOffsetRegressed)), Code: api.CodeOffsetRegressed, SQS: "InvalidParameterValue"},
	{match: errs(as[*topic.OffsetError](), is(topic.ErrOffsetOutOfRange), is(broker.ErrRecordsGone)), Code: api.CodeOffsetOutOfRange, SQS: "InvalidParameterValue"},
	{match: errs(as[*topic.PartitionError](), is(topic.ErrPartitionOutOfRange)), Code: api.CodePartitionOutOfRange, SQS: "InvalidParameterValue"},
	{match: errs(as[*topic.TooLargeError](), is(topic.ErrRecordTooLarge)), Code: api.CodeRecordTooLarge, SQS: "InvalidParameterValue"},
	// A lease that is over. SQS answers a FIFO delete with its handle as an invalid
	// parameter (a standard queue's delete succeeds: the SQS front never asks here), and
	// a visibility change of a message deleted or received again in two other ways (a
	// lease that merely ran out is changed with no effect: the front answers that itself).
	// A receipt whose message has left the queue: also stale, so SQS answers it alike.
	{match: errs(is(queue.ErrAlreadySettled)), Code: api.CodeAlreadySettled, SQS: "InvalidParameterValue",
		SQSMessage: "Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
		SQSActions: map[string]SQSAnswer{
			"ChangeMessageVisibility":      {"InvalidParameterValue", "Value {receipt} for parameter ReceiptHandle is invalid. Reason: " + visibilityGone + "."},
			"ChangeMessageVisibilityBatch": {"ReceiptHandleIsInvalid", visibilityGone},
		}},
	{match: errs(is(queue.ErrReceiptStale)), Code: api.CodeReceiptStale, SQS: "InvalidParameterValue",
		SQSMessage: "Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
		SQSActions: map[string]SQSAnswer{
			"ChangeMessageVisibility":      {"InvalidParameterValue", "Value {receipt} for parameter ReceiptHandle is invalid. Reason: " + visibilityGone + "."},
			"ChangeMessageVisibilityBatch": {"ReceiptHandleIsInvalid", visibilityGone},
		}},
	// Messages that cannot be taken as they are.
	{match: errs(as[*queue.TooLargeError](), is(queue.ErrMessageTooLarge)), Code: api.CodeMessageTooLarge, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.DelayError](), is(queue.ErrInvalidDelay)), Code: api.CodeInvalidDelay, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.InvalidError](), is(queue.ErrInvalidMessage)), Code: api.CodeInvalidMessage, SQS: "InvalidParameterValue"},
	// A redrive of dead letters whose body this node cannot read (reason corrupt); SQS's
	// move tasks name no messages, so only their reason filter could meet it.
	{match: errs(is(queue.ErrMessageCorrupt)), Code: api.CodeMessageCorrupt, SQS: "InvalidParameterValue"},
	// A fetch by id of a message that is not deferred; SQS has no deferral to meet it.
	{match: errs(is(queue.ErrNotDeferred)), Code: api.CodeNotDeferred, SQS: "InvalidParameterValue"},
	// A release of a group that is not parked; SQS has no parked groups to meet it.
	{match: errs(is(queue.ErrNotParked)), Code: api.CodeNotParked, SQS: "InvalidParameterValue"},

	// broker.ErrInvalidReceipt is receipt.ErrInvalid.
	{match: errs(is(broker.ErrInvalidReceipt)), Code: api.CodeInvalidReceipt, SQS: "ReceiptHandleIsInvalid",
		SQSMessage: "The input receipt handle is invalid: {error}"},
	{match: errs(is(queue.ErrTaskNotFound)), Code: api.CodeTaskNotFound, SQS: "ResourceNotFoundException"},
	{match: errs(is(queue.ErrTaskFinished)), Code: api.CodeTaskFinished, SQS: "ResourceNotFoundException"},

	// Errors of operations the SQS front never reports (it deletes queues with force,
	// keeps to itself whether a message it looks up by id is gone, and dead-letters
	// nothing by hand): should one reach it, it answers in the nearest of SQS's words.
	{match: errs(as[*queue.InUseError](), is(queue.ErrQueueInUse)), Code: api.CodeQueueInUse, SQS: "InvalidParameterValue"},
	{match: errs(as[*queue.ExistsError]()), Code: api.CodeQueueExists, SQS: "QueueNameExists"},
	{match: errs(is(queue.ErrMessageNotFound)), Code: api.CodeMessageNotFound, SQS: "ResourceNotFoundException"},
	{match: errs(is(queue.ErrNoDeadLetter)), Code: api.CodeNoDeadLetter, SQS: "InvalidParameterValue"},

	// The broker cannot serve: retry against a healthy or restarted one.
	{match: errs(is(broker.ErrStorageFailed)), Code: api.CodeStorageFailed, SQS: "ServiceUnavailable"},
	// A receive whose bodies could not be read (I/O errors) leased nothing: the messages
	// stay ready, and a retry may find the disk well (or the broker failed for good).
	{match: errs(is(broker.ErrReadFailed)), Code: api.CodeUnavailable, RetryAfter: time.Second, SQS: "ServiceUnavailable"},
	{match: errs(is(broker.ErrBackupRace)), Code: api.CodeUnavailable, RetryAfter: time.Second, SQS: "ServiceUnavailable"},
	// A node of a cluster that does not lead, or rebuilds after losing the lead, ran
	// nothing: the node forwards calls to the leader, and clients retry.
	{match: errs(is(broker.ErrNotLeader), is(broker.ErrRebuilding)), Code: api.CodeUnavailable, RetryAfter: time.Second, SQS: "ServiceUnavailable"},
	// A leader cut off by a partition, or deposed meanwhile, ran the command and cannot
	// know whether it commits: like a lost answer, the client retries (at least once).
	{match: errs(is(broker.ErrLeadLost)), Code: api.CodeUnavailable, RetryAfter: time.Second, SQS: "ServiceUnavailable"},
	{match: errs(is(broker.ErrClosed), is(context.Canceled), is(context.DeadlineExceeded)), Code: api.CodeUnavailable, SQS: "ServiceUnavailable",
		SQSMessage: "the server is shutting down or the request was cancelled; retry"},

	// Principals and permissions. A refusal names the permission that was missing.
	{match: errs(as[*access.DeniedError](), is(access.ErrDenied)), Code: api.CodeForbidden, SQS: "AccessDenied"},
	{match: errs(as[*access.InvalidError]()), Code: api.CodeInvalidRequest, SQS: "InvalidParameterValue"},
	{match: errs(is(access.ErrNotFound)), Code: api.CodePrincipalNotFound, SQS: "InvalidParameterValue"},
	{match: errs(is(access.ErrExists)), Code: api.CodePrincipalExists, SQS: "InvalidParameterValue"},
	{match: errs(is(access.ErrTooMany)), Code: api.CodeTooManyPrincipals, SQS: "OverLimit"},

	// A browser request from elsewhere (the SQS front answers these through Forbid).
	{match: errs(as[*crossorigin.Error](), is(crossorigin.ErrCrossOrigin), is(crossorigin.ErrHost)), Code: api.CodeForbidden, SQS: "AccessDenied"},

	// Errors of opening a data directory, which no request meets: should one reach a
	// front it is a bug, logged and answered as internal.
	{match: errs(is(broker.ErrNewerFormat), is(broker.ErrLocked), is(queue.ErrSnapshotVersion), is(topic.ErrSnapshotVersion), is(access.ErrSnapshotNewer)), Code: api.CodeInternal, SQS: "InternalError"},
}

// visibilityGone is SQS's reason for refusing a visibility change of a message that was
// deleted or received again.
const visibilityGone = "Message does not exist or is not available for visibility timeout change"
