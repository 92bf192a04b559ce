package errcode

// SQSError is one error of the SQS API as both of its protocols show it. The JSON
// protocol names it by Code ({"__type": "com.amazonaws.sqs#<Code>"}, with Query in the
// x-amzn-query-error header); the query protocol names it by Query
// (<Error><Code><Query></Code>), which is what old SDKs and hand-written clients branch
// on. The two differ for a third of the errors (QueueNameExists is QueueAlreadyExists,
// QueueDoesNotExist is AWS.SimpleQueueService.NonExistentQueue), and a client that gets
// the other protocol's code does not recognise the error. Status and both codes follow
// the SQS service model; the errors it does not model take the code SQS answers with.
type SQSError struct {
	Status int
	Code   string // the JSON protocol's code
	Query  string // the query protocol's code
	// Receiver says the fault is the server's (<Type>Receiver</Type>, "…;Receiver"),
	// not the caller's (Sender).
	Receiver bool
}

// sqsErrors is every error the SQS front answers with. A row of table names its SQS
// error by Code; TestSQSCodesAreKnown checks that each is here.
var sqsErrors = []SQSError{
	{400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", false},
	{400, "QueueNameExists", "QueueAlreadyExists", false},
	{404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", false},
	{400, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", false},
	{403, "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", false},
	{403, "RequestThrottled", "RequestThrottled", false},
	{400, "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", false},
	{400, "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", false},
	{400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", false},
	{400, "InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", false},
	{400, "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", false},
	{400, "InvalidAttributeName", "InvalidAttributeName", false},
	{400, "InvalidAttributeValue", "InvalidAttributeValue", false},
	{400, "InvalidMessageContents", "InvalidMessageContents", false},
	{400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", false},
	{404, "ResourceNotFoundException", "ResourceNotFoundException", false},
	{404, "InvalidAddress", "InvalidAddress", false},
	{403, "OverLimit", "OverLimit", false},

	{400, "InvalidParameterValue", "InvalidParameterValue", false},
	{400, "MissingParameter", "MissingParameter", false},
	// A body the protocol cannot read: malformed JSON, or a malformed form (a parameter
	// given twice, a list numbered with gaps).
	{400, "SerializationException", "MalformedQueryString", false},
	{400, "UnknownOperationException", "InvalidAction", false},
	// A query request's Version that names no API okiba serves.
	{400, "NoSuchVersion", "NoSuchVersion", false},
	{413, "RequestEntityTooLarge", "RequestEntityTooLarge", false},
	{403, "MissingAuthenticationToken", "MissingAuthenticationToken", false},
	{400, "IncompleteSignature", "IncompleteSignature", false},
	{403, "InvalidClientTokenId", "InvalidClientTokenId", false},
	{403, "SignatureDoesNotMatch", "SignatureDoesNotMatch", false},
	{403, "AccessDenied", "AccessDenied", false},
	{400, "RequestExpired", "RequestExpired", false},
	{503, "ServiceUnavailable", "ServiceUnavailable", true},
	{500, "InternalError", "InternalError", true},
	{405, "InvalidHttpRequest", "InvalidHttpRequest", false},
}

// SQSErrorOf returns the SQS error whose (JSON protocol) code is code.
func SQSErrorOf(code string) (SQSError, bool) {
	for _, e := range sqsErrors {
		if e.Code == code {
			return e, true
		}
	}
	return SQSError{}, false
}

// SQSErrors returns every SQS error the front answers with.
func SQSErrors() []SQSError { return append([]SQSError(nil), sqsErrors...) }
