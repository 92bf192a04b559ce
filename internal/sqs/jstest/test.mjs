// The AWS SDK for JavaScript v3 against a running okiba server (OKIBA_URL), unchanged but
// for its endpoint. Run by sqs/js_test.go; exits non-zero on the first failure.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueUrlCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  ChangeMessageVisibilityCommand,
  StartMessageMoveTaskCommand,
  ListMessageMoveTasksCommand,
  QueueDoesNotExist,
  ReceiptHandleIsInvalid,
} from "@aws-sdk/client-sqs";

const endpoint = process.env.OKIBA_URL;
assert.ok(endpoint, "OKIBA_URL must be set");
const sqs = new SQSClient({
  region: "us-east-1",
  endpoint,
  credentials: {
    accessKeyId: process.env.OKIBA_ACCESS_KEY_ID ?? "AKIDJS",
    secretAccessKey: process.env.OKIBA_SECRET_ACCESS_KEY ?? "secret",
  },
  maxAttempts: 2,
});

const step = (name) => console.log(`ok - ${name}`);

// MD5OfMessageAttributes as SQS computes it, written here independently of the server.
function md5OfAttributes(attrs) {
  const h = createHash("md5");
  const put = (buf) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(buf.length);
    h.update(len);
    h.update(buf);
  };
  for (const name of Object.keys(attrs).sort()) {
    const a = attrs[name];
    put(Buffer.from(name, "utf8"));
    put(Buffer.from(a.DataType, "utf8"));
    if (a.DataType.startsWith("Binary")) {
      h.update(Buffer.from([2]));
      put(Buffer.from(a.BinaryValue));
    } else {
      h.update(Buffer.from([1]));
      put(Buffer.from(a.StringValue, "utf8"));
    }
  }
  return h.digest("hex");
}

async function until(what, fn) {
  const deadline = Date.now() + 15000;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function attrs(QueueUrl) {
  const out = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
  return out.Attributes;
}

// Send, receive with attributes, delete.
{
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-orders" }));
  const MessageAttributes = {
    kind: { DataType: "String", StringValue: "espresso" },
    price: { DataType: "Number.eur", StringValue: "2.40" },
    blob: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 255]) },
  };
  const sent = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "one espresso ☕", MessageAttributes }));
  assert.equal(sent.MD5OfMessageAttributes, md5OfAttributes(MessageAttributes));
  const got = await sqs.send(new ReceiveMessageCommand({
    QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
    MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"],
  }));
  assert.equal(got.Messages.length, 1);
  const m = got.Messages[0];
  assert.equal(m.Body, "one espresso ☕");
  assert.equal(m.MessageId, sent.MessageId);
  assert.equal(m.MessageAttributes.kind.StringValue, "espresso");
  assert.equal(m.MessageAttributes.price.DataType, "Number.eur");
  assert.deepEqual([...m.MessageAttributes.blob.BinaryValue], [0, 1, 2, 255]);
  assert.equal(m.MD5OfMessageAttributes, md5OfAttributes(m.MessageAttributes));
  assert.equal(m.Attributes.ApproximateReceiveCount, "1");
  assert.ok(Number(m.Attributes.SentTimestamp) > 0);
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
  const a = await attrs(QueueUrl);
  assert.equal(a.ApproximateNumberOfMessages, "0");
  assert.equal(a.ApproximateNumberOfMessagesNotVisible, "0");
  await assert.rejects(
    sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: "not-a-handle" })),
    (err) => err instanceof ReceiptHandleIsInvalid,
  );
  step("send, receive with attributes, delete");
}

// FIFO: order within a group, dedup.
{
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({
    QueueName: "js-orders.fifo",
    Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
  }));
  const batch = await sqs.send(new SendMessageBatchCommand({
    QueueUrl,
    Entries: ["1", "2", "3"].map((n) => ({ Id: `m${n}`, MessageBody: `step ${n}`, MessageGroupId: "table-7" })),
  }));
  assert.equal(batch.Successful.length, 3);
  const dup = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "step 1", MessageGroupId: "table-7" }));
  assert.equal(dup.MessageId, batch.Successful.find((s) => s.Id === "m1").MessageId);
  const bodies = [];
  while (bodies.length < 3) {
    const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 1, MessageSystemAttributeNames: ["All"] }));
    for (const m of got.Messages ?? []) {
      assert.equal(m.Attributes.MessageGroupId, "table-7");
      assert.ok(m.Attributes.SequenceNumber);
      bodies.push(m.Body);
      await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  assert.deepEqual(bodies, ["step 1", "step 2", "step 3"]);
  step("FIFO order and dedup");
}

// Dead-letter queue round trip: redrive after maxReceiveCount, then a move task back.
{
  const dlq = await sqs.send(new CreateQueueCommand({ QueueName: "js-dlq" }));
  const dlqArn = (await attrs(dlq.QueueUrl)).QueueArn;
  const src = await sqs.send(new CreateQueueCommand({
    QueueName: "js-src",
    Attributes: { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }) },
  }));
  await sqs.send(new SendMessageCommand({ QueueUrl: src.QueueUrl, MessageBody: "poison" }));
  const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: src.QueueUrl, WaitTimeSeconds: 1 }));
  assert.equal(got.Messages.length, 1);
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: src.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0 }));
  await until("the dead letter", async () => (await attrs(dlq.QueueUrl)).ApproximateNumberOfMessages === "1");
  const dead = await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq.QueueUrl, MessageSystemAttributeNames: ["DeadLetterQueueSourceArn"], VisibilityTimeout: 1 }));
  assert.equal(dead.Messages[0].Body, "poison");
  assert.match(dead.Messages[0].Attributes.DeadLetterQueueSourceArn, /:js-src$/);
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: dlq.QueueUrl, ReceiptHandle: dead.Messages[0].ReceiptHandle, VisibilityTimeout: 0 }));
  const task = await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn }));
  assert.ok(task.TaskHandle);
  await until("the move task", async () => {
    const l = await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }));
    return l.Results[0].Status === "COMPLETED" && l.Results[0].ApproximateNumberOfMessagesMoved === 1;
  });
  const back = await sqs.send(new ReceiveMessageCommand({ QueueUrl: src.QueueUrl, WaitTimeSeconds: 1 }));
  assert.equal(back.Messages[0].Body, "poison");
  await sqs.send(new DeleteMessageCommand({ QueueUrl: src.QueueUrl, ReceiptHandle: back.Messages[0].ReceiptHandle }));
  step("dead-letter queue round trip");
}

// Typed errors.
await assert.rejects(
  sqs.send(new GetQueueUrlCommand({ QueueName: "js-missing" })),
  (err) => err instanceof QueueDoesNotExist && err.$metadata.httpStatusCode === 400,
);
step("typed errors");
