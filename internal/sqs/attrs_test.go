package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/okiba/okiba/okibatest"
)

// TestStoredAttributesSurviveRestart: the attributes okiba keeps for SQS without
// interpreting them come back from GetQueueAttributes as they were set, through
// CreateQueue and SetQueueAttributes, after the broker restarts, and "" removes one.
func TestStoredAttributesSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, okibatest.Options{Dir: dir})
	ctx := ctxT(t)
	const policy = `{"Version":"2012-10-17","Statement":[]}`
	const allow = `{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:src"]}`
	e.createQueue(t, "kept", map[string]string{"Policy": policy})
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String("kept"),
		Attributes: map[string]string{
			"RedriveAllowPolicy": allow, "KmsMasterKeyId": "alias/aws/sqs",
			"KmsDataKeyReusePeriodSeconds": "600", "SqsManagedSseEnabled": "true",
		}}); err != nil {
		t.Fatal(err)
	}
	e.createQueue(t, "kept.fifo", map[string]string{"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"})
	want := map[string]map[string]string{
		"kept": {"Policy": policy, "RedriveAllowPolicy": allow, "KmsMasterKeyId": "alias/aws/sqs",
			"KmsDataKeyReusePeriodSeconds": "600", "SqsManagedSseEnabled": "true"},
		"kept.fifo": {"FifoThroughputLimit": "perMessageGroupId", "SqsManagedSseEnabled": "false"},
	}
	check := func(e *env, when string) {
		t.Helper()
		for q, attrs := range want {
			got := e.attrs(t, q)
			for k, v := range attrs {
				if got[k] != v {
					t.Errorf("%s: %s %s = %q, want %q", when, q, k, got[k], v)
				}
			}
		}
	}
	check(e, "before the restart")

	e.srv.Close()
	e = newEnv(t, okibatest.Options{Dir: dir})
	check(e, "after the restart")

	// The stored RedriveAllowPolicy is still enforced: only src may use kept.
	e.createQueue(t, "src", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:kept","maxReceiveCount":3}`})
	_, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("other"),
		Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:kept","maxReceiveCount":3}`}})
	wantAPIError(t, err, "InvalidAttributeValue")

	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String("kept"),
		Attributes: map[string]string{"Policy": ""}}); err != nil {
		t.Fatal(err)
	}
	if v, ok := e.attrs(t, "kept")["Policy"]; ok {
		t.Errorf("Policy still shown after it was removed: %q", v)
	}
}
