package api

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	t.Parallel()
	frames := []Frame{
		{Kind: FrameRequest, ID: 1, Method: "POST", Target: "/v1/queues/q/messages?x=1", Header: []Header{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(`{"messages":[]}`)},
		{Kind: FrameRequest, ID: 1 << 62, Method: "GET", Target: "/", Body: []byte{}},
		{Kind: FrameCancel, ID: 7},
		{Kind: FrameAnswer, ID: 3, Status: 429, Header: []Header{{Name: "Retry-After", Value: "1"}, {Name: "Content-Type", Value: "application/json"}}, Body: []byte("{}")},
		{Kind: FrameAnswer, ID: 0, Status: 400, Body: []byte{}},
	}
	var wire []byte
	for i := range frames {
		wire = AppendFrame(wire, &frames[i])
	}
	r := bufio.NewReader(bytes.NewReader(wire))
	var buf []byte
	for i, want := range frames {
		got, b, err := ReadFrame(r, nil, MaxFrame)
		buf = b
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("frame %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	if _, _, err := ReadFrame(r, buf, MaxFrame); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFramesRejectMalformedInput(t *testing.T) {
	t.Parallel()
	req := AppendFrame(nil, &Frame{Kind: FrameRequest, ID: 1, Method: "GET", Target: "/v1/queues"})
	for name, b := range map[string][]byte{
		"empty":            {},
		"unknown kind":     {9, 1},
		"no id":            {FrameRequest},
		"no method":        AppendFrame(nil, &Frame{Kind: FrameRequest, ID: 1, Target: "/x"})[4:],
		"relative target":  AppendFrame(nil, &Frame{Kind: FrameRequest, ID: 1, Method: "GET", Target: "v1/queues"})[4:],
		"truncated":        req[4 : len(req)-3],
		"answer status 42": AppendFrame(nil, &Frame{Kind: FrameAnswer, ID: 1, Status: 42})[4:],
		"cancel with more": append(AppendFrame(nil, &Frame{Kind: FrameCancel, ID: 1})[4:], 0),
		"long varint":      {FrameCancel, 0x81, 0x00},
	} {
		if _, err := DecodeFrame(b); !errors.Is(err, ErrBinary) {
			t.Errorf("%s: %v, want ErrBinary", name, err)
		}
	}
	big := []byte{0x7f, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(big)), nil, MaxFrame); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("a 2 GiB frame: %v, want ErrFrameTooLarge", err)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(req[:len(req)-1])), nil, MaxFrame); !errors.Is(err, ErrBinary) {
		t.Errorf("a connection ending inside a frame: %v, want ErrBinary", err)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(req[:2])), nil, MaxFrame); !errors.Is(err, ErrBinary) {
		t.Errorf("a connection ending inside a length: %v, want ErrBinary", err)
	}
}

// FuzzFrame: the decoder never panics, and what it accepts re-encodes to the same bytes.
func FuzzFrame(f *testing.F) {
	f.Add(AppendFrame(nil, &Frame{Kind: FrameRequest, ID: 5, Method: "POST", Target: "/v1/queues/q/ack", Header: []Header{{Name: "a", Value: "b"}}, Body: []byte("{}")})[4:])
	f.Add(AppendFrame(nil, &Frame{Kind: FrameAnswer, ID: 5, Status: 200, Body: []byte("{}")})[4:])
	f.Add(AppendFrame(nil, &Frame{Kind: FrameCancel, ID: 5})[4:])
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		if got := AppendFrame(nil, &fr)[4:]; !bytes.Equal(got, b) {
			t.Fatalf("frame does not re-encode to its input:\n in  %x\n out %x", b, got)
		}
	})
}

// TestReadFrameGrowsWithTheBytes: a frame longer than eagerFrame is read whole, and a
// frame announced long but cut short costs no more memory than what arrived.
func TestReadFrameGrowsWithTheBytes(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16)
	wire := AppendFrame(nil, &Frame{Kind: FrameAnswer, ID: 9, Status: 200, Body: body})
	f, buf, err := ReadFrame(bufio.NewReader(bytes.NewReader(wire)), nil, MaxFrame)
	if err != nil || f.ID != 9 || !bytes.Equal(f.Body, body) {
		t.Fatalf("a 5 MiB frame: id %d, %d bytes, %v", f.ID, len(f.Body), err)
	}
	if cap(buf) > len(wire) {
		t.Fatalf("buffer of %d bytes for a frame of %d", cap(buf), len(wire)-4)
	}
	cut := wire[:4+100]
	_, buf, err = ReadFrame(bufio.NewReader(bytes.NewReader(cut)), nil, MaxFrame)
	if !errors.Is(err, ErrBinary) {
		t.Fatalf("a frame cut short: %v", err)
	}
	if cap(buf) > eagerRead {
		t.Fatalf("a frame that sent 100 of its %d bytes got a %d-byte buffer", len(wire)-4, cap(buf))
	}
}
