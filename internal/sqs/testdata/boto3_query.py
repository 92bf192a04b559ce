"""Debian's boto3 (botocore 1.29, which speaks SQS's query protocol) against a real okiba.

Run by TestBoto3QueryProtocol (query_clients_test.go) with /usr/bin/python3, in one
process for every case. OKIBA_OPEN_URL is a server without authentication;
OKIBA_AUTH_URL one with it, where OKIBA_ADMIN_KEY/SECRET may do everything and
OKIBA_READER_KEY/SECRET may only browse. Prints one line per step; any failure raises.
"""

import base64
import hashlib
import json
import os
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import boto3
import botocore
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import ClientError

OPEN = os.environ["OKIBA_OPEN_URL"]
AUTH = os.environ["OKIBA_AUTH_URL"]
NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


def step(what):
    print("ok:", what, flush=True)


def client(url, key="AKIDEXAMPLE", secret="any-secret-will-do-here", service="sqs"):
    return boto3.client(
        service, endpoint_url=url, region_name="us-east-1",
        aws_access_key_id=key, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def error_of(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        return e
    raise AssertionError("%s succeeded, an error was expected" % fn.__name__)


def want_error(e, code, message=None):
    got = e.response["Error"]["Code"]
    assert got == code, "error code %r (%s), want %r" % (got, e, code)
    if message is not None:
        assert e.response["Error"]["Message"] == message, "message %r, want %r" % (e.response["Error"]["Message"], message)


def md5(b):
    return hashlib.md5(b).hexdigest()


def md5_of_attributes(attrs):
    """SQS's digest of message attributes, written from its documented algorithm."""
    h = hashlib.md5()

    def put(b):
        h.update(struct.pack(">I", len(b)))
        h.update(b)

    for name in sorted(attrs):
        a = attrs[name]
        put(name.encode())
        put(a["DataType"].encode())
        if a["DataType"].startswith("Binary"):
            h.update(b"\x02")
            put(a["BinaryValue"])
        else:
            h.update(b"\x01")
            put(a["StringValue"].encode())
    return h.hexdigest()


def raw(url, params, method="POST", path="/"):
    """A hand-rolled query request (unsigned, for the open server): status and XML root."""
    data = urllib.parse.urlencode(params)
    if method == "GET":
        req = urllib.request.Request(url + path + "?" + data, method="GET")
    else:
        req = urllib.request.Request(url + path, data=data.encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    return send(req)


def send(req):
    try:
        with urllib.request.urlopen(req) as r:
            status, body, ctype = r.status, r.read(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        status, body, ctype = e.code, e.read(), e.headers.get("Content-Type")
    assert ctype == "text/xml", "Content-Type %r: %r" % (ctype, body[:200])
    return status, ET.fromstring(body)


def xml_error(root):
    err = root.find(NS + "Error")
    return err.find(NS + "Type").text, err.find(NS + "Code").text, err.find(NS + "Message").text


print("botocore", botocore.__version__, "boto3", boto3.__version__, flush=True)
sqs = client(OPEN)
assert sqs.meta.service_model.protocol == "query", "this botocore speaks %s, not the query protocol" % sqs.meta.service_model.protocol

# --- queues -----------------------------------------------------------------------------
url = sqs.create_queue(QueueName="boto-work", Attributes={"VisibilityTimeout": "45"}, tags={"team": "a"})["QueueUrl"]
assert url.endswith("/000000000000/boto-work"), url
assert sqs.create_queue(QueueName="boto-work", Attributes={"VisibilityTimeout": "45"})["QueueUrl"] == url
e = error_of(sqs.create_queue, QueueName="boto-work", Attributes={"VisibilityTimeout": "46"})
want_error(e, "QueueAlreadyExists")
assert isinstance(e, sqs.exceptions.QueueNameExists), type(e)
dlq = sqs.create_queue(QueueName="boto-work-dead")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
assert dlq_arn == "arn:aws:sqs:us-east-1:000000000000:boto-work-dead", dlq_arn
sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}), "DelaySeconds": "0"})
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
assert a["VisibilityTimeout"] == "45" and json.loads(a["RedrivePolicy"])["maxReceiveCount"] == 5, a
assert sqs.get_queue_url(QueueName="boto-work")["QueueUrl"] == url
e = error_of(sqs.get_queue_url, QueueName="boto-missing")
want_error(e, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue boto-missing does not exist.")
assert isinstance(e, sqs.exceptions.QueueDoesNotExist), type(e)
assert sqs.list_queues(QueueNamePrefix="boto-")["QueueUrls"] == [url, dlq]
page = sqs.list_queues(QueueNamePrefix="boto-", MaxResults=1)
assert page["QueueUrls"] == [url] and page["NextToken"], page
assert sqs.list_queues(QueueNamePrefix="boto-", MaxResults=1, NextToken=page["NextToken"])["QueueUrls"] == [dlq]
assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="nothing-")
assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [url]
sqs.tag_queue(QueueUrl=url, Tags={"env": "test", "owner": "me"})
sqs.untag_queue(QueueUrl=url, TagKeys=["owner"])
assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a", "env": "test"}
step("queues: create (and QueueAlreadyExists), attributes, url, list and pages, dead-letter sources, tags")

# --- messages ---------------------------------------------------------------------------
attrs = {
    "s": {"DataType": "String", "StringValue": "héllo <&> \"quoted\""},
    "n": {"DataType": "Number.int", "StringValue": "42"},
    "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"},
}
body = "line one\r\nline two\ttabbed & <escaped> ünïcode \U0001F600"
out = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs,
                       MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}})
assert out["MD5OfMessageBody"] == md5(body.encode()), out
assert out["MD5OfMessageAttributes"] == md5_of_attributes(attrs), out
assert out["MD5OfMessageSystemAttributes"], out
batch = sqs.send_message_batch(QueueUrl=url, Entries=[
    {"Id": "a", "MessageBody": "batch a", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
    {"Id": "b", "MessageBody": "batch b", "DelaySeconds": 0},
    {"Id": "bad", "MessageBody": "x", "MessageAttributes": {"AWS.reserved": {"DataType": "String", "StringValue": "v"}}},
])
assert sorted(s["Id"] for s in batch["Successful"]) == ["a", "b"], batch
assert batch["Failed"][0]["Id"] == "bad" and batch["Failed"][0]["Code"] == "InvalidParameterValue" and batch["Failed"][0]["SenderFault"] is True, batch
assert batch["Successful"][0]["MD5OfMessageAttributes"] == md5_of_attributes({"k": {"DataType": "String", "StringValue": "v"}}), batch

got = {}
for _ in range(10):
    r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                            MessageAttributeNames=["All"], AttributeNames=["All"])
    for m in r.get("Messages", []):
        got[m["Body"]] = m
    if len(got) == 3:
        break
assert sorted(got) == sorted([body, "batch a", "batch b"]), sorted(got)
m = got[body]
assert m["MD5OfBody"] == md5(body.encode()), m
assert m["MessageAttributes"]["b"]["BinaryValue"] == b"\x00\x01\xfe\xff", m["MessageAttributes"]
assert m["MessageAttributes"]["s"]["StringValue"] == attrs["s"]["StringValue"]
assert m["MD5OfMessageAttributes"] == md5_of_attributes(attrs), m
assert m["Attributes"]["ApproximateReceiveCount"] == "1" and m["Attributes"]["AWSTraceHeader"].startswith("Root="), m["Attributes"]
assert m["MessageId"] == out["MessageId"]
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])["Attributes"]
assert a == {"ApproximateNumberOfMessagesNotVisible": "3"}, a
step("messages: send with attributes (digests), batch with a failed entry, receive with attributes")

# --- settling, and receipts answered as SQS answers them ----------------------------------
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=100)
cv = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
    {"Id": "a", "ReceiptHandle": got["batch a"]["ReceiptHandle"], "VisibilityTimeout": 60},
    {"Id": "junk", "ReceiptHandle": "junk", "VisibilityTimeout": 60},
])
assert [s["Id"] for s in cv["Successful"]] == ["a"] and cv["Failed"][0]["Code"] == "ReceiptHandleIsInvalid", cv
d = sqs.delete_message_batch(QueueUrl=url, Entries=[
    {"Id": "a", "ReceiptHandle": got["batch a"]["ReceiptHandle"]},
    {"Id": "b", "ReceiptHandle": got["batch b"]["ReceiptHandle"]},
])
assert sorted(s["Id"] for s in d["Successful"]) == ["a", "b"] and not d.get("Failed"), d
sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])  # standard queue: a stale delete succeeds
h = m["ReceiptHandle"]
e = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=h, VisibilityTimeout=10)
want_error(e, "InvalidParameterValue", "Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change." % h)
cv = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[{"Id": "gone", "ReceiptHandle": h, "VisibilityTimeout": 10}])
f = cv["Failed"][0]
assert f["Code"] == "ReceiptHandleIsInvalid" and f["SenderFault"] and f["Message"] == "Message does not exist or is not available for visibility timeout change", cv
# A lease that merely ran out (visibility 0), the message not received again.
sqs.send_message(QueueUrl=url, MessageBody="ran out")
r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=r["ReceiptHandle"], VisibilityTimeout=0)
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=r["ReceiptHandle"], VisibilityTimeout=600)
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
assert a == {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "0"}, a
again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
assert again["Attributes"]["ApproximateReceiveCount"] == "2", again
e = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=r["ReceiptHandle"], VisibilityTimeout=10)
want_error(e, "InvalidParameterValue")  # received again since
sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
step("settling, and stale receipts: deleted, lease ran out, received again")

# --- FIFO -------------------------------------------------------------------------------
fifo = sqs.create_queue(QueueName="boto-orders.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
first = sqs.send_message(QueueUrl=fifo, MessageBody="o1", MessageGroupId="g")
dup = sqs.send_message(QueueUrl=fifo, MessageBody="o1", MessageGroupId="g")
assert dup["MessageId"] == first["MessageId"] and dup["SequenceNumber"] == first["SequenceNumber"], (first, dup)
sqs.send_message(QueueUrl=fifo, MessageBody="o2", MessageGroupId="g")
r = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10, AttributeNames=["All"], ReceiveRequestAttemptId="attempt-1")
assert [m["Body"] for m in r["Messages"]] == ["o1", "o2"], r
assert r["Messages"][0]["Attributes"]["MessageGroupId"] == "g" and len(r["Messages"][0]["Attributes"]["SequenceNumber"]) == 20
for m in r["Messages"]:
    sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
h = r["Messages"][0]["ReceiptHandle"]
e = error_of(sqs.delete_message, QueueUrl=fifo, ReceiptHandle=h)
want_error(e, "InvalidParameterValue", "Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired." % h)
e = error_of(sqs.send_message, QueueUrl=fifo, MessageBody="no group")
want_error(e, "MissingParameter")
step("FIFO: dedup, order, group attributes, an expired handle's delete")

# --- refusals that change nothing -------------------------------------------------------
e = error_of(sqs.send_message_batch, QueueUrl=url, Entries=[{"Id": "x", "MessageBody": "1"}, {"Id": "x", "MessageBody": "2"}])
want_error(e, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct")
e = error_of(sqs.send_message, QueueUrl=url, MessageBody="bad \x01 char")
want_error(e, "InvalidMessageContents")
e = error_of(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["NoSuchAttribute"])
want_error(e, "InvalidAttributeName")
e = error_of(sqs.add_permission, QueueUrl=url, Label="l", AWSAccountIds=["1"], Actions=["SendMessage"])
want_error(e, "AWS.SimpleQueueService.UnsupportedOperation")
sqs.purge_queue(QueueUrl=dlq)
want_error(error_of(sqs.purge_queue, QueueUrl=dlq), "AWS.SimpleQueueService.PurgeQueueInProgress")
# Hand-written forms: a list with a gap, a parameter given twice, another API version.
status, root = raw(OPEN, {"Action": "SendMessage", "QueueUrl": url, "MessageBody": "m",
                          "MessageAttribute.2.Name": "a", "MessageAttribute.2.Value.DataType": "String",
                          "MessageAttribute.2.Value.StringValue": "v"})
assert status == 400 and xml_error(root)[:2] == ("Sender", "MalformedQueryString"), (status, xml_error(root))
status, root = send(urllib.request.Request(OPEN + "/", method="POST", data=b"Action=ListQueues&Action=ListQueues",
                                           headers={"Content-Type": "application/x-www-form-urlencoded"}))
assert status == 400 and xml_error(root)[1] == "MalformedQueryString", xml_error(root)
status, root = raw(OPEN, {"Action": "ListQueues", "Version": "2011-10-01"})
assert status == 400 and xml_error(root)[1] == "NoSuchVersion", xml_error(root)
status, root = raw(OPEN, {"Action": "NoSuchAction"})
assert status == 400 and xml_error(root)[1] == "InvalidAction", xml_error(root)
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
assert a == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}, a
step("refusals: ids not distinct, contents, attribute names, unsupported, purge limit, malformed forms, version")

# --- the shapes kombu and hand-rolled clients send --------------------------------------
sqs.send_message(QueueUrl=url, MessageBody="by path")
path = urllib.parse.urlsplit(url).path
status, root = raw(OPEN, {"Action": "ReceiveMessage", "MaxNumberOfMessages": "1", "WaitTimeSeconds": "1"}, path=path)
assert status == 200 and root.tag == NS + "ReceiveMessageResponse", ET.tostring(root)
msg = root.find(NS + "ReceiveMessageResult/" + NS + "Message")
assert msg.find(NS + "Body").text == "by path", ET.tostring(root)
assert root.find(NS + "ResponseMetadata/" + NS + "RequestId").text
status, root = raw(OPEN, {"Action": "DeleteMessage", "QueueUrl": url, "ReceiptHandle": msg.find(NS + "ReceiptHandle").text}, method="GET")
assert status == 200 and root.tag == NS + "DeleteMessageResponse" and root.find(NS + "DeleteMessageResult") is None, ET.tostring(root)
status, root = raw(OPEN, {"Action": "ListQueues", "QueueNamePrefix": "boto-work"}, method="GET")
assert [u.text for u in root.iter(NS + "QueueUrl")] == [url, dlq], ET.tostring(root)
step("a receive posted to the queue's path, GETs with the parameters in the query string")

# --- SNS requests reach the SNS front (internal/sns has its own boto3 script) ------------
sns = client(OPEN, service="sns")
assert sns.list_topics()["Topics"] == []
e = error_of(sns.publish, TopicArn="arn:aws:sns:us-east-1:000000000000:t", Message="m")
want_error(e, "NotFound")
step("SNS requests: dispatched to SNS")

# --- authentication: signed forms, presigned URLs, permissions ---------------------------
admin = client(AUTH, os.environ["OKIBA_ADMIN_KEY"], os.environ["OKIBA_ADMIN_SECRET"])
aurl = admin.create_queue(QueueName="boto-secure")["QueueUrl"]
admin.send_message(QueueUrl=aurl, MessageBody="signed")
want_error(error_of(client(AUTH, os.environ["OKIBA_ADMIN_KEY"], "not-the-secret-at-all-123").list_queues), "SignatureDoesNotMatch")
reader = client(AUTH, os.environ["OKIBA_READER_KEY"], os.environ["OKIBA_READER_SECRET"])
assert reader.list_queues()["QueueUrls"] == [aurl]
want_error(error_of(reader.send_message, QueueUrl=aurl, MessageBody="no"), "AccessDenied")
# A GET with the parameters in its query string, signed as kombu 5.2 signs its receives
# (botocore's "presignurl" signing type, which in botocore 1.29 signs in headers).
req = AWSRequest(method="GET", url=aurl, params={"Action": "ReceiveMessage", "MaxNumberOfMessages": "1", "WaitTimeSeconds": "1"})
admin._request_signer.sign("ReceiveMessage", req, signing_type="presignurl")
prepared = req.prepare()
status, root = send(urllib.request.Request(prepared.url, method="GET", headers=dict(prepared.headers)))
assert status == 200, ET.tostring(root)
assert root.find(NS + "ReceiveMessageResult/" + NS + "Message/" + NS + "Body").text == "signed", ET.tostring(root)
# A GET presigned in its query string (X-Amz-Signature), by botocore's own signer.
creds = admin._request_signer._credentials
req = AWSRequest(method="GET", url=aurl, params={"Action": "GetQueueAttributes", "AttributeName.1": "ApproximateNumberOfMessagesNotVisible"})
SigV4QueryAuth(creds, "sqs", "us-east-1", expires=60).add_auth(req)
prepared = req.prepare()
assert "X-Amz-Signature=" in prepared.url and "Authorization" not in prepared.headers, prepared.url
status, root = send(urllib.request.Request(prepared.url, method="GET"))
assert status == 200 and root.find(NS + "GetQueueAttributesResult/" + NS + "Attribute/" + NS + "Value").text == "1", ET.tostring(root)
status, root = send(urllib.request.Request(prepared.url.replace("NotVisible", "Delayed"), method="GET"))
assert status == 403 and xml_error(root)[1] == "SignatureDoesNotMatch", xml_error(root)
# boto3's own presigned URL (signed for POST, as the model's operations are).
purl = admin.generate_presigned_url("get_queue_attributes", Params={"QueueUrl": aurl, "AttributeNames": ["ApproximateNumberOfMessagesNotVisible"]}, ExpiresIn=60)
status, root = send(urllib.request.Request(purl, method="POST", data=b""))
assert status == 200 and root.find(NS + "GetQueueAttributesResult/" + NS + "Attribute/" + NS + "Value").text == "1", ET.tostring(root)
status, root = send(urllib.request.Request(purl, method="POST", data=b"AttributeName.2=All",
                                           headers={"Content-Type": "application/x-www-form-urlencoded"}))
assert status == 400 and xml_error(root)[1] == "IncompleteSignature", xml_error(root)
assert admin.get_queue_url(QueueName="boto-secure")["QueueUrl"] == aurl
step("authentication: signed forms, a wrong secret, permissions, presigned GET (kombu) and POST (boto3)")

sqs.delete_queue(QueueUrl=url)
want_error(error_of(sqs.get_queue_url, QueueName="boto-work"), "AWS.SimpleQueueService.NonExistentQueue")
step("delete queue")
print("all boto3 cases passed", flush=True)
