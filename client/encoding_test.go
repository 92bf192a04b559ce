package client_test

import (
	"cmp"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"

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

// forEncodings runs test once with the binary encoding and once with JSON.
func forEncodings(t *testing.T, test func(*testing.T, client.Options)) {
	for _, enc := range []struct {
		name string
		opts client.Options
	}{{"binary", client.Options{}}, {"json", client.Options{JSON: true}}} {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			test(t, enc.opts)
		})
	}
}

// clientFor is a client of srv with opts.
func clientFor(t testing.TB, srv *okibatest.Server, opts client.Options) *client.Client {
	c, err := client.New(srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The same records published and pulled in either encoding, over the stream and over
// plain HTTP, land in the same places and read back the same.
func TestClientEncodingsCarryTheSameRecords(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	ctx := context.Background()
	recs := []client.Record{
		{Body: []byte("plain")},
		{Key: []byte("k-1"), HasKey: true, Body: []byte{0, 0xff}, Headers: map[string]string{"b": "2", "a": "1"}},
		{Key: []byte{}, HasKey: true, Body: []byte{}, Partition: ptr(2), DedupID: "d"},
		{Body: []byte("dup"), Partition: ptr(0), DedupID: "d"},
	}
	type outcome struct {
		Published []client.Published
		Records   []client.TopicRecord
	}
	var want *outcome
	for _, enc := range []struct {
		name string
		opts client.Options
	}{
		{"binary/stream", client.Options{}}, {"binary/http", client.Options{NoStream: true}},
		{"json/stream", client.Options{JSON: true}}, {"json/http", client.Options{JSON: true, NoStream: true}},
	} {
		c := clientFor(t, srv, enc.opts)
		topic := "t-" + strings.ReplaceAll(enc.name, "/", "-")
		if _, err := c.PutTopic(ctx, topic, api.TopicConfig{Partitions: ptr(3)}); err != nil {
			t.Fatal(err)
		}
		pub, err := c.PublishRecords(ctx, topic, recs)
		if err != nil || !pub[3].Duplicate {
			t.Fatalf("%s: publish %+v %v", enc.name, pub, err)
		}
		if _, err := c.PutGroup(ctx, topic, "g", api.GroupConfig{}); err != nil {
			t.Fatal(err)
		}
		p, err := c.Pull(ctx, topic, "g", client.Member{Name: "m"}, client.PullOptions{Max: 100})
		if err != nil || len(p.Records) != 3 || len(p.Assignment) != 3 || p.Expires.Before(time.Now()) {
			t.Fatalf("%s: pull %+v %v", enc.name, p, err)
		}
		slices.SortFunc(p.Records, func(a, b client.TopicRecord) int {
			return cmp.Compare(a.Partition*1000+int(a.Offset), b.Partition*1000+int(b.Offset))
		})
		for i := range p.Records {
			if p.Records[i].Time.IsZero() || p.Records[i].Time.Location() != time.UTC {
				t.Fatalf("%s: record %+v has no UTC time", enc.name, p.Records[i])
			}
			p.Records[i].Time = time.Time{}
		}
		got := &outcome{pub, p.Records}
		if want == nil {
			want = got
		} else if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %+v, binary/stream's %+v", enc.name, got, want)
		}
		// A negative partition is refused for the whole request in either encoding.
		_, err = c.PublishRecords(ctx, topic, []client.Record{{Body: []byte("x"), Partition: ptr(-1)}})
		if !client.IsCode(err, api.CodePartitionOutOfRange) {
			t.Fatalf("%s: publish to partition -1: %v", enc.name, err)
		}
	}
}
