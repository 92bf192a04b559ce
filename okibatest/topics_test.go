package okibatest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// The topic helpers: a subscription from the first record sees what was published
// before it, and ReadAll returns a partition's records in offset order.
func TestTopicHelpers(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateTopic(t, "events", 2)
	var recs []client.Record
	for i := range 5 {
		recs = append(recs, client.Record{Key: []byte("k"), HasKey: true, Body: []byte(fmt.Sprint(i))})
	}
	res := srv.Publish(t, "events", recs...)
	p := res[0].Partition
	for i, r := range res {
		if r.Partition != p || r.Offset != uint64(i) {
			t.Fatalf("record %d went to %d@%d; one key keeps one partition, in order", i, r.Partition, r.Offset)
		}
	}
	got := srv.ReadAll(t, "events", p)
	if len(got) != 5 {
		t.Fatalf("ReadAll: %d records, want 5", len(got))
	}
	for i, r := range got {
		if string(r.Body) != fmt.Sprint(i) || r.Offset != uint64(i) {
			t.Fatalf("record %d: offset %d body %q", i, r.Offset, r.Body)
		}
	}
	if other := srv.ReadAll(t, "events", 1-p); len(other) != 0 {
		t.Fatalf("the other partition holds %d records", len(other))
	}

	srv.CreateQueue(t, "copy")
	srv.Subscribe(t, "events", "all", "copy", true)
	ctx := context.Background()
	seen := 0
	wait := 2 * time.Second
	for try := 0; seen < 5; try++ {
		if try == 20 {
			t.Fatalf("the subscription delivered %d of 5 records", seen)
		}
		ds, err := srv.Client.Receive(ctx, "copy", client.ReceiveOptions{Max: 10, Wait: &wait})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Headers["okiba-topic"] != "events" {
				t.Fatalf("message from the subscription has headers %v", d.Headers)
			}
		}
		seen += len(ds)
	}
}
