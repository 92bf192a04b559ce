package api

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
)

func samplePublish() []BinaryPublishRecord {
	return []BinaryPublishRecord{
		{Body: []byte("hello"), Partition: -1},
		{Body: []byte{0, 0xff}, HasKey: true, Key: []byte("k"), Partition: 3, DedupID: "d", Headers: []Header{{Name: "a", Value: "1"}, {Name: "b"}}},
		{Body: []byte{}, HasKey: true, Key: []byte{}, Partition: 0},
	}
}

func samplePull() *BinaryPull {
	return &BinaryPull{
		Session: "12", Expires: 1700000000000,
		Assignment: []Assignment{{Partition: 0, Epoch: 2, Position: 5, Committed: 3, End: 9}, {Partition: 3, Epoch: 1 << 40, Revoking: true}},
		Records: []BinaryTopicRecord{
			{Partition: 0, Offset: 3, Time: 1700000000001, Body: []byte("x")},
			{Partition: 3, Offset: 1 << 50, Time: 1, HasKey: true, Key: []byte{}, Headers: []Header{{Name: "h", Value: "v"}}, Body: []byte{0xff}},
		},
	}
}

func TestBinaryTopicRoundTrips(t *testing.T) {
	t.Parallel()
	ps := samplePublish()
	got, err := DecodePublishRequest(AppendPublishRequest(nil, ps))
	if err != nil || !reflect.DeepEqual(got, ps) {
		t.Fatalf("publish request: %+v, %v", got, err)
	}
	retry := Duration(3 * time.Second)
	rs := []PublishResult{{Partition: 2, Offset: 7}, {Partition: 255, Offset: 1 << 60, Duplicate: true},
		{Error: &Error{Code: CodeTopicFull, Message: "full", RetryAfter: &retry}}, {Error: &Error{Code: CodeRecordTooLarge, Message: "big"}}}
	gotR, err := DecodePublishAnswer(AppendPublishAnswer(nil, rs))
	if err != nil || !reflect.DeepEqual(gotR, rs) {
		t.Fatalf("publish answer: %+v, %v", gotR, err)
	}
	p := samplePull()
	gotP, err := DecodePullAnswer(AppendPullAnswer(nil, p))
	if err != nil || !reflect.DeepEqual(gotP, p) {
		t.Fatalf("pull answer: %+v, %v", gotP, err)
	}
	empty := &BinaryPull{Assignment: []Assignment{}, Records: []BinaryTopicRecord{}}
	if gotP, err = DecodePullAnswer(AppendPullAnswer(nil, empty)); err != nil || !reflect.DeepEqual(gotP, empty) {
		t.Fatalf("empty pull answer: %+v, %v", gotP, err)
	}
}

// The decoders alias their input: a body is a window of the batch, not a copy.
func TestBinaryTopicBodiesAlias(t *testing.T) {
	t.Parallel()
	b := AppendPublishRequest(nil, []BinaryPublishRecord{{Body: []byte("body"), Partition: -1}})
	got, err := DecodePublishRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 'Y'
	if string(got[0].Body) != "bodY" {
		t.Fatalf("body %q does not alias the input", got[0].Body)
	}
	if cap(got[0].Body) != len(got[0].Body) {
		t.Fatalf("body's capacity %d reaches past it", cap(got[0].Body))
	}
}

func TestBinaryTopicRejectsMalformedInput(t *testing.T) {
	t.Parallel()
	pub := AppendPublishRequest(nil, samplePublish())
	ans := AppendPublishAnswer(nil, []PublishResult{{Partition: 1, Offset: 2}})
	pull := AppendPullAnswer(nil, samplePull())
	cases := map[string]struct {
		decode func([]byte) error
		b      []byte
	}{}
	add := func(kind string, decode func([]byte) error, good []byte, extra map[string][]byte) {
		cases[kind+": empty"] = struct {
			decode func([]byte) error
			b      []byte
		}{decode, nil}
		bad := map[string][]byte{
			"bad magic":  append([]byte("OKB2"), good[4:]...),
			"wrong kind": append(append([]byte("OKB1"), good[4]+1), good[5:]...),
			"trailing":   append(append([]byte(nil), good...), 0),
		}
		// Every truncation fails: no prefix of a batch is a batch.
		for n := 0; n < len(good); n++ {
			bad["truncated to "+strconv.Itoa(n)] = good[:n]
		}
		for k, v := range extra {
			bad[k] = v
		}
		for k, v := range bad {
			cases[kind+": "+k] = struct {
				decode func([]byte) error
				b      []byte
			}{decode, v}
		}
	}
	add("publish", func(b []byte) error { _, err := DecodePublishRequest(b); return err }, pub, map[string][]byte{
		"huge count":        append([]byte("OKB1\x04"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"count over limit":  append([]byte("OKB1\x04"), 0xe9, 0x07), // 1001
		"count past end":    append([]byte("OKB1\x04"), 0x05, 0x00, 0x00),
		"unknown flags":     []byte("OKB1\x04\x01\x10\x00"),
		"empty headers":     []byte("OKB1\x04\x01\x08\x00\x00"),
		"empty dedup id":    []byte("OKB1\x04\x01\x04\x00\x00"),
		"huge partition":    append([]byte("OKB1\x04\x01\x02"), 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00),
		"field past end":    []byte("OKB1\x04\x01\x00\x7f"),
		"long number":       []byte("OKB1\x04\x01\x00\x80\x00"),
		"huge header count": append([]byte("OKB1\x04\x01\x08"), 0xff, 0xff, 0x03),
	})
	add("publish answer", func(b []byte) error { _, err := DecodePublishAnswer(b); return err }, ans, map[string][]byte{
		"unknown status": []byte("OKB1\x05\x01\x03\x00\x00"),
		"huge retry":     append([]byte("OKB1\x05\x01\x02\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f),
	})
	add("pull", func(b []byte) error { _, err := DecodePullAnswer(b); return err }, pull, map[string][]byte{
		"huge assignment count": append([]byte("OKB1\x06\x00\x00"), 0xff, 0xff, 0x03),
		"huge record count":     append([]byte("OKB1\x06\x00\x00\x00"), 0xff, 0xff, 0x03),
		"bad revoking":          []byte("OKB1\x06\x00\x00\x01\x00\x00\x02\x00\x00\x00\x00"),
		"unknown record flags":  []byte("OKB1\x06\x00\x00\x00\x01\x00\x00\x00\x04\x00"),
		"huge time":             append([]byte("OKB1\x06\x00\x00\x00\x01\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00),
	})
	for name, c := range cases {
		if err := c.decode(c.b); !errors.Is(err, ErrBinary) {
			t.Errorf("%s: %v, want ErrBinary", name, err)
		}
	}
}

// FuzzBinaryTopics: the topic decoders never panic, and what they accept re-encodes to
// the same bytes (one encoding per batch).
func FuzzBinaryTopics(f *testing.F) {
	f.Add(AppendPublishRequest(nil, samplePublish()))
	f.Add(AppendPublishAnswer(nil, []PublishResult{{Partition: 1, Offset: 3}, {Error: &Error{Code: "c", Message: "m"}}}))
	f.Add(AppendPullAnswer(nil, samplePull()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if rs, err := DecodePublishRequest(b); err == nil && !bytes.Equal(AppendPublishRequest(nil, rs), b) {
			t.Fatalf("publish request does not re-encode to its input")
		}
		if rs, err := DecodePublishAnswer(b); err == nil && !bytes.Equal(AppendPublishAnswer(nil, rs), b) {
			t.Fatalf("publish answer does not re-encode to its input")
		}
		if p, err := DecodePullAnswer(b); err == nil && !bytes.Equal(AppendPullAnswer(nil, p), b) {
			t.Fatalf("pull answer does not re-encode to its input")
		}
	})
}
