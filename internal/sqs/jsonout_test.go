package sqs

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodeStd is the answer as ServeHTTP wrote every answer before the hot ones wrote
// their own.
func encodeStd(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// awkward are strings every escape rule of encoding/json applies to.
var awkward = []string{
	"", "plain", `quo"te back\slash`, "\b\f\n\r\t\x00\x01\x1f\x7f", "<html> & more",
	"héllo 😀", "bad \xff\xfe utf-8 \xed\xa0\x80", "sep \u2028 and \u2029", "trailing \xe2\x82",
}

func TestAppendJSONMatchesEncoder(t *testing.T) {
	ptr := func(s string) *string { return &s }
	var answers []jsonAppender
	for _, s := range awkward {
		answers = append(answers,
			sendMessageOut{MD5OfMessageBody: s, MessageID: s},
			receiveMessageOut{Messages: []wireMessage{{MessageID: s, ReceiptHandle: s, MD5OfBody: s, Body: s,
				Attributes:             map[string]string{"SentTimestamp": s, s: "v", "ApproximateReceiveCount": "1"},
				MD5OfMessageAttributes: s,
				MessageAttributes: map[string]wireAttrValue{
					s: {DataType: "String", StringValue: ptr(s)}, "b": {DataType: "Binary", BinaryValue: []byte(s)},
					"e": {DataType: "String", StringValue: ptr("")}, "l": {DataType: "String", StringListValues: []string{s, "x"}, BinaryListValues: [][]byte{[]byte(s), nil}},
				}}}},
			sendMessageBatchOut{Successful: []sendBatchResultEntry{{ID: s, sendMessageOut: sendMessageOut{MD5OfMessageBody: "m", MD5OfMessageAttributes: s, MD5OfMessageSystemAttributes: s, MessageID: "i", SequenceNumber: s}}},
				Failed: []batchError{{ID: s, SenderFault: true, Code: s, Message: s}, {ID: "x", Code: "c"}}},
			receiptBatchOut{Successful: []idEntry{{ID: s}}, Failed: []batchError{{ID: "y", Code: s, Message: s}}},
		)
	}
	answers = append(answers,
		empty{}, receiveMessageOut{}, receiveMessageOut{Messages: []wireMessage{}},
		receiveMessageOut{Messages: []wireMessage{{Attributes: map[string]string{}, MessageAttributes: map[string]wireAttrValue{}}}},
		sendMessageBatchOut{}, sendMessageBatchOut{Successful: []sendBatchResultEntry{}, Failed: []batchError{}},
		receiptBatchOut{}, receiptBatchOut{Successful: []idEntry{}, Failed: []batchError{}},
	)
	for _, a := range answers {
		want := encodeStd(t, a)
		if got := string(a.appendJSON(nil)) + "\n"; got != want {
			t.Errorf("%T:\n got %s\nwant %s", a, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := encodeStd(t, s)
		if got := string(appendString(nil, s)) + "\n"; got != want {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	})
}
