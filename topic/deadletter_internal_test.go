package topic

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

// TestMessagePayloadValues checks MessagePayload's attributes against the values they
// name, at the extremes of partition, offset and topic id, with and without a key and
// headers, so that the one buffer they share is sized for the longest and no value
// runs into the next.
func TestMessagePayloadValues(t *testing.T) {
	for _, r := range []PublishRecord{
		{TopicID: 1, Partition: 0, Offset: 0, Body: []byte("b")},
		{TopicID: math.MaxUint64, Partition: math.MaxInt, Offset: math.MaxUint64, HasKey: true, Key: []byte("k"),
			Headers: []Header{{Name: "a", Value: "1"}, {Name: "b", Value: ""}, {Name: "c", Value: "three"}}},
		{TopicID: 0x1f, Partition: 3, Offset: 12345, Headers: []Header{{Name: "x", Value: "long value " + string(bytes.Repeat([]byte("v"), 300))}}},
	} {
		p := MessagePayload("orders-topic", &r)
		want := map[string]string{
			HeaderTopic:     "orders-topic",
			HeaderPartition: strconv.Itoa(r.Partition),
			HeaderOffset:    strconv.FormatUint(r.Offset, 10),
			HeaderRecordID:  RecordID(r.TopicID, r.Partition, r.Offset),
		}
		for _, h := range r.Headers {
			want[h.Name] = h.Value
		}
		if r.HasKey {
			want[HeaderKey] = string(r.Key)
		}
		if len(p.Attrs) != len(want) {
			t.Fatalf("%d attributes, want %d: %+v", len(p.Attrs), len(want), p.Attrs)
		}
		for _, a := range p.Attrs {
			if w, ok := want[a.Name]; !ok || string(a.Value) != w {
				t.Errorf("attribute %s = %q, want %q", a.Name, a.Value, w)
			}
			if cap(a.Value) != len(a.Value) {
				t.Errorf("attribute %s has room past its value (cap %d, len %d): an append would overwrite the next", a.Name, cap(a.Value), len(a.Value))
			}
		}
		if !bytes.Equal(p.Body, r.Body) {
			t.Errorf("body %q, want %q", p.Body, r.Body)
		}
	}
}
