package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// TestDeferAndReceiveDeferred: through a real server, in both encodings (the binary
// client on the stream), Defer sets a group's head aside so the group moves on, and
// ReceiveDeferred fetches it by id under a new lease, with not_deferred for an id that is
// not deferred.
func TestDeferAndReceiveDeferred(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	forEncodings(t, func(t *testing.T, opts client.Options) {
		c := clientFor(t, srv, opts)
		ctx := context.Background()
		q := "df-" + map[bool]string{false: "bin", true: "json"}[opts.JSON]
		if _, err := c.PutQueue(ctx, q, api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendBatch(ctx, q, []client.Message{{Body: []byte("payment"), Group: "o7"}, {Body: []byte("shipping"), Group: "o7"}}); err != nil {
			t.Fatal(err)
		}
		wait := time.Duration(0)
		ds, err := c.Receive(ctx, q, client.ReceiveOptions{Max: 1, Wait: &wait})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %+v %v", ds, err)
		}
		if err := c.DeferOne(ctx, q, ds[0].Receipt); err != nil {
			t.Fatalf("defer: %v", err)
		}
		if err := c.DeferOne(ctx, q, ds[0].Receipt); !client.IsCode(err, api.CodeReceiptStale) {
			t.Fatalf("defer of an ended lease: %v", err)
		}
		next, err := c.Receive(ctx, q, client.ReceiveOptions{Max: 10, Wait: &wait})
		if err != nil || len(next) != 1 || string(next[0].Body) != "shipping" {
			t.Fatalf("after defer: %+v %v", next, err)
		}
		vis := time.Minute
		res, err := c.ReceiveDeferred(ctx, q, &vis, ds[0].ID, next[0].ID)
		if err != nil || len(res) != 2 {
			t.Fatalf("receive deferred: %+v %v", res, err)
		}
		if d := res[0].Delivery; res[0].Err != nil || string(d.Body) != "payment" || d.Deliveries != 2 || d.Group != "o7" || d.Receipt == "" {
			t.Fatalf("fetched: %+v", res[0])
		}
		if !client.IsCode(res[1].Err, api.CodeNotDeferred) || res[1].ID != next[0].ID {
			t.Fatalf("fetch of a leased message: %+v", res[1])
		}
		if err := c.AckOne(ctx, q, res[0].Delivery.Receipt); err != nil {
			t.Fatalf("ack: %v", err)
		}
		qi, err := c.Queue(ctx, q)
		if err != nil || qi.Stats.Deferred != 0 || qi.Stats.Deferrals != 1 || qi.Stats.Acked != 1 {
			t.Fatalf("stats: %+v %v", qi, err)
		}
	})
}
