package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// TestRejectedRequestsChangeNothing sends malformed, oversized and out-of-range requests
// and checks that each is refused as a whole with a clear error and that the broker's
// state — every queue's configuration, counts, counters and messages, and the redrive
// tasks — is exactly as before.
func TestRejectedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	// A fake clock keeps leases and delays where they are while the test looks.
	e := newEnv(t, okibatest.Options{FakeClock: true})
	e.putQueue("v", `{"visibility_timeout":"1m","max_messages":100,"tags":{"team":"a"}}`)
	e.putQueue("other", `{}`)
	e.call("POST", "/v1/queues/v/messages", `{"messages":[
		{"body":"a","group":"g1","headers":{"content-type":"text/plain"}},
		{"body":"b","dedup_id":"b-1"},
		{"body_base64":"AAEC/w=="},
		{"body":"d","delay":"1h"},
		{"body":"e","group":"g1"}]}`, 200, nil)
	leased := e.receive("v", 2, "")
	if len(leased) != 2 {
		t.Fatalf("setup: received %d messages", len(leased))
	}
	if r, _ := e.settle("v", "deadletter", []string{leased[1].Receipt}, `,"reason":"setup"`); r.Status != 200 {
		t.Fatalf("setup deadletter: %v", r)
	}
	R := leased[0].Receipt // in flight for the whole test
	e.send("other", "o1", "o2")

	before := e.snapshot()
	if len(before.Queues) != 4 {
		t.Fatalf("setup: queues %+v", before.Queues)
	}

	rcpt := func(extra string) string { return receiptsBody([]string{R}, extra) }
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	huge := strings.Repeat("x", api.MaxRequestBody)
	manyReceipts := make([]string, api.MaxBatch+1)
	for i := range manyReceipts {
		manyReceipts[i] = R
	}
	manyIDs, _ := json.Marshal(strings.Split(strings.TrimSuffix(strings.Repeat("0000000000000001,", 100_001), ","), ","))

	type tc struct {
		name, method, path, body, code string
		mentions                       []string
	}
	const (
		msgs = "/v1/queues/v/messages"
		recv = "/v1/queues/v/receive"
		put  = "/v1/queues/v"
	)
	cases := []tc{
		// Bad JSON.
		{"truncated object", "POST", msgs, `{"body":"x"`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"trailing comma", "POST", msgs, `{"body":"x",}`, api.CodeInvalidRequest, []string{"malformed JSON", "byte"}},
		{"single quotes", "POST", msgs, `{'body':'x'}`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"not UTF-8", "POST", msgs, "\xff\xfe{}", api.CodeInvalidRequest, []string{"not valid UTF-8"}},
		{"array instead of object", "POST", msgs, `[{"body":"x"}]`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"empty send", "POST", msgs, ``, api.CodeInvalidRequest, []string{"empty"}},
		{"whitespace send", "POST", msgs, " \n\t", api.CodeInvalidRequest, []string{"empty"}},
		{"null send", "POST", msgs, `null`, api.CodeInvalidBody, []string{"body"}},
		{"truncated config", "PUT", put, `{"visibility_timeout":`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"truncated config of a new queue", "PUT", "/v1/queues/fresh", `{"visibility_timeout":"1s"`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"truncated receive", "POST", recv, `{"max":2`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"ack not JSON", "POST", "/v1/queues/v/ack", `not json`, api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"nack trailing comma", "POST", "/v1/queues/v/nack", rcpt(`,`), api.CodeInvalidRequest, []string{"malformed JSON"}},
		{"truncated redrive", "POST", "/v1/queues/v-dlq/redrive", `{"to":`, api.CodeInvalidRequest, []string{"malformed JSON"}},

		// Unknown fields.
		{"unknown field in send", "POST", msgs, `{"body":"x","colour":"red"}`, api.CodeInvalidRequest, []string{"colour"}},
		{"unknown field in one batch entry", "POST", msgs, `{"messages":[{"body":"x"},{"body":"y","bdy":"z"}]}`, api.CodeInvalidRequest, []string{"bdy"}},
		{"unknown config field", "PUT", put, `{"visiblity_timeout":"1s"}`, api.CodeInvalidRequest, []string{"visiblity_timeout"}},
		{"GET shape sent back to PUT", "PUT", put, `{"config":{"max_messages":5}}`, api.CodeInvalidRequest, []string{"config"}},
		{"unknown receive field", "POST", recv, `{"max":1,"visibilty":"1s"}`, api.CodeInvalidRequest, []string{"visibilty"}},
		{"unknown ack field", "POST", "/v1/queues/v/ack", rcpt(`,"receipt":"x"`), api.CodeInvalidRequest, []string{`unknown field "receipt"`}},
		{"unknown redrive field", "POST", "/v1/queues/v-dlq/redrive", `{"too":"v"}`, api.CodeInvalidRequest, []string{"too"}},

		// Trailing data after the object.
		{"two objects", "POST", msgs, `{"body":"x"}{"body":"y"}`, api.CodeInvalidRequest, []string{"after the object"}},
		{"object then array", "POST", msgs, `{"body":"x"} []`, api.CodeInvalidRequest, []string{"after the object"}},
		{"ack then garbage", "POST", "/v1/queues/v/ack", rcpt(``) + ` x`, api.CodeInvalidRequest, nil},
		{"config then object", "PUT", put, `{"max_messages":5}{}`, api.CodeInvalidRequest, []string{"after the object"}},
		{"receive then object", "POST", recv, `{} {}`, api.CodeInvalidRequest, []string{"after the object"}},

		// Bodies.
		{"body and body_base64", "POST", msgs, `{"body":"x","body_base64":"eA=="}`, api.CodeInvalidBody, []string{"body_base64", "not both"}},
		{"body and body_base64 in entry 1", "POST", msgs, `{"messages":[{"body":"ok"},{"body":"x","body_base64":"eA=="}]}`, api.CodeInvalidBody, []string{"messages[1]", "not both"}},
		{"bad base64", "POST", msgs, `{"body_base64":"not base64!"}`, api.CodeInvalidBody, []string{"body_base64"}},
		{"URL-safe base64", "POST", msgs, `{"body_base64":"-_8="}`, api.CodeInvalidBody, []string{"body_base64", "standard"}},
		{"no body", "POST", msgs, `{"headers":{"a":"b"}}`, api.CodeInvalidBody, []string{"body"}},
		{"no body in entry 1", "POST", msgs, `{"messages":[{"body":"ok"},{}]}`, api.CodeInvalidBody, []string{"messages[1]"}},
		{"messages and single fields", "POST", msgs, `{"messages":[{"body":"x"}],"body":"y"}`, api.CodeInvalidRequest, []string{"messages"}},
		{"empty messages", "POST", msgs, `{"messages":[]}`, api.CodeInvalidRequest, []string{"messages", "empty"}},
		{"wrong type in entry 1", "POST", msgs, `{"messages":[{"body":"ok"},{"body":5}]}`, api.CodeInvalidRequest, []string{"messages.body"}},
		{"bad delay in entry 1", "POST", msgs, `{"messages":[{"body":"ok"},{"body":"x","delay":"-1s"}]}`, api.CodeInvalidDelay, []string{"messages[1]", "delay"}},

		// Too many entries, too many bytes.
		{"1001 messages", "POST", msgs, `{"messages":[` + many(1001, `{"body":"x"}`) + `]}`, api.CodeBatchTooLarge, []string{"1001", "1000"}},
		{"1001 receipts to ack", "POST", "/v1/queues/v/ack", receiptsBody(manyReceipts, ""), api.CodeBatchTooLarge, []string{"1001", "1000"}},
		{"1001 receipts to dead-letter", "POST", "/v1/queues/v/deadletter", receiptsBody(manyReceipts, `,"reason":"x"`), api.CodeBatchTooLarge, []string{"1000"}},
		{"receive max 1001", "POST", recv, `{"max":1001}`, api.CodeInvalidRequest, []string{"max", "1000"}},
		{"100001 redrive ids", "POST", "/v1/queues/v-dlq/redrive", `{"ids":` + string(manyIDs) + `}`, api.CodeBatchTooLarge, []string{"100000"}},
		{"send over 16 MiB", "POST", msgs, `{"body":"` + huge + `"}`, api.CodeRequestTooLarge, []string{"16777216"}},
		{"config over 16 MiB", "PUT", put, `{"tags":{"a":"` + huge + `"}}`, api.CodeRequestTooLarge, nil},
		{"ack over 16 MiB", "POST", "/v1/queues/v/ack", `{"receipts":["` + huge + `"]}`, api.CodeRequestTooLarge, nil},

		// Durations that are not durations.
		{"send delay word", "POST", msgs, `{"body":"x","delay":"soon"}`, api.CodeInvalidRequest, []string{`"soon"`, "duration"}},
		{"config duration word", "PUT", put, `{"visibility_timeout":"1x"}`, api.CodeInvalidRequest, []string{`"1x"`}},
		{"config duration with spaces", "PUT", put, `{"retention":"10 days"}`, api.CodeInvalidRequest, []string{"10 days"}},
		{"config duration out of range", "PUT", put, `{"dedup_window":1e10}`, api.CodeInvalidRequest, []string{"dedup_window", "not a duration"}},
		{"receive wait word", "POST", recv, `{"wait":"forever"}`, api.CodeInvalidRequest, []string{"forever"}},
		{"nack delay word", "POST", "/v1/queues/v/nack", rcpt(`,"delay":"later"`), api.CodeInvalidRequest, []string{"later"}},
		{"extend visibility bool", "POST", "/v1/queues/v/extend", rcpt(`,"visibility":true`), api.CodeInvalidRequest, []string{"duration"}},

		// Numbers out of range.
		{"send delay negative", "POST", msgs, `{"body":"x","delay":"-1s"}`, api.CodeInvalidDelay, []string{"delay"}},
		{"send delay over 7 days", "POST", msgs, `{"body":"x","delay":"169h"}`, api.CodeInvalidDelay, []string{"delay", "168h"}},
		{"send delay sub-millisecond", "POST", msgs, `{"body":"x","delay":"1.5ms"}`, api.CodeInvalidDelay, []string{"milliseconds"}},
		{"receive max negative", "POST", recv, `{"max":-1}`, api.CodeInvalidRequest, []string{"max"}},
		{"receive max not integer", "POST", recv, `{"max":1.5}`, api.CodeInvalidRequest, []string{"max"}},
		{"receive wait over 60s", "POST", recv, `{"wait":"61s"}`, api.CodeInvalidRequest, []string{"wait", "60s"}},
		{"receive wait negative", "POST", recv, `{"wait":-1}`, api.CodeInvalidRequest, []string{"wait"}},
		{"receive visibility over 12h", "POST", recv, `{"visibility":"13h"}`, api.CodeInvalidRequest, []string{"visibility", "12h"}},
		{"receive visibility negative", "POST", recv, `{"visibility":"-5s"}`, api.CodeInvalidRequest, []string{"visibility"}},
		{"receive visibility sub-millisecond", "POST", recv, `{"visibility":"1.5ms"}`, api.CodeInvalidRequest, []string{"visibility"}},
		{"nack delay negative", "POST", "/v1/queues/v/nack", rcpt(`,"delay":"-1s"`), api.CodeInvalidDelay, []string{"delay"}},
		{"nack delay over 7 days", "POST", "/v1/queues/v/nack", rcpt(`,"delay":"169h"`), api.CodeInvalidDelay, []string{"delay"}},
		{"extend visibility over 12h", "POST", "/v1/queues/v/extend", rcpt(`,"visibility":"13h"`), api.CodeInvalidRequest, []string{"visibility"}},
		{"extend visibility negative", "POST", "/v1/queues/v/extend", rcpt(`,"visibility":"-1s"`), api.CodeInvalidRequest, []string{"visibility"}},
		{"extend without visibility", "POST", "/v1/queues/v/extend", rcpt(``), api.CodeInvalidRequest, []string{"visibility"}},
		{"peek limit 0", "GET", msgs + "?limit=0", "", api.CodeInvalidRequest, []string{"limit"}},
		{"peek limit 1001", "GET", msgs + "?limit=1001", "", api.CodeInvalidRequest, []string{"limit"}},
		{"peek limit word", "GET", msgs + "?limit=ten", "", api.CodeInvalidRequest, []string{"limit"}},
		{"peek after negative", "GET", msgs + "?after=-1", "", api.CodeInvalidRequest, []string{"after"}},
		{"peek state unknown", "GET", msgs + "?state=gone", "", api.CodeInvalidRequest, []string{"state", "in_flight"}},
		{"delete force word", "DELETE", put + "?force=maybe", "", api.CodeInvalidRequest, []string{"force"}},
		{"redrive rate negative", "POST", "/v1/queues/v-dlq/redrive", `{"rate":-1}`, api.CodeInvalidRequest, []string{"rate"}},
		{"redrive older_than negative", "POST", "/v1/queues/v-dlq/redrive", `{"older_than":"-1s"}`, api.CodeInvalidRequest, []string{"older_than"}},
		{"redrive bad id", "POST", "/v1/queues/v-dlq/redrive", `{"ids":["zz"]}`, api.CodeInvalidID, []string{"ids", `"zz"`}},
		{"redrive into itself", "POST", "/v1/queues/v-dlq/redrive", `{"to":"v-dlq"}`, api.CodeInvalidConfig, []string{"to"}},
		{"redrive to a missing queue", "POST", "/v1/queues/v-dlq/redrive", `{"to":"nope"}`, api.CodeQueueNotFound, []string{"nope"}},
		{"redrive from a missing queue", "POST", "/v1/queues/nope/redrive", `{}`, api.CodeQueueNotFound, []string{"nope"}},
		{"task id word", "GET", "/v1/redrives/abc", "", api.CodeInvalidID, []string{"abc"}},
		{"cancel task id word", "DELETE", "/v1/redrives/abc", "", api.CodeInvalidID, []string{"abc"}},
		{"cancel missing task", "DELETE", "/v1/redrives/999", "", api.CodeTaskNotFound, []string{"999"}},
		{"delete message id word", "DELETE", msgs + "/xyz", "", api.CodeInvalidID, []string{"xyz"}},
		{"delete message id too short", "DELETE", msgs + "/" + leased[0].ID[1:], "", api.CodeInvalidID, []string{leased[0].ID[1:]}},
		{"delete missing message", "DELETE", msgs + "/0000000000000001", "", api.CodeMessageNotFound, []string{"0000000000000001"}},
		{"delete message of another queue", "DELETE", "/v1/queues/other/messages/" + leased[0].ID, "", api.CodeMessageNotFound, []string{leased[0].ID}},

		// Receipt requests that do not fit their operation.
		{"ack empty receipts", "POST", "/v1/queues/v/ack", `{"receipts":[]}`, api.CodeInvalidRequest, []string{"receipts"}},
		{"ack no receipts", "POST", "/v1/queues/v/ack", `{}`, api.CodeInvalidRequest, []string{"receipts"}},
		{"ack with delay", "POST", "/v1/queues/v/ack", rcpt(`,"delay":"1s"`), api.CodeInvalidRequest, []string{"receipts"}},
		{"nack with visibility", "POST", "/v1/queues/v/nack", rcpt(`,"visibility":"1s"`), api.CodeInvalidRequest, []string{"delay"}},
		{"extend with reason", "POST", "/v1/queues/v/extend", rcpt(`,"visibility":"1s","reason":"x"`), api.CodeInvalidRequest, []string{"visibility"}},
		{"deadletter with delay", "POST", "/v1/queues/v/deadletter", rcpt(`,"delay":"1s"`), api.CodeInvalidRequest, []string{"reason"}},
		{"deadletter with bad reason", "POST", "/v1/queues/v/deadletter", rcpt(`,"reason":"tab\there"`), api.CodeInvalidMessage, []string{"reason"}},
		{"deadletter with long description", "POST", "/v1/queues/v/deadletter", rcpt(`,"reason":"x","description":"` + strings.Repeat("d", 1025) + `"`), api.CodeInvalidMessage, []string{"description"}},
		{"ack on a missing queue", "POST", "/v1/queues/nope/ack", rcpt(``), api.CodeQueueNotFound, []string{"nope"}},
		{"send to a missing queue", "POST", "/v1/queues/nope/messages", `{"body":"x"}`, api.CodeQueueNotFound, []string{"nope"}},
		{"receive from a missing queue", "POST", "/v1/queues/nope/receive", `{}`, api.CodeQueueNotFound, []string{"nope"}},
		{"purge a missing queue", "POST", "/v1/queues/nope/purge", ``, api.CodeQueueNotFound, []string{"nope"}},
		{"delete a missing queue", "DELETE", "/v1/queues/nope", ``, api.CodeQueueNotFound, []string{"nope"}},
		{"delete a DLQ in use", "DELETE", "/v1/queues/v-dlq", ``, api.CodeQueueInUse, []string{"v-dlq", "force"}},
		{"delete a DLQ in use, force=false", "DELETE", "/v1/queues/v-dlq?force=false", ``, api.CodeQueueInUse, []string{"v-dlq"}},
		{"wrong method", "POST", "/v1/queues/v", `{}`, api.CodeMethod, []string{"POST"}},
		{"no such route", "POST", "/v1/queues/v/settle", rcpt(``), api.CodeNotFound, []string{"/v1/queues/v/settle"}},
	}

	// Queue configurations out of range, on the existing queue and on a new one.
	badConfigs := []struct{ body, code, field string }{
		{`{"max_messages":-1}`, api.CodeInvalidConfig, "max_messages"},
		{`{"max_bytes":-1}`, api.CodeInvalidConfig, "max_bytes"},
		{`{"max_message_size":0}`, api.CodeInvalidConfig, "max_message_size"},
		{`{"max_message_size":1048577}`, api.CodeInvalidConfig, "max_message_size"},
		{`{"max_deliveries":-1}`, api.CodeInvalidConfig, "max_deliveries"},
		{`{"max_deliveries":1000001}`, api.CodeInvalidConfig, "max_deliveries"},
		{`{"visibility_timeout":"13h"}`, api.CodeInvalidConfig, "visibility_timeout"},
		{`{"visibility_timeout":"-1s"}`, api.CodeInvalidConfig, "visibility_timeout"},
		{`{"visibility_timeout":"1.5ms"}`, api.CodeInvalidConfig, "visibility_timeout"},
		{`{"retention":"500ms"}`, api.CodeInvalidConfig, "retention"},
		{`{"retention":"87601h"}`, api.CodeInvalidConfig, "retention"},
		{`{"dedup_window":"169h"}`, api.CodeInvalidConfig, "dedup_window"},
		{`{"dedup_window":"-1s"}`, api.CodeInvalidConfig, "dedup_window"},
		{`{"receive_wait":"61s"}`, api.CodeInvalidConfig, "receive_wait"},
		{`{"backoff_base":"13h"}`, api.CodeInvalidConfig, "backoff_base"},
		{`{"backoff_max":"500ms"}`, api.CodeInvalidConfig, "backoff_max"},
		{`{"delay":"169h"}`, api.CodeInvalidConfig, "delay"},
		{`{"delay":"20s","retention":"10s"}`, api.CodeInvalidConfig, "delay"},
		{`{"dedup_scope":"global"}`, api.CodeInvalidConfig, "dedup_scope"},
		{`{"dead_letter_queue":""}`, api.CodeInvalidConfig, "dead_letter_queue"},
		{`{"dead_letter_queue":"bad name"}`, api.CodeInvalidConfig, "dead_letter_queue"},
		{`{"dead_letter_queue":"x.fifo"}`, api.CodeInvalidConfig, "dead_letter_queue"},
		{`{"dead_letter_queue":"none","max_deliveries":3}`, api.CodeInvalidConfig, "max_deliveries"},
		{`{"tags":{"":"x"}}`, api.CodeInvalidConfig, "tags"},
		{`{"tags":{"k":"` + strings.Repeat("v", 257) + `"}}`, api.CodeInvalidConfig, "tags"},
		{`{"tags":{` + tags(51) + `}}`, api.CodeInvalidConfig, "tags"},
	}
	for _, c := range badConfigs {
		cases = append(cases,
			tc{"config " + c.body, "PUT", put, c.body, c.code, []string{c.field}},
			tc{"new queue config " + c.body, "PUT", "/v1/queues/fresh", c.body, c.code, []string{c.field}})
	}
	cases = append(cases,
		tc{"ordered_groups changed", "PUT", put, `{"ordered_groups":false}`, api.CodeInvalidConfig, []string{"ordered_groups"}},
		tc{"own DLQ", "PUT", put, `{"dead_letter_queue":"v"}`, api.CodeDLQCycle, []string{"v -> v"}},
		tc{"DLQ cycle", "PUT", "/v1/queues/v-dlq", `{"dead_letter_queue":"v"}`, api.CodeDLQCycle, []string{"v-dlq -> v -> v-dlq"}},
		tc{"auto DLQ name too long", "PUT", "/v1/queues/" + strings.Repeat("n", 77), `{}`, api.CodeInvalidConfig, []string{"dead_letter_queue", "explicitly"}},
	)
	// Names outside [A-Za-z0-9_-]{1,80}(.fifo)?.
	for _, name := range []string{"bad.name", "a%20b", strings.Repeat("x", 81), strings.Repeat("x", 76) + ".fifo", "x.fifo.fifo", ".fifo", "%C3%A9t%C3%A9", "a%2Fb", "a:b"} {
		cases = append(cases, tc{"name " + name, "PUT", "/v1/queues/" + name, `{}`, api.CodeInvalidName, []string{"A-Z a-z 0-9"}})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" || c.method == "POST" {
				body = c.body
			}
			r := e.do(c.method, c.path, body)
			expectError(t, r, c.code, c.mentions...)
			if after := e.snapshot(); !reflect.DeepEqual(before, after) {
				a, _ := json.MarshalIndent(after, "", " ")
				b, _ := json.MarshalIndent(before, "", " ")
				before = after // report each change once
				t.Fatalf("the rejected request changed the broker's state:\nbefore: %s\nafter:  %s", b, a)
			}
		})
	}

	// The state is still usable: the lease held through all of this settles.
	if r, out := e.settle("v", "ack", []string{R}, ""); r.Status != 200 || !out.Results[0].OK {
		t.Fatalf("ack after the rejected requests: %v", r)
	}
}

func tags(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}
