package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// TestConsumers follows a queue's receivers through a real server: a named Go client's
// long poll (on the stream) waiting, then the lease it took and settled; a plain HTTP
// receive without a name, and an SQS client, known by address; and okiba consumers.
func TestConsumers(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.srv.CreateQueue(t, "orders")
	worker, err := client.New(h.srv.URL, client.Options{Name: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	find := func(name string) (api.Consumer, bool) {
		l, err := h.srv.Client.Consumers(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Consumers {
			if c.Name == name {
				return c, true
			}
		}
		return api.Consumer{}, false
	}

	got := make(chan []client.Delivery, 1)
	go func() {
		wait := 20 * time.Second
		ds, err := worker.Receive(ctx, "orders", client.ReceiveOptions{Wait: &wait})
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { c, ok := find("worker-1"); return ok && c.Waiting == 1 },
		"worker-1's long poll to be listed as waiting")
	if _, err := h.srv.Client.Send(ctx, "orders", client.Message{Body: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	ds := <-got
	if len(ds) != 1 {
		t.Fatalf("the poll got %d messages", len(ds))
	}
	if c, _ := find("worker-1"); c.Waiting != 0 || c.Leases != 1 || c.Via != "stream" || c.Received != 1 || !strings.HasPrefix(c.Remote, "127.0.0.1:") {
		t.Errorf("worker-1 holding its lease: %+v", c)
	}
	out := h.ok("consumers", "orders")
	if !strings.Contains(out, "worker-1") || !strings.Contains(out, "stream") || !strings.Contains(out, "1 in flight in orders") {
		t.Errorf("okiba consumers orders:\n%s", out)
	}
	if _, err := worker.Ack(ctx, "orders", ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if c, _ := find("worker-1"); c.Leases != 0 {
		t.Errorf("worker-1 after its ack: %+v", c)
	}

	// A plain request with no name.
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/queues/orders/receive", strings.NewReader(`{"wait":"0s"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// An SQS client.
	sq := sqsClient(h.srv.URL, "anything", "goes")
	u, err := sq.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, WaitTimeSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	l, err := h.srv.Client.Consumers(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	vias := map[string]int{}
	for _, c := range l.Consumers {
		vias[c.Via]++
		if c.Name == "" && !strings.HasPrefix(c.Remote, "127.0.0.1:") {
			t.Errorf("a receiver without a name is known by its address: %+v", c)
		}
	}
	if vias["http"] != 1 || vias["sqs"] != 1 || vias["stream"] != 1 {
		t.Errorf("receivers by interface %v, want one each of stream, http and sqs: %+v", vias, l.Consumers)
	}
	if r := h.fails(1, "consumers", "ordres"); !strings.Contains(r.err, "queue_not_found") || !strings.Contains(r.err, `did you mean "orders"`) {
		t.Errorf("okiba consumers ordres: %s", r.err)
	}
}
