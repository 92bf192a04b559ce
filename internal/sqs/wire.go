package sqs

// Shapes of the SQS API, as the SQS service model names their members. The json tags
// are the JSON protocol's (awsJson1_0); the query protocol (query.go) uses the same
// names except where a query tag gives another: a list or map member is flattened
// under its query name ("Attribute.1.Name", "QueueUrl" repeated), a map's tag naming
// its key and value members too ("Attribute,Name,Value"), and "@" standing for the
// action ("@RequestEntry": SendMessageBatchRequestEntry, …). Optional request members
// are pointers so that "absent" and "zero" differ. Unknown members are ignored, as
// newer SDKs may send members this server does not know.

type wireAttrValue struct {
	DataType         string   `json:"DataType"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty" query:"StringListValue"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty" query:"BinaryListValue"`
}

type createQueueIn struct {
	QueueName  *string           `json:"QueueName"`
	Attributes map[string]string `json:"Attributes" query:"Attribute,Name,Value"`
	Tags       map[string]string `json:"tags" query:"Tag,Key,Value"`
}

type queueURLOut struct {
	QueueURL string `json:"QueueUrl"`
}

type getQueueURLIn struct {
	QueueName              *string `json:"QueueName"`
	QueueOwnerAWSAccountID *string `json:"QueueOwnerAWSAccountId"`
}

type listQueuesIn struct {
	QueueNamePrefix *string `json:"QueueNamePrefix"`
	NextToken       *string `json:"NextToken"`
	MaxResults      *int64  `json:"MaxResults"`
}

type listQueuesOut struct {
	QueueUrls []string `json:"QueueUrls,omitempty" query:"QueueUrl"`
	NextToken string   `json:"NextToken,omitempty"`
}

type queueIn struct {
	QueueURL *string `json:"QueueUrl"`
}

type getQueueAttributesIn struct {
	QueueURL       *string  `json:"QueueUrl"`
	AttributeNames []string `json:"AttributeNames" query:"AttributeName"`
}

type attributesOut struct {
	Attributes map[string]string `json:"Attributes,omitempty" query:"Attribute,Name,Value"`
}

type setQueueAttributesIn struct {
	QueueURL   *string           `json:"QueueUrl"`
	Attributes map[string]string `json:"Attributes" query:"Attribute,Name,Value"`
}

type sendEntry struct {
	ID                      *string                  `json:"Id"`
	MessageBody             *string                  `json:"MessageBody"`
	DelaySeconds            *int64                   `json:"DelaySeconds"`
	MessageAttributes       map[string]wireAttrValue `json:"MessageAttributes" query:"MessageAttribute,Name,Value"`
	MessageSystemAttributes map[string]wireAttrValue `json:"MessageSystemAttributes" query:"MessageSystemAttribute,Name,Value"`
	MessageDeduplicationID  *string                  `json:"MessageDeduplicationId"`
	MessageGroupID          *string                  `json:"MessageGroupId"`
}

type sendMessageIn struct {
	QueueURL *string `json:"QueueUrl"`
	sendEntry
}

type sendMessageOut struct {
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	MessageID                    string `json:"MessageId"`
	SequenceNumber               string `json:"SequenceNumber,omitempty"`
}

type sendMessageBatchIn struct {
	QueueURL *string     `json:"QueueUrl"`
	Entries  []sendEntry `json:"Entries" query:"@RequestEntry"`
}

type sendBatchResultEntry struct {
	ID string `json:"Id"`
	sendMessageOut
}

type batchError struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

type sendMessageBatchOut struct {
	Successful []sendBatchResultEntry `json:"Successful" query:"@ResultEntry"`
	Failed     []batchError           `json:"Failed" query:"BatchResultErrorEntry"`
}

type receiveMessageIn struct {
	QueueURL                    *string  `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames" query:"AttributeName"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames" query:"MessageSystemAttributeName"`
	MessageAttributeNames       []string `json:"MessageAttributeNames" query:"MessageAttributeName"`
	MaxNumberOfMessages         *int64   `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int64   `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int64   `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptID     *string  `json:"ReceiveRequestAttemptId"`
}

type wireMessage struct {
	MessageID              string                   `json:"MessageId"`
	ReceiptHandle          string                   `json:"ReceiptHandle"`
	MD5OfBody              string                   `json:"MD5OfBody"`
	Body                   string                   `json:"Body"`
	Attributes             map[string]string        `json:"Attributes,omitempty" query:"Attribute,Name,Value"`
	MD5OfMessageAttributes string                   `json:"MD5OfMessageAttributes,omitempty"`
	MessageAttributes      map[string]wireAttrValue `json:"MessageAttributes,omitempty" query:"MessageAttribute,Name,Value"`
}

type receiveMessageOut struct {
	Messages []wireMessage `json:"Messages,omitempty" query:"Message"`
}

type deleteMessageIn struct {
	QueueURL      *string `json:"QueueUrl"`
	ReceiptHandle *string `json:"ReceiptHandle"`
}

type receiptEntry struct {
	ID                *string `json:"Id"`
	ReceiptHandle     *string `json:"ReceiptHandle"`
	VisibilityTimeout *int64  `json:"VisibilityTimeout"`
}

type receiptBatchIn struct {
	QueueURL *string        `json:"QueueUrl"`
	Entries  []receiptEntry `json:"Entries" query:"@RequestEntry"`
}

type idEntry struct {
	ID string `json:"Id"`
}

type receiptBatchOut struct {
	Successful []idEntry    `json:"Successful" query:"@ResultEntry"`
	Failed     []batchError `json:"Failed" query:"BatchResultErrorEntry"`
}

type changeVisibilityIn struct {
	QueueURL          *string `json:"QueueUrl"`
	ReceiptHandle     *string `json:"ReceiptHandle"`
	VisibilityTimeout *int64  `json:"VisibilityTimeout"`
}

type tagQueueIn struct {
	QueueURL *string           `json:"QueueUrl"`
	Tags     map[string]string `json:"Tags" query:"Tag,Key,Value"`
}

type untagQueueIn struct {
	QueueURL *string  `json:"QueueUrl"`
	TagKeys  []string `json:"TagKeys" query:"TagKey"`
}

type tagsOut struct {
	Tags map[string]string `json:"Tags,omitempty" query:"Tag,Key,Value"`
}

type listDLQSourcesIn struct {
	QueueURL   *string `json:"QueueUrl"`
	NextToken  *string `json:"NextToken"`
	MaxResults *int64  `json:"MaxResults"`
}

type listDLQSourcesOut struct {
	QueueUrls []string `json:"queueUrls" query:"QueueUrl"`
	NextToken string   `json:"NextToken,omitempty"`
}

type startMoveIn struct {
	SourceARN                    *string `json:"SourceArn"`
	DestinationARN               *string `json:"DestinationArn"`
	MaxNumberOfMessagesPerSecond *int64  `json:"MaxNumberOfMessagesPerSecond"`
}

type startMoveOut struct {
	TaskHandle string `json:"TaskHandle"`
}

type listMovesIn struct {
	SourceARN  *string `json:"SourceArn"`
	MaxResults *int64  `json:"MaxResults"`
}

type moveTask struct {
	TaskHandle                        string `json:"TaskHandle,omitempty"`
	Status                            string `json:"Status"`
	SourceArn                         string `json:"SourceArn"`
	DestinationArn                    string `json:"DestinationArn,omitempty"`
	MaxNumberOfMessagesPerSecond      *int64 `json:"MaxNumberOfMessagesPerSecond,omitempty"`
	ApproximateNumberOfMessagesMoved  int64  `json:"ApproximateNumberOfMessagesMoved"`
	ApproximateNumberOfMessagesToMove *int64 `json:"ApproximateNumberOfMessagesToMove,omitempty"`
	FailureReason                     string `json:"FailureReason,omitempty"`
	StartedTimestamp                  int64  `json:"StartedTimestamp"`
}

type listMovesOut struct {
	Results []moveTask `json:"Results" query:"ListMessageMoveTasksResultEntry"`
}

type cancelMoveIn struct {
	TaskHandle *string `json:"TaskHandle"`
}

type cancelMoveOut struct {
	ApproximateNumberOfMessagesMoved int64 `json:"ApproximateNumberOfMessagesMoved"`
}

type empty struct{}
