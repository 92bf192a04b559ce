package sqs

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/okiba/okiba/internal/errcode"
)

// kind is one SQS error as the wire shows it, from the one table of package
// internal/errcode. In the JSON protocol the body carries
// {"__type": "com.amazonaws.sqs#<Code>", "message": …} and the header
// x-amzn-query-error carries "<Query>;Sender" (or ";Receiver"): the SDKs build their
// typed errors from the first and, in query-compatible mode, take the error code from
// the second. In the query protocol <Error><Code> is Query (query.go).
type kind = errcode.SQSError

// sqsKind is the kind whose JSON code is code; a code missing from the table is a bug,
// caught when the package loads.
func sqsKind(code string) kind {
	k, ok := errcode.SQSErrorOf(code)
	if !ok {
		panic("sqs: internal/errcode has no SQS error " + code)
	}
	return k
}

// The errors the front answers with. The modelled ones are those the SDKs turn into
// typed errors (types.QueueDoesNotExist, …); the others arrive as generic API errors
// whose code is the one given here, as with SQS.
var (
	kQueueDoesNotExist      = sqsKind("QueueDoesNotExist")
	kQueueNameExists        = sqsKind("QueueNameExists")
	kReceiptHandleIsInvalid = sqsKind("ReceiptHandleIsInvalid")
	kMessageNotInflight     = sqsKind("MessageNotInflight")
	kPurgeInProgress        = sqsKind("PurgeQueueInProgress")
	kRequestThrottled       = sqsKind("RequestThrottled")
	kTooManyEntries         = sqsKind("TooManyEntriesInBatchRequest")
	kIdsNotDistinct         = sqsKind("BatchEntryIdsNotDistinct")
	kEmptyBatch             = sqsKind("EmptyBatchRequest")
	kInvalidBatchEntryID    = sqsKind("InvalidBatchEntryId")
	kBatchTooLong           = sqsKind("BatchRequestTooLong")
	kInvalidAttributeName   = sqsKind("InvalidAttributeName")
	kInvalidAttributeValue  = sqsKind("InvalidAttributeValue")
	kInvalidMessageContents = sqsKind("InvalidMessageContents")
	kUnsupportedOperation   = sqsKind("UnsupportedOperation")
	kResourceNotFound       = sqsKind("ResourceNotFoundException")
	kInvalidAddress         = sqsKind("InvalidAddress")
	kOverLimit              = sqsKind("OverLimit")

	kInvalidParameterValue = sqsKind("InvalidParameterValue")
	kMissingParameter      = sqsKind("MissingParameter")
	kSerialization         = sqsKind("SerializationException")
	kUnknownOperation      = sqsKind("UnknownOperationException")
	kNoSuchVersion         = sqsKind("NoSuchVersion")
	kRequestTooLarge       = sqsKind("RequestEntityTooLarge")
	kMissingAuth           = sqsKind("MissingAuthenticationToken")
	kIncompleteSignature   = sqsKind("IncompleteSignature")
	kInvalidClientTokenID  = sqsKind("InvalidClientTokenId")
	kSignatureDoesNotMatch = sqsKind("SignatureDoesNotMatch")
	kAccessDenied          = sqsKind("AccessDenied")
	kRequestExpired        = sqsKind("RequestExpired")
	kServiceUnavailable    = sqsKind("ServiceUnavailable")
	kInternal              = sqsKind("InternalError")
	kMethodNotAllowed      = sqsKind("InvalidHttpRequest")
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

// fault is who is to blame, as both protocols name it.
func (e *apiError) fault() string {
	if e.Receiver {
		return "Receiver"
	}
	return "Sender"
}

func (e *apiError) queryHeader() string {
	return e.Query + ";" + e.fault()
}

// errorOf maps a broker or queue error to its SQS error (internal/errcode has the
// table); an error that already is an SQS answer stays itself. An internal error is
// logged and its details kept from the client. q names the queue for messages.
func (f *Front) errorOf(err error, q string) *apiError {
	return f.errorAbout(err, "", q, "")
}

// errorAbout is errorOf for an error of action about receipt handle receipt: the table
// words some errors per action, with the handle.
func (f *Front) errorAbout(err error, action, q, receipt string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	row := errcode.Of(err).ForSQSAction(action)
	k, known := errcode.SQSErrorOf(row.SQS)
	if row.Internal() || !known {
		f.opts.Logger.Error("sqs: internal error", "error", err)
		return newErr(kInternal, "%s", errcode.InternalMessage)
	}
	return &apiError{kind: k, Message: row.SQSTextOf(err, q, receipt)}
}

// statusOK is a convenience for handlers that answer 200.
const statusOK = http.StatusOK
