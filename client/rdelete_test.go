package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// TestReceiveAndDelete: through a real server, in both encodings and on the stream, a
// receive-and-delete returns the messages with no receipt and no lease, leaves nothing
// in flight, counts them as received_and_deleted (not acked), and refuses a visibility.
func TestReceiveAndDelete(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	forEncodings(t, func(t *testing.T, opts client.Options) {
		c, err := client.New(srv.URL, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		q := "rd-" + map[bool]string{false: "bin", true: "json"}[opts.JSON]
		if _, err := c.PutQueue(ctx, q, api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendBatch(ctx, q, []client.Message{{Body: []byte("one"), Group: "g"}, {Body: []byte("two"), Group: "g"}, {Body: []byte("three")}}); err != nil {
			t.Fatal(err)
		}
		wait := time.Duration(0)
		ds, err := c.Receive(ctx, q, client.ReceiveOptions{Max: 10, Wait: &wait, Delete: true})
		if err != nil || len(ds) != 3 {
			t.Fatalf("receive-and-delete: %+v %v", ds, err)
		}
		for _, d := range ds {
			if d.Receipt != "" || !d.LeaseDeadline.IsZero() || d.Deliveries != 1 || d.FirstDeliveredAt.IsZero() {
				t.Fatalf("a received-and-deleted message: %+v", d)
			}
		}
		if string(ds[0].Body) != "one" || string(ds[1].Body) != "two" || string(ds[2].Body) != "three" {
			t.Fatalf("bodies %q %q %q", ds[0].Body, ds[1].Body, ds[2].Body)
		}
		qi, err := c.Queue(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if st := qi.Stats; st.Ready != 0 || st.InFlight != 0 || st.ReceivedAndDeleted != 3 || st.Acked != 0 || st.Delivered != 3 {
			t.Fatalf("stats after receive-and-delete: %+v", st)
		}
		vis := time.Second
		if _, err := c.Receive(ctx, q, client.ReceiveOptions{Delete: true, Visibility: &vis, Wait: &wait}); !client.IsCode(err, api.CodeInvalidRequest) {
			t.Fatalf("receive-and-delete with a visibility: %v", err)
		}
	})
}

// TestReceiveAndDeleteIsNotSentTwice: a receive-and-delete whose stream breaks fails to
// its caller; the client does not send it again (an answer lost loses its messages, and
// a second call would take more), so the message sent afterwards stays in the queue.
func TestReceiveAndDeleteIsNotSentTwice(t *testing.T) {
	t.Parallel()
	s := newStreamServer(t, "", false)
	p := newCutter(t, s.url)
	c := newClient(t, p.url, "")
	direct := newClient(t, s.url, "")
	ctx := context.Background()
	if _, err := direct.PutQueue(ctx, "telemetry", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	sent := p.sent.Load()
	go func() {
		_, err := c.Receive(ctx, "telemetry", client.ReceiveOptions{Wait: ptr(30 * time.Second), Delete: true})
		waiting <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return p.sent.Load() > sent }, "the long poll to leave the client")
	// The bytes seen may be the stream's upgrade rather than the receive itself: cut
	// every connection until the receive fails, then no more, so that a receive the
	// client sent again would be left standing.
	var err error
	testkit.Eventually(t, 10*time.Second, func() bool {
		p.cut()
		select {
		case err = <-waiting:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}, "the receive-and-delete to fail")
	if err == nil {
		t.Fatal("a receive-and-delete on a broken stream succeeded")
	}
	// Had the client sent it again, that call would be waiting now, and would take this;
	// the one it sent ends on the server once the server sees its stream cut.
	waitNoLongPoll(t, direct, "telemetry")
	if _, err := direct.Send(ctx, "telemetry", client.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		q, err := direct.Queue(ctx, "telemetry")
		return err == nil && q.Stats.Ready == 1 && q.Stats.ReceivedAndDeleted == 0
	}, "the message to stay ready")
}
