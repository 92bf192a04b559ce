package sns_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/okiba/okiba/okibatest"
)

// TestPublishEnvelope: a topic, an SQS queue subscribed to it, a publish; the queue's
// message is SNS's envelope, and its signature verifies with the certificate okiba
// serves at SigningCertURL.
func TestPublishEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	topicARN := e.createTopic(t, "orders", nil)
	if topicARN != "arn:aws:sns:us-east-1:000000000000:orders" {
		t.Fatalf("TopicArn %s", topicARN)
	}
	url, qarn := e.createQueue(t, "orders-audit")
	subARN := e.subscribe(t, topicARN, qarn, nil)
	if !strings.HasPrefix(subARN, topicARN+":") {
		t.Fatalf("SubscriptionArn %s", subARN)
	}
	pub, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String(`{"id": 7, "text": "héllo <&>"}`),
		Subject: aws.String("new order"), MessageAttributes: map[string]types.MessageAttributeValue{
			"region": {DataType: aws.String("String"), StringValue: aws.String("eu")},
			"price":  {DataType: aws.String("Number"), StringValue: aws.String("12.5")},
			"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := e.receive(t, url, 1)
	if len(msgs[0].MessageAttributes) != 0 {
		t.Errorf("an envelope delivery has message attributes %v", msgs[0].MessageAttributes)
	}
	n := parseEnvelope(t, *msgs[0].Body)
	if n.MessageId != *pub.MessageId || n.MessageId == *msgs[0].MessageId {
		t.Errorf("envelope MessageId %s, publish answered %s, queue message %s", n.MessageId, *pub.MessageId, *msgs[0].MessageId)
	}
	if n.TopicArn != topicARN || n.Subject != "new order" || n.Message != `{"id": 7, "text": "héllo <&>"}` || n.SignatureVersion != "1" {
		t.Errorf("envelope %+v", n)
	}
	if ts, err := time.Parse("2006-01-02T15:04:05.000Z", n.Timestamp); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("Timestamp %q: %v", n.Timestamp, err)
	}
	if !strings.HasPrefix(n.SigningCertURL, e.srv.URL+"/sns/") || !strings.HasPrefix(n.UnsubscribeURL, e.srv.URL+"/?Action=Unsubscribe&SubscriptionArn=") {
		t.Errorf("URLs %s %s", n.SigningCertURL, n.UnsubscribeURL)
	}
	if a := n.MessageAttributes; a["region"].Type != "String" || a["region"].Value != "eu" || a["price"].Type != "Number" || a["price"].Value != "12.5" ||
		a["blob"].Type != "Binary" || a["blob"].Value != base64.StdEncoding.EncodeToString([]byte{0, 1, 2}) || len(a) != 3 {
		t.Errorf("envelope MessageAttributes %+v", a)
	}
	verify(t, n)

	// SignatureVersion 2 signs with SHA-256.
	if _, err := e.sns.SetTopicAttributes(ctx, &awssns.SetTopicAttributesInput{TopicArn: aws.String(topicARN),
		AttributeName: aws.String("SignatureVersion"), AttributeValue: aws.String("2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("second")}); err != nil {
		t.Fatal(err)
	}
	n = parseEnvelope(t, *e.receive(t, url, 1)[0].Body)
	if n.SignatureVersion != "2" || n.Subject != "" || n.Message != "second" {
		t.Errorf("second envelope %+v", n)
	}
	verify(t, n)

	// A message published natively into the SNS subscription arrives as an envelope too.
	e.srv.Publish(t, "orders", okibatestRecord("native"))
	n = parseEnvelope(t, *e.receive(t, url, 1)[0].Body)
	if n.Message != "native" {
		t.Errorf("native record's envelope %+v", n)
	}
	verify(t, n)

	// MessageStructure=json: the sqs key, else default.
	if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), MessageStructure: aws.String("json"),
		Message: aws.String(`{"default": "for everyone", "sqs": "for queues"}`)}); err != nil {
		t.Fatal(err)
	}
	if n := parseEnvelope(t, *e.receive(t, url, 1)[0].Body); n.Message != "for queues" {
		t.Errorf("MessageStructure json delivered %q", n.Message)
	}

	// The envelope's UnsubscribeURL unsubscribes (without authentication, as on AWS);
	// nothing more arrives.
	resp, err := http.Get(n.UnsubscribeURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET UnsubscribeURL: %d", resp.StatusCode)
	}
	_, err = e.sns.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(subARN)})
	wantCode(t, err, "NotFound")
	if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("after")}); err != nil {
		t.Fatal(err)
	}
	e.empty(t, url)
}

// TestRawDeliveryAndFilters: a raw subscription gets the message as its body and the
// attributes as SQS message attributes; filter policies in both scopes choose what
// each subscription gets.
func TestRawDeliveryAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	topicARN := e.createTopic(t, "events", nil)
	rawURL, rawARN := e.createQueue(t, "raw")
	attrURL, attrARN := e.createQueue(t, "red-only")
	bodyURL, _ := e.createQueue(t, "big-orders")
	e.subscribe(t, topicARN, rawARN, map[string]string{"RawMessageDelivery": "true"})
	e.subscribe(t, topicARN, attrARN, map[string]string{"RawMessageDelivery": "true", "FilterPolicy": `{"color": ["red"], "price": [{"numeric": [">", 10]}]}`})
	bodySub := e.subscribe(t, topicARN, bodyURL, map[string]string{"FilterPolicyScope": "MessageBody", "FilterPolicy": `{"order": {"total": [{"numeric": [">=", 100]}]}}`})

	publish := func(body, color, price string) {
		t.Helper()
		if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String(body),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"color": {DataType: aws.String("String"), StringValue: aws.String(color)},
				"price": {DataType: aws.String("Number"), StringValue: aws.String(price)},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	publish(`{"order": {"total": 150}}`, "red", "11")
	publish(`{"order": {"total": 5}}`, "blue", "50")
	publish(`{"order": {"total": 5}}`, "red", "3")

	raw := e.receive(t, rawURL, 3)
	m := raw[0]
	if *m.Body != `{"order": {"total": 150}}` || *m.MessageAttributes["color"].StringValue != "red" || *m.MessageAttributes["color"].DataType != "String" ||
		*m.MessageAttributes["price"].DataType != "Number" || len(m.MessageAttributes) != 2 {
		t.Errorf("raw delivery: body %q attributes %v", *m.Body, m.MessageAttributes)
	}
	red := e.receive(t, attrURL, 1)
	if *red[0].MessageAttributes["price"].StringValue != "11" {
		t.Errorf("the attribute filter let through %v", red[0].MessageAttributes)
	}
	big := e.receive(t, bodyURL, 1)
	if n := parseEnvelope(t, *big[0].Body); n.Message != `{"order": {"total": 150}}` {
		t.Errorf("the body filter let through %q", n.Message)
	}
	e.empty(t, attrURL)
	e.empty(t, bodyURL)

	// The subscription's attributes, and a change of its filter.
	got, err := e.sns.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(bodySub)})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Attributes; a["FilterPolicyScope"] != "MessageBody" || a["RawMessageDelivery"] != "false" || a["Protocol"] != "sqs" ||
		a["TopicArn"] != topicARN || a["PendingConfirmation"] != "false" || !strings.Contains(a["FilterPolicy"], "total") {
		t.Errorf("GetSubscriptionAttributes %v", a)
	}
	if _, err := e.sns.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{SubscriptionArn: aws.String(bodySub),
		AttributeName: aws.String("FilterPolicy"), AttributeValue: aws.String(`{"order": {"total": [{"numeric": ["<", 10]}]}}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sns.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{SubscriptionArn: aws.String(bodySub),
		AttributeName: aws.String("RawMessageDelivery"), AttributeValue: aws.String("true")}); err != nil {
		t.Fatal(err)
	}
	publish(`{"order": {"total": 5}}`, "green", "1")
	if m := e.receive(t, bodyURL, 1)[0]; *m.Body != `{"order": {"total": 5}}` {
		t.Errorf("after the change: %q", *m.Body)
	}

	// A bad filter policy is refused, and the subscription keeps its own.
	_, err = e.sns.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{SubscriptionArn: aws.String(bodySub),
		AttributeName: aws.String("FilterPolicy"), AttributeValue: aws.String(`{"order": [`)})
	wantCode(t, err, "InvalidParameter")
	got, _ = e.sns.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(bodySub)})
	if !strings.Contains(got.Attributes["FilterPolicy"], "<") {
		t.Errorf("a refused filter changed the subscription: %v", got.Attributes["FilterPolicy"])
	}
}

// TestFIFO: a FIFO topic into a FIFO queue keeps groups and deduplicates.
func TestFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	topicARN := e.createTopic(t, "payments.fifo", map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "true"})
	url, qarn := e.createQueue(t, "payments.fifo")
	_, stdARN := e.createQueue(t, "standard")
	_, err := e.sns.Subscribe(ctx, &awssns.SubscribeInput{TopicArn: aws.String(topicARN), Protocol: aws.String("sqs"), Endpoint: aws.String(stdARN)})
	wantCode(t, err, "InvalidParameter")
	e.subscribe(t, topicARN, qarn, map[string]string{"RawMessageDelivery": "true"})

	first, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("pay 1"), MessageGroupId: aws.String("alice")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("pay 1"), MessageGroupId: aws.String("alice")})
	if err != nil {
		t.Fatal(err)
	}
	if *again.MessageId != *first.MessageId || first.SequenceNumber == nil {
		t.Errorf("a duplicate publish answered %s, the first %s (sequence %v)", *again.MessageId, *first.MessageId, first.SequenceNumber)
	}
	batch, err := e.sns.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: []types.PublishBatchRequestEntry{
		{Id: aws.String("a"), Message: aws.String("pay 2"), MessageGroupId: aws.String("alice"), MessageDeduplicationId: aws.String("d2")},
		{Id: aws.String("b"), Message: aws.String("pay 3"), MessageGroupId: aws.String("bob")},
		{Id: aws.String("c"), Message: aws.String("no group")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.Successful) != 2 || len(batch.Failed) != 1 || *batch.Failed[0].Id != "c" || *batch.Failed[0].Code != "InvalidParameter" || !batch.Failed[0].SenderFault {
		t.Errorf("PublishBatch: %d successful, failed %+v", len(batch.Successful), batch.Failed)
	}
	msgs := e.receive(t, url, 3)
	groups := map[string][]string{}
	for _, m := range msgs {
		g := m.Attributes["MessageGroupId"]
		groups[g] = append(groups[g], *m.Body)
	}
	if strings.Join(groups["alice"], ",") != "pay 1,pay 2" || strings.Join(groups["bob"], ",") != "pay 3" {
		t.Errorf("groups %v", groups)
	}

	// A FIFO publish needs a group.
	_, err = e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("x")})
	wantCode(t, err, "InvalidParameter")
}

// TestTopicsAndSubscriptions: the management actions, and bad input that changes
// nothing.
func TestTopicsAndSubscriptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	arn := e.createTopic(t, "news", map[string]string{"DisplayName": "News"})
	if again := e.createTopic(t, "news", map[string]string{"DisplayName": "News"}); again != arn {
		t.Errorf("CreateTopic again: %s", again)
	}
	_, err := e.sns.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String("news"), Attributes: map[string]string{"DisplayName": "Other"}})
	wantCode(t, err, "InvalidParameter")
	_, err = e.sns.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String("bad name!")})
	wantCode(t, err, "InvalidParameter")
	_, err = e.sns.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String("x.fifo")})
	wantCode(t, err, "InvalidParameter")
	_, err = e.sns.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String("okiba-sns")})
	wantCode(t, err, "InvalidParameter")

	a, err := e.sns.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	if a.Attributes["DisplayName"] != "News" || a.Attributes["TopicArn"] != arn || a.Attributes["Owner"] != "000000000000" || a.Attributes["Policy"] == "" {
		t.Errorf("GetTopicAttributes %v", a.Attributes)
	}
	_, err = e.sns.SetTopicAttributes(ctx, &awssns.SetTopicAttributesInput{TopicArn: aws.String(arn), AttributeName: aws.String("Bogus"), AttributeValue: aws.String("1")})
	wantCode(t, err, "InvalidParameter")
	_, err = e.sns.SetTopicAttributes(ctx, &awssns.SetTopicAttributesInput{TopicArn: aws.String(arn), AttributeName: aws.String("Policy"), AttributeValue: aws.String("not json")})
	wantCode(t, err, "InvalidParameter")
	if _, err := e.sns.SetTopicAttributes(ctx, &awssns.SetTopicAttributesInput{TopicArn: aws.String(arn), AttributeName: aws.String("KmsMasterKeyId"), AttributeValue: aws.String("alias/aws/sns")}); err != nil {
		t.Fatal(err)
	}
	a, _ = e.sns.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	if a.Attributes["KmsMasterKeyId"] != "alias/aws/sns" || a.Attributes["DisplayName"] != "News" {
		t.Errorf("after SetTopicAttributes %v", a.Attributes)
	}

	// Tags.
	if _, err := e.sns.TagResource(ctx, &awssns.TagResourceInput{ResourceArn: aws.String(arn), Tags: []types.Tag{{Key: aws.String("team"), Value: aws.String("web")}, {Key: aws.String("env"), Value: aws.String("prod")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sns.UntagResource(ctx, &awssns.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: []string{"env"}}); err != nil {
		t.Fatal(err)
	}
	tags, err := e.sns.ListTagsForResource(ctx, &awssns.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil || len(tags.Tags) != 1 || *tags.Tags[0].Key != "team" || *tags.Tags[0].Value != "web" {
		t.Fatalf("ListTagsForResource %+v %v", tags, err)
	}
	_, err = e.sns.ListTagsForResource(ctx, &awssns.ListTagsForResourceInput{ResourceArn: aws.String("arn:aws:sns:us-east-1:000000000000:nope")})
	wantCode(t, err, "ResourceNotFound")

	// Subscriptions: the same endpoint twice is one subscription; lists; bad input.
	_, qarn := e.createQueue(t, "inbox")
	sub := e.subscribe(t, arn, qarn, nil)
	if again := e.subscribe(t, arn, qarn, nil); again != sub {
		t.Errorf("Subscribe again: %s, first %s", again, sub)
	}
	for _, bad := range []*awssns.SubscribeInput{
		{TopicArn: aws.String(arn), Protocol: aws.String("email"), Endpoint: aws.String("a@example.com")},
		{TopicArn: aws.String(arn), Protocol: aws.String("sqs"), Endpoint: aws.String("arn:aws:sqs:eu-west-1:000000000000:inbox")},
		{TopicArn: aws.String(arn), Protocol: aws.String("sqs"), Endpoint: aws.String(qarn), Attributes: map[string]string{"RawMessageDelivery": "maybe"}},
		{TopicArn: aws.String(arn), Protocol: aws.String("sqs"), Endpoint: aws.String(qarn), Attributes: map[string]string{"FilterPolicy": `{"a": 1}`}},
		{TopicArn: aws.String(arn), Protocol: aws.String("sqs"), Endpoint: aws.String(qarn), Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:missing"}`}},
	} {
		_, err := e.sns.Subscribe(ctx, bad)
		wantCode(t, err, "InvalidParameter")
	}
	_, err = e.sns.Subscribe(ctx, &awssns.SubscribeInput{TopicArn: aws.String("arn:aws:sns:us-east-1:000000000000:nope"), Protocol: aws.String("sqs"), Endpoint: aws.String(qarn)})
	wantCode(t, err, "NotFound")
	list, err := e.sns.ListSubscriptionsByTopic(ctx, &awssns.ListSubscriptionsByTopicInput{TopicArn: aws.String(arn)})
	if err != nil || len(list.Subscriptions) != 1 || *list.Subscriptions[0].SubscriptionArn != sub || *list.Subscriptions[0].Endpoint != qarn {
		t.Fatalf("ListSubscriptionsByTopic %+v %v", list, err)
	}
	all, err := e.sns.ListSubscriptions(ctx, &awssns.ListSubscriptionsInput{})
	if err != nil || len(all.Subscriptions) != 1 {
		t.Fatalf("ListSubscriptions %+v %v", all, err)
	}
	conf, err := e.sns.ConfirmSubscription(ctx, &awssns.ConfirmSubscriptionInput{TopicArn: aws.String(arn), Token: aws.String(sub)})
	if err != nil || *conf.SubscriptionArn != sub {
		t.Fatalf("ConfirmSubscription %v %v", conf, err)
	}

	// A RedrivePolicy naming a queue that exists is kept.
	_, dlq := e.createQueue(t, "inbox-dlq")
	if _, err := e.sns.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{SubscriptionArn: aws.String(sub),
		AttributeName: aws.String("RedrivePolicy"), AttributeValue: aws.String(`{"deadLetterTargetArn":"` + dlq + `"}`)}); err != nil {
		t.Fatal(err)
	}
	sa, _ := e.sns.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(sub)})
	if !strings.Contains(sa.Attributes["RedrivePolicy"], dlq) {
		t.Errorf("RedrivePolicy %q", sa.Attributes["RedrivePolicy"])
	}

	// Publish refusals change nothing.
	for _, bad := range []*awssns.PublishInput{
		{TopicArn: aws.String(arn), Message: aws.String("")},
		{TopicArn: aws.String(arn), Message: aws.String("x"), Subject: aws.String(strings.Repeat("s", 101))},
		{TopicArn: aws.String(arn), Message: aws.String(strings.Repeat("x", 256<<10+1))},
		{TopicArn: aws.String(arn), Message: aws.String("x"), MessageStructure: aws.String("json")},
		{TopicArn: aws.String(arn), Message: aws.String("x"), MessageGroupId: aws.String("g")},
	} {
		_, err := e.sns.Publish(ctx, bad)
		wantCode(t, err, "InvalidParameter")
	}
	_, err = e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(arn), Message: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("ten")}}})
	wantCode(t, err, "ParameterValueInvalid")
	_, err = e.sns.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: []types.PublishBatchRequestEntry{
		{Id: aws.String("same"), Message: aws.String("1")}, {Id: aws.String("same"), Message: aws.String("2")}}})
	wantCode(t, err, "BatchEntryIdsNotDistinct")
	var eleven []types.PublishBatchRequestEntry
	for i := range 11 {
		eleven = append(eleven, types.PublishBatchRequestEntry{Id: aws.String(strings.Repeat("i", i+1)), Message: aws.String("m")})
	}
	_, err = e.sns.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: eleven})
	wantCode(t, err, "TooManyEntriesInBatchRequest")
	if ti, err := e.srv.Client.Topic(ctx, "news"); err != nil || ti.Partitions[0].End != 0 {
		t.Errorf("refused publishes left records: %+v %v", ti, err)
	}

	// ListTopics hides okiba's own state topic; DeleteTopic deletes the subscriptions.
	lt, err := e.sns.ListTopics(ctx, &awssns.ListTopicsInput{})
	if err != nil || len(lt.Topics) != 1 || *lt.Topics[0].TopicArn != arn {
		t.Fatalf("ListTopics %+v %v", lt, err)
	}
	if _, err := e.sns.DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sns.DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(arn)}); err != nil {
		t.Errorf("deleting a deleted topic: %v", err)
	}
	_, err = e.sns.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	wantCode(t, err, "NotFound")
	// The queue stays, as a queue outlives its subscriptions.
	if _, err := e.sqs.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("inbox")}); err != nil {
		t.Error(err)
	}
}

// TestRawDeliveryBeyondTenAttributes: SQS takes ten attributes on a message; a raw
// delivery of more goes to the subscription's dead-letter queue, or nowhere, as SNS.
func TestRawDeliveryBeyondTenAttributes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	ctx := ctxT(t)
	topicARN := e.createTopic(t, "wide", nil)
	withURL, withARN := e.createQueue(t, "with-dlq")
	dlqURL, dlqARN := e.createQueue(t, "wide-dlq")
	bareURL, bareARN := e.createQueue(t, "without-dlq")
	envURL, envARN := e.createQueue(t, "enveloped")
	e.subscribe(t, topicARN, withARN, map[string]string{"RawMessageDelivery": "true", "RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `"}`})
	e.subscribe(t, topicARN, bareARN, map[string]string{"RawMessageDelivery": "true"})
	e.subscribe(t, topicARN, envARN, nil)
	attrs := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		attrs["a"+strconv.Itoa(i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("wide"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	delete(attrs, "a10")
	if _, err := e.sns.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String("ten"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	if m := e.receive(t, withURL, 1)[0]; *m.Body != "ten" || len(m.MessageAttributes) != 10 {
		t.Errorf("with a dead-letter queue: %q with %d attributes", *m.Body, len(m.MessageAttributes))
	}
	if m := e.receive(t, bareURL, 1)[0]; *m.Body != "ten" {
		t.Errorf("without a dead-letter queue: %q", *m.Body)
	}
	if m := e.receive(t, dlqURL, 1)[0]; *m.Body != "wide" {
		t.Errorf("dead-letter queue: %q", *m.Body)
	}
	e.empty(t, withURL)
	e.empty(t, bareURL)
	// An envelope carries every attribute inside it.
	for _, m := range e.receive(t, envURL, 2) {
		if n := parseEnvelope(t, *m.Body); n.Message == "wide" && len(n.MessageAttributes) != 11 {
			t.Errorf("the envelope has %d attributes", len(n.MessageAttributes))
		}
	}
}
