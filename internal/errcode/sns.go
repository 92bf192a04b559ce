package errcode

import "github.com/okiba/okiba/api"

// SNSError is one error of the SNS API as its query protocol shows it:
// <ErrorResponse><Error><Type>Sender|Receiver</Type><Code>Code</Code>…. Codes and
// statuses follow the SNS service model, which the SDKs build their typed errors from
// (NotFound is types.NotFoundException, InvalidParameter types.InvalidParameterException).
type SNSError struct {
	Status   int
	Code     string
	Receiver bool // the fault is the server's
}

// snsErrors is every error the SNS front answers with.
var snsErrors = []SNSError{
	{400, "InvalidParameter", false},
	{400, "ParameterValueInvalid", false}, // InvalidParameterValueException: message attributes
	{404, "NotFound", false},
	{404, "ResourceNotFound", false}, // tags of a resource that is not there
	{403, "AuthorizationError", false},
	{403, "TopicLimitExceeded", false},
	{403, "SubscriptionLimitExceeded", false},
	{400, "TagLimitExceeded", false},
	{400, "TooManyEntriesInBatchRequest", false},
	{400, "BatchEntryIdsNotDistinct", false},
	{400, "EmptyBatchRequest", false},
	{400, "InvalidBatchEntryId", false},
	{400, "BatchRequestTooLong", false},
	{400, "ValidationException", false},
	{400, "InvalidAction", false},
	{400, "MalformedQueryString", false},
	{400, "MissingParameter", false},
	{429, "Throttled", false},
	{503, "ServiceUnavailable", true},
	{500, "InternalError", true},
}

// SNSErrorOf returns the SNS error whose code is code.
func SNSErrorOf(code string) (SNSError, bool) {
	for _, e := range snsErrors {
		if e.Code == code {
			return e, true
		}
	}
	return SNSError{}, false
}

// snsOfNative is the SNS code of each native code a row of table names: the SNS front
// answers a domain error with the SNS error of its row's native code, so that it keeps
// no mapping of its own. TestSNSCodesCoverTable checks that every row's code is here.
var snsOfNative = map[string]string{
	api.CodeInvalidRequest: "InvalidParameter", api.CodeInvalidName: "InvalidParameter",
	api.CodeInvalidConfig: "InvalidParameter", api.CodeInvalidMessage: "InvalidParameter",
	api.CodeInvalidDelay: "InvalidParameter", api.CodeInvalidReceipt: "InvalidParameter",
	api.CodeMessageTooLarge: "InvalidParameter", api.CodeRecordTooLarge: "InvalidParameter",
	api.CodeDLQCycle: "InvalidParameter", api.CodeInvalidFilter: "InvalidParameter",
	api.CodeTopicInUse: "InvalidParameter", api.CodeQueueInUse: "InvalidParameter", api.CodeQueueExists: "InvalidParameter",
	api.CodeMemberUnknown: "InvalidParameter", api.CodeEpochStale: "InvalidParameter",
	api.CodeOffsetRegressed: "InvalidParameter", api.CodeOffsetOutOfRange: "InvalidParameter",
	api.CodePartitionOutOfRange: "InvalidParameter", api.CodeMessageCorrupt: "InvalidParameter", api.CodeNotDeferred: "InvalidParameter", api.CodeNotParked: "InvalidParameter",
	api.CodeReceiptStale: "InvalidParameter", api.CodeAlreadySettled: "InvalidParameter", api.CodeNoDeadLetter: "InvalidParameter",
	api.CodePrincipalNotFound: "InvalidParameter", api.CodePrincipalExists: "InvalidParameter",
	api.CodeQueueNotFound: "NotFound", api.CodeTopicNotFound: "NotFound",
	api.CodeSubscriptionNotFound: "NotFound", api.CodeGroupNotFound: "NotFound",
	api.CodeGroupDeleted: "NotFound", api.CodeMessageNotFound: "NotFound",
	api.CodeTaskNotFound: "NotFound", api.CodeTaskFinished: "NotFound",
	api.CodeTooManyTopics: "TopicLimitExceeded", api.CodeTooManySubscriptions: "SubscriptionLimitExceeded",
	api.CodeTooManyQueues: "InvalidParameter", api.CodeTooManyGroups: "InvalidParameter",
	api.CodeTooManyMembers: "InvalidParameter", api.CodeTooManyPrincipals: "InvalidParameter",
	api.CodeSequenceTooOld: "InvalidParameter", api.CodeSequenceReused: "InvalidParameter", api.CodeNotRepeated: "InvalidParameter",
	api.CodeTooManyInFlight: "Throttled", api.CodeQueueFull: "Throttled",
	api.CodeTopicFull: "Throttled", api.CodeDiskFull: "Throttled",
	api.CodeForbidden:     "AuthorizationError",
	api.CodeStorageFailed: "ServiceUnavailable", api.CodeUnavailable: "ServiceUnavailable",
	api.CodeInternal: "InternalError",
}

// SNSCode is the SNS error code of the row's errors.
func (r Row) SNSCode() string {
	if c, ok := snsOfNative[r.Code]; ok {
		return c
	}
	return "InternalError"
}
