package sqs

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func mustForm(t *testing.T, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDecodeForm: the flattened members of every shape decode into the structs the JSON
// body decodes into.
func TestDecodeForm(t *testing.T) {
	t.Parallel()
	var batch sendMessageBatchIn
	e := decodeForm(mustForm(t, "QueueUrl=q"+
		"&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one&SendMessageBatchRequestEntry.1.DelaySeconds=5"+
		"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=s&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String"+
		"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=v%26w"+
		"&SendMessageBatchRequestEntry.1.MessageAttribute.2.Name=b&SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.DataType=Binary"+
		"&SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.BinaryValue=AAH%2B%2Fw%3D%3D"+
		"&SendMessageBatchRequestEntry.1.MessageSystemAttribute.1.Name=AWSTraceHeader"+
		"&SendMessageBatchRequestEntry.1.MessageSystemAttribute.1.Value.DataType=String"+
		"&SendMessageBatchRequestEntry.1.MessageSystemAttribute.1.Value.StringValue=Root%3D1"+
		"&SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=two"+
		"&SendMessageBatchRequestEntry.2.MessageGroupId=g&SendMessageBatchRequestEntry.2.MessageDeduplicationId=d"+
		"&Unknown=ignored&SendMessageBatchRequestEntry.2.Unknown=ignored"), "SendMessageBatch", &batch)
	if e != nil {
		t.Fatal(e)
	}
	want := sendMessageBatchIn{QueueURL: ptr("q"), Entries: []sendEntry{
		{ID: ptr("a"), MessageBody: ptr("one"), DelaySeconds: ptr(int64(5)),
			MessageAttributes: map[string]wireAttrValue{
				"s": {DataType: "String", StringValue: ptr("v&w")},
				"b": {DataType: "Binary", BinaryValue: []byte{0, 1, 0xfe, 0xff}},
			},
			MessageSystemAttributes: map[string]wireAttrValue{"AWSTraceHeader": {DataType: "String", StringValue: ptr("Root=1")}}},
		{ID: ptr("b"), MessageBody: ptr("two"), MessageGroupID: ptr("g"), MessageDeduplicationID: ptr("d")},
	}}
	if !reflect.DeepEqual(batch, want) {
		t.Errorf("SendMessageBatch:\n got %#v\nwant %#v", batch, want)
	}

	var cq createQueueIn
	if e := decodeForm(mustForm(t, "QueueName=n&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=5&Attribute.2.Name=Policy&Attribute.2.Value="+
		"&Tag.1.Key=team&Tag.1.Value=a"), "CreateQueue", &cq); e != nil {
		t.Fatal(e)
	}
	if !reflect.DeepEqual(cq, createQueueIn{QueueName: ptr("n"), Attributes: map[string]string{"VisibilityTimeout": "5", "Policy": ""}, Tags: map[string]string{"team": "a"}}) {
		t.Errorf("CreateQueue: %#v", cq)
	}

	var rm receiveMessageIn
	if e := decodeForm(mustForm(t, "QueueUrl=q&AttributeName.1=All&AttributeName.2=SentTimestamp&MessageAttributeName.1=a.*"+
		"&MessageSystemAttributeName.1=SequenceNumber&MaxNumberOfMessages=10&WaitTimeSeconds=0"), "ReceiveMessage", &rm); e != nil {
		t.Fatal(e)
	}
	if !reflect.DeepEqual(rm, receiveMessageIn{QueueURL: ptr("q"), AttributeNames: []string{"All", "SentTimestamp"}, MessageAttributeNames: []string{"a.*"},
		MessageSystemAttributeNames: []string{"SequenceNumber"}, MaxNumberOfMessages: ptr(int64(10)), WaitTimeSeconds: ptr(int64(0))}) {
		t.Errorf("ReceiveMessage: %#v", rm)
	}

	// One struct behind two actions: the entries are named for the action.
	for _, action := range []string{"DeleteMessageBatch", "ChangeMessageVisibilityBatch"} {
		var rb receiptBatchIn
		form := mustForm(t, "QueueUrl=q&"+action+"RequestEntry.1.Id=x&"+action+"RequestEntry.1.ReceiptHandle=h&"+action+"RequestEntry.1.VisibilityTimeout=7")
		if e := decodeForm(form, action, &rb); e != nil {
			t.Fatal(e)
		}
		if len(rb.Entries) != 1 || *rb.Entries[0].ID != "x" || *rb.Entries[0].ReceiptHandle != "h" || *rb.Entries[0].VisibilityTimeout != 7 {
			t.Errorf("%s: %#v", action, rb)
		}
	}
	var ut untagQueueIn
	if e := decodeForm(mustForm(t, "QueueUrl=q&TagKey.1=a&TagKey.2=b"), "UntagQueue", &ut); e != nil || !reflect.DeepEqual(ut.TagKeys, []string{"a", "b"}) {
		t.Errorf("UntagQueue: %#v %v", ut, e)
	}
}

// TestDecodeFormRefusals: a malformed form is refused with the parameter it is about.
func TestDecodeFormRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ form, code, mention string }{
		{"AttributeName.2=All", "SerializationException", "AttributeName.2"},
		{"AttributeName.0=All", "SerializationException", "AttributeName.0"},
		{"AttributeName.01=All", "SerializationException", "AttributeName.01"},
		{"AttributeName.x=All", "SerializationException", "AttributeName.x"},
		{"AttributeName.1.x=All", "MissingParameter", "AttributeName.1"},
		{"MaxNumberOfMessages=ten", "InvalidParameterValue", "MaxNumberOfMessages"},
		{"MessageAttributeName.1=a&MessageAttributeName.3=b", "SerializationException", "MessageAttributeName"},
	} {
		var in receiveMessageIn
		e := decodeForm(mustForm(t, c.form), "ReceiveMessage", &in)
		if e == nil || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
			t.Errorf("%s: %v, want %s naming %s", c.form, e, c.code, c.mention)
		}
	}
	for _, c := range []struct{ form, code, mention string }{
		{"MessageAttribute.1.Value.DataType=String", "MissingParameter", "MessageAttribute.1.Name"},
		{"MessageAttribute.1.Name=a&MessageAttribute.2.Name=a", "InvalidParameterValue", "given twice"},
		{"MessageAttribute.1.Name=b&MessageAttribute.1.Value.DataType=Binary&MessageAttribute.1.Value.BinaryValue=!!", "InvalidParameterValue", "MessageAttribute.1.Value.BinaryValue"},
		{"DelaySeconds=1.5", "InvalidParameterValue", "DelaySeconds"},
	} {
		var in sendMessageIn
		e := decodeForm(mustForm(t, c.form), "SendMessage", &in)
		if e == nil || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
			t.Errorf("%s: %v, want %s naming %s", c.form, e, c.code, c.mention)
		}
	}
	var cq createQueueIn
	if e := decodeForm(mustForm(t, "Attribute.1.Name=DelaySeconds"), "CreateQueue", &cq); e == nil || e.Code != "MissingParameter" || !strings.Contains(e.Message, "Attribute.1.Value") {
		t.Errorf("an attribute without its value: %v", e)
	}
}

// TestQueryParams: where a query request's parameters come from.
func TestQueryParams(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/000000000000/orders?Version=2012-11-05&X-Amz-Signature=s", nil)
	form, e := queryParams(r, []byte("Action=ReceiveMessage&MaxNumberOfMessages=2"))
	if e != nil || form.Get("QueueUrl") != "/000000000000/orders" || form.Get("Action") != "ReceiveMessage" || form.Get("Version") != sqsVersion || form.Has("X-Amz-Signature") {
		t.Errorf("a receive posted to the queue's path: %v %v", form, e)
	}
	form, _ = queryParams(httptest.NewRequest(http.MethodPost, "/000000000000/orders", nil), []byte("Action=ReceiveMessage&QueueUrl=other"))
	if form.Get("QueueUrl") != "other" {
		t.Errorf("a QueueUrl parameter gives way to the path: %v", form)
	}
	if _, e := queryParams(httptest.NewRequest(http.MethodPost, "/?Action=ListQueues", nil), []byte("Action=ListQueues")); e == nil || e.Query != "MalformedQueryString" {
		t.Errorf("a parameter in the query and the body: %v", e)
	}
	if _, e := queryParams(httptest.NewRequest(http.MethodPost, "/", nil), []byte("Action=%zz")); e == nil || e.Query != "MalformedQueryString" {
		t.Errorf("a malformed body: %v", e)
	}
	// A GET's body is not its parameters.
	form, _ = queryParams(httptest.NewRequest(http.MethodGet, "/?Action=ListQueues", nil), []byte("QueueNamePrefix=x"))
	if form.Has("QueueNamePrefix") {
		t.Errorf("a GET took its body's parameters: %v", form)
	}
}

// TestEncodeXML: answers in the query protocol's XML, exactly as SQS shapes them.
func TestEncodeXML(t *testing.T) {
	t.Parallel()
	const head = `<?xml version="1.0"?>` + "\n"
	const meta = `<ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata>`
	for _, c := range []struct {
		action string
		out    any
		want   string
	}{
		{"DeleteMessage", empty{}, `<DeleteMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">` + meta + `</DeleteMessageResponse>`},
		{"ListQueues", listQueuesOut{QueueUrls: []string{"http://h/0/a", "http://h/0/b&c"}},
			`<ListQueuesResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ListQueuesResult><QueueUrl>http://h/0/a</QueueUrl><QueueUrl>http://h/0/b&amp;c</QueueUrl></ListQueuesResult>` + meta + `</ListQueuesResponse>`},
		{"ListQueues", listQueuesOut{},
			`<ListQueuesResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ListQueuesResult></ListQueuesResult>` + meta + `</ListQueuesResponse>`},
		{"GetQueueAttributes", attributesOut{Attributes: map[string]string{"VisibilityTimeout": "30", "DelaySeconds": "0"}},
			`<GetQueueAttributesResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><GetQueueAttributesResult>` +
				`<Attribute><Name>DelaySeconds</Name><Value>0</Value></Attribute><Attribute><Name>VisibilityTimeout</Name><Value>30</Value></Attribute>` +
				`</GetQueueAttributesResult>` + meta + `</GetQueueAttributesResponse>`},
		{"SendMessageBatch", sendMessageBatchOut{
			Successful: []sendBatchResultEntry{{ID: "a", sendMessageOut: sendMessageOut{MD5OfMessageBody: "m1", MessageID: "id1", SequenceNumber: "00000000000000000001"}}},
			Failed:     []batchError{{ID: "b", SenderFault: true, Code: "InvalidParameterValue", Message: "bad <body>"}},
		}, `<SendMessageBatchResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><SendMessageBatchResult>` +
			`<SendMessageBatchResultEntry><Id>a</Id><MD5OfMessageBody>m1</MD5OfMessageBody><MessageId>id1</MessageId><SequenceNumber>00000000000000000001</SequenceNumber></SendMessageBatchResultEntry>` +
			`<BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault><Code>InvalidParameterValue</Code><Message>bad &lt;body&gt;</Message></BatchResultErrorEntry>` +
			`</SendMessageBatchResult>` + meta + `</SendMessageBatchResponse>`},
		{"ChangeMessageVisibilityBatch", receiptBatchOut{Successful: []idEntry{{ID: "x"}}, Failed: []batchError{}},
			`<ChangeMessageVisibilityBatchResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ChangeMessageVisibilityBatchResult>` +
				`<ChangeMessageVisibilityBatchResultEntry><Id>x</Id></ChangeMessageVisibilityBatchResultEntry>` +
				`</ChangeMessageVisibilityBatchResult>` + meta + `</ChangeMessageVisibilityBatchResponse>`},
		{"ReceiveMessage", receiveMessageOut{Messages: []wireMessage{{
			MessageID: "id", ReceiptHandle: "rh", MD5OfBody: "mb", Body: "a\r\nb\t<c>",
			Attributes:             map[string]string{"SentTimestamp": "1"},
			MD5OfMessageAttributes: "ma",
			MessageAttributes: map[string]wireAttrValue{
				"b": {DataType: "Binary", BinaryValue: []byte{0, 0xff}},
				"s": {DataType: "String", StringValue: ptr("v")},
			},
		}}}, `<ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ReceiveMessageResult><Message>` +
			`<MessageId>id</MessageId><ReceiptHandle>rh</ReceiptHandle><MD5OfBody>mb</MD5OfBody><Body>a&#xD;&#xA;b&#x9;&lt;c&gt;</Body>` +
			`<Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute><MD5OfMessageAttributes>ma</MD5OfMessageAttributes>` +
			`<MessageAttribute><Name>b</Name><Value><DataType>Binary</DataType><BinaryValue>AP8=</BinaryValue></Value></MessageAttribute>` +
			`<MessageAttribute><Name>s</Name><Value><DataType>String</DataType><StringValue>v</StringValue></Value></MessageAttribute>` +
			`</Message></ReceiveMessageResult>` + meta + `</ReceiveMessageResponse>`},
		{"ListMessageMoveTasks", listMovesOut{Results: []moveTask{{Status: "RUNNING", SourceArn: "arn", MaxNumberOfMessagesPerSecond: ptr(int64(5)), StartedTimestamp: 9}}},
			`<ListMessageMoveTasksResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ListMessageMoveTasksResult><ListMessageMoveTasksResultEntry>` +
				`<Status>RUNNING</Status><SourceArn>arn</SourceArn><MaxNumberOfMessagesPerSecond>5</MaxNumberOfMessagesPerSecond>` +
				`<ApproximateNumberOfMessagesMoved>0</ApproximateNumberOfMessagesMoved><StartedTimestamp>9</StartedTimestamp>` +
				`</ListMessageMoveTasksResultEntry></ListMessageMoveTasksResult>` + meta + `</ListMessageMoveTasksResponse>`},
	} {
		var b bytes.Buffer
		encodeXML(&b, c.action, c.out, "rid")
		if b.String() != head+c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.action, b.String(), head+c.want)
		}
		if err := wellFormed(b.Bytes()); err != nil {
			t.Errorf("%s: %v", c.action, err)
		}
	}
	var b bytes.Buffer
	encodeXMLError(&b, sqsNamespace, newErr(kQueueDoesNotExist, "The specified queue q does not exist."), "rid")
	if want := head + `<ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><Error><Type>Sender</Type>` +
		`<Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue q does not exist.</Message><Detail/></Error>` +
		`<RequestId>rid</RequestId></ErrorResponse>`; b.String() != want {
		t.Errorf("error:\n got %s\nwant %s", b.String(), want)
	}
	b.Reset()
	encodeXMLError(&b, sqsNamespace, newErr(kServiceUnavailable, "later"), "rid")
	if !strings.Contains(b.String(), "<Type>Receiver</Type><Code>ServiceUnavailable</Code>") {
		t.Errorf("a server's fault: %s", b.String())
	}
}

// wellFormed reports whether b is one well-formed XML document.
func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// doForm posts a query-protocol form to the fuzz environment's front.
func (e *fuzzEnv) doForm(body []byte) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://localhost:7070/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	e.f.ServeHTTP(w, r)
	return w
}

// FuzzQueryForm throws arbitrary forms at the query protocol: the input's first byte
// picks the action (fuzzActions), the rest is the form after Action=<action>&. It must
// never panic or answer 5xx, every answer must be well-formed XML, and a refused request
// must change nothing. @RECEIPT@ is replaced by a valid receipt, as in FuzzRequest.
// `go test -fuzz FuzzQueryForm ./internal/sqs` explores; the corpus is in testdata/fuzz.
func FuzzQueryForm(f *testing.F) {
	seeds := map[string][]string{
		"CreateQueue":        {"QueueName=new&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=5&Tag.1.Key=a&Tag.1.Value=b", "QueueName=q&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=9"},
		"SetQueueAttributes": {"QueueUrl=q&Attribute.1.Name=DelaySeconds&Attribute.1.Value=901", "QueueUrl=q&Attribute.2.Name=DelaySeconds&Attribute.2.Value=1"},
		"GetQueueAttributes": {"QueueUrl=q&AttributeName.1=All", "QueueUrl=q&AttributeName.1=Nope"},
		"SendMessage": {"QueueUrl=q&MessageBody=hi&MessageAttribute.1.Name=b&MessageAttribute.1.Value.DataType=Binary&MessageAttribute.1.Value.BinaryValue=AAE%3D",
			"QueueUrl=q&MessageBody=x&MessageAttribute.1.Name=a&MessageAttribute.2.Name=a", "QueueUrl=q&MessageBody=%00", "QueueUrl=q&MessageBody=x&DelaySeconds=x"},
		"SendMessageBatch": {"QueueUrl=q&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x&SendMessageBatchRequestEntry.2.Id=b",
			"QueueUrl=q&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x&SendMessageBatchRequestEntry.1.Id=a"},
		"ReceiveMessage":               {"QueueUrl=q&MaxNumberOfMessages=10&AttributeName.1=All&MessageAttributeName.1=All", "QueueUrl=q&AttributeName.3=All"},
		"DeleteMessage":                {"QueueUrl=q&ReceiptHandle=@RECEIPT@", "QueueUrl=q.fifo&ReceiptHandle=@RECEIPT@"},
		"DeleteMessageBatch":           {"QueueUrl=q&DeleteMessageBatchRequestEntry.1.Id=a&DeleteMessageBatchRequestEntry.1.ReceiptHandle=@RECEIPT@"},
		"ChangeMessageVisibility":      {"QueueUrl=q&ReceiptHandle=@RECEIPT@&VisibilityTimeout=0"},
		"ChangeMessageVisibilityBatch": {"QueueUrl=q&ChangeMessageVisibilityBatchRequestEntry.1.Id=a&ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle=@RECEIPT@&ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout=5"},
		"TagQueue":                     {"QueueUrl=q&Tag.1.Key=k&Tag.1.Value=v", "QueueUrl=q&Tag.1.Value=v"},
		"UntagQueue":                   {"QueueUrl=q&TagKey.1=k"},
		"ListQueues":                   {"QueueNamePrefix=q&MaxResults=1", "Version=2011-01-01", "Version=2010-03-31"},
		"Bogus":                        {""},
	}
	for i, a := range fuzzActions {
		for _, s := range seeds[a] {
			f.Add(append([]byte{byte(i)}, s...))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		t.Parallel()
		if len(in) == 0 {
			return
		}
		action := fuzzActions[int(in[0])%len(fuzzActions)]
		body := in[1:]
		if form, _ := url.ParseQuery(string(body)); form.Has("WaitTimeSeconds") || form.Has("Action") {
			// A long poll waits on the fake clock; another Action is refused as given twice.
			t.Skip("long polls and second actions are not what this target is about")
		}
		e := newFuzzEnv(t)
		body = bytes.ReplaceAll(body, []byte("@RECEIPT@"), []byte(url.QueryEscape(e.receipt)))
		body = append([]byte("Action="+action+"&"), body...)
		before := e.snapshot()
		w := e.doForm(body)
		if w.Code >= 500 {
			t.Fatalf("%q: %d %s", body, w.Code, w.Body)
		}
		if err := wellFormed(w.Body.Bytes()); err != nil || w.Header().Get("Content-Type") != "text/xml" {
			t.Fatalf("%q: not XML (%v): %s", body, err, w.Body)
		}
		if w.Code >= 400 {
			if !bytes.Contains(w.Body.Bytes(), []byte("<ErrorResponse")) {
				t.Fatalf("%q: %d without an ErrorResponse: %s", body, w.Code, w.Body)
			}
			if after := e.snapshot(); !reflect.DeepEqual(before, after) {
				t.Fatalf("%q was refused (%d %s) but changed the state:\nbefore %v\nafter  %v", body, w.Code, w.Body, before, after)
			}
		}
	})
}
