package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// The binary encoding of publishes and pulls is the same API as JSON: the same records in
// either encoding land in the same places and read back the same, and a malformed or
// refused binary publish changes nothing.

// topicRecords reads every record of a topic's partitions, in JSON.
func (e *env) topicRecords(name string, partitions int) []api.Record {
	e.t.Helper()
	var out []api.Record
	for p := range partitions {
		var rd api.ReadResponse
		e.call("GET", fmt.Sprintf("/v1/topics/%s/partitions/%d/records?offset=0&max=1000", name, p), nil, 200, &rd)
		out = append(out, rd.Records...)
	}
	return out
}

// sameRecords compares records but for their publish times.
func sameRecords(a, b []api.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Time, y.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// The records of both encodings: text and binary bodies and keys, an empty key, an
// explicit partition, headers, dedup ids (one repeated).
var (
	jsonRecords = `{"records":[
		{"body":"plain"},
		{"key":"k-1","body":"keyed","headers":{"b":"2","a":"1"}},
		{"key_base64":"AP8=","body_base64":"AAEC"},
		{"key":"","body":"","partition":2,"dedup_id":"d-1"},
		{"body":"dup","partition":0,"dedup_id":"d-1"}]}`
	binaryRecords = []api.BinaryPublishRecord{
		{Body: []byte("plain"), Partition: -1},
		{HasKey: true, Key: []byte("k-1"), Body: []byte("keyed"), Partition: -1, Headers: []api.Header{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}},
		{HasKey: true, Key: []byte{0, 0xff}, Body: []byte{0, 1, 2}, Partition: -1},
		{HasKey: true, Key: []byte{}, Body: []byte{}, Partition: 2, DedupID: "d-1"},
		{Body: []byte("dup"), Partition: 0, DedupID: "d-1"},
	}
)

func TestBinaryPublishAndPullAreOneAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	for _, name := range []string{"tj", "tb"} {
		e.call("PUT", "/v1/topics/"+name, `{"partitions":3}`, 201, nil)
	}
	var pj api.PublishResponse
	e.call("POST", "/v1/topics/tj/records", jsonRecords, 200, &pj)
	status, hdr, data := e.binary("/v1/topics/tb/records", api.AppendPublishRequest(nil, binaryRecords))
	if status != 200 || hdr.Get("Content-Type") != api.ContentTypeBinary {
		t.Fatalf("binary publish: %d %s %q", status, hdr.Get("Content-Type"), data)
	}
	pb, err := api.DecodePublishAnswer(data)
	if err != nil || !reflect.DeepEqual(pb, pj.Results) || !pb[4].Duplicate {
		t.Fatalf("binary publish results %+v (%v), JSON's %+v", pb, err, pj.Results)
	}
	rj, rb := e.topicRecords("tj", 3), e.topicRecords("tb", 3)
	if len(rj) != 4 || !sameRecords(rj, rb) {
		t.Fatalf("records published in binary %+v, in JSON %+v", rb, rj)
	}
	// A binary publish answered in JSON, and a JSON one in binary.
	r := e.do("POST", "/v1/topics/tb/records", api.AppendPublishRequest(nil, binaryRecords[:1]), "Content-Type", api.ContentTypeBinary)
	var mixed api.PublishResponse
	if r.Status != 200 || json.Unmarshal(r.Body, &mixed) != nil || len(mixed.Results) != 1 || mixed.Results[0].Error != nil {
		t.Fatalf("binary publish, JSON answer: %v", r)
	}
	r = e.do("POST", "/v1/topics/tj/records", `{"body":"plain"}`, "Accept", api.ContentTypeBinary)
	if rs, err := api.DecodePublishAnswer(r.Body); r.Status != 200 || err != nil || len(rs) != 1 || rs[0] != mixed.Results[0] {
		t.Fatalf("JSON publish, binary answer: %v (%v), want %+v", r, err, mixed.Results[0])
	}

	// A pull answers the same records in either encoding.
	for _, name := range []string{"tj", "tb"} {
		e.call("PUT", "/v1/topics/"+name+"/groups/g", `{}`, 201, nil)
	}
	var gj api.PullResponse
	e.call("POST", "/v1/topics/tj/groups/g/pull", `{"member":"m","max":100}`, 200, &gj)
	r = e.do("POST", "/v1/topics/tb/groups/g/pull", `{"member":"m","max":100}`, "Accept", api.ContentTypeBinary)
	if r.Status != 200 || r.Header.Get("Content-Type") != api.ContentTypeBinary {
		t.Fatalf("binary pull: %v", r)
	}
	gb, err := api.DecodePullAnswer(r.Body)
	if err != nil || gb.Session == "" || !reflect.DeepEqual(gb.Assignment, gj.Assignment) || len(gb.Records) != len(gj.Records) {
		t.Fatalf("binary pull %+v (%v), JSON's %+v", gb, err, gj)
	}
	if d := time.UnixMilli(gb.Expires).Sub(gj.Expires); d < -time.Second || d > time.Second {
		t.Fatalf("binary pull's lease ends at %v, JSON's at %v", time.UnixMilli(gb.Expires), gj.Expires)
	}
	asJSON := make([]api.Record, len(gb.Records))
	for i, x := range gb.Records {
		asJSON[i] = api.Record{Partition: x.Partition, Offset: x.Offset, Time: time.UnixMilli(x.Time).UTC()}
		asJSON[i].Body, asJSON[i].BodyBase64 = api.EncodeBody(x.Body)
		if x.HasKey {
			asJSON[i].Key, asJSON[i].KeyBase64 = api.EncodeBody(x.Key)
		}
		for _, h := range x.Headers {
			if asJSON[i].Headers == nil {
				asJSON[i].Headers = map[string]string{}
			}
			asJSON[i].Headers[h.Name] = h.Value
		}
		if x.Time <= 0 {
			t.Fatalf("record %d has no time", i)
		}
	}
	if !sameRecords(asJSON, gj.Records) {
		t.Fatalf("binary pull's records %+v, JSON's %+v", asJSON, gj.Records)
	}
	// An error of a binary pull is JSON.
	r = e.do("POST", "/v1/topics/tb/groups/g/pull", `{"member":"m","session":"12345"}`, "Accept", api.ContentTypeBinary)
	if r.Status < 400 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("binary pull with a stale session: %v %s", r, r.Header.Get("Content-Type"))
	}
}

func TestBinaryPublishRejectsLikeJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.call("PUT", "/v1/topics/t", `{"partitions":2,"max_record_size":10,"retention_records":3,"discard":"new"}`, 201, nil)
	e.call("POST", "/v1/topics/t/records", `{"body":"1"}`, 200, nil)
	topicState := func() api.Topic {
		var tp api.Topic
		e.call("GET", "/v1/topics/t", nil, 200, &tp)
		return tp
	}
	before := topicState()
	good := api.AppendPublishRequest(nil, []api.BinaryPublishRecord{{Body: []byte("ok"), Partition: -1}})
	for name, c := range map[string]struct {
		body []byte
		code string
	}{
		"malformed":          {[]byte("OKB1\x04\x05garbage"), api.CodeInvalidRequest},
		"truncated":          {good[:len(good)-1], api.CodeInvalidRequest},
		"trailing bytes":     {append(append([]byte(nil), good...), 0), api.CodeInvalidRequest},
		"hostile count":      {append([]byte("OKB1\x04"), 0xff, 0xff, 0xff, 0xff, 0x0f), api.CodeInvalidRequest},
		"a send batch":       {api.AppendSendRequest(nil, []api.BinaryMessage{{Body: []byte("x"), Delay: -1}}), api.CodeInvalidRequest},
		"empty batch":        {api.AppendPublishRequest(nil, nil), api.CodeInvalidRequest},
		"bad partition":      {api.AppendPublishRequest(nil, []api.BinaryPublishRecord{{Body: []byte("ok"), Partition: -1}, {Body: []byte("x"), Partition: 256}}), api.CodePartitionOutOfRange},
		"header given twice": {api.AppendPublishRequest(nil, []api.BinaryPublishRecord{{Body: []byte("x"), Partition: -1, Headers: []api.Header{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}}}}), api.CodeInvalidMessage},
	} {
		status, hdr, data := e.binary("/v1/topics/t/records", c.body)
		var eb api.ErrorBody
		if status < 400 || status >= 500 || hdr.Get("Content-Type") != "application/json" || json.Unmarshal(data, &eb) != nil || eb.Error == nil || eb.Error.Code != c.code {
			t.Errorf("%s: HTTP %d %s %q, want a 4xx JSON %s", name, status, hdr.Get("Content-Type"), data, c.code)
		} else if c.code == api.CodeInvalidRequest && eb.Error.Message == "" {
			t.Errorf("%s: no message says what is wrong", name)
		}
		if after := topicState(); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s changed the topic: %+v, was %+v", name, after, before)
		}
	}
	// Records refused one by one come back per record, in binary, as in JSON.
	status, _, data := e.binary("/v1/topics/t/records", api.AppendPublishRequest(nil, []api.BinaryPublishRecord{
		{Body: []byte("ok"), Partition: -1}, {Body: []byte("far too large"), Partition: -1},
	}))
	rs, err := api.DecodePublishAnswer(data)
	if status != 200 || err != nil || len(rs) != 2 || rs[0].Error != nil || rs[1].Error == nil || rs[1].Error.Code != api.CodeRecordTooLarge {
		t.Fatalf("mixed batch: %d %+v %v", status, rs, err)
	}
	// Every record refused alike: that error's status, still a binary answer.
	e.call("POST", "/v1/topics/t/records", `{"body":"3"}`, 200, nil)
	status, hdr, data := e.binary("/v1/topics/t/records", good)
	rs, err = api.DecodePublishAnswer(data)
	if status != 429 || hdr.Get("Content-Type") != api.ContentTypeBinary || err != nil || len(rs) != 1 || rs[0].Error == nil || rs[0].Error.Code != api.CodeTopicFull {
		t.Fatalf("full topic: %d %v %+v %v", status, hdr, rs, err)
	}
}
