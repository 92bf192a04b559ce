package errcode

import (
	"fmt"
	"testing"

	"github.com/okiba/okiba/queue"
)

// TestSQSCodesAreKnown: every SQS code a row names (for any action) is in the SQS
// catalogue, so that both protocols can show it; codes are unique in both protocols.
func TestSQSCodesAreKnown(t *testing.T) {
	t.Parallel()
	code, query := map[string]bool{}, map[string]bool{}
	for _, e := range sqsErrors {
		if code[e.Code] || query[e.Query] {
			t.Errorf("%s/%s: a code given twice", e.Code, e.Query)
		}
		code[e.Code], query[e.Query] = true, true
		if e.Status < 400 || e.Status > 599 || e.Query == "" {
			t.Errorf("%+v: incomplete", e)
		}
	}
	for _, r := range table {
		if _, ok := SQSErrorOf(r.SQS); !ok {
			t.Errorf("the row of %s names SQS error %q, which is not in sqsErrors", r.Code, r.SQS)
		}
		for action, a := range r.SQSActions {
			if _, ok := SQSErrorOf(a.Code); !ok {
				t.Errorf("the row of %s names SQS error %q for %s, which is not in sqsErrors", r.Code, a.Code, action)
			}
		}
	}
	if e, _ := SQSErrorOf("QueueNameExists"); e.Query != "QueueAlreadyExists" {
		t.Errorf("QueueNameExists is %q in the query protocol", e.Query)
	}
}

// TestStaleReceiptPerAction: a lost lease is worded per action as SQS words it, with the
// handle in the message.
func TestStaleReceiptPerAction(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("ack: %w", queue.ErrReceiptStale)
	for _, c := range []struct{ action, code, msg string }{
		{"DeleteMessage", "InvalidParameterValue", "Value h1 for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."},
		{"ChangeMessageVisibility", "InvalidParameterValue", "Value h1 for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."},
		{"ChangeMessageVisibilityBatch", "ReceiptHandleIsInvalid", "Message does not exist or is not available for visibility timeout change"},
	} {
		r := Of(err).ForSQSAction(c.action)
		if r.SQS != c.code || r.SQSTextOf(err, "q", "h1") != c.msg {
			t.Errorf("%s: %s %q", c.action, r.SQS, r.SQSTextOf(err, "q", "h1"))
		}
	}
}
