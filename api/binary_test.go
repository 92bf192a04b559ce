package api

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestBinaryRoundTrips(t *testing.T) {
	t.Parallel()
	ms := []BinaryMessage{
		{Body: []byte("hello"), Delay: -1},
		{Body: []byte{0, 0xff, 0xfe}, Group: "g", DedupID: "d", Delay: 1500, Headers: []Header{{Name: "a", Value: "1"}, {Name: "b"}}},
		{Body: []byte{}, Delay: 0},
	}
	got, err := DecodeSendRequest(AppendSendRequest(nil, ms))
	if err != nil || !reflect.DeepEqual(got, ms) {
		t.Fatalf("send request: %+v, %v", got, err)
	}
	retry := Duration(2 * time.Second)
	rs := []BinaryResult{{ID: 1}, {ID: 1 << 60, Duplicate: true}, {Err: &Error{Code: CodeQueueFull, Message: "full", RetryAfter: &retry}}, {Err: &Error{Code: CodeMessageTooLarge, Message: "big"}}}
	gotR, err := DecodeSendAnswer(AppendSendAnswer(nil, rs))
	if err != nil || !reflect.DeepEqual(gotR, rs) {
		t.Fatalf("send answer: %+v, %v", gotR, err)
	}
	rcv := []BinaryReceived{
		{ID: 7, Receipt: "r", Deliveries: 2, EnqueuedAt: 1, FirstDelivered: 2, Deadline: 3, Group: "g", DedupID: "d",
			Attrs: []BinaryAttr{{Name: "n", Type: "Number", Value: []byte("1")}, {Name: "b", Type: "Binary", Value: []byte{0}}}, Body: []byte("x"),
			Dead: &BinaryDead{Source: "q", Reason: "max_deliveries", Description: "d", At: 9, Deliveries: 5}},
		{ID: 8, Receipt: "s", Body: []byte{}},
	}
	gotM, err := DecodeReceiveAnswer(AppendReceiveAnswer(nil, rcv))
	if err != nil || !reflect.DeepEqual(gotM, rcv) {
		t.Fatalf("receive answer: %+v, %v", gotM, err)
	}
}

func TestBinaryRejectsMalformedInput(t *testing.T) {
	t.Parallel()
	good := AppendSendRequest(nil, []BinaryMessage{{Body: []byte("hello"), Delay: -1}})
	for name, b := range map[string][]byte{
		"empty":         {},
		"bad magic":     append([]byte("XXXX"), good[4:]...),
		"wrong kind":    AppendSendAnswer(nil, nil),
		"truncated":     good[:len(good)-2],
		"trailing":      append(append([]byte(nil), good...), 0),
		"huge count":    append([]byte("OKB1\x01"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"unknown flags": append([]byte("OKB1\x01\x01"), 0x40, 0x00),
	} {
		if _, err := DecodeSendRequest(b); !errors.Is(err, ErrBinary) {
			t.Errorf("%s: %v, want ErrBinary", name, err)
		}
	}
}

// FuzzBinary: the decoders never panic, and what they accept re-encodes to the same bytes.
func FuzzBinary(f *testing.F) {
	f.Add(AppendSendRequest(nil, []BinaryMessage{{Body: []byte("x"), Group: "g", Delay: 5, Headers: []Header{{Name: "h", Value: "v"}}}}))
	f.Add(AppendSendAnswer(nil, []BinaryResult{{ID: 3}, {Err: &Error{Code: "c", Message: "m"}}}))
	f.Add(AppendReceiveAnswer(nil, []BinaryReceived{{ID: 1, Receipt: "r", Body: []byte("b"), Dead: &BinaryDead{Reason: "x"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ms, err := DecodeSendRequest(b); err == nil && !bytes.Equal(AppendSendRequest(nil, ms), b) {
			t.Fatalf("send request does not re-encode to its input")
		}
		if rs, err := DecodeSendAnswer(b); err == nil && !bytes.Equal(AppendSendAnswer(nil, rs), b) {
			t.Fatalf("send answer does not re-encode to its input")
		}
		if ms, err := DecodeReceiveAnswer(b); err == nil && !bytes.Equal(AppendReceiveAnswer(nil, ms), b) {
			t.Fatalf("receive answer does not re-encode to its input")
		}
	})
}
