package chaos_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/okibatest/chaos"
)

func TestDiceIsDeterministicAndFair(t *testing.T) {
	t.Parallel()
	a, b := chaos.Dice{Seed: 1}, chaos.Dice{Seed: 1}
	if a.Roll("ack", "m1", 1) != b.Roll("ack", "m1", 1) {
		t.Fatal("same seed, message and attempt must roll the same")
	}
	if a.Roll("ack", "m1", 1) == a.Roll("ack", "m1", 2) || a.Roll("ack", "m1", 1) == (chaos.Dice{Seed: 2}).Roll("ack", "m1", 1) {
		t.Fatal("attempt and seed must change the roll")
	}
	hits := 0
	for i := 0; i < 10000; i++ {
		if a.Hit(0.3, "x", "m", uint64(i)) {
			hits++
		}
	}
	if math.Abs(float64(hits)/10000-0.3) > 0.02 {
		t.Fatalf("rate 0.3 hit %d of 10000", hits)
	}
	r := chaos.NewRate(2)
	if r.Get() != 1 {
		t.Fatal("rates are clamped to 1")
	}
}

// A lost ack is answered as a success but never reaches the broker; the other receipts
// of the same request do.
func TestTransportLosesChosenAcks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := okibatest.New(t, okibatest.Options{})
	srv.PutQueue(t, "q", api.QueueConfig{VisibilityTimeout: api.Ptr(time.Minute)})
	tr := chaos.NewTransport(nil)
	c, _ := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: tr}})
	for _, b := range []string{"a", "b"} {
		c.Send(ctx, "q", client.Message{Body: []byte(b)})
	}
	ds, err := c.Receive(ctx, "q", client.ReceiveOptions{Max: 2})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive %v %v", ds, err)
	}
	tr.LoseAck(ds[0].Receipt)
	errs, err := c.Ack(ctx, "q", ds[0].Receipt, ds[1].Receipt)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("ack: %v %v; both must look acked", errs, err)
	}
	q, _ := srv.Client.Queue(ctx, "q")
	if q.Stats.Acked != 1 || q.Stats.InFlight != 1 || tr.LostAcks() != 1 {
		t.Fatalf("broker saw %d acks, %d in flight; lost %d", q.Stats.Acked, q.Stats.InFlight, tr.LostAcks())
	}
	tr.Crash()
	if errs, err := c.Ack(ctx, "q", ds[0].Receipt); err != nil || errs[0] != nil {
		t.Fatalf("ack after crash: %v %v", errs, err)
	}
	if q, _ := srv.Client.Queue(ctx, "q"); q.Stats.Acked != 1 {
		t.Fatal("an ack sent after the crash reached the broker")
	}
	if _, err := c.Send(ctx, "q", client.Message{Body: []byte("c")}); err == nil {
		t.Fatal("a crashed client sent a message")
	}
	// A crashed client receives nothing, in the encoding it asked for: the Go client
	// (binary) and a JSON one both read an empty answer, not an error.
	if ds, err := c.Receive(ctx, "q", client.ReceiveOptions{Max: 1}); err != nil || len(ds) != 0 {
		t.Fatalf("receive after crash: %v %v", ds, err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/queues/q/receive", strings.NewReader(`{"max":1}`))
	res, err := tr.RoundTrip(req)
	if err != nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON receive after crash: %v %v", res, err)
	}
}

func TestBrokerRestartKeepsAddressAndMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := chaos.StartBroker(broker.Config{Dir: t.TempDir()}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, _ := client.New(b.URL, client.Options{})
	c.PutQueue(ctx, "q", api.QueueConfig{})
	c.Send(ctx, "q", client.Message{Body: []byte("kept")})
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(ctx, "q", client.ReceiveOptions{})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "kept" || b.Restarts() != 1 {
		t.Fatalf("after restart: %v %v", ds, err)
	}
}
