"""Debian's boto3 (botocore 1.29) SNS and SQS clients against a real okiba.

Run by TestBoto3SNS (boto3_test.go) with /usr/bin/python3, in one process for every
case. OKIBA_URL is a server with authentication on which OKIBA_ADMIN_KEY/SECRET may do
everything and OKIBA_READER_KEY/SECRET only browse. Prints one line per step, and the
envelope it received as "envelope: <json>" for the Go test to verify its signature; any
failure raises.
"""

import json
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

URL = os.environ["OKIBA_URL"]
KEY, SECRET = os.environ["OKIBA_ADMIN_KEY"], os.environ["OKIBA_ADMIN_SECRET"]


def step(what):
    print("ok:", what, flush=True)


def client(service, key=KEY, secret=SECRET):
    return boto3.client(
        service, endpoint_url=URL, region_name="us-east-1",
        aws_access_key_id=key, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def error_of(fn, **kwargs):
    try:
        fn(**kwargs)
    except ClientError as e:
        return e
    raise AssertionError("%s succeeded, an error was expected" % fn.__name__)


def want_error(e, code, status=None):
    got = e.response["Error"]["Code"]
    assert got == code, "error code %r (%s), want %r" % (got, e, code)
    if status is not None:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == status, e.response["ResponseMetadata"]


def receive(sqs, url, n):
    got = []
    for _ in range(10):
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                  MessageAttributeNames=["All"], AttributeNames=["All"])
        for m in out.get("Messages", []):
            got.append(m)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if len(got) >= n:
            break
    assert len(got) == n, "received %d messages, want %d" % (len(got), n)
    return got


sns, sqs = client("sns"), client("sqs")

# --- topics ---------------------------------------------------------------------------
arn = sns.create_topic(Name="boto-news", Attributes={"DisplayName": "News"}, Tags=[{"Key": "team", "Value": "web"}])["TopicArn"]
assert arn == "arn:aws:sns:us-east-1:000000000000:boto-news", arn
assert sns.create_topic(Name="boto-news")["TopicArn"] == arn
attrs = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
assert attrs["DisplayName"] == "News" and attrs["Owner"] == "000000000000", attrs
sns.set_topic_attributes(TopicArn=arn, AttributeName="DeliveryPolicy", AttributeValue='{"http": {}}')
assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["DeliveryPolicy"] == '{"http": {}}'
assert [t["TopicArn"] for t in sns.list_topics()["Topics"]] == [arn]
sns.tag_resource(ResourceArn=arn, Tags=[{"Key": "env", "Value": "prod"}])
sns.untag_resource(ResourceArn=arn, TagKeys=["team"])
assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "env", "Value": "prod"}]
want_error(error_of(sns.create_topic, Name="bad name"), "InvalidParameter", 400)
want_error(error_of(sns.get_topic_attributes, TopicArn=arn + "-nope"), "NotFound", 404)
step("topics: create (again), attributes, list, tags, refusals")

# --- subscriptions and delivery --------------------------------------------------------
url = sqs.create_queue(QueueName="boto-inbox")["QueueUrl"]
raw_url = sqs.create_queue(QueueName="boto-raw")["QueueUrl"]
qarn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
sub = sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=qarn, ReturnSubscriptionArn=True)["SubscriptionArn"]
raw_sub = sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=raw_url, ReturnSubscriptionArn=True,
                        Attributes={"RawMessageDelivery": "true", "FilterPolicy": '{"kind": ["order"]}'})["SubscriptionArn"]
subs = sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
assert sorted(s["SubscriptionArn"] for s in subs) == sorted([sub, raw_sub]), subs
assert len(sns.list_subscriptions()["Subscriptions"]) == 2
a = sns.get_subscription_attributes(SubscriptionArn=raw_sub)["Attributes"]
assert a["RawMessageDelivery"] == "true" and a["FilterPolicy"] == '{"kind": ["order"]}' and a["Endpoint"].endswith(":boto-raw"), a
assert sns.confirm_subscription(TopicArn=arn, Token=sub)["SubscriptionArn"] == sub

mid = sns.publish(TopicArn=arn, Message="an order", Subject="hello",
                  MessageAttributes={"kind": {"DataType": "String", "StringValue": "order"},
                                     "qty": {"DataType": "Number", "StringValue": "3"}})["MessageId"]
sns.publish(TopicArn=arn, Message="a note", MessageAttributes={"kind": {"DataType": "String", "StringValue": "note"}})
env = [json.loads(m["Body"]) for m in receive(sqs, url, 2)]
first = [e for e in env if e["Message"] == "an order"][0]
assert first["MessageId"] == mid and first["Subject"] == "hello" and first["TopicArn"] == arn, first
assert first["MessageAttributes"]["qty"] == {"Type": "Number", "Value": "3"}, first
print("envelope:", json.dumps(first), flush=True)
(m,) = receive(sqs, raw_url, 1)
assert m["Body"] == "an order", m
assert m["MessageAttributes"]["qty"] == {"StringValue": "3", "DataType": "Number"}, m["MessageAttributes"]
step("subscribe (envelope, raw with a filter), publish, receive with boto3's SQS client")

out = sns.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[
    {"Id": "a", "Message": "one", "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "order"}}},
    {"Id": "b", "Message": "two", "MessageAttributes": {"kind": {"DataType": "Number", "StringValue": "x"}}},
])
assert [s["Id"] for s in out["Successful"]] == ["a"] and out["Failed"][0]["Id"] == "b" and out["Failed"][0]["SenderFault"], out
assert [m["Body"] for m in receive(sqs, raw_url, 1)] == ["one"]
receive(sqs, url, 1)
want_error(error_of(sns.publish_batch, TopicArn=arn, PublishBatchRequestEntries=[{"Id": "x", "Message": "m"}] * 2), "BatchEntryIdsNotDistinct")
want_error(error_of(sns.publish, TopicArn=arn, Message=""), "InvalidParameter")
step("publish_batch with a failed entry; refusals")

sns.set_subscription_attributes(SubscriptionArn=sub, AttributeName="RawMessageDelivery", AttributeValue="true")
sns.publish(TopicArn=arn, Message="plain now")
assert [m["Body"] for m in receive(sqs, url, 1)] == ["plain now"]
sns.unsubscribe(SubscriptionArn=sub)
want_error(error_of(sns.get_subscription_attributes, SubscriptionArn=sub), "NotFound")
step("set_subscription_attributes, unsubscribe")

# --- FIFO ----------------------------------------------------------------------------
farn = sns.create_topic(Name="boto-pay.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "true"})["TopicArn"]
furl = sqs.create_queue(QueueName="boto-pay.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
sns.subscribe(TopicArn=farn, Protocol="sqs", Endpoint=furl, Attributes={"RawMessageDelivery": "true"})
p1 = sns.publish(TopicArn=farn, Message="pay", MessageGroupId="alice")
p2 = sns.publish(TopicArn=farn, Message="pay", MessageGroupId="alice")
assert p1["MessageId"] == p2["MessageId"] and p1["SequenceNumber"], (p1, p2)
(m,) = receive(sqs, furl, 1)
assert m["Body"] == "pay" and m["Attributes"]["MessageGroupId"] == "alice", m
want_error(error_of(sns.publish, TopicArn=farn, Message="no group"), "InvalidParameter")
step("FIFO: groups and deduplication")

# --- permissions ---------------------------------------------------------------------
reader = client("sns", os.environ["OKIBA_READER_KEY"], os.environ["OKIBA_READER_SECRET"])
assert [t["TopicArn"] for t in reader.list_topics()["Topics"]] == [arn], "the reader browses boto-news only"
want_error(error_of(reader.publish, TopicArn=arn, Message="no"), "AuthorizationError", 403)
want_error(error_of(client("sns", KEY, "not-the-admin-secret-at-all-1").list_topics), "SignatureDoesNotMatch", 403)
sns.delete_topic(TopicArn=arn)
sns.delete_topic(TopicArn=farn)
assert sns.list_topics()["Topics"] == []
step("permissions, signatures, delete_topic")
