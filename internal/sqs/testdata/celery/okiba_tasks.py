"""A Celery 5.2 application on okiba's SQS front, as docs/sqs.md configures one.

Imported by the worker (celery -A okiba_tasks worker) and by celery_client.py, both
started by TestCeleryWorker (celery_test.go) with Debian's /usr/bin/python3 (Celery 5.2,
kombu 5.2.4, which speaks SQS's query protocol through botocore 1.29 and pycurl).
OKIBA_URL is the server, OKIBA_KEY/OKIBA_SECRET a principal's access key, OKIBA_QUEUE
the queue (made by the test: predefined queues are not created by kombu) and
OKIBA_RESULTS the file-system result backend's directory.
"""

import os
import time
import urllib.parse

import boto3
from celery import Celery

URL = os.environ["OKIBA_URL"]
QUEUE = os.environ["OKIBA_QUEUE"]
QUEUE_URL = URL + "/000000000000/" + QUEUE
RESULTS = os.environ["OKIBA_RESULTS"]
KEY = os.environ["OKIBA_KEY"]
SECRET = os.environ["OKIBA_SECRET"]

app = Celery("okiba_tasks")
app.conf.update(
    # The configuration docs/sqs.md gives: the key and secret in the URL (quoted, since
    # a secret may hold characters a URL reserves), plain HTTP, the queue predefined.
    broker_url="sqs://%s:%s@%s" % (urllib.parse.quote(KEY, safe=""), urllib.parse.quote(SECRET, safe=""),
                                   urllib.parse.urlsplit(URL).netloc),
    broker_transport_options={
        "is_secure": False,
        "region": "us-east-1",
        "predefined_queues": {QUEUE: {"url": QUEUE_URL}},
        # Short long polls, so that the worker's warm shutdown is quick.
        "wait_time_seconds": 1,
        "visibility_timeout": 60,
    },
    task_default_queue=QUEUE,
    # A result backend that needs no broker of its own: files.
    result_backend="file://" + RESULTS,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=False,
)


def sqs():
    return boto3.client("sqs", endpoint_url=URL, region_name="us-east-1",
                        aws_access_key_id=KEY, aws_secret_access_key=SECRET)


@app.task
def add(x, y):
    return x + y


@app.task(bind=True, max_retries=3)
def flaky(self, fails, runs=()):
    """Fails its first `fails` runs, each retried with a countdown of one second, and
    returns the time of every run, so that the client can see the countdown kept."""
    runs = list(runs) + [time.time()]
    if self.request.retries < fails:
        raise self.retry(countdown=1, args=(fails, runs))
    return {"retries": self.request.retries, "runs": runs}


@app.task(acks_late=True)
def late(token):
    """With acks_late, the task's own message is still in flight while it runs, and is
    deleted only after it returns: it reports what the queue held meanwhile."""
    a = sqs().get_queue_attributes(QueueUrl=QUEUE_URL, AttributeNames=["All"])["Attributes"]
    return {"token": token, "in_flight": int(a["ApproximateNumberOfMessagesNotVisible"])}
