package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
)

// fuzzActions are the actions FuzzRequest aims at (an input's first byte picks one).
var fuzzActions = []string{
	"CreateQueue", "SetQueueAttributes", "GetQueueAttributes", "SendMessage", "SendMessageBatch",
	"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
	"ChangeMessageVisibilityBatch", "PurgeQueue", "DeleteQueue", "TagQueue", "UntagQueue",
	"StartMessageMoveTask", "CancelMessageMoveTask", "ListQueues", "Bogus",
}

// fuzzEnv is a broker on a fake clock (so that nothing moves by itself) behind a front,
// with queues q (two messages, one of them leased), q.fifo and q-dlq (q's dead-letter
// queue, holding one message).
type fuzzEnv struct {
	f       *Front
	b       *broker.Broker
	receipt string
}

func newFuzzEnv(t *testing.T) *fuzzEnv {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e := &fuzzEnv{f: New(b, Options{Clock: clk}), b: b}
	e.call(t, "CreateQueue", `{"QueueName":"q-dlq"}`)
	e.call(t, "CreateQueue", `{"QueueName":"q","Attributes":{"RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:q-dlq\",\"maxReceiveCount\":3}"}}`)
	e.call(t, "CreateQueue", `{"QueueName":"q.fifo","Attributes":{"FifoQueue":"true","ContentBasedDeduplication":"true"}}`)
	e.call(t, "SendMessage", `{"QueueUrl":"q","MessageBody":"one","MessageAttributes":{"a":{"DataType":"String","StringValue":"v"}}}`)
	e.call(t, "SendMessage", `{"QueueUrl":"q-dlq","MessageBody":"dead"}`)
	e.call(t, "SendMessage", `{"QueueUrl":"q.fifo","MessageBody":"f1","MessageGroupId":"g"}`)
	var out receiveMessageOut
	json.Unmarshal(e.call(t, "ReceiveMessage", `{"QueueUrl":"q","VisibilityTimeout":60}`).Body.Bytes(), &out)
	if len(out.Messages) != 1 {
		t.Fatalf("fixture receive: %+v", out)
	}
	e.receipt = out.Messages[0].ReceiptHandle
	e.call(t, "SendMessage", `{"QueueUrl":"q","MessageBody":"two"}`)
	return e
}

func (e *fuzzEnv) do(action string, body []byte) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://localhost:7070/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/x-amz-json-1.0")
	r.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	w := httptest.NewRecorder()
	e.f.ServeHTTP(w, r)
	return w
}

func (e *fuzzEnv) call(t *testing.T, action, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := e.do(action, []byte(body))
	if w.Code != http.StatusOK {
		t.Fatalf("fixture %s %s: %d %s", action, body, w.Code, w.Body)
	}
	return w
}

// state is everything a request could change: queues with their configuration and
// message counts, and redrive tasks.
type state struct {
	Queues []string
	Tasks  int
}

func (e *fuzzEnv) snapshot() state {
	var s state
	for _, qi := range e.b.Queues("") {
		st := qi.Stats
		s.Queues = append(s.Queues, fmt.Sprintf("%s %d %+v ready=%d delayed=%d inflight=%d sent=%d acked=%d delivered=%d extended=%d purged=%d deleted=%d dead=%d",
			qi.Name, qi.UpdatedAt, qi.Config, st.Ready, st.Delayed, st.InFlight, st.Sent, st.Acked, st.Delivered,
			st.Extended, st.Purged, st.Deleted, st.DeadLettered))
	}
	s.Tasks = len(e.b.Tasks())
	return s
}

// FuzzRequest throws arbitrary request bodies at the SQS front's decoding and actions:
// it must never panic or answer 5xx, and a rejected request (4xx) must change nothing.
// The text @RECEIPT@ in an input is replaced by a valid receipt of a leased message, so
// that inputs reach past receipt decoding. `go test` replays the corpus in testdata/fuzz;
// `go test -fuzz FuzzRequest ./sqs` explores.
func FuzzRequest(f *testing.F) {
	seeds := map[string][]string{
		"CreateQueue": {`{"QueueName":"new","Attributes":{"VisibilityTimeout":"5"},"tags":{"a":"b"}}`, `{"QueueName":"q","Attributes":{"VisibilityTimeout":"5"}}`,
			`{"QueueName":"x.fifo"}`, `{"QueueName":"bad name"}`, `{"QueueName":"d","Attributes":{"RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:r:1:q\",\"maxReceiveCount\":0}"}}`},
		"SetQueueAttributes": {`{"QueueUrl":"q","Attributes":{"DelaySeconds":"901"}}`, `{"QueueUrl":"q","Attributes":{"FifoQueue":"true"}}`,
			`{"QueueUrl":"q.fifo","Attributes":{"DeduplicationScope":"messageGroup","FifoThroughputLimit":"bogus"}}`, `{"QueueUrl":"q","Attributes":{"RedrivePolicy":""}}`},
		"GetQueueAttributes": {`{"QueueUrl":"http://h/000000000000/q","AttributeNames":["All"]}`, `{"QueueUrl":"q","AttributeNames":["Nope"]}`},
		"SendMessage": {`{"QueueUrl":"q","MessageBody":"hi","DelaySeconds":5,"MessageAttributes":{"n":{"DataType":"Number","StringValue":"1.5e3"},"b":{"DataType":"Binary","BinaryValue":"AAE="}}}`,
			`{"QueueUrl":"q.fifo","MessageBody":"x","MessageGroupId":"g","DelaySeconds":3}`, `{"QueueUrl":"q","MessageBody":"\u0000"}`,
			`{"QueueUrl":"q","MessageBody":"x","MessageAttributes":{"AWS.x":{"DataType":"String","StringValue":"v"}}}`,
			`{"QueueUrl":"q","MessageBody":"x","MessageSystemAttributes":{"AWSTraceHeader":{"DataType":"String","StringValue":"Root=1"}}}`},
		"SendMessageBatch": {`{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"x"},{"Id":"b","MessageBody":""}]}`, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"x"},{"Id":"a","MessageBody":"y"}]}`,
			`{"QueueUrl":"q","Entries":[]}`, `{"QueueUrl":"q","Entries":[{"Id":"a b","MessageBody":"x"}]}`},
		"ReceiveMessage":               {`{"QueueUrl":"q","MaxNumberOfMessages":10,"AttributeNames":["All"],"MessageAttributeNames":["a.*"]}`, `{"QueueUrl":"q.fifo","ReceiveRequestAttemptId":"r1"}`, `{"QueueUrl":"q","MaxNumberOfMessages":0}`},
		"DeleteMessage":                {`{"QueueUrl":"q","ReceiptHandle":"@RECEIPT@"}`, `{"QueueUrl":"q.fifo","ReceiptHandle":"@RECEIPT@"}`, `{"QueueUrl":"q","ReceiptHandle":"junk"}`},
		"DeleteMessageBatch":           {`{"QueueUrl":"q","Entries":[{"Id":"a","ReceiptHandle":"@RECEIPT@"},{"Id":"b","ReceiptHandle":"x"}]}`},
		"ChangeMessageVisibility":      {`{"QueueUrl":"q","ReceiptHandle":"@RECEIPT@","VisibilityTimeout":0}`, `{"QueueUrl":"q","ReceiptHandle":"@RECEIPT@","VisibilityTimeout":99999}`},
		"ChangeMessageVisibilityBatch": {`{"QueueUrl":"q","Entries":[{"Id":"a","ReceiptHandle":"@RECEIPT@","VisibilityTimeout":5},{"Id":"b","ReceiptHandle":"@RECEIPT@"}]}`},
		"PurgeQueue":                   {`{"QueueUrl":"q"}`, `{"QueueUrl":"nope"}`},
		"DeleteQueue":                  {`{"QueueUrl":"q-dlq"}`, `{"QueueUrl":"http://h/a/b/c"}`},
		"TagQueue":                     {`{"QueueUrl":"q","Tags":{"k":"v"}}`, `{"QueueUrl":"q","Tags":{}}`},
		"UntagQueue":                   {`{"QueueUrl":"q","TagKeys":["k"]}`},
		"StartMessageMoveTask":         {`{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q-dlq","MaxNumberOfMessagesPerSecond":1}`, `{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q"}`, `{"SourceArn":"nope"}`},
		"CancelMessageMoveTask":        {`{"TaskHandle":"b2tpYmEtcmVkcml2ZToxOnEtZGxx"}`, `{"TaskHandle":"!!"}`},
		"ListQueues":                   {`{"QueueNamePrefix":"q","MaxResults":1,"NextToken":"cQ"}`, `{"MaxResults":0}`},
		"Bogus":                        {`{}`},
	}
	for i, a := range fuzzActions {
		for _, s := range seeds[a] {
			f.Add(append([]byte{byte(i)}, s...))
		}
	}
	for _, s := range []string{"", "{", "[]", "null", `{"QueueUrl":5}`, "\xff\xfe", `{"QueueUrl":"q"}{}`, `{"QueueUrl":"q","MaxNumberOfMessages":1.5}`} {
		f.Add(append([]byte{5}, s...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		t.Parallel() // each input gets a broker of its own (a no-op while fuzzing)
		if len(in) == 0 {
			return
		}
		action := fuzzActions[int(in[0])%len(fuzzActions)]
		body := in[1:]
		if action == "ReceiveMessage" && bytes.Contains(bytes.ToLower(body), []byte("wait")) {
			t.Skip("long polls wait on the fake clock; they are not what this target is about")
		}
		e := newFuzzEnv(t)
		body = bytes.ReplaceAll(body, []byte("@RECEIPT@"), []byte(e.receipt))
		before := e.snapshot()
		w := e.do(action, body)
		if w.Code >= 500 {
			t.Fatalf("%s %q: %d %s", action, body, w.Code, w.Body)
		}
		if w.Code >= 400 {
			if w.Header().Get("X-Amzn-Query-Error") == "" || !strings.Contains(w.Body.String(), `"__type"`) {
				t.Fatalf("%s %q: error without its type: %v %s", action, body, w.Header(), w.Body)
			}
			if after := e.snapshot(); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s %q was refused (%d %s) but changed the state:\nbefore %v\nafter  %v", action, body, w.Code, w.Body, before, after)
			}
		}
	})
}

// TestQueryDispatch: which requests the front takes, and which service a query request
// is for (SQS served; SNS told it is not, in SNS's namespace), by the signature's scope,
// then the Version, then the action, then a TopicArn.
func TestQueryDispatch(t *testing.T) {
	t.Parallel()
	e := newFuzzEnv(t)
	form := func(body string, header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	const snsScope = "AWS4-HMAC-SHA256 Credential=k/20240101/us-east-1/sns/aws4_request, SignedHeaders=host, Signature=00"
	const sqsScope = "AWS4-HMAC-SHA256 Credential=k/20240101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00"
	for _, c := range []struct {
		name string
		r    *http.Request
		want string // a piece of the answer
	}{
		{"sqs form", form("Action=ListQueues&Version=2012-11-05"), "<ListQueuesResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">"},
		{"no version", form("Action=ListQueues"), "<ListQueuesResult>"},
		{"get", httptest.NewRequest(http.MethodGet, "/?Action=ListQueues", nil), "<ListQueuesResult>"},
		{"sns by scope", form("Action=ListQueues", "Authorization", snsScope), "xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error><Type>Sender</Type><Code>InvalidAction</Code>"},
		{"sqs by scope", form("Action=ListQueues&Version=2010-03-31", "Authorization", sqsScope), "<Code>NoSuchVersion</Code>"},
		{"sns by version", form("Action=ListTopics&Version=2010-03-31"), "does not serve the SNS API"},
		{"sns by action", form("Action=Publish"), "does not serve the SNS API"},
		{"sns by topic", form("Action=TagResource&TopicArn=arn:aws:sns:us-east-1:0:t"), "does not serve the SNS API"},
		{"unknown action", form("Action=NoSuchAction"), "<Code>InvalidAction</Code>"},
		{"no action", form("QueueUrl=q"), "<Code>MissingParameter</Code>"},
	} {
		if !IsSQSRequest(c.r) {
			t.Errorf("%s: not taken as an SQS request", c.name)
			continue
		}
		w := httptest.NewRecorder()
		e.f.ServeHTTP(w, c.r)
		if !strings.Contains(w.Body.String(), c.want) || w.Header().Get("Content-Type") != "text/xml" {
			t.Errorf("%s: %d %s %s, want %s", c.name, w.Code, w.Header().Get("Content-Type"), w.Body, c.want)
		}
	}
	if w := e.do("NoSuchAction", []byte("{}")); w.Code != 400 || !strings.Contains(w.Body.String(), "UnknownOperationException") {
		t.Errorf("unknown action: %d %s", w.Code, w.Body)
	}
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/", nil),
		httptest.NewRequest(http.MethodGet, "/queues/orders", nil),
		httptest.NewRequest(http.MethodPost, "/v1/queues/q/messages", nil),
		httptest.NewRequest(http.MethodGet, "/v1/queues?Action=ListQueues", nil),
	} {
		if IsSQSRequest(r) {
			t.Errorf("%s %s taken as an SQS request", r.Method, r.URL)
		}
	}
}
