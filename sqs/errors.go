package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

// kind is one SQS error as the wire shows it. The JSON body carries
// {"__type": "com.amazonaws.sqs#<Code>", "message": …} and the header
// x-amzn-query-error carries "<Query>;Sender" (or ";Receiver"): the SDKs build their
// typed errors from the first and, in query-compatible mode, take the error code from
// the second. Status and Query follow the SQS service model.
type kind struct {
	Status int
	Code   string
	Query  string
	Server bool // the fault is the server's (Receiver), not the caller's (Sender)
}

// The errors the front answers with. The modelled ones are those the SDKs turn into
// typed errors (types.QueueDoesNotExist, …); the others arrive as generic API errors
// whose code is the one given here, as with SQS.
var (
	kQueueDoesNotExist      = kind{400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", false}
	kQueueNameExists        = kind{400, "QueueNameExists", "QueueAlreadyExists", false}
	kReceiptHandleIsInvalid = kind{404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", false}
	kMessageNotInflight     = kind{400, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", false}
	kPurgeInProgress        = kind{403, "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", false}
	kRequestThrottled       = kind{403, "RequestThrottled", "RequestThrottled", false}
	kTooManyEntries         = kind{400, "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", false}
	kIdsNotDistinct         = kind{400, "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", false}
	kEmptyBatch             = kind{400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", false}
	kInvalidBatchEntryID    = kind{400, "InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", false}
	kBatchTooLong           = kind{400, "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", false}
	kInvalidAttributeName   = kind{400, "InvalidAttributeName", "InvalidAttributeName", false}
	kInvalidAttributeValue  = kind{400, "InvalidAttributeValue", "InvalidAttributeValue", false}
	kInvalidMessageContents = kind{400, "InvalidMessageContents", "InvalidMessageContents", false}
	kUnsupportedOperation   = kind{400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", false}
	kResourceNotFound       = kind{404, "ResourceNotFoundException", "ResourceNotFoundException", false}
	kInvalidAddress         = kind{404, "InvalidAddress", "InvalidAddress", false}
	kOverLimit              = kind{403, "OverLimit", "OverLimit", false}

	kInvalidParameterValue = kind{400, "InvalidParameterValue", "InvalidParameterValue", false}
	kMissingParameter      = kind{400, "MissingParameter", "MissingParameter", false}
	kSerialization         = kind{400, "SerializationException", "MalformedQueryString", false}
	kUnknownOperation      = kind{400, "UnknownOperationException", "InvalidAction", false}
	kRequestTooLarge       = kind{413, "RequestEntityTooLarge", "RequestEntityTooLarge", false}
	kMissingAuth           = kind{403, "MissingAuthenticationToken", "MissingAuthenticationToken", false}
	kIncompleteSignature   = kind{400, "IncompleteSignature", "IncompleteSignature", false}
	kInvalidClientTokenID  = kind{403, "InvalidClientTokenId", "InvalidClientTokenId", false}
	kSignatureDoesNotMatch = kind{403, "SignatureDoesNotMatch", "SignatureDoesNotMatch", false}
	kAccessDenied          = kind{403, "AccessDenied", "AccessDenied", false}
	kRequestExpired        = kind{400, "RequestExpired", "RequestExpired", false}
	kServiceUnavailable    = kind{503, "ServiceUnavailable", "ServiceUnavailable", true}
	kInternal              = kind{500, "InternalError", "InternalError", true}
	kMethodNotAllowed      = kind{405, "InvalidHttpRequest", "InvalidHttpRequest", false}
)

// apiError is an error answer: its kind and a message for the user.
type apiError struct {
	kind
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newErr(k kind, format string, args ...any) *apiError {
	return &apiError{kind: k, Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of an error response.
type errorBody struct {
	Type    string `json:"__type"`
	Message string `json:"message"`
}

func (e *apiError) body() errorBody {
	return errorBody{Type: "com.amazonaws.sqs#" + e.Code, Message: e.Message}
}

func (e *apiError) queryHeader() string {
	fault := "Sender"
	if e.Server {
		fault = "Receiver"
	}
	return e.Query + ";" + fault
}

// errorOf maps a broker or queue error to its SQS error. Unknown errors become
// InternalError (and are logged by the caller). q names the queue for messages.
func (f *Front) errorOf(err error, q string) *apiError {
	var (
		ae *apiError
		ne *queue.NameError
		ce *queue.ConfigError
		pe *queue.ParamError
		cy *queue.CycleError
		fe *queue.FullError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, queue.ErrQueueNotFound):
		return newErr(kQueueDoesNotExist, "The specified queue %s does not exist.", q)
	case errors.As(err, &fe), errors.Is(err, broker.ErrDiskFull):
		return newErr(kRequestThrottled, "%s", err.Error()) // the SDKs retry it
	case errors.Is(err, queue.ErrLimit):
		return newErr(kOverLimit, "%s", err.Error())
	case errors.As(err, &ne):
		return newErr(kInvalidParameterValue, "%s", ne.Error())
	case errors.As(err, &cy):
		return newErr(kInvalidParameterValue, "%s", cy.Error())
	case errors.As(err, &ce):
		return newErr(kInvalidAttributeValue, "%s", ce.Error())
	case errors.As(err, &pe):
		return newErr(kInvalidParameterValue, "%s", pe.Error())
	case errors.Is(err, queue.ErrMessageTooLarge), errors.Is(err, queue.ErrInvalidMessage), errors.Is(err, queue.ErrInvalidDelay):
		return newErr(kInvalidParameterValue, "%s", err.Error())
	case errors.Is(err, queue.ErrReceiptStale):
		return newErr(kReceiptHandleIsInvalid, "The receipt handle has expired.")
	case errors.Is(err, broker.ErrInvalidReceipt):
		return newErr(kReceiptHandleIsInvalid, "The input receipt handle is invalid: %s", err.Error())
	case errors.Is(err, queue.ErrTaskNotFound), errors.Is(err, queue.ErrTaskFinished):
		return newErr(kResourceNotFound, "%s", err.Error())
	case errors.Is(err, broker.ErrStorageFailed):
		return newErr(kServiceUnavailable, "%s", err.Error())
	case errors.Is(err, broker.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newErr(kServiceUnavailable, "the server is shutting down or the request was cancelled; retry")
	}
	f.opts.Logger.Error("sqs: internal error", "error", err)
	return newErr(kInternal, "internal error; the server log has the details")
}

// statusOK is a convenience for handlers that answer 200.
const statusOK = http.StatusOK
