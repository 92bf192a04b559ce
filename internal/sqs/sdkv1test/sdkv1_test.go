// Package sdkv1test runs aws-sdk-go v1 at v1.47.5, the last release whose SQS client
// speaks the query protocol (v1.47.6 moved it to JSON), against a real okiba server.
//
// It is a module of its own so that the product's go.mod never carries the deprecated
// SDK. TestAWSSDKGoV1 in internal/sqs (sdkv1_test.go) starts the server and runs this
// module's tests with `go test`, passing OKIBA_SQS_URL, OKIBA_SQS_KEY and
// OKIBA_SQS_SECRET; run on their own, without them, they skip and say so.
package sdkv1test

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go/aws"
	"github.com/aws/aws-sdk-go/aws/awserr"
	"github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/request"
	"github.com/aws/aws-sdk-go/aws/session"
	"github.com/aws/aws-sdk-go/service/sqs"
)

// client returns an SQS client of aws-sdk-go v1 for the server the wrapper started,
// signing with secret, and records the Content-Type of every request it sends.
func client(t *testing.T, secret string) (*sqs.SQS, *contentTypes) {
	t.Helper()
	url, key := os.Getenv("OKIBA_SQS_URL"), os.Getenv("OKIBA_SQS_KEY")
	if url == "" {
		t.Skip("SKIP: OKIBA_SQS_URL is not set: TestAWSSDKGoV1 in internal/sqs runs these tests against a server it starts (go test -run TestAWSSDKGoV1 ./internal/sqs)")
	}
	if secret == "" {
		secret = os.Getenv("OKIBA_SQS_SECRET")
	}
	sess, err := session.NewSession(&aws.Config{
		Region:      aws.String("us-east-1"),
		Endpoint:    aws.String(url),
		Credentials: credentials.NewStaticCredentials(key, secret, ""),
		MaxRetries:  aws.Int(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sqs.New(sess)
	seen := &contentTypes{}
	c.Handlers.Send.PushFront(func(r *request.Request) { seen.add(r.HTTPRequest.Header.Get("Content-Type")) })
	return c, seen
}

type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *contentTypes) add(ct string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[ct]++
}

// wantCode fails unless err is an AWS error with the query protocol's code and status.
func wantCode(t *testing.T, what string, err error, code string, status int) {
	t.Helper()
	var rf awserr.RequestFailure
	if !errors.As(err, &rf) {
		t.Fatalf("%s: %v, want the error %s", what, err, code)
	}
	if rf.Code() != code || rf.StatusCode() != status {
		t.Fatalf("%s: %s (%d) %q, want %s (%d)", what, rf.Code(), rf.StatusCode(), rf.Message(), code, status)
	}
	if rf.RequestID() == "" {
		t.Errorf("%s: the error has no request id", what)
	}
}

// md5OfAttributes is SQS's digest of message attributes, written from its documented
// algorithm: for each attribute by name, the length-prefixed name and data type, a
// transport byte (1 string, 2 binary) and the length-prefixed value.
func md5OfAttributes(attrs map[string]*sqs.MessageAttributeValue) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New()
	put := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		put([]byte(n))
		put([]byte(*a.DataType))
		if strings.HasPrefix(*a.DataType, "Binary") {
			h.Write([]byte{2})
			put(a.BinaryValue)
		} else {
			h.Write([]byte{1})
			put([]byte(*a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestQueryProtocol drives every kind of call an aws-sdk-go v1 application makes, with
// the SDK's own checksum validation of bodies on: queues and their attributes, tags,
// sends with message attributes, receives with every attribute, visibility changes,
// deletes, the three batches with a failed entry each, FIFO order and deduplication,
// the purge limit, and errors in the query protocol's codes.
func TestQueryProtocol(t *testing.T) {
	c, seen := client(t, "")

	// --- queues and their attributes ----------------------------------------------
	dlq, err := c.CreateQueue(&sqs.CreateQueueInput{QueueName: aws.String("v1-dead")})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	work, err := c.CreateQueue(&sqs.CreateQueueInput{
		QueueName:  aws.String("v1-work"),
		Attributes: map[string]*string{"VisibilityTimeout": aws.String("40"), "MaximumMessageSize": aws.String("262144")},
		Tags:       map[string]*string{"team": aws.String("payments")},
	})
	if err != nil {
		t.Fatalf("CreateQueue with attributes and tags: %v", err)
	}
	url := *work.QueueUrl
	if !strings.HasSuffix(url, "/000000000000/v1-work") {
		t.Fatalf("QueueUrl %q", url)
	}
	// The same name with the same attributes is the same queue; with others, an error.
	if again, err := c.CreateQueue(&sqs.CreateQueueInput{QueueName: aws.String("v1-work"),
		Attributes: map[string]*string{"VisibilityTimeout": aws.String("40"), "MaximumMessageSize": aws.String("262144")}}); err != nil || *again.QueueUrl != url {
		t.Fatalf("CreateQueue again, same attributes: %v %v", again, err)
	}
	_, err = c.CreateQueue(&sqs.CreateQueueInput{QueueName: aws.String("v1-work"), Attributes: map[string]*string{"VisibilityTimeout": aws.String("41")}})
	wantCode(t, "CreateQueue with other attributes", err, sqs.ErrCodeQueueNameExists, 400)
	if sqs.ErrCodeQueueNameExists != "QueueAlreadyExists" {
		t.Fatalf("this SDK's QueueNameExists code is %q: not the query protocol's", sqs.ErrCodeQueueNameExists)
	}
	got, err := c.GetQueueUrl(&sqs.GetQueueUrlInput{QueueName: aws.String("v1-work")})
	if err != nil || *got.QueueUrl != url {
		t.Fatalf("GetQueueUrl: %v %v", got, err)
	}
	_, err = c.GetQueueUrl(&sqs.GetQueueUrlInput{QueueName: aws.String("v1-nowhere")})
	wantCode(t, "GetQueueUrl of a missing queue", err, sqs.ErrCodeQueueDoesNotExist, 400)
	if sqs.ErrCodeQueueDoesNotExist != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Fatalf("this SDK's QueueDoesNotExist code is %q: not the query protocol's", sqs.ErrCodeQueueDoesNotExist)
	}
	list, err := c.ListQueues(&sqs.ListQueuesInput{QueueNamePrefix: aws.String("v1-")})
	if err != nil || len(list.QueueUrls) != 2 || *list.QueueUrls[0] != *dlq.QueueUrl || *list.QueueUrls[1] != url {
		t.Fatalf("ListQueues: %v %v", list, err)
	}
	dlqAttrs, err := c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []*string{aws.String("QueueArn")}})
	if err != nil {
		t.Fatalf("GetQueueAttributes QueueArn: %v", err)
	}
	dlqArn := *dlqAttrs.Attributes["QueueArn"]
	if dlqArn != "arn:aws:sqs:us-east-1:000000000000:v1-dead" {
		t.Fatalf("QueueArn %q", dlqArn)
	}
	redrive := `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"5"}`
	if _, err := c.SetQueueAttributes(&sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]*string{
		"RedrivePolicy": aws.String(redrive), "ReceiveMessageWaitTimeSeconds": aws.String("1")}}); err != nil {
		t.Fatalf("SetQueueAttributes: %v", err)
	}
	attrs, err := c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []*string{aws.String("All")}})
	if err != nil {
		t.Fatalf("GetQueueAttributes All: %v", err)
	}
	for k, want := range map[string]string{"VisibilityTimeout": "40", "MaximumMessageSize": "262144", "ReceiveMessageWaitTimeSeconds": "1",
		"ApproximateNumberOfMessages": "0", "QueueArn": "arn:aws:sqs:us-east-1:000000000000:v1-work"} {
		if v := attrs.Attributes[k]; v == nil || *v != want {
			t.Errorf("attribute %s = %v, want %s", k, aws.StringValue(v), want)
		}
	}
	if v := attrs.Attributes["RedrivePolicy"]; v == nil || !strings.Contains(*v, dlqArn) || !strings.Contains(*v, "5") {
		t.Errorf("RedrivePolicy = %v", aws.StringValue(v))
	}
	_, err = c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []*string{aws.String("NoSuchAttribute")}})
	wantCode(t, "GetQueueAttributes of an unknown attribute", err, "InvalidAttributeName", 400)
	sources, err := c.ListDeadLetterSourceQueues(&sqs.ListDeadLetterSourceQueuesInput{QueueUrl: dlq.QueueUrl})
	if err != nil || len(sources.QueueUrls) != 1 || *sources.QueueUrls[0] != url {
		t.Errorf("ListDeadLetterSourceQueues: %v %v", sources, err)
	}

	// --- tags ----------------------------------------------------------------------
	if _, err := c.TagQueue(&sqs.TagQueueInput{QueueUrl: aws.String(url), Tags: map[string]*string{"env": aws.String("test")}}); err != nil {
		t.Fatalf("TagQueue: %v", err)
	}
	if _, err := c.UntagQueue(&sqs.UntagQueueInput{QueueUrl: aws.String(url), TagKeys: []*string{aws.String("team")}}); err != nil {
		t.Fatalf("UntagQueue: %v", err)
	}
	tags, err := c.ListQueueTags(&sqs.ListQueueTagsInput{QueueUrl: aws.String(url)})
	if err != nil || len(tags.Tags) != 1 || aws.StringValue(tags.Tags["env"]) != "test" {
		t.Fatalf("ListQueueTags: %v %v", tags, err)
	}

	// --- sends ---------------------------------------------------------------------
	mattrs := map[string]*sqs.MessageAttributeValue{
		"trace": {DataType: aws.String("String"), StringValue: aws.String("t-1 & <x>")},
		"n":     {DataType: aws.String("Number.int"), StringValue: aws.String("42")},
		"raw":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 0xfe, 0xff}},
	}
	body := "héllo <v1> & \"query\""
	sent, err := c.SendMessage(&sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: mattrs})
	if err != nil {
		t.Fatalf("SendMessage: %v", err) // the SDK checks MD5OfMessageBody itself
	}
	if aws.StringValue(sent.MD5OfMessageAttributes) != md5OfAttributes(mattrs) || aws.StringValue(sent.MD5OfMessageBody) != md5Hex(body) {
		t.Errorf("SendMessage digests: body %s attributes %s", aws.StringValue(sent.MD5OfMessageBody), aws.StringValue(sent.MD5OfMessageAttributes))
	}
	batch, err := c.SendMessageBatch(&sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []*sqs.SendMessageBatchRequestEntry{
		{Id: aws.String("b1"), MessageBody: aws.String("batch one")},
		{Id: aws.String("b2"), MessageBody: aws.String("batch two"), DelaySeconds: aws.Int64(0),
			MessageAttributes: map[string]*sqs.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}},
		{Id: aws.String("bad"), MessageBody: aws.String("bad \x00 body")},
	}})
	if err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	if len(batch.Successful) != 2 || len(batch.Failed) != 1 || *batch.Failed[0].Id != "bad" || *batch.Failed[0].Code != "InvalidMessageContents" || !*batch.Failed[0].SenderFault {
		t.Fatalf("SendMessageBatch with one bad entry: %v", batch)
	}
	_, err = c.SendMessageBatch(&sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []*sqs.SendMessageBatchRequestEntry{
		{Id: aws.String("x"), MessageBody: aws.String("1")}, {Id: aws.String("x"), MessageBody: aws.String("2")}}})
	wantCode(t, "SendMessageBatch with repeated ids", err, sqs.ErrCodeBatchEntryIdsNotDistinct, 400)
	_, err = c.SendMessage(&sqs.SendMessageInput{QueueUrl: aws.String(url + "-missing"), MessageBody: aws.String("x")})
	wantCode(t, "SendMessage to a missing queue", err, sqs.ErrCodeQueueDoesNotExist, 400)

	// --- receives ------------------------------------------------------------------
	received := map[string]*sqs.Message{}
	for deadline := time.Now().Add(10 * time.Second); len(received) < 3 && time.Now().Before(deadline); {
		out, err := c.ReceiveMessage(&sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: aws.Int64(10),
			AttributeNames: []*string{aws.String("All")}, MessageAttributeNames: []*string{aws.String("All")}, WaitTimeSeconds: aws.Int64(1)})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err) // the SDK checks every MD5OfBody
		}
		for _, m := range out.Messages {
			received[*m.Body] = m
		}
	}
	if len(received) != 3 {
		t.Fatalf("received %d of the 3 messages sent", len(received))
	}
	m := received[body]
	if m == nil || *m.MessageId != *sent.MessageId || aws.StringValue(m.MD5OfMessageAttributes) != md5OfAttributes(mattrs) {
		t.Fatalf("the message with attributes: %v", m)
	}
	if a := m.MessageAttributes; aws.StringValue(a["trace"].StringValue) != "t-1 & <x>" || aws.StringValue(a["n"].DataType) != "Number.int" ||
		string(a["raw"].BinaryValue) != "\x00\x01\xfe\xff" {
		t.Errorf("received message attributes: %v", a)
	}
	if n, _ := strconv.Atoi(aws.StringValue(m.Attributes["ApproximateReceiveCount"])); n != 1 {
		t.Errorf("ApproximateReceiveCount = %v", aws.StringValue(m.Attributes["ApproximateReceiveCount"]))
	}
	if ts, _ := strconv.ParseInt(aws.StringValue(m.Attributes["SentTimestamp"]), 10, 64); time.Since(time.UnixMilli(ts)) > time.Minute || ts == 0 {
		t.Errorf("SentTimestamp = %v", aws.StringValue(m.Attributes["SentTimestamp"]))
	}
	a, err := c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []*string{aws.String("ApproximateNumberOfMessages"), aws.String("ApproximateNumberOfMessagesNotVisible")}})
	if err != nil || aws.StringValue(a.Attributes["ApproximateNumberOfMessages"]) != "0" || aws.StringValue(a.Attributes["ApproximateNumberOfMessagesNotVisible"]) != "3" {
		t.Errorf("counts while 3 are in flight: %v %v", a, err)
	}
	_, err = c.ReceiveMessage(&sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: aws.Int64(11)})
	wantCode(t, "ReceiveMessage of 11", err, "InvalidParameterValue", 400)

	// --- visibility ----------------------------------------------------------------
	one, two := received["batch one"], received["batch two"]
	if _, err := c.ChangeMessageVisibility(&sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: one.ReceiptHandle, VisibilityTimeout: aws.Int64(0)}); err != nil {
		t.Fatalf("ChangeMessageVisibility to 0: %v", err)
	}
	again, err := c.ReceiveMessage(&sqs.ReceiveMessageInput{QueueUrl: aws.String(url), AttributeNames: []*string{aws.String("ApproximateReceiveCount")}, WaitTimeSeconds: aws.Int64(1)})
	if err != nil || len(again.Messages) != 1 || *again.Messages[0].Body != "batch one" || aws.StringValue(again.Messages[0].Attributes["ApproximateReceiveCount"]) != "2" {
		t.Fatalf("receive after a visibility change to 0: %v %v", again, err)
	}
	// The first handle is stale now: the message was received again.
	_, err = c.ChangeMessageVisibility(&sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: one.ReceiptHandle, VisibilityTimeout: aws.Int64(10)})
	wantCode(t, "ChangeMessageVisibility with a handle received again", err, "InvalidParameterValue", 400)
	vb, err := c.ChangeMessageVisibilityBatch(&sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []*sqs.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("fresh"), ReceiptHandle: again.Messages[0].ReceiptHandle, VisibilityTimeout: aws.Int64(100)},
		{Id: aws.String("forged"), ReceiptHandle: aws.String("not-a-receipt-handle"), VisibilityTimeout: aws.Int64(100)},
	}})
	if err != nil || len(vb.Successful) != 1 || *vb.Successful[0].Id != "fresh" || len(vb.Failed) != 1 || *vb.Failed[0].Code != "ReceiptHandleIsInvalid" {
		t.Fatalf("ChangeMessageVisibilityBatch: %v %v", vb, err)
	}

	// --- deletes -------------------------------------------------------------------
	if _, err := c.DeleteMessage(&sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	_, err = c.DeleteMessage(&sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("forged")})
	wantCode(t, "DeleteMessage with a forged handle", err, sqs.ErrCodeReceiptHandleIsInvalid, 404)
	db, err := c.DeleteMessageBatch(&sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []*sqs.DeleteMessageBatchRequestEntry{
		{Id: aws.String("one"), ReceiptHandle: again.Messages[0].ReceiptHandle},
		{Id: aws.String("two"), ReceiptHandle: two.ReceiptHandle},
		{Id: aws.String("forged"), ReceiptHandle: aws.String("forged")},
	}})
	if err != nil || len(db.Successful) != 2 || len(db.Failed) != 1 || *db.Failed[0].Id != "forged" || *db.Failed[0].Code != "ReceiptHandleIsInvalid" {
		t.Fatalf("DeleteMessageBatch: %v %v", db, err)
	}
	a, err = c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []*string{aws.String("All")}})
	if err != nil || aws.StringValue(a.Attributes["ApproximateNumberOfMessages"]) != "0" || aws.StringValue(a.Attributes["ApproximateNumberOfMessagesNotVisible"]) != "0" {
		t.Errorf("counts after every delete: %v %v", a, err)
	}

	// --- FIFO ----------------------------------------------------------------------
	fifo, err := c.CreateQueue(&sqs.CreateQueueInput{QueueName: aws.String("v1-orders.fifo"), Attributes: map[string]*string{"FifoQueue": aws.String("true")}})
	if err != nil {
		t.Fatalf("CreateQueue FIFO: %v", err)
	}
	var ids []string
	for i, b := range []string{"o1", "o2", "o3", "o1"} {
		dedup := b
		out, err := c.SendMessage(&sqs.SendMessageInput{QueueUrl: fifo.QueueUrl, MessageBody: aws.String(b), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(dedup)})
		if err != nil {
			t.Fatalf("FIFO send %d: %v", i, err)
		}
		if out.SequenceNumber == nil || *out.SequenceNumber == "" {
			t.Errorf("FIFO send %d: no SequenceNumber", i)
		}
		ids = append(ids, *out.MessageId)
	}
	if ids[3] != ids[0] {
		t.Errorf("a FIFO send with a dedup id seen before got id %s, want %s", ids[3], ids[0])
	}
	_, err = c.SendMessage(&sqs.SendMessageInput{QueueUrl: fifo.QueueUrl, MessageBody: aws.String("no group")})
	wantCode(t, "a FIFO send without MessageGroupId", err, "MissingParameter", 400)
	var order []string
	for len(order) < 3 {
		out, err := c.ReceiveMessage(&sqs.ReceiveMessageInput{QueueUrl: fifo.QueueUrl, MaxNumberOfMessages: aws.Int64(10),
			AttributeNames: []*string{aws.String("MessageGroupId"), aws.String("SequenceNumber")}, WaitTimeSeconds: aws.Int64(1)})
		if err != nil || len(out.Messages) == 0 {
			t.Fatalf("FIFO receive: %v %v (so far %v)", out, err, order)
		}
		var del []*sqs.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			order = append(order, *m.Body)
			if aws.StringValue(m.Attributes["MessageGroupId"]) != "g" {
				t.Errorf("FIFO message attributes: %v", m.Attributes)
			}
			del = append(del, &sqs.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if _, err := c.DeleteMessageBatch(&sqs.DeleteMessageBatchInput{QueueUrl: fifo.QueueUrl, Entries: del}); err != nil {
			t.Fatalf("FIFO DeleteMessageBatch: %v", err)
		}
	}
	if strings.Join(order, ",") != "o1,o2,o3" {
		t.Errorf("FIFO order %v, want o1,o2,o3", order)
	}

	// --- purge, delete --------------------------------------------------------------
	if _, err := c.SendMessage(&sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("to purge")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PurgeQueue(&sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("PurgeQueue: %v", err)
	}
	_, err = c.PurgeQueue(&sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
	wantCode(t, "a second PurgeQueue within 60 s", err, sqs.ErrCodePurgeQueueInProgress, 403)
	for _, u := range []string{url, *dlq.QueueUrl, *fifo.QueueUrl} {
		if _, err := c.DeleteQueue(&sqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
			t.Fatalf("DeleteQueue %s: %v", u, err)
		}
	}
	_, err = c.GetQueueAttributes(&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []*string{aws.String("All")}})
	wantCode(t, "GetQueueAttributes of a deleted queue", err, sqs.ErrCodeQueueDoesNotExist, 400)

	// Every call went as a form: this SDK spoke the query protocol, not JSON.
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for ct, n := range seen.seen {
		if !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			t.Errorf("%d requests with Content-Type %q: this SDK should speak only the query protocol", n, ct)
		}
	}
	if len(seen.seen) == 0 {
		t.Error("no request was recorded")
	}
}

// TestSignatures: a wrong secret is refused with the query protocol's code, and an
// unsigned request is refused before any action runs.
func TestSignatures(t *testing.T) {
	c, _ := client(t, "not-the-secret-of-anyone-at-all")
	_, err := c.ListQueues(&sqs.ListQueuesInput{})
	wantCode(t, "ListQueues signed with a wrong secret", err, "SignatureDoesNotMatch", http.StatusForbidden)
	anon, _ := client(t, "")
	anon.Config.Credentials = credentials.AnonymousCredentials
	_, err = anon.ListQueues(&sqs.ListQueuesInput{})
	wantCode(t, "ListQueues unsigned", err, "MissingAuthenticationToken", http.StatusForbidden)
}
