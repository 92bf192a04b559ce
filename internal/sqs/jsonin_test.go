package sqs

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fastCases are bodies of the hot actions: the shapes the SDKs send, and the ones the
// scanner must leave to encoding/json (whose answer, error or not, then stands).
var fastCases = []string{
	``, ` `, `{}`, ` { } `, `null`, `[]`, `"x"`, `{`, `{}x`, `{} {}`, `{"QueueUrl":"q"}`,
	`{"QueueUrl":"http://h/000000000000/q","Entries":[{"Id":"0","MessageBody":"hello"},{"Id":"1","MessageBody":"x\ny"}]}`,
	`{"QueueUrl":"q","Entries":[]}`,
	`{"QueueUrl":"q","Entries":null}`,
	`{"QueueUrl":"q","Entries":[null]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","DelaySeconds":5,"MessageGroupId":"g","MessageDeduplicationId":"d"}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageAttributes":{"a":{"DataType":"String","StringValue":"v"},"b":{"DataType":"Binary","BinaryValue":"AAEC"}}}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageAttributes":{"a":{"DataType":"Binary","BinaryValue":"!!"}}}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageAttributes":{"a":{"DataType":"Binary","BinaryValue":""}}}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageAttributes":{"a":{"DataType":"String","StringListValues":["x"]}}}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageAttributes":{"a":{"DataType":"String"},"a":{"StringValue":"v"}}}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"b","MessageSystemAttributes":{"AWSTraceHeader":{"DataType":"String","StringValue":"Root=1"}}}]}`,
	`{"QueueUrl":"q","MessageBody":"héllo \u00e9 \ud83d\ude00 \" \\ \/ \b\f\n\r\t","DelaySeconds":0}`,
	`{"QueueUrl":"q","MessageBody":"bad \ud83d"}`,
	`{"QueueUrl":"q","MessageBody":"bad \x"}`,
	"{\"QueueUrl\":\"q\",\"MessageBody\":\"invalid \xff utf-8\"}",
	"{\"QueueUrl\":\"q\",\"MessageBody\":\"control \x01\"}",
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":1.5}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":1e2}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":-0}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":01}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":99999999999999999999}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":"5"}`,
	`{"QueueUrl":"q","MessageBody":"b","DelaySeconds":null}`,
	`{"QueueUrl":"q","MessageBody":null}`,
	`{"QueueUrl":5}`,
	`{"QueueUrl":"q","QueueUrl":"r"}`,
	`{"queueurl":"q"}`,
	`{"QUEUEURL":"q","MessageBody":"b"}`,
	`{"Queue\u0055rl":"q"}`,
	`{"QueueUrl":"q","Unknown":{"a":[1,2.5,-3e+4,true,false,null,"s\"",{}],"b":{}}}`,
	`{"QueueUrl":"q","Unknown":[1,]}`,
	`{"QueueUrl":"q","Unknown":01}`,
	`{"QueueUrl":"q","Unknown":tru}`,
	`{"QueueUrl":"q","Unknown":"\u12"}`,
	`{"QueueUrl":"q","Unknown":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`{"QueueUrl":"q",}`,
	`{"QueueUrl" "q"}`,
	`{"QueueUrl":"q"`,
	`{"QueueUrl":"q","MaxNumberOfMessages":10,"WaitTimeSeconds":1,"VisibilityTimeout":30,"AttributeNames":["All"],"MessageSystemAttributeNames":[],"MessageAttributeNames":["a.*","b"],"ReceiveRequestAttemptId":"x"}`,
	`{"QueueUrl":"q","AttributeNames":["All",5]}`,
	`{"QueueUrl":"q","AttributeNames":null}`,
	`{"QueueUrl":"q","ReceiptHandle":"r","VisibilityTimeout":10}`,
	`{"QueueUrl":"q","Entries":[{"Id":"a","ReceiptHandle":"r1"},{"Id":"b","ReceiptHandle":"r2","VisibilityTimeout":3}]}`,
	`{"QueueUrl":"q","Entries":[{"Id":"a","ReceiptHandle":"r1"},]}`,
	`{"QueueUrl":"q","Entries":{"Id":"a"}}`,
	"\t{\"QueueUrl\":\"q\"}\r\n",
}

// sdkShapes are requests as aws-sdk-go-v2 sends them, which the scanner must take.
var sdkShapes = []struct{ action, body string }{
	{"SendMessageBatch", `{"Entries":[{"Id":"0","MessageBody":"xxxx"},{"Id":"1","MessageBody":"yyyy"}],"QueueUrl":"http://127.0.0.1:1/000000000000/q"}`},
	{"SendMessageBatch", `{"Entries":[{"Id":"0","MessageAttributes":{"a":{"DataType":"String","StringValue":"v"},"b":{"BinaryValue":"AAEC","DataType":"Binary"}},"MessageBody":"b"}],"QueueUrl":"q"}`},
	{"SendMessage", `{"DelaySeconds":0,"MessageBody":"h\u00e9llo","QueueUrl":"q"}`},
	{"ReceiveMessage", `{"MaxNumberOfMessages":10,"MessageSystemAttributeNames":["MessageGroupId"],"QueueUrl":"q","WaitTimeSeconds":1}`},
	{"DeleteMessageBatch", `{"Entries":[{"Id":"0","ReceiptHandle":"AQID"},{"Id":"1","ReceiptHandle":"BAUG"}],"QueueUrl":"q"}`},
	{"DeleteMessage", `{"QueueUrl":"q","ReceiptHandle":"AQID"}`},
	{"ChangeMessageVisibilityBatch", `{"Entries":[{"Id":"0","ReceiptHandle":"AQID","VisibilityTimeout":0}],"QueueUrl":"q"}`},
}

// TestFastDecodeMatchesJSON holds the scanner to encoding/json: on every body where it
// does not give up, encoding/json reads the same struct without error.
func TestFastDecodeMatchesJSON(t *testing.T) {
	taken := 0
	bodies := slices.Clone(fastCases)
	for _, c := range sdkShapes {
		bodies = append(bodies, c.body)
	}
	for _, body := range bodies {
		for action := range fastInputs {
			if checkFastDecode(t, action, []byte(body)) {
				taken++
			}
		}
	}
	if taken == 0 {
		t.Fatal("the scanner took none of the bodies")
	}
	// The SDK's own shapes must be taken, or the fast path is never used.
	for _, c := range sdkShapes {
		if !decodeFast([]byte(c.body), fastInputs[c.action]()) {
			t.Errorf("%s: the scanner gave up on %s", c.action, c.body)
		}
	}
}

// checkFastDecode compares the two readings of body as action's request, and reports
// whether the scanner took it.
func checkFastDecode(t *testing.T, action string, body []byte) bool {
	t.Helper()
	fast := fastInputs[action]()
	if !decodeFast(body, fast) {
		return false
	}
	slow := fastInputs[action]()
	q := &request{body: body, action: action}
	if e := q.decode(slow); e != nil {
		t.Errorf("%s %q: the scanner took a body encoding/json refuses (%s)", action, body, e.Message)
		return true
	}
	if !reflect.DeepEqual(fast, slow) {
		fj, _ := json.Marshal(fast)
		sj, _ := json.Marshal(slow)
		t.Errorf("%s %q: scanner read %s, encoding/json %s", action, body, fj, sj)
	}
	return true
}

func FuzzFastDecode(f *testing.F) {
	for _, c := range fastCases {
		f.Add([]byte(c))
	}
	for _, c := range sdkShapes {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for action := range fastInputs {
			checkFastDecode(t, action, bytes.Clone(body))
		}
	})
}
