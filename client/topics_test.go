package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

func TestTopicPublishAndReadThroughTheClient(t *testing.T) {
	t.Parallel()
	forEncodings(t, testTopicPublishAndReadThroughTheClient)
}

func testTopicPublishAndReadThroughTheClient(t *testing.T, opts client.Options) {
	srv := okibatest.New(t, okibatest.Options{})
	cl := clientFor(t, srv, opts)
	ctx := context.Background()
	parts := 2
	if _, err := cl.PutTopic(ctx, "events", api.TopicConfig{Partitions: &parts}); err != nil {
		t.Fatal(err)
	}
	res, err := cl.PublishRecords(ctx, "events", []client.Record{
		{Key: []byte("k"), HasKey: true, Body: []byte("one"), Headers: map[string]string{"h": "v"}},
		{Key: []byte("k"), HasKey: true, Body: []byte{0xff, 0x00}},
		{Body: []byte("x"), DedupID: "d"},
		{Body: []byte("x"), DedupID: "d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Partition != res[1].Partition || res[1].Offset != res[0].Offset+1 || !res[3].Duplicate || res[3].Offset != res[2].Offset {
		t.Fatalf("publish: %+v", res)
	}
	b, err := cl.ReadPartition(ctx, "events", res[0].Partition, client.ReadOptions{Offset: res[0].Offset, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) < 2 || string(b.Records[0].Body) != "one" || b.Records[0].Headers["h"] != "v" ||
		string(b.Records[0].Key) != "k" || string(b.Records[1].Body) != "\xff\x00" || b.Next != b.Records[len(b.Records)-1].Offset+1 {
		t.Fatalf("read: %+v", b)
	}
	if _, err := cl.ReadPartition(ctx, "events", 9, client.ReadOptions{}); !client.IsCode(err, api.CodePartitionOutOfRange) {
		t.Fatalf("read of a missing partition: %v", err)
	}
	if err := cl.DeleteTopic(ctx, "events", false); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Topic(ctx, "events"); !client.IsCode(err, api.CodeTopicNotFound) {
		t.Fatalf("deleted topic: %v", err)
	}
}
