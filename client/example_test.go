package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/okibatest"
)

// exampleBroker starts an in-process broker on a temporary directory and returns a
// client for it. In your tests, use okibatest.New(t, …), which also cleans up.
func exampleBroker() (*client.Client, func()) {
	dir, err := os.MkdirTemp("", "okiba-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := okibatest.Start(okibatest.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	return srv.Client, func() {
		srv.Close()
		os.RemoveAll(dir)
	}
}

// Consume runs a handler on every message. Messages of one group (here, one customer)
// are handled one at a time, in order; an order that cannot ever be processed is
// dead-lettered with a reason; cancelling the context drains and stops the consumer.
func Example_consume() {
	c, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	if _, err := c.PutQueue(ctx, "orders", api.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	for _, body := range []string{"order 1", "order 2", "garbage", "order 3"} {
		if _, err := c.Send(ctx, "orders", client.Message{Body: []byte(body), Group: "customer-7"}); err != nil {
			log.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := 0
	err := c.Consume(ctx, "orders", func(ctx context.Context, d *client.Delivery) error {
		seen++
		if seen == 4 {
			cancel() // stop after this one: Consume drains, settles and returns
		}
		if string(d.Body) == "garbage" {
			return client.DeadLetter("unparseable", "not an order")
		}
		fmt.Println("processed", string(d.Body))
		return nil
	}, client.ConsumeOptions{Concurrency: 8})
	fmt.Println("consume returned", err)

	dead, err := c.Peek(context.Background(), "orders-dlq", client.PeekOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dead.Messages {
		fmt.Printf("dead letter %q: %s (%s)\n", *m.Body, m.DeadLetter.Reason, m.DeadLetter.Description)
	}
	// Output:
	// processed order 1
	// processed order 2
	// processed order 3
	// consume returned <nil>
	// dead letter "garbage": unparseable (not an order)
}

// ConsumeGroup reads a topic as a member of a consumer group: each partition's records in
// offset order, committed as they are handled. A record no retry can fix is set aside in
// the group's dead-letter queue, <topic>.<group>-dlq. Cancelling the context drains,
// commits and leaves the group.
func Example_consumeGroup() {
	c, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	if _, err := c.PutTopic(ctx, "orders", api.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.PutGroup(ctx, "orders", "billing", api.GroupConfig{}); err != nil {
		log.Fatal(err)
	}
	var recs []client.Record
	for _, body := range []string{"order 1", "garbage", "order 2"} {
		recs = append(recs, client.Record{Key: []byte("customer-7"), HasKey: true, Body: []byte(body)})
	}
	if _, err := c.PublishRecords(ctx, "orders", recs); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := c.ConsumeGroup(ctx, "orders", "billing", func(ctx context.Context, r client.TopicRecord) error {
		if string(r.Body) == "garbage" {
			return client.DeadLetter("unparseable", "not an order")
		}
		fmt.Printf("billed %s (offset %d)\n", r.Body, r.Offset)
		if r.Offset == 2 {
			cancel() // stop after this one: ConsumeGroup drains, commits, leaves and returns
		}
		return nil
	}, client.ConsumeGroupOptions{})
	fmt.Println("consume group returned", err)

	g, err := c.Group(context.Background(), "orders", "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("committed %d, members %d\n", g.Partitions[0].Committed, len(g.Members))
	dead, err := c.Peek(context.Background(), g.DeadLetterQueue, client.PeekOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dead.Messages {
		fmt.Printf("dead letter %q in %s: %s\n", *m.Body, g.DeadLetterQueue, m.DeadLetter.Reason)
	}
	// Output:
	// billed order 1 (offset 0)
	// billed order 2 (offset 2)
	// consume group returned <nil>
	// committed 3, members 0
	// dead letter "garbage" in orders.billing-dlq: unparseable
}

// A Producer gathers concurrent Sends into batch requests; each Send still gets its own
// message's id or error.
func Example_producer() {
	c, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	if _, err := c.PutQueue(ctx, "events", api.QueueConfig{}); err != nil {
		log.Fatal(err)
	}

	p := client.NewProducer(c, "events", client.ProducerOptions{})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Send(ctx, client.Message{Body: fmt.Appendf(nil, "event %d", i)}); err != nil {
				log.Print(err)
			}
		}()
	}
	wg.Wait()
	if err := p.Close(ctx); err != nil { // sends what is left, then stops
		log.Fatal(err)
	}

	q, err := c.Queue(ctx, "events")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages in the queue:", q.Stats.Ready)
	// Output:
	// messages in the queue: 100
}

// A TopicPublisher gathers concurrent Publishes to a topic into batch requests; each
// Publish still gets its own record's partition and offset, or its error. Records of one
// key, published in turn, keep their order in the key's partition.
func Example_topicPublisher() {
	c, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	partitions := 4
	if _, err := c.PutTopic(ctx, "orders", api.TopicConfig{Partitions: &partitions}); err != nil {
		log.Fatal(err)
	}

	p := client.NewTopicPublisher(c, "orders", client.TopicPublisherOptions{})
	var wg sync.WaitGroup
	for order := range 10 {
		wg.Add(1)
		go func() { // one goroutine per order, its events in turn
			defer wg.Done()
			key := fmt.Appendf(nil, "order-%d", order)
			for _, event := range []string{"placed", "paid", "shipped"} {
				r := client.Record{Key: key, HasKey: true, Body: []byte(event),
					DedupID: fmt.Sprintf("order-%d-%s", order, event)} // safe to publish again
				if _, err := p.Publish(ctx, r); err != nil {
					log.Print(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := p.Close(ctx); err != nil { // publishes what is left, then stops
		log.Fatal(err)
	}

	t, err := c.Topic(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("records in the topic:", t.Stats.Records)
	// Output:
	// records in the topic: 30
}

// In a test, the client's time can be a fake clock: here a Producer's linger holds a
// batch until the test moves the clock past it. WaitTimers says when the producer has
// taken the message and armed its linger, so the test moves the clock only then.
func ExampleOptions_clock() {
	admin, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	if _, err := admin.PutQueue(ctx, "events", api.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := client.New(admin.Server(), client.Options{Clock: clk})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p := client.NewProducer(c, "events", client.ProducerOptions{Linger: time.Minute})
	defer p.Close(ctx)

	sent := make(chan client.SendResult, 1)
	p.Publish(ctx, client.Message{Body: []byte("hello")}, func(r client.SendResult) { sent <- r })
	if err := clk.WaitTimers(ctx, 1); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent before the linger ended:", len(sent))
	clk.Advance(time.Minute)
	fmt.Println("sent after it:", (<-sent).Err == nil)
	// Output:
	// sent before the linger ended: 0
	// sent after it: true
}

// A handler chooses each message's fate by what it returns. A consumer started like
// this drains on the first interrupt and stops hard on the second.
func ExampleClient_Consume() {
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, drain := signal.NotifyContext(context.Background(), os.Interrupt)
	defer drain()
	hardStop := make(chan struct{})
	go func() {
		<-ctx.Done()
		again, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		<-again.Done()
		close(hardStop)
	}()

	errBusy := errors.New("payment service busy")
	err = c.Consume(ctx, "payments", func(ctx context.Context, d *client.Delivery) error {
		switch err := charge(ctx, d.Body); {
		case err == nil:
			return nil // ack
		case errors.Is(err, errBusy):
			return fmt.Errorf("charge: %w", client.RetryAfter(30*time.Second)) // nack, retry in 30s
		case d.Deliveries >= 3:
			return client.DeadLetter("charge_failed", err.Error()) // give up, with a reason
		default:
			return err // nack, retry after the queue's backoff
		}
	}, client.ConsumeOptions{Concurrency: 16, HardStop: hardStop})
	if err != nil {
		log.Fatal(err)
	}
}

func charge(ctx context.Context, body []byte) error { return nil }
