package api

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// The stream: the native API's requests as length-prefixed frames on one persistent
// connection, many in flight at once (docs/api.md, "The stream"). A client opens it with
//
//	GET /v1/stream HTTP/1.1
//	Connection: Upgrade
//	Upgrade: okiba-stream/1
//	Authorization: Bearer <token>        (when the server has one)
//
// and, on "101 Switching Protocols", both sides send frames:
//
//	frame   = length kind id rest        length: 4 bytes, big-endian, of what follows it
//	kind 1  request  (client → server)   rest = method target headers body
//	kind 2  cancel   (client → server)   rest = empty: stop request id (its answer still comes)
//	kind 3  answer   (server → client)   rest = status headers body
//	headers = count (name value)*
//
// id is an unsigned varint chosen by the client, unique among its requests in flight;
// method, target (path and query, as in an HTTP request line), names and values are a
// varint length then the bytes; body is the rest of the frame. A request means what the
// same HTTP request means, and its answer carries the same status, headers and body. An
// answer with id 0 reports an error of the connection itself (a malformed frame); the
// server closes the connection after it.
//
// Why a stream and not HTTP: an HTTP/1.1 connection carries one request at a time, and
// Go's server and client each add goroutine hand-offs per request (a background reader
// on the server, read and write loops in the client) that, on a machine whose idle cores
// sleep, cost more than the request's own work. docs/benchmarks.md has the measurements.
const (
	StreamPath     = "/v1/stream"
	StreamProtocol = "okiba-stream/1"
)

// Frame kinds.
const (
	FrameRequest = 1
	FrameCancel  = 2
	FrameAnswer  = 3
)

// MaxFrame is the largest frame a server reads: a request body of MaxRequestBody plus
// room for the method, target and headers.
const MaxFrame = MaxRequestBody + 64<<10

// Frame is one decoded frame. Only the fields of its Kind are used.
type Frame struct {
	Kind   byte
	ID     uint64
	Method string   // request
	Target string   // request
	Status int      // answer
	Header []Header // request, answer
	Body   []byte   // request, answer
}

// AppendFrame appends f, length prefix included, to b.
func AppendFrame(b []byte, f *Frame) []byte {
	b = AppendFrameHead(b, f, len(f.Body))
	if f.Kind != FrameCancel {
		b = append(b, f.Body...)
	}
	return b
}

// AppendFrameHead appends f without its body, its length prefix counting bodyLen bytes
// of body, which the caller sends right after it: a large answer then goes out as it
// lies, without being copied into the stream's buffer first. f.Body is ignored.
func AppendFrameHead(b []byte, f *Frame, bodyLen int) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.Kind)
	b = binary.AppendUvarint(b, f.ID)
	switch f.Kind {
	case FrameRequest:
		b = putString(b, f.Method)
		b = putString(b, f.Target)
	case FrameAnswer:
		b = binary.AppendUvarint(b, uint64(f.Status))
	}
	if f.Kind == FrameCancel {
		bodyLen = 0
	} else {
		b = binary.AppendUvarint(b, uint64(len(f.Header)))
		for _, h := range f.Header {
			b = putString(b, h.Name)
			b = putString(b, h.Value)
		}
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4+bodyLen))
	return b
}

// ReadFrame reads one frame of at most max bytes (after the length) from r. Its Body
// and the returned buffer alias buf, grown as needed, which the caller passes back to
// reuse it once it no longer needs the frame. io.EOF means r ended between frames.
func ReadFrame(r *bufio.Reader, buf []byte, max int) (Frame, []byte, error) {
	return readFrame(r, buf, max, eagerRead)
}

// ReadTrustedFrame is ReadFrame into a fresh buffer for a reader that trusts the
// lengths its peer announces (a client reading its server's answers): the buffer is
// made at the frame's size at once, where ReadFrame grows it as the bytes arrive, which
// for a pull's answer of 10 MB was four allocations and 15 MB of copying.
func ReadTrustedFrame(r *bufio.Reader, max int) (Frame, error) {
	f, _, err := readFrame(r, nil, max, max)
	return f, err
}

func readFrame(r *bufio.Reader, buf []byte, max, eager int) (Frame, []byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: connection ended inside a frame's length", ErrBinary)
		}
		return Frame{}, buf, err
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size > max {
		return Frame{}, buf, fmt.Errorf("%w: frame of %d bytes; the limit is %d", ErrFrameTooLarge, size, max)
	}
	buf, err := readFull(r, buf, size, eager)
	if err != nil {
		return Frame{}, buf, fmt.Errorf("%w: connection ended inside a frame (%v)", ErrBinary, err)
	}
	f, err := DecodeFrame(buf)
	return f, buf, err
}

// ReadFull reads exactly n bytes from r. Memory follows the bytes that arrive, not the
// length a peer announced: up to 1 MiB is allocated at once, and beyond that the buffer
// doubles as the bytes come in, to exactly n, so that a peer cannot make a server hold
// 16 MiB by announcing it. The server reads request bodies and stream frames with it.
func ReadFull(r io.Reader, n int) ([]byte, error) { return readFull(r, nil, n, eagerRead) }

// eagerRead is the most ReadFull allocates before the bytes arrive.
const eagerRead = 1 << 20

// readFull is ReadFull into buf, reused when large enough, allocating up to eager
// bytes before they arrive.
func readFull(r io.Reader, buf []byte, n, eager int) ([]byte, error) {
	if cap(buf) < min(n, eager) {
		buf = make([]byte, 0, min(n, eager))
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) { // double, up to n
			grown := make([]byte, len(buf), len(buf)+min(n-len(buf), cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		end := min(n, cap(buf))
		if _, err := io.ReadFull(r, buf[len(buf):end]); err != nil {
			return buf, err
		}
		buf = buf[:end]
	}
	return buf, nil
}

// ErrFrameTooLarge is returned by ReadFrame for a frame longer than its limit.
var ErrFrameTooLarge = fmt.Errorf("%w: frame too large", ErrBinary)

// DecodeFrame decodes a frame without its length prefix. Body aliases b.
func DecodeFrame(b []byte) (Frame, error) {
	r := reader{b: b}
	f := Frame{Kind: r.byte()}
	f.ID = r.uvarint()
	switch f.Kind {
	case FrameRequest:
		f.Method = r.string()
		f.Target = r.string()
	case FrameAnswer:
		st := r.uvarint()
		if r.err == nil && (st < 100 || st > 999) {
			r.fail("status %d is not an HTTP status", st)
		}
		f.Status = int(st)
	case FrameCancel:
		return f, r.done()
	default:
		if r.err == nil {
			r.fail("unknown frame kind %d", f.Kind)
		}
	}
	if n := r.count(); n > 0 {
		f.Header = make([]Header, n)
		for i := range f.Header {
			f.Header[i] = Header{Name: r.string(), Value: r.string()}
		}
	}
	if r.err != nil {
		return Frame{}, r.err
	}
	if f.Kind == FrameRequest && (f.Method == "" || len(f.Target) == 0 || f.Target[0] != '/') {
		return Frame{}, fmt.Errorf("%w: a request needs a method and a target starting with /", ErrBinary)
	}
	f.Body = r.b
	return f, nil
}

// FrameHeader lists h's fields for a frame, leaving out the names in skip (canonical).
func FrameHeader(h http.Header, skip ...string) []Header {
	var out []Header
	for name, vs := range h {
		if slices.Contains(skip, name) {
			continue
		}
		for _, v := range vs {
			out = append(out, Header{Name: name, Value: v})
		}
	}
	return out
}

// HTTPHeader returns the frame's headers as an http.Header.
func (f *Frame) HTTPHeader() http.Header {
	h := make(http.Header, len(f.Header))
	for _, kv := range f.Header {
		h.Add(kv.Name, kv.Value)
	}
	return h
}
