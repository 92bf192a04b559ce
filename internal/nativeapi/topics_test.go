package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

func TestTopicsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	var tp api.Topic
	e.call("PUT", "/v1/topics/orders", `{"partitions":3,"retention":"forever"}`, 201, &tp)
	if *tp.Config.Partitions != 3 || len(tp.Partitions) != 3 || tp.Config.Retention == nil || !tp.Config.Retention.Forever {
		t.Fatalf("created %+v", tp)
	}
	e.call("PUT", "/v1/topics/orders", `{"retention":"48h","tags":{"team":"cafe"}}`, 200, &tp)
	if tp.Config.Retention.Age != 48*time.Hour || *tp.Config.Partitions != 3 {
		t.Fatalf("reconfigured %+v", tp.Config)
	}

	// A batch: keyed records land on their key's partition, in order.
	var pub api.PublishResponse
	e.call("POST", "/v1/topics/orders/records",
		`{"records":[{"key":"o-1","body":"placed","headers":{"type":"OrderPlaced"}},{"key":"o-1","body":"paid"},{"key":"o-2","body_base64":"AAE="}]}`, 200, &pub)
	if len(pub.Results) != 3 || pub.Results[0].Partition != pub.Results[1].Partition || pub.Results[1].Offset != pub.Results[0].Offset+1 {
		t.Fatalf("publish: %+v", pub)
	}
	// One record without "records"; a dedup id repeated is a duplicate with the original's place.
	var one api.PublishResponse
	e.call("POST", "/v1/topics/orders/records", `{"body":"x","partition":2,"dedup_id":"d-1"}`, 200, &one)
	var dup api.PublishResponse
	e.call("POST", "/v1/topics/orders/records", `{"body":"x again","partition":0,"dedup_id":"d-1"}`, 200, &dup)
	if !dup.Results[0].Duplicate || dup.Results[0].Partition != 2 || dup.Results[0].Offset != one.Results[0].Offset {
		t.Fatalf("duplicate: %+v, original %+v", dup, one)
	}

	p := pub.Results[0].Partition
	var rd api.ReadResponse
	e.call("GET", fmt.Sprintf("/v1/topics/orders/partitions/%d/records?offset=0&max=10", p), nil, 200, &rd)
	if len(rd.Records) < 2 || *rd.Records[0].Body != "placed" || rd.Records[0].Headers["type"] != "OrderPlaced" ||
		*rd.Records[0].Key != "o-1" || *rd.Records[1].Body != "paid" || rd.Next != rd.End {
		t.Fatalf("read: %+v", rd)
	}

	// A long poll at the end answers when a record arrives.
	ch := e.doAsync("GET", fmt.Sprintf("/v1/topics/orders/partitions/%d/records?offset=%d&wait=20s", p, rd.End), nil)
	// The poll may or may not be parked yet: either way it must answer with the record
	// (broker.TestTopicReadLongPollsAndRefusesBadOffsets parks it for certain).
	e.call("POST", "/v1/topics/orders/records", fmt.Sprintf(`{"body":"late","partition":%d}`, p), 200, nil)
	select {
	case r := <-ch:
		var got api.ReadResponse
		if err := json.Unmarshal(r.Body, &got); err != nil || len(got.Records) != 1 || *got.Records[0].Body != "late" {
			t.Fatalf("long poll: %v", r)
		}
	case <-time.After(waitLong):
		t.Fatal("the long poll did not answer")
	}

	var list api.TopicList
	e.call("GET", "/v1/topics?prefix=ord", nil, 200, &list)
	if len(list.Topics) != 1 || list.Topics[0].Stats.Published != 5 || list.Topics[0].Stats.Records != 5 {
		t.Fatalf("list: %+v", list)
	}
	e.call("DELETE", "/v1/topics/orders", nil, 204, nil)
	expectError(t, e.do("GET", "/v1/topics/orders", nil), api.CodeTopicNotFound, "orders")
}

// TestTopicsRefuseBadInput: each mistake gets its code and a message that says what to
// fix, and changes nothing.
func TestTopicsRefuseBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.call("PUT", "/v1/topics/t", `{"partitions":2,"max_record_size":10}`, 201, nil)
	for _, c := range []struct {
		method, path, body string
		code               string
		mentions           []string
	}{
		{"PUT", "/v1/topics/bad%20name", `{}`, api.CodeInvalidName, []string{"topic name"}},
		{"PUT", "/v1/topics/x", `{"partitions":0}`, api.CodeInvalidConfig, []string{"partitions"}},
		{"PUT", "/v1/topics/x", `{"partitions":257}`, api.CodeInvalidConfig, []string{"256"}},
		{"PUT", "/v1/topics/t", `{"partitions":3}`, api.CodeInvalidConfig, []string{"fixed at creation"}},
		{"PUT", "/v1/topics/x", `{"retention":"soon"}`, api.CodeInvalidRequest, []string{"forever"}},
		{"PUT", "/v1/topics/x", `{"discard":"new"}`, api.CodeInvalidConfig, []string{"retention_bytes"}},
		{"PUT", "/v1/topics/x", `{"hash":"crc32"}`, api.CodeInvalidConfig, []string{"murmur2"}},
		{"PUT", "/v1/topics/x", `{"partitons":2}`, api.CodeInvalidRequest, []string{"partitons"}},
		{"POST", "/v1/topics/nope/records", `{"body":"x"}`, api.CodeTopicNotFound, []string{"nope"}},
		{"POST", "/v1/topics/t/records", `{"body":"this is too large"}`, api.CodeRecordTooLarge, []string{"10"}},
		{"POST", "/v1/topics/t/records", `{"body":"x","partition":5}`, api.CodePartitionOutOfRange, []string{"0 to 1"}},
		{"POST", "/v1/topics/t/records", `{"body":"x","headers":{"okiba-topic":"y"}}`, api.CodeInvalidMessage, []string{"okiba-"}},
		{"POST", "/v1/topics/t/records", `{"key":"a","key_base64":"YQ==","body":"x"}`, api.CodeInvalidMessage, []string{"key"}},
		{"POST", "/v1/topics/t/records", `{"records":[]}`, api.CodeInvalidRequest, []string{"records"}},
		{"POST", "/v1/topics/t/records", `{}`, api.CodeInvalidBody, []string{"body"}},
		{"GET", "/v1/topics/t/partitions/2/records", ``, api.CodePartitionOutOfRange, []string{"0 to 1"}},
		{"GET", "/v1/topics/t/partitions/x/records", ``, api.CodePartitionOutOfRange, []string{"number"}},
		{"GET", "/v1/topics/t/partitions/0/records?offset=1", ``, api.CodeOffsetOutOfRange, []string{"end"}},
		{"GET", "/v1/topics/t/partitions/0/records?offset=-1", ``, api.CodeInvalidRequest, []string{"offset"}},
		{"GET", "/v1/topics/t/partitions/0/records?max=0", ``, api.CodeInvalidRequest, []string{"max"}},
		{"GET", "/v1/topics/t/partitions/0/records?max=10001", ``, api.CodeInvalidRequest, []string{"10000"}},
		{"GET", "/v1/topics/t/partitions/0/records?wait=2m", ``, api.CodeInvalidRequest, []string{"wait"}},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		expectError(t, e.do(c.method, c.path, body), c.code, c.mentions...)
	}
	var tp api.Topic
	e.call("GET", "/v1/topics/t", nil, 200, &tp)
	if tp.Stats.Published != 0 || *tp.Config.Partitions != 2 {
		t.Fatalf("rejected requests changed the topic: %+v", tp)
	}
	var list api.TopicList
	e.call("GET", "/v1/topics", nil, 200, &list)
	if len(list.Topics) != 1 {
		t.Fatalf("rejected requests created topics: %+v", list.Topics)
	}
	// In a batch, the refused record's result has its error and no place; the other's
	// has its place.
	r := e.do("POST", "/v1/topics/t/records", `{"records":[{"body":"x","partition":1},{"body":"this is too large"}]}`)
	if want := `{"results":[{"partition":1,"offset":0},{"error":{"code":"record_too_large",`; !strings.HasPrefix(string(r.Body), want) {
		t.Fatalf("mixed batch answered %s, want it to begin %s", r.Body, want)
	}
}
