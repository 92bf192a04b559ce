package api

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ContentTypeBinary is okiba's compact binary encoding of the calls that carry message
// bodies in bulk: a send batch (request and answer), a receive's answer, a topic publish
// (request and answer) and a group pull's answer. The Go client uses it; JSON stays the
// default for everybody else. A client asks for it with this Content-Type on a send or a
// publish, and with Accept on a receive, a send, a publish or a pull; errors are always
// JSON.
//
// It exists because JSON costs more CPU than the broker's own work per message (escaping,
// UTF-8 checks, base64 for binary bodies): with it, a batch of small messages costs about
// one memory copy per body. Layout (integers are unsigned varints unless said; a string or
// byte field is a varint length then the bytes):
//
//	batch     = "OKB1" kind count item*          (kinds 1 to 5)
//	          | "OKB1" 6 pull                     (kind 6)
//	kind      = 1 send request | 2 send answer | 3 receive answer
//	          | 4 publish request | 5 publish answer | 6 pull answer
//
//	send item (1)    = flags [group] [dedup_id] [delay_ms] [headers] body
//	                   flags bit 0 group, 1 dedup_id, 2 delay, 3 headers
//	                   headers = count (name value)*
//	send result (2)  = status id                       status 0 sent, 1 duplicate
//	                 | status code message retry_ms     status 2 error
//	received (3)     = id receipt deliveries enqueued_ms first_delivered_ms
//	                   deadline_ms group dedup_id attrs body dead
//	                   attrs = count (name type value)*
//	                   dead  = 0 | 1 source reason description at_ms deliveries
//	publish record (4) = flags(byte) [key] [partition] [dedup_id] [headers] body
//	                   flags bit 0 key (an empty key is a key), 1 partition (else by
//	                   key or round-robin), 2 dedup_id (not empty), 3 headers (at least one)
//	publish result (5) = status partition offset      status 0 appended, 1 duplicate
//	                   | status code message retry_ms  status 2 error
//	pull (6)           = session expires_ms count assignment* count record*
//	                   assignment = partition epoch revoking(byte 0|1) position committed end
//	                   record     = partition offset time_ms flags(byte) [key] [headers] body
//	                   flags bit 0 key, 1 headers (at least one)
//
// Times are Unix milliseconds (0: none).
const ContentTypeBinary = "application/vnd.okiba.v1+binary"

const binaryMagic = "OKB1"

// Binary batch kinds.
const (
	KindSendRequest   = 1
	KindSendAnswer    = 2
	KindReceiveAnswer = 3
	// KindSendRequestFrom is a send batch numbered by its producer (idempotent sends):
	// "OKB1" 7 producer_id sequence count item*, the items as kind 1's.
	KindSendRequestFrom = 7
)

// Limits that keep a decoder from allocating on the word of a corrupt or hostile input.
const (
	maxBinaryCount = MaxBatch
	maxBinaryField = MaxRequestBody // no field is longer than the body that holds it
)

// ErrBinary is wrapped by every decoding error.
var ErrBinary = errors.New("malformed binary batch")

// BinaryMessage is one message of a binary send batch (Body is raw bytes).
type BinaryMessage struct {
	Body    []byte
	Group   string
	DedupID string
	Delay   int64 // milliseconds; negative: the queue's delay
	Headers []Header
}

// Header is a name and a value.
type Header struct{ Name, Value string }

// BinaryResult is one result of a binary send answer.
type BinaryResult struct {
	ID        uint64
	Duplicate bool
	Err       *Error
}

// BinaryReceived is one message of a binary receive answer.
type BinaryReceived struct {
	ID             uint64
	Receipt        string
	Deliveries     uint32
	EnqueuedAt     int64
	FirstDelivered int64
	Deadline       int64
	Group, DedupID string
	Attrs          []BinaryAttr
	Body           []byte
	Dead           *BinaryDead
}

// BinaryAttr is a typed attribute (String, Number, Binary, with optional suffix).
type BinaryAttr struct {
	Name, Type string
	Value      []byte
}

// BinaryDead says why a received message is a dead letter.
type BinaryDead struct {
	Source, Reason, Description string
	At                          int64
	Deliveries                  uint32
}

func putString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func putBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func header(b []byte, kind byte, n int) []byte {
	b = append(b, binaryMagic...)
	b = append(b, kind)
	return binary.AppendUvarint(b, uint64(n))
}

// AppendSendRequest encodes a send batch.
func AppendSendRequest(b []byte, ms []BinaryMessage) []byte {
	return appendSendItems(header(b, KindSendRequest, len(ms)), ms)
}

// AppendSendRequestFrom encodes a send batch as request seq of producer.
func AppendSendRequestFrom(b []byte, producer string, seq uint64, ms []BinaryMessage) []byte {
	b = append(b, binaryMagic...)
	b = append(b, KindSendRequestFrom)
	b = putString(b, producer)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(len(ms)))
	return appendSendItems(b, ms)
}

func appendSendItems(b []byte, ms []BinaryMessage) []byte {
	for i := range ms {
		m := &ms[i]
		var flags uint64
		if m.Group != "" {
			flags |= 1
		}
		if m.DedupID != "" {
			flags |= 2
		}
		if m.Delay >= 0 {
			flags |= 4
		}
		if len(m.Headers) > 0 {
			flags |= 8
		}
		b = binary.AppendUvarint(b, flags)
		if flags&1 != 0 {
			b = putString(b, m.Group)
		}
		if flags&2 != 0 {
			b = putString(b, m.DedupID)
		}
		if flags&4 != 0 {
			b = binary.AppendUvarint(b, uint64(m.Delay))
		}
		if flags&8 != 0 {
			b = binary.AppendUvarint(b, uint64(len(m.Headers)))
			for _, h := range m.Headers {
				b = putString(b, h.Name)
				b = putString(b, h.Value)
			}
		}
		b = putBytes(b, m.Body)
	}
	return b
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// reader decodes; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBinary, fmt.Sprintf(format, args...))
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated number")
		return 0
	}
	if n != uvarintLen(v) {
		r.fail("number not in its shortest form") // one encoding per value
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// raw returns a length-prefixed field, aliasing the input.
func (r *reader) raw() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxBinaryField || n > uint64(len(r.b)) {
		r.fail("field of %d bytes runs past the end", n)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.raw()) }

func (r *reader) count() int { return r.countUpTo(maxBinaryCount) }

// countUpTo reads a count of items of at least one byte each: at most limit, and no more
// than the bytes left could hold, so that a hostile count allocates nothing.
func (r *reader) countUpTo(limit uint64) int {
	n := r.uvarint()
	if r.err == nil && (n > limit || n > uint64(len(r.b))+1) {
		r.fail("count %d is too large (at most %d, and no more than the bytes left)", n, limit)
		return 0
	}
	return int(n)
}

// kind checks the magic and the batch kind.
func (r *reader) kind(kind byte) {
	if len(r.b) < len(binaryMagic)+1 || string(r.b[:len(binaryMagic)]) != binaryMagic {
		r.fail("not an okiba binary batch (bad magic)")
		return
	}
	r.b = r.b[len(binaryMagic):]
	if k := r.byte(); k != kind {
		r.fail("batch kind %d, want %d", k, kind)
	}
}

func (r *reader) header(kind byte) int {
	r.kind(kind)
	if r.err != nil {
		return 0
	}
	return r.count()
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the last item", len(r.b))
	}
	return r.err
}

// DecodeSendRequest decodes a send batch. Bodies alias b; copy them to keep them.
func DecodeSendRequest(b []byte) ([]BinaryMessage, error) {
	r := &reader{b: b}
	return decodeSendItems(r, r.header(KindSendRequest))
}

// DecodeSendRequestFrom decodes a send batch of either kind: a producer's (7), with its
// id and sequence, or a plain one (1), with none.
func DecodeSendRequestFrom(b []byte) (producer string, seq uint64, ms []BinaryMessage, err error) {
	if len(b) > len(binaryMagic) && b[len(binaryMagic)] == KindSendRequest {
		ms, err = DecodeSendRequest(b)
		return "", 0, ms, err
	}
	r := &reader{b: b}
	r.kind(KindSendRequestFrom)
	if r.err == nil {
		producer, seq = r.string(), r.uvarint()
	}
	if r.err != nil {
		return "", 0, nil, r.err
	}
	ms, err = decodeSendItems(r, r.count())
	return producer, seq, ms, err
}

func decodeSendItems(r *reader, n int) ([]BinaryMessage, error) {
	ms := make([]BinaryMessage, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		m := BinaryMessage{Delay: -1}
		flags := r.uvarint()
		if flags&^15 != 0 {
			r.fail("message %d has unknown flags %#x", i, flags)
			break
		}
		if flags&1 != 0 {
			m.Group = r.string()
		}
		if flags&2 != 0 {
			m.DedupID = r.string()
		}
		if flags&4 != 0 {
			d := r.uvarint()
			if d > 1<<40 {
				r.fail("message %d: delay out of range", i)
			}
			m.Delay = int64(d)
		}
		if flags&8 != 0 {
			nh := r.count()
			m.Headers = make([]Header, 0, nh)
			for j := 0; j < nh && r.err == nil; j++ {
				m.Headers = append(m.Headers, Header{Name: r.string(), Value: r.string()})
			}
		}
		m.Body = r.raw()
		if m.Body == nil && r.err == nil {
			m.Body = []byte{}
		}
		ms = append(ms, m)
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return ms, nil
}

// AppendSendAnswer encodes the results of a send batch.
func AppendSendAnswer(b []byte, rs []BinaryResult) []byte {
	b = header(b, KindSendAnswer, len(rs))
	for _, x := range rs {
		switch {
		case x.Err != nil:
			b = append(b, 2)
			b = putString(b, x.Err.Code)
			b = putString(b, x.Err.Message)
			var retry uint64
			if x.Err.RetryAfter != nil {
				retry = uint64(x.Err.RetryAfter.D().Milliseconds())
			}
			b = binary.AppendUvarint(b, retry)
		case x.Duplicate:
			b = append(b, 1)
			b = binary.AppendUvarint(b, x.ID)
		default:
			b = append(b, 0)
			b = binary.AppendUvarint(b, x.ID)
		}
	}
	return b
}

// DecodeSendAnswer decodes the results of a send batch.
func DecodeSendAnswer(b []byte) ([]BinaryResult, error) {
	r := &reader{b: b}
	n := r.header(KindSendAnswer)
	rs := make([]BinaryResult, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		switch st := r.byte(); st {
		case 0, 1:
			rs = append(rs, BinaryResult{ID: r.uvarint(), Duplicate: st == 1})
		case 2:
			e := &Error{Code: r.string(), Message: r.string()}
			if ms := r.uvarint(); ms > 0 {
				d := Duration(int64(ms) * 1e6)
				e.RetryAfter = &d
			}
			rs = append(rs, BinaryResult{Err: e})
		default:
			r.fail("result %d has unknown status %d", i, st)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return rs, nil
}

// AppendReceiveAnswer encodes received messages.
func AppendReceiveAnswer(b []byte, ms []BinaryReceived) []byte {
	b = header(b, KindReceiveAnswer, len(ms))
	for i := range ms {
		m := &ms[i]
		b = binary.AppendUvarint(b, m.ID)
		b = putString(b, m.Receipt)
		b = binary.AppendUvarint(b, uint64(m.Deliveries))
		b = binary.AppendUvarint(b, uint64(max(m.EnqueuedAt, 0)))
		b = binary.AppendUvarint(b, uint64(max(m.FirstDelivered, 0)))
		b = binary.AppendUvarint(b, uint64(max(m.Deadline, 0)))
		b = putString(b, m.Group)
		b = putString(b, m.DedupID)
		b = binary.AppendUvarint(b, uint64(len(m.Attrs)))
		for _, a := range m.Attrs {
			b = putString(b, a.Name)
			b = putString(b, a.Type)
			b = putBytes(b, a.Value)
		}
		b = putBytes(b, m.Body)
		if d := m.Dead; d != nil {
			b = append(b, 1)
			b = putString(b, d.Source)
			b = putString(b, d.Reason)
			b = putString(b, d.Description)
			b = binary.AppendUvarint(b, uint64(max(d.At, 0)))
			b = binary.AppendUvarint(b, uint64(d.Deliveries))
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// DecodeReceiveAnswer decodes received messages. Bodies and values alias b.
func DecodeReceiveAnswer(b []byte) ([]BinaryReceived, error) {
	r := &reader{b: b}
	n := r.header(KindReceiveAnswer)
	ms := make([]BinaryReceived, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var m BinaryReceived
		m.ID = r.uvarint()
		m.Receipt = r.string()
		m.Deliveries = uint32(r.uvarint())
		m.EnqueuedAt = int64(r.uvarint())
		m.FirstDelivered = int64(r.uvarint())
		m.Deadline = int64(r.uvarint())
		m.Group = r.string()
		m.DedupID = r.string()
		if na := r.count(); na > 0 {
			m.Attrs = make([]BinaryAttr, 0, na)
			for j := 0; j < na && r.err == nil; j++ {
				m.Attrs = append(m.Attrs, BinaryAttr{Name: r.string(), Type: r.string(), Value: r.raw()})
			}
		}
		m.Body = r.raw()
		if m.Body == nil && r.err == nil {
			m.Body = []byte{}
		}
		switch r.byte() {
		case 0:
		case 1:
			m.Dead = &BinaryDead{Source: r.string(), Reason: r.string(), Description: r.string(), At: int64(r.uvarint()), Deliveries: uint32(r.uvarint())}
		default:
			r.fail("message %d: bad dead-letter flag", i)
		}
		ms = append(ms, m)
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return ms, nil
}
