package sqs

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/okiba/okiba/internal/errcode"
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

// kinds lists every error the front answers with, so that the table of package
// internal/errcode, which names SQS errors by their code, can be read here.
var kinds = []kind{
	kQueueDoesNotExist, kQueueNameExists, kReceiptHandleIsInvalid, kMessageNotInflight,
	kPurgeInProgress, kRequestThrottled, kTooManyEntries, kIdsNotDistinct, kEmptyBatch,
	kInvalidBatchEntryID, kBatchTooLong, kInvalidAttributeName, kInvalidAttributeValue,
	kInvalidMessageContents, kUnsupportedOperation, kResourceNotFound, kInvalidAddress,
	kOverLimit, kInvalidParameterValue, kMissingParameter, kSerialization, kUnknownOperation,
	kRequestTooLarge, kMissingAuth, kIncompleteSignature, kInvalidClientTokenID,
	kSignatureDoesNotMatch, kAccessDenied, kRequestExpired, kServiceUnavailable, kInternal,
	kMethodNotAllowed,
}

// kindOf returns the kind whose code is code.
func kindOf(code string) (kind, bool) {
	for _, k := range kinds {
		if k.Code == code {
			return k, true
		}
	}
	return kind{}, false
}

// errorOf maps a broker or queue error to its SQS error (internal/errcode has the
// table); an error that already is an SQS answer stays itself. An internal error is
// logged and its details kept from the client. q names the queue for messages.
func (f *Front) errorOf(err error, q string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	row := errcode.Of(err)
	k, known := kindOf(row.SQS)
	if row.Internal() || !known {
		f.opts.Logger.Error("sqs: internal error", "error", err)
		return newErr(kInternal, "%s", errcode.InternalMessage)
	}
	return &apiError{kind: k, Message: row.SQSText(err, q)}
}

// statusOK is a convenience for handlers that answer 200.
const statusOK = http.StatusOK
