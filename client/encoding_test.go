package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// The Go client speaks the binary encoding by default and JSON on request; both carry the
// same messages.
func TestClientEncodingsCarryTheSameMessages(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	ctx := context.Background()
	delay := time.Duration(0)
	for _, jsonMode := range []bool{false, true} {
		c, err := client.New(srv.URL, client.Options{JSON: jsonMode})
		if err != nil {
			t.Fatal(err)
		}
		in := []client.Message{
			{Body: []byte{0, 0xff, 'x'}, Group: "g", DedupID: "d" + map[bool]string{false: "b", true: "j"}[jsonMode], Headers: map[string]string{"k": "v"}, Delay: &delay},
			{Body: []byte("plain")},
		}
		res, err := c.SendBatch(ctx, "q", in)
		if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil || len(res[0].ID) != 16 {
			t.Fatalf("json=%v: send %+v %v", jsonMode, res, err)
		}
		wait := time.Second
		ds, err := c.Receive(ctx, "q", client.ReceiveOptions{Max: 10, Wait: &wait})
		if err != nil || len(ds) != 2 {
			t.Fatalf("json=%v: receive %+v %v", jsonMode, ds, err)
		}
		d := ds[0]
		if d.ID != res[0].ID || string(d.Body) != string(in[0].Body) || d.Group != "g" || d.Headers["k"] != "v" || d.Deliveries != 1 ||
			d.DedupID != in[0].DedupID || d.LeaseDeadline.IsZero() || d.EnqueuedAt.IsZero() || d.FirstDeliveredAt.IsZero() {
			t.Fatalf("json=%v: delivery %+v", jsonMode, d)
		}
		if _, err := c.Ack(ctx, "q", d.Receipt, ds[1].Receipt); err != nil {
			t.Fatal(err)
		}
	}
}
