package sqs_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

func TestQueueActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "orders", map[string]string{"VisibilityTimeout": "45"})
	if !strings.HasPrefix(url, e.srv.URL+"/000000000000/orders") {
		t.Fatalf("queue URL %s", url)
	}

	// SQS's defaults, and the attribute given.
	a := e.attrs(t, url)
	for k, want := range map[string]string{
		"VisibilityTimeout": "45", "MessageRetentionPeriod": "345600", "MaximumMessageSize": "1048576",
		"DelaySeconds": "0", "ReceiveMessageWaitTimeSeconds": "0", "ApproximateNumberOfMessages": "0",
		"QueueArn": "arn:aws:sqs:us-east-1:000000000000:orders",
	} {
		if a[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, a[k], want)
		}
	}
	for _, k := range []string{"RedrivePolicy", "FifoQueue"} {
		if v, ok := a[k]; ok {
			t.Errorf("standard queue has %s = %q", k, v)
		}
	}

	// Creating again with the same attributes returns the URL; with others, an error.
	if again := e.createQueue(t, "orders", map[string]string{"VisibilityTimeout": "45"}); again != url {
		t.Errorf("second CreateQueue: %s", again)
	}
	_, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "10"}})
	wantTyped[*types.QueueNameExists](t, err)
	if a := e.attrs(t, url); a["VisibilityTimeout"] != "45" {
		t.Errorf("a refused CreateQueue changed the queue: %v", a["VisibilityTimeout"])
	}

	// GetQueueUrl, SetQueueAttributes, and the plain name where a URL is expected.
	got, err := e.c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders")})
	if err != nil || *got.QueueUrl != url {
		t.Fatalf("GetQueueUrl: %v %v", got, err)
	}
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String("orders"),
		Attributes: map[string]string{"DelaySeconds": "2", "MessageRetentionPeriod": "60", "ReceiveMessageWaitTimeSeconds": "20",
			"MaximumMessageSize": "2048", "Policy": `{"Version":"2012-10-17"}`}}); err != nil {
		t.Fatal(err)
	}
	a = e.attrs(t, url)
	if a["DelaySeconds"] != "2" || a["MessageRetentionPeriod"] != "60" || a["ReceiveMessageWaitTimeSeconds"] != "20" ||
		a["MaximumMessageSize"] != "2048" || a["Policy"] != `{"Version":"2012-10-17"}` {
		t.Errorf("after SetQueueAttributes: %v", a)
	}
	_, err = e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"VisibilityTimeout": "43201"}})
	wantTyped[*types.InvalidAttributeValue](t, err)
	_, err = e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"Bogus": "1"}})
	wantTyped[*types.InvalidAttributeName](t, err)
	_, err = e.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"Bogus"}})
	wantTyped[*types.InvalidAttributeName](t, err)
	sel, err := e.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameDelaySeconds}})
	if err != nil || len(sel.Attributes) != 1 || sel.Attributes["DelaySeconds"] != "2" {
		t.Errorf("selected attributes: %v %v", sel, err)
	}

	// Tags.
	if _, err := e.c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: aws.String(url), Tags: map[string]string{"team": "cafe", "env": "dev"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: aws.String(url), TagKeys: []string{"env"}}); err != nil {
		t.Fatal(err)
	}
	tags, err := e.c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: aws.String(url)})
	if err != nil || len(tags.Tags) != 1 || tags.Tags["team"] != "cafe" {
		t.Errorf("tags: %v %v", tags, err)
	}
	tagged, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tagged"), Tags: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if tags, _ := e.c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: tagged.QueueUrl}); tags.Tags["k"] != "v" {
		t.Errorf("CreateQueue tags: %v", tags.Tags)
	}

	// ListQueues with a prefix and pagination.
	for i := range 5 {
		e.createQueue(t, fmt.Sprintf("page-%d", i), nil)
	}
	var pages [][]string
	var token *string
	for {
		out, err := e.c.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String("page-"), MaxResults: aws.Int32(2), NextToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, out.QueueUrls)
		if out.NextToken == nil {
			break
		}
		token = out.NextToken
	}
	if len(pages) != 3 || len(pages[0]) != 2 || len(pages[2]) != 1 || !strings.HasSuffix(pages[2][0], "/page-4") {
		t.Errorf("pages: %v", pages)
	}
	all, err := e.c.ListQueues(ctx, &awssqs.ListQueuesInput{})
	if err != nil || len(all.QueueUrls) != 7 || all.NextToken != nil {
		t.Errorf("ListQueues: %v %v", all, err)
	}

	// PurgeQueue and DeleteQueue.
	e.send(t, url, "x")
	if _, err := e.c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders")})
	wantTyped[*types.QueueDoesNotExist](t, err)
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
	qde := wantTyped[*types.QueueDoesNotExist](t, err)
	if qde.ErrorCode() != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Errorf("query-compatible code: %s", qde.ErrorCode())
	}
	_, err = e.c.AddPermission(ctx, &awssqs.AddPermissionInput{QueueUrl: aws.String("tagged"), Label: aws.String("l"),
		AWSAccountIds: []string{"1"}, Actions: []string{"SendMessage"}})
	wantTyped[*types.UnsupportedOperation](t, err)
}

func TestSendReceiveDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "work", nil)
	attrs := map[string]types.MessageAttributeValue{
		"attribName1":            {DataType: aws.String("String"), StringValue: aws.String("attribValue 1")},
		"customNumberTypeAttrib": {DataType: aws.String("Number.float"), StringValue: aws.String("4563442423554324324264524243.32543234")},
		"binaryAttribute":        {DataType: aws.String("Binary"), BinaryValue: []byte("Hello binary world!")},
	}
	sent, err := e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("héllo <xml/> & ☕"),
		MessageAttributes: attrs, MessageGroupId: aws.String("fair-1"),
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")},
		}})
	if err != nil {
		t.Fatal(err)
	}
	// The digest SQS returns for exactly these attributes (a published vector).
	if got := aws.ToString(sent.MD5OfMessageAttributes); got != "c932db14a896c663f83c260297d594ff" {
		t.Errorf("MD5OfMessageAttributes = %s", got)
	}
	if sent.MD5OfMessageSystemAttributes == nil || sent.SequenceNumber != nil {
		t.Errorf("send answer: %+v", sent)
	}
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "1" {
		t.Errorf("ApproximateNumberOfMessages = %s", a["ApproximateNumberOfMessages"])
	}

	msgs := e.receive(t, url, 10, 30)
	if len(msgs) != 1 {
		t.Fatalf("received %d", len(msgs))
	}
	m := msgs[0]
	if *m.Body != "héllo <xml/> & ☕" || *m.MessageId != *sent.MessageId || *m.MD5OfMessageAttributes != "c932db14a896c663f83c260297d594ff" {
		t.Errorf("message: %+v", m)
	}
	if string(m.MessageAttributes["binaryAttribute"].BinaryValue) != "Hello binary world!" ||
		*m.MessageAttributes["customNumberTypeAttrib"].DataType != "Number.float" {
		t.Errorf("attributes: %+v", m.MessageAttributes)
	}
	sys := m.Attributes
	if sys["ApproximateReceiveCount"] != "1" || sys["MessageGroupId"] != "fair-1" || sys["AWSTraceHeader"] == "" ||
		sys["SentTimestamp"] == "" || sys["ApproximateFirstReceiveTimestamp"] == "" || sys["SenderId"] == "" {
		t.Errorf("system attributes: %v", sys)
	}
	if _, ok := sys["SequenceNumber"]; ok {
		t.Errorf("standard queue message has a SequenceNumber")
	}
	if a := e.attrs(t, url); a["ApproximateNumberOfMessagesNotVisible"] != "1" || a["ApproximateNumberOfMessages"] != "0" {
		t.Errorf("counts while in flight: %v", a)
	}

	// Only the attributes asked for come back, with the digest of those.
	e.send(t, url, "two", func(in *awssqs.SendMessageInput) { in.MessageAttributes = attrs })
	out, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MessageAttributeNames: []string{"attribName1", "binary.*", "binaryAttribute"},
		AttributeNames: []types.QueueAttributeName{"SentTimestamp"}}) // the deprecated form of MessageSystemAttributeNames
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	if len(out.Messages[0].MessageAttributes) != 2 || len(out.Messages[0].Attributes) != 1 || out.Messages[0].Attributes["SentTimestamp"] == "" {
		t.Errorf("filtered attributes: %v %v", out.Messages[0].MessageAttributes, out.Messages[0].Attributes)
	}

	// Delete settles; a second delete with the same (now stale) handle is a success
	// that settles nothing, as SQS answers on a standard queue.
	if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if h := e.headers.get("X-Okiba-Settled"); h != "true" {
		t.Errorf("x-okiba-settled = %q, want true", h)
	}
	if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatalf("stale delete on a standard queue: %v", err)
	}
	if h := e.headers.get("X-Okiba-Settled"); h != "false" {
		t.Errorf("x-okiba-settled = %q, want false", h)
	}
	// A lease that ended (visibility timeout over, message received again): its handle
	// settles nothing.
	e.send(t, url, "three")
	first := e.receiveUntil(t, url, 1, 1)[0]
	// receiveUntil long-polls: it does not ask again and again while the lease runs out.
	second := e.receiveUntil(t, url, 1, 30)[0]
	if *second.MessageId != *first.MessageId || second.Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("redelivery: %+v", second)
	}
	// A visibility change with the handle of a message received again is refused.
	_, err = e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: first.ReceiptHandle, VisibilityTimeout: 10})
	wantVisibilityGone(t, err, *first.ReceiptHandle)
	if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if h := e.headers.get("X-Okiba-Settled"); h != "false" {
		t.Errorf("delete with the first lease's handle: x-okiba-settled = %q", h)
	}
	if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: second.ReceiptHandle}); err != nil || e.headers.get("X-Okiba-Settled") != "true" {
		t.Fatalf("delete with the current handle: %v %q", err, e.headers.get("X-Okiba-Settled"))
	}
	// ... and with the handle of a deleted one.
	_, err = e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10})
	wantVisibilityGone(t, err, *m.ReceiptHandle)
	_, err = e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("garbage")})
	wantTyped[*types.ReceiptHandleIsInvalid](t, err)
	_, err = e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("garbage")})
	wantTyped[*types.ReceiptHandleIsInvalid](t, err)

	// ChangeMessageVisibility to 0 makes a message visible again at once.
	e.send(t, url, "four")
	var four types.Message
	for _, m := range e.receiveUntil(t, url, 1, 60) {
		if *m.Body == "four" {
			four = m
		}
	}
	if four.ReceiptHandle == nil {
		t.Fatal("message four not received")
	}
	if _, err := e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: four.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	// The lease merely ran out and the message was not received again: a visibility
	// change with its handle succeeds, as SQS answers, and changes nothing.
	before := e.attrs(t, url)
	if _, err := e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: four.ReceiptHandle, VisibilityTimeout: 600}); err != nil {
		t.Fatalf("visibility change of a lease that ran out: %v", err)
	}
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "1" || a["ApproximateNumberOfMessagesNotVisible"] != before["ApproximateNumberOfMessagesNotVisible"] {
		t.Errorf("the change of a lease that ran out had an effect: before %v, after %v", before, a)
	}
	again := e.receiveUntil(t, url, 1, 60)
	if *again[0].MessageId != *four.MessageId || again[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Errorf("after ChangeMessageVisibility(0): %+v", again[0])
	}

	// Bodies SQS does not allow are refused; nothing is sent.
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("bad \x00 char")})
	wantTyped[*types.InvalidMessageContents](t, err)
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"AWS.x": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("twelve")}}})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MessageSystemAttributeNames: []types.MessageSystemAttributeName{"Nope"}})
	wantTyped[*types.InvalidAttributeName](t, err)

	// Per-message delay on a standard queue.
	e.send(t, url, "later", func(in *awssqs.SendMessageInput) { in.DelaySeconds = 900 })
	if a := e.attrs(t, url); a["ApproximateNumberOfMessagesDelayed"] != "1" {
		t.Errorf("delayed count: %v", a["ApproximateNumberOfMessagesDelayed"])
	}
}

// A message up to 1 MiB goes through, and the queue's MaximumMessageSize is enforced.
func TestLargeMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "big", nil)
	body := strings.Repeat("a", 1<<20)
	e.send(t, url, body)
	got := e.receiveUntil(t, url, 1, 30)
	if len(*got[0].Body) != 1<<20 {
		t.Errorf("body of %d bytes", len(*got[0].Body))
	}
	_, err := e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body + "b")})
	wantAPIError(t, err, "InvalidParameterValue")
	small := e.createQueue(t, "small", map[string]string{"MaximumMessageSize": "1024"})
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(small), MessageBody: aws.String(strings.Repeat("x", 1025))})
	wantAPIError(t, err, "InvalidParameterValue")
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	_, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("nofifo.fifo")})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("plain"), Attributes: map[string]string{"FifoQueue": "true"}})
	wantAPIError(t, err, "InvalidParameterValue")

	url := e.createQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "queue"})
	a := e.attrs(t, url)
	if a["FifoQueue"] != "true" || a["ContentBasedDeduplication"] != "false" || a["FifoThroughputLimit"] != "perMessageGroupId" || a["DeduplicationScope"] != "queue" {
		t.Errorf("FIFO attributes: %v", a)
	}

	// Order within each group; one receive may take several of one group.
	var seqs []string
	for i := range 4 {
		out := e.send(t, url, fmt.Sprintf("a%d", i), group("A", fmt.Sprintf("a%d", i)))
		seqs = append(seqs, *out.SequenceNumber)
		e.send(t, url, fmt.Sprintf("b%d", i), group("B", fmt.Sprintf("b%d", i)))
	}
	if !slices.IsSorted(seqs) {
		t.Errorf("sequence numbers not increasing: %v", seqs)
	}
	// A duplicate returns the original's id and sequence number and enqueues nothing.
	dup := e.send(t, url, "a0 again", group("A", "a0"))
	if dup.SequenceNumber == nil || *dup.SequenceNumber != seqs[0] {
		t.Errorf("duplicate's SequenceNumber = %v, want the original's %s", dup.SequenceNumber, seqs[0])
	}
	first, _ := e.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
	if first.Attributes["ApproximateNumberOfMessages"] != "8" {
		t.Errorf("after a duplicate: %v messages", first.Attributes["ApproximateNumberOfMessages"])
	}
	got := map[string][]string{}
	var receipts []*string
	for len(receipts) < 8 {
		msgs := e.receiveUntil(t, url, 1, 30)
		for _, m := range msgs {
			g := m.Attributes["MessageGroupId"]
			got[g] = append(got[g], *m.Body)
			receipts = append(receipts, m.ReceiptHandle)
			if m.Attributes["SequenceNumber"] == "" || m.Attributes["MessageDeduplicationId"] == "" {
				t.Errorf("FIFO system attributes: %v", m.Attributes)
			}
			if *m.Body == "a0" && *m.MessageId != *dup.MessageId {
				t.Errorf("duplicate send returned %s, the original is %s", *dup.MessageId, *m.MessageId)
			}
		}
	}
	if !slices.Equal(got["A"], []string{"a0", "a1", "a2", "a3"}) || !slices.Equal(got["B"], []string{"b0", "b1", "b2", "b3"}) {
		t.Errorf("order: %v", got)
	}
	for _, r := range receipts {
		if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: r}); err != nil {
			t.Fatal(err)
		}
	}
	// On a FIFO queue a stale handle is an error, in SQS's words.
	_, err = e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: receipts[0]})
	wantAPIMessage(t, err, "InvalidParameterValue", "Value "+*receipts[0]+" for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.")
	_, err = e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: receipts[0], VisibilityTimeout: 5})
	wantVisibilityGone(t, err, *receipts[0])

	// FIFO rules: a group is required, a per-message delay is refused, a dedup id is
	// required without content-based dedup.
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("x")})
	wantAPIError(t, err, "MissingParameter")
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("x"), DelaySeconds: 5})
	wantAPIError(t, err, "InvalidParameterValue")
	_, err = e.c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
	wantAPIError(t, err, "InvalidParameterValue")
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "0" {
		t.Errorf("refused sends enqueued: %v", a["ApproximateNumberOfMessages"])
	}
}

func TestFIFODedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "content.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	one := e.send(t, url, "same body", group("g1", ""))
	two := e.send(t, url, "same body", group("g2", ""))
	three := e.send(t, url, "other body", group("g1", ""))
	if *one.MessageId != *two.MessageId || *one.MessageId == *three.MessageId {
		t.Errorf("content dedup: %s %s %s", *one.MessageId, *two.MessageId, *three.MessageId)
	}
	msgs := e.receiveUntil(t, url, 2, 30)
	sum := sha256.Sum256([]byte("same body"))
	for _, m := range msgs {
		if *m.Body == "same body" && m.Attributes["MessageDeduplicationId"] != hex.EncodeToString(sum[:]) {
			t.Errorf("content-based dedup id: %v", m.Attributes["MessageDeduplicationId"])
		}
	}

	// With DeduplicationScope=messageGroup the same id in two groups is two messages.
	scoped := e.createQueue(t, "scoped.fifo", map[string]string{"FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})
	a := e.send(t, scoped, "x", group("g1", "same"))
	b := e.send(t, scoped, "y", group("g2", "same"))
	c := e.send(t, scoped, "z", group("g1", "same"))
	if *a.MessageId == *b.MessageId || *a.MessageId != *c.MessageId {
		t.Errorf("group-scoped dedup: %s %s %s", *a.MessageId, *b.MessageId, *c.MessageId)
	}
	// Changing ContentBasedDeduplication later works; FifoQueue cannot change.
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(scoped), Attributes: map[string]string{"ContentBasedDeduplication": "true"}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(scoped), Attributes: map[string]string{"FifoQueue": "false"}})
	wantTyped[*types.InvalidAttributeName](t, err)
}

func TestReceiveRequestAttemptID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "attempt.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	for i := range 3 {
		e.send(t, url, fmt.Sprintf("m%d", i), group("g", ""))
	}
	recv := func(id string) []types.Message {
		out, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 2,
			ReceiveRequestAttemptId: aws.String(id), VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		return out.Messages
	}
	first := recv("attempt-1")
	retry := recv("attempt-1")
	if len(first) != 2 || len(retry) != 2 {
		t.Fatalf("first %d, retry %d messages", len(first), len(retry))
	}
	for i := range first {
		if *first[i].MessageId != *retry[i].MessageId || *first[i].ReceiptHandle != *retry[i].ReceiptHandle {
			t.Errorf("retry %d differs: %s/%s", i, *first[i].MessageId, *retry[i].MessageId)
		}
	}
	// Another attempt id is a new receive: the group is held, so nothing comes.
	if other := recv("attempt-2"); len(other) != 0 {
		t.Errorf("a new attempt while the group is in flight got %d messages", len(other))
	}
	// Once a message of the attempt is deleted the retry is a new receive.
	if _, err := e.c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if again := recv("attempt-1"); len(again) != 0 {
		t.Errorf("retry after a delete replayed %d messages", len(again))
	}
}

func TestRedriveAndMoveTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	dlq := e.createQueue(t, "jobs-dlq", nil)
	dlqARN := e.attrs(t, dlq)["QueueArn"]
	_, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs"),
		Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:missing","maxReceiveCount":"2"}`}})
	wantTyped[*types.InvalidAttributeValue](t, err)
	src := e.createQueue(t, "jobs", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":"2"}`})
	if rp := e.attrs(t, src)["RedrivePolicy"]; !strings.Contains(rp, dlqARN) || !strings.Contains(rp, `"maxReceiveCount":2`) {
		t.Errorf("RedrivePolicy: %s", rp)
	}
	srcs, err := e.c.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq)})
	if err != nil || len(srcs.QueueUrls) != 1 || srcs.QueueUrls[0] != src {
		t.Errorf("ListDeadLetterSourceQueues: %v %v", srcs, err)
	}

	const n = 3
	for i := range n {
		e.send(t, src, fmt.Sprintf("poison %d", i))
	}
	// Each lease is ended at once with ChangeMessageVisibility(0); the second one's end
	// dead-letters the message.
	for range 2 {
		for _, m := range e.receiveUntil(t, src, n, 30) {
			if _, err := e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(src), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var dead []types.Message
	testkit.Eventually(t, 15*time.Second, func() bool {
		a := e.attrs(t, dlq)
		return a["ApproximateNumberOfMessages"] == strconv.Itoa(n)
	}, "dead letters")
	out, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameDeadLetterQueueSourceArn}})
	if err != nil || len(out.Messages) != n {
		t.Fatalf("dead letters: %v %v", out, err)
	}
	dead = out.Messages
	for _, m := range dead {
		if _, err := e.c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlq), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if got := dead[0].Attributes["DeadLetterQueueSourceArn"]; got != "arn:aws:sqs:us-east-1:000000000000:jobs" {
		t.Errorf("DeadLetterQueueSourceArn = %q", got)
	}

	// Move them back to their source.
	start, err := e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqARN)})
	if err != nil {
		t.Fatal(err)
	}
	var task types.ListMessageMoveTasksResultEntry
	testkit.Eventually(t, 15*time.Second, func() bool {
		out, err := e.c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqARN)})
		if err != nil {
			t.Fatal(err)
		}
		task = out.Results[0]
		return aws.ToString(task.Status) == "COMPLETED"
	}, "the move task to complete")
	if task.ApproximateNumberOfMessagesMoved != n || aws.ToInt64(task.ApproximateNumberOfMessagesToMove) != n {
		t.Errorf("task: %+v", task)
	}
	back := e.receiveUntil(t, src, n, 30)
	if back[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Errorf("redriven message's receive count: %v", back[0].Attributes["ApproximateReceiveCount"])
	}
	_, err = e.c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: start.TaskHandle})
	wantTyped[*types.ResourceNotFoundException](t, err)

	// A slow task into an explicit destination, cancelled while it runs.
	other := e.createQueue(t, "elsewhere", nil)
	for i := range 20 {
		e.send(t, dlq, fmt.Sprintf("to move %d", i))
	}
	slow, err := e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqARN),
		DestinationArn: aws.String(e.attrs(t, other)["QueueArn"]), MaxNumberOfMessagesPerSecond: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqARN)})
	wantAPIError(t, err, "InvalidParameterValue")
	if _, err := e.c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: slow.TaskHandle}); err != nil {
		t.Fatal(err)
	}
	list, err := e.c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqARN), MaxResults: aws.Int32(10)})
	if err != nil || len(list.Results) != 2 || aws.ToString(list.Results[0].Status) != "CANCELLED" || aws.ToString(list.Results[1].Status) != "COMPLETED" {
		t.Errorf("tasks: %+v %v", list, err)
	}
	_, err = e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.attrs(t, other)["QueueArn"])})
	wantAPIError(t, err, "InvalidParameterValue") // not a dead-letter queue
	_, err = e.c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:nope")})
	wantTyped[*types.ResourceNotFoundException](t, err)

	// RedriveAllowPolicy is enforced when a source names the queue.
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(dlq),
		Attributes: map[string]string{"RedriveAllowPolicy": `{"redrivePermission":"denyAll"}`}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs2"),
		Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":5}`}})
	wantTyped[*types.InvalidAttributeValue](t, err)
	// Removing the redrive policy.
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(src), Attributes: map[string]string{"RedrivePolicy": ""}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.attrs(t, src)["RedrivePolicy"]; ok {
		t.Error("RedrivePolicy still set")
	}
}

func TestLongPolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "poll", nil)
	// An empty queue: the receive waits its WaitTimeSeconds, then answers empty.
	start := time.Now()
	out, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("empty long poll: %v %v", out, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("long poll returned after %v", d)
	}
	// A message sent while a receiver waits reaches it before its wait ends.
	got := make(chan []types.Message, 1)
	go func() {
		out, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		if err != nil {
			t.Error(err)
		}
		got <- out.Messages
	}()
	start = time.Now()
	e.send(t, url, "wake up")
	msgs := testkit.Recv(t, got, 25*time.Second, "the long poll to answer")
	if len(msgs) != 1 || *msgs[0].Body != "wake up" {
		t.Errorf("long poll got %v", msgs)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("long poll answered after %v", d)
	}
	// The queue's ReceiveMessageWaitTimeSeconds applies when the request gives none.
	slow := e.createQueue(t, "slowpoll", map[string]string{"ReceiveMessageWaitTimeSeconds": "1"})
	start = time.Now()
	if _, err := e.c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(slow)}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("queue default wait: returned after %v", d)
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	url := e.createQueue(t, "batch", nil)
	entry := func(id, body string) types.SendMessageBatchRequestEntry {
		return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)}
	}
	out, err := e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		entry("ok1", "one"), entry("bad", "nul \x00"), entry("ok2", "two"),
		{Id: aws.String("delay"), MessageBody: aws.String("d"), DelaySeconds: 901},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Successful) != 2 || len(out.Failed) != 2 {
		t.Fatalf("batch: %+v", out)
	}
	for _, f := range out.Failed {
		if !f.SenderFault || (*f.Id == "bad" && *f.Code != "InvalidMessageContents") || (*f.Id == "delay" && *f.Code != "InvalidParameterValue") {
			t.Errorf("failed entry: %+v", f)
		}
	}

	// Request-level errors change nothing.
	many := make([]types.SendMessageBatchRequestEntry, 11)
	for i := range many {
		many[i] = entry(fmt.Sprint("e", i), "x")
	}
	_, err = e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: many})
	wantTyped[*types.TooManyEntriesInBatchRequest](t, err)
	_, err = e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{entry("a", "x"), entry("a", "y")}})
	wantTyped[*types.BatchEntryIdsNotDistinct](t, err)
	_, err = e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{entry("a b", "x")}})
	wantTyped[*types.InvalidBatchEntryId](t, err)
	_, err = e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{}})
	wantTyped[*types.EmptyBatchRequest](t, err)
	half := strings.Repeat("h", 600<<10)
	_, err = e.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{entry("a", half), entry("b", half)}})
	wantTyped[*types.BatchRequestTooLong](t, err)
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "2" {
		t.Errorf("messages after the refused batches: %s", a["ApproximateNumberOfMessages"])
	}

	msgs := e.receiveUntil(t, url, 2, 30)
	cv, err := e.c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("m0"), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 60},
		{Id: aws.String("m1"), ReceiptHandle: msgs[1].ReceiptHandle, VisibilityTimeout: 120},
		{Id: aws.String("junk"), ReceiptHandle: aws.String("junk"), VisibilityTimeout: 60},
	}})
	if err != nil || len(cv.Successful) != 2 || len(cv.Failed) != 1 || *cv.Failed[0].Code != "ReceiptHandleIsInvalid" || !cv.Failed[0].SenderFault {
		t.Fatalf("ChangeMessageVisibilityBatch: %+v %v", cv, err)
	}
	del, err := e.c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("m0"), ReceiptHandle: msgs[0].ReceiptHandle},
		{Id: aws.String("m1"), ReceiptHandle: msgs[1].ReceiptHandle},
		{Id: aws.String("junk"), ReceiptHandle: aws.String("junk")},
	}})
	if err != nil || len(del.Successful) != 2 || len(del.Failed) != 1 || *del.Failed[0].Code != "ReceiptHandleIsInvalid" {
		t.Fatalf("DeleteMessageBatch: %+v %v", del, err)
	}
	// Deleting the same handles again: successes that settle nothing (standard queue).
	del, err = e.c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("m0"), ReceiptHandle: msgs[0].ReceiptHandle},
	}})
	if err != nil || len(del.Successful) != 1 || e.headers.get("X-Okiba-Unsettled") != "m0" {
		t.Fatalf("stale DeleteMessageBatch: %+v %v %q", del, err, e.headers.get("X-Okiba-Unsettled"))
	}
	cv, err = e.c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("m0"), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 60},
	}})
	if err != nil || len(cv.Failed) != 1 || *cv.Failed[0].Code != "ReceiptHandleIsInvalid" || !cv.Failed[0].SenderFault ||
		*cv.Failed[0].Message != "Message does not exist or is not available for visibility timeout change" {
		t.Fatalf("ChangeMessageVisibilityBatch on settled: %+v %v", cv, err)
	}
}

func TestPurgeRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{FakeClock: true})
	ctx := ctxT(t)
	url := e.createQueue(t, "purged", nil)
	e.send(t, url, "a")
	e.send(t, url, "b")
	if _, err := e.c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	e.send(t, url, "c")
	_, err := e.c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)})
	wantTyped[*types.PurgeQueueInProgress](t, err)
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "1" {
		t.Errorf("after purge and a refused purge: %s messages", a["ApproximateNumberOfMessages"])
	}
	e.srv.Clock.Advance(61 * time.Second)
	if _, err := e.c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("purge after 61 s: %v", err)
	}
	if a := e.attrs(t, url); a["ApproximateNumberOfMessages"] != "0" {
		t.Errorf("after the second purge: %s messages", a["ApproximateNumberOfMessages"])
	}
}

func TestBackpressureThrottles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	e.srv.PutQueue(t, "tiny", api.QueueConfig{MaxMessages: aws.Int64(1)})
	once := e.client("AKID", "secret", 1)
	if _, err := once.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String("tiny"), MessageBody: aws.String("1")}); err != nil {
		t.Fatal(err)
	}
	_, err := once.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String("tiny"), MessageBody: aws.String("2")})
	wantTyped[*types.RequestThrottled](t, err)
	if retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) != aws.TrueTernary {
		t.Errorf("the SDK does not treat %v as throttling", err)
	}
	out, err := once.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String("tiny"), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("a")}, {Id: aws.String("b"), MessageBody: aws.String("b")}}})
	wantTyped[*types.RequestThrottled](t, err)
	_ = out
}

func TestNativeAndSQSShareQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	// Native queue, used through SQS.
	e.srv.CreateQueue(t, "native")
	got, err := e.c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("native")})
	if err != nil {
		t.Fatal(err)
	}
	a := e.attrs(t, *got.QueueUrl)
	if a["MessageRetentionPeriod"] != "1209600" || !strings.Contains(a["RedrivePolicy"], "native-dlq") || !strings.Contains(a["RedrivePolicy"], `"maxReceiveCount":10`) {
		t.Errorf("native queue seen through SQS: %v", a)
	}
	// CreateQueue without attributes on an existing queue returns it unchanged.
	if again := e.createQueue(t, "native", nil); again != *got.QueueUrl {
		t.Errorf("CreateQueue on a native queue: %s", again)
	}
	if _, err := e.srv.Client.Send(ctx, "native", client.Message{Body: []byte{0xff, 0x00, 'b', 'i', 'n'}, Headers: map[string]string{"content-type": "application/octet-stream"}}); err != nil {
		t.Fatal(err)
	}
	msgs := e.receiveUntil(t, *got.QueueUrl, 1, 30)
	e.send(t, *got.QueueUrl, "from sqs", func(in *awssqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}
	})
	m := msgs[0]
	raw, err := base64.StdEncoding.DecodeString(*m.Body)
	if err != nil || string(raw) != "\xff\x00bin" || *m.MessageAttributes["okiba.BodyEncoding"].StringValue != "base64" ||
		*m.MessageAttributes["content-type"].StringValue != "application/octet-stream" {
		t.Errorf("binary native message through SQS: %q %v", *m.Body, m.MessageAttributes)
	}
	// Received natively: the SQS message with its attribute as a header.
	leases, err := e.srv.Client.Receive(ctx, "native", client.ReceiveOptions{Max: 10})
	if err != nil || len(leases) != 1 || string(leases[0].Body) != "from sqs" || leases[0].Headers["k"] != "v" {
		t.Fatalf("native receive: %+v %v", leases, err)
	}

	// SQS queue, seen natively with SQS's defaults.
	e.createQueue(t, "fromsqs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	q, err := e.srv.Client.Queue(ctx, "fromsqs.fifo")
	if err != nil {
		t.Fatal(err)
	}
	c := q.Config
	if c.Retention.D() != 96*time.Hour || *c.MaxDeliveries != 0 || *c.DeadLetterQueue != "none" || !*c.OrderedGroups || !*c.ContentDedup {
		t.Errorf("SQS queue seen natively: %+v", c)
	}
	std := e.createQueue(t, "fromsqs", nil)
	q, _ = e.srv.Client.Queue(ctx, "fromsqs")
	if *q.Config.OrderedGroups {
		t.Error("an SQS standard queue orders groups")
	}
	if _, err := e.srv.Client.Send(ctx, "fromsqs", client.Message{Body: []byte("native"), Group: "g"}); err != nil {
		t.Fatal(err)
	}
	if m := e.receiveUntil(t, std, 1, 30)[0]; *m.Body != "native" || m.Attributes["MessageGroupId"] != "g" {
		t.Errorf("native message through SQS: %+v", m)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	const token = "tok3n-tok3n-tok3n-tok3n-tok3n"
	e := newEnv(t, okibatest.Options{Token: token})
	ctx := ctxT(t)
	// The token is the secret of the principal "admin", whose name is its access key id.
	good := e.client("admin", token, 1)
	if _, err := good.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("secure")}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client("admin", "wrong-wrong-wrong-wrong-wrong", 1).ListQueues(ctx, &awssqs.ListQueuesInput{})
	wantAPIError(t, err, "SignatureDoesNotMatch")
	_, err = e.client("okiba", token, 1).ListQueues(ctx, &awssqs.ListQueuesInput{})
	wantAPIError(t, err, "InvalidClientTokenId") // the former access key id of the token
	_, err = good.ListQueues(ctx, &awssqs.ListQueuesInput{}, func(o *awssqs.Options) { o.Region = "eu-west-1" })
	wantAPIError(t, err, "SignatureDoesNotMatch")
	if !strings.Contains(err.Error(), `"us-east-1"`) {
		t.Errorf("a signature for another region is not told the server's: %v", err)
	}
	// The native API still wants its bearer token.
	if _, err := e.srv.Client.Queue(ctx, "secure"); err != nil {
		t.Fatalf("native with token: %v", err)
	}
	anon, _ := client.New(e.srv.URL, client.Options{})
	if _, err := anon.Queue(ctx, "secure"); err == nil {
		t.Fatal("native API without the token answered")
	}
}

// A signature covers the action: one made over a request's body and host alone (as a
// GetQueueUrl seen on the wire would be replayed) is refused whatever action it is sent
// as, and the queue it names is left as it was. The front once accepted it, and purged
// and deleted the queue.
func TestSignatureCoversTheAction(t *testing.T) {
	t.Parallel()
	const token = "tok3n-tok3n-tok3n-tok3n-tok3n"
	e := newEnv(t, okibatest.Options{Token: token})
	e.c = e.client("admin", token, 1)
	url := e.createQueue(t, "victim", nil)
	e.send(t, url, "keep me")
	body := `{"QueueName":"victim","QueueUrl":"` + url + `"}`
	for _, action := range []string{"GetQueueUrl", "PurgeQueue", "DeleteQueue"} {
		status, code := rawSQS(t, e.srv.URL, "admin", token, body, nil, map[string]string{
			"X-Amz-Target": "AmazonSQS." + action, "Content-Type": "application/x-amz-json-1.0"})
		if status != http.StatusBadRequest || code != "IncompleteSignature" {
			t.Errorf("%s signed without its target: %d %s, want 400 IncompleteSignature", action, status, code)
		}
	}
	if n := e.attrs(t, url)["ApproximateNumberOfMessages"]; n != "1" {
		t.Fatalf("the queue holds %s messages after the replays, want 1", n)
	}
	// Signed as the SDKs sign, the same request is served.
	if status, code := rawSQS(t, e.srv.URL, "admin", token, body, map[string]string{
		"X-Amz-Target": "AmazonSQS.GetQueueUrl", "Content-Type": "application/x-amz-json-1.0"}, nil); status != http.StatusOK {
		t.Fatalf("a request signed over its target: %d %s", status, code)
	}
}

func TestSequenceNumbersAreNumbers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	url := e.createQueue(t, "seq.fifo", map[string]string{"FifoQueue": "true"})
	out := e.send(t, url, "x", group("g", "d"))
	if _, err := strconv.ParseUint(*out.SequenceNumber, 10, 64); err != nil || len(*out.SequenceNumber) != 20 {
		t.Errorf("SequenceNumber %q", *out.SequenceNumber)
	}
}
