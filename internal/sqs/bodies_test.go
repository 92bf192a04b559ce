package sqs_test

import (
	"bytes"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/okibatest"
)

// TestBodiesTheNodeCannotRead: ReceiveMessage goes through the broker's receive, so a
// body that fails its checksum never fails the batch. Without a RedrivePolicy the
// message comes with an empty body and the okiba-corrupt message attributes (which the
// SDK's checksums accept, and which come whatever MessageAttributeNames asks for); with
// one it is in the dead-letter queue. A receive that could
// read nothing is ServiceUnavailable, which the SDKs retry, never InternalError.
func TestBodiesTheNodeCannotRead(t *testing.T) {
	mem := vfs.NewMemFS()
	var failing atomic.Bool
	fs := vfs.NewFaulty(mem, func(e vfs.Event) error {
		if failing.Load() && e.Op == vfs.OpRead && strings.HasSuffix(e.Name, ".wal") && e.Length > 8 {
			return vfs.ErrInjected
		}
		return nil
	})
	e := newEnv(t, okibatest.Options{Dir: "/data", Broker: broker.Config{FS: fs, NoPrecreate: true, CacheBytes: -1}})
	rot := func(body string) {
		t.Helper()
		data, err := vfs.ReadFile(mem, "/data/wal/00000001.wal")
		if err != nil {
			t.Fatal(err)
		}
		f, err := mem.OpenFile("/data/wal/00000001.wal", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("#"), int64(bytes.Index(data, []byte(body)))); err != nil {
			t.Fatal(err)
		}
	}

	plain := e.createQueue(t, "plain", nil)
	e.send(t, plain, "a healthy message")
	e.send(t, plain, "a body that rots on disk")
	rot("a body that rots on disk")
	ms := e.receive(t, plain, 10, 30)
	if len(ms) != 2 || *ms[0].Body != "a healthy message" {
		t.Fatalf("receive: %+v", ms)
	}
	bad := ms[1]
	if *bad.Body != "" || bad.MessageAttributes[broker.HeaderCorrupt].StringValue == nil || *bad.MessageAttributes[broker.HeaderCorrupt].StringValue != "true" ||
		!strings.HasPrefix(aws.ToString(bad.MessageAttributes[broker.HeaderCorruptLocation].StringValue), "00000001.wal@") {
		t.Fatalf("the corrupt message: body %q, attributes %+v", aws.ToString(bad.Body), bad.MessageAttributes)
	}

	dlq := e.createQueue(t, "jobs-dlq", nil)
	jobs := e.createQueue(t, "jobs", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + e.attrs(t, dlq)["QueueArn"] + `","maxReceiveCount":"3"}`})
	e.send(t, jobs, "a job whose body rots")
	e.send(t, jobs, "a job that is fine")
	rot("a job whose body rots")
	if ms := e.receive(t, jobs, 10, 30); len(ms) != 1 || *ms[0].Body != "a job that is fine" {
		t.Fatalf("receive of jobs: %+v", ms)
	}
	// Asked for no message attribute, a receiver still gets the marks: they stand in for
	// the body.
	out, err := e.c.ReceiveMessage(ctxT(t), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameDeadLetterQueueSourceArn}})
	if err != nil {
		t.Fatal(err)
	}
	dead := out.Messages
	if len(dead) != 1 || *dead[0].Body != "" || aws.ToString(dead[0].MessageAttributes[broker.HeaderCorrupt].StringValue) != "true" ||
		dead[0].MessageAttributes[broker.HeaderCorruptLocation].StringValue == nil ||
		!strings.HasSuffix(dead[0].Attributes["DeadLetterQueueSourceArn"], ":jobs") {
		t.Fatalf("the dead-letter queue: %+v", dead)
	}

	e.send(t, plain, "unreadable for now")
	failing.Store(true)
	_, err = e.client("AKIDEXAMPLE", "secret", 1).ReceiveMessage(ctxT(t), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(plain), MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	failing.Store(false)
	wantAPIError(t, err, "ServiceUnavailable")
}
