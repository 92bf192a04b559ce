package api

import (
	"encoding/binary"
	"math"
)

// The binary encoding of topic publishes and group pulls (see ContentTypeBinary for the
// layout): the topic counterparts of a send batch and a receive answer, for the same
// reason — encoding/json was a third of a topic publish's CPU in the broker, and a pull's
// answer escaped every body into a JSON string.

// Binary batch kinds of topics.
const (
	KindPublishRequest = 4
	KindPublishAnswer  = 5
	KindPullAnswer     = 6
)

// Limits of the topic decoders, beside maxBinaryCount and maxBinaryField.
const (
	maxBinaryPartition   = math.MaxInt32 // the service checks the topic's own range
	maxBinaryAssignments = 1024          // more than any topic's partitions (256)
)

// BinaryPublishRecord is one record of a binary publish (Body and Key are raw bytes).
type BinaryPublishRecord struct {
	Key    []byte
	HasKey bool // an empty key is a key
	// Partition places the record; -1: by its key, or round-robin without one.
	Partition int
	Headers   []Header
	Body      []byte
	DedupID   string
}

// BinaryTopicRecord is one record of a binary pull answer.
type BinaryTopicRecord struct {
	Partition int
	Offset    uint64
	Time      int64 // publish time, Unix ms
	HasKey    bool
	Key       []byte
	Headers   []Header
	Body      []byte
}

// BinaryPull is a pull's answer in the binary encoding: PullResponse with raw records.
type BinaryPull struct {
	Session    string
	Expires    int64 // the member's lease, Unix ms
	Assignment []Assignment
	Records    []BinaryTopicRecord
}

func putHeaders(b []byte, hs []Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = putString(b, h.Name)
		b = putString(b, h.Value)
	}
	return b
}

// headers reads the headers of an item whose flags say it has some: at least one, so
// that every item has one encoding.
func (r *reader) headers(what string, i int) []Header {
	n := r.count()
	if n == 0 && r.err == nil {
		r.fail("%s %d: the headers flag is set, and no header follows", what, i)
	}
	hs := make([]Header, 0, n)
	for j := 0; j < n && r.err == nil; j++ {
		hs = append(hs, Header{Name: r.string(), Value: r.string()})
	}
	return hs
}

func (r *reader) partition(what string, i int) int {
	p := r.uvarint()
	if p > maxBinaryPartition {
		r.fail("%s %d: partition %d out of range", what, i, p)
		return 0
	}
	return int(p)
}

// body reads a body: never nil, as a JSON body that is present is never nil.
func (r *reader) body() []byte {
	b := r.raw()
	if b == nil && r.err == nil {
		b = []byte{}
	}
	return b
}

// AppendPublishRequest encodes a publish.
func AppendPublishRequest(b []byte, rs []BinaryPublishRecord) []byte {
	b = header(b, KindPublishRequest, len(rs))
	for i := range rs {
		x := &rs[i]
		var flags byte
		if x.HasKey {
			flags |= 1
		}
		if x.Partition >= 0 {
			flags |= 2
		}
		if x.DedupID != "" {
			flags |= 4
		}
		if len(x.Headers) > 0 {
			flags |= 8
		}
		b = append(b, flags)
		if flags&1 != 0 {
			b = putBytes(b, x.Key)
		}
		if flags&2 != 0 {
			b = binary.AppendUvarint(b, uint64(x.Partition))
		}
		if flags&4 != 0 {
			b = putString(b, x.DedupID)
		}
		if flags&8 != 0 {
			b = putHeaders(b, x.Headers)
		}
		b = putBytes(b, x.Body)
	}
	return b
}

// DecodePublishRequest decodes a publish. Bodies and keys alias b; copy them to keep them.
func DecodePublishRequest(b []byte) ([]BinaryPublishRecord, error) {
	r := &reader{b: b}
	n := r.header(KindPublishRequest)
	rs := make([]BinaryPublishRecord, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		x := BinaryPublishRecord{Partition: -1}
		flags := r.byte()
		if flags&^15 != 0 {
			r.fail("record %d has unknown flags %#x", i, flags)
			break
		}
		if flags&1 != 0 {
			x.HasKey, x.Key = true, r.raw()
		}
		if flags&2 != 0 {
			x.Partition = r.partition("record", i)
		}
		if flags&4 != 0 {
			if x.DedupID = r.string(); x.DedupID == "" && r.err == nil {
				r.fail("record %d: the dedup id flag is set, and the dedup id is empty", i)
			}
		}
		if flags&8 != 0 {
			x.Headers = r.headers("record", i)
		}
		x.Body = r.body()
		rs = append(rs, x)
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return rs, nil
}

// AppendPublishAnswer encodes the results of a publish. A failed record's partition and
// offset are not sent (it has none).
func AppendPublishAnswer(b []byte, rs []PublishResult) []byte {
	b = header(b, KindPublishAnswer, len(rs))
	for _, x := range rs {
		switch {
		case x.Error != nil:
			b = append(b, 2)
			b = putString(b, x.Error.Code)
			b = putString(b, x.Error.Message)
			var retry uint64
			if x.Error.RetryAfter != nil {
				retry = uint64(x.Error.RetryAfter.D().Milliseconds())
			}
			b = binary.AppendUvarint(b, retry)
			continue
		case x.Duplicate:
			b = append(b, 1)
		default:
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(x.Partition))
		b = binary.AppendUvarint(b, x.Offset)
	}
	return b
}

// DecodePublishAnswer decodes the results of a publish.
func DecodePublishAnswer(b []byte) ([]PublishResult, error) {
	r := &reader{b: b}
	n := r.header(KindPublishAnswer)
	rs := make([]PublishResult, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		switch st := r.byte(); st {
		case 0, 1:
			p := r.partition("result", i)
			rs = append(rs, PublishResult{Partition: p, Offset: r.uvarint(), Duplicate: st == 1})
		case 2:
			e := &Error{Code: r.string(), Message: r.string()}
			if ms := r.uvarint(); ms > 0 {
				if ms > 1<<40 {
					r.fail("result %d: retry after out of range", i)
				}
				d := Duration(int64(ms) * 1e6)
				e.RetryAfter = &d
			}
			rs = append(rs, PublishResult{Error: e})
		default:
			r.fail("result %d has unknown status %d", i, st)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return rs, nil
}

// AppendPullAnswer encodes a pull's answer.
func AppendPullAnswer(b []byte, p *BinaryPull) []byte {
	b = append(b, binaryMagic...)
	b = append(b, KindPullAnswer)
	b = putString(b, p.Session)
	b = binary.AppendUvarint(b, uint64(max(p.Expires, 0)))
	b = binary.AppendUvarint(b, uint64(len(p.Assignment)))
	for _, a := range p.Assignment {
		b = binary.AppendUvarint(b, uint64(a.Partition))
		b = binary.AppendUvarint(b, a.Epoch)
		if a.Revoking {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, a.Position)
		b = binary.AppendUvarint(b, a.Committed)
		b = binary.AppendUvarint(b, a.End)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Records)))
	for i := range p.Records {
		x := &p.Records[i]
		b = binary.AppendUvarint(b, uint64(x.Partition))
		b = binary.AppendUvarint(b, x.Offset)
		b = binary.AppendUvarint(b, uint64(max(x.Time, 0)))
		var flags byte
		if x.HasKey {
			flags |= 1
		}
		if len(x.Headers) > 0 {
			flags |= 2
		}
		b = append(b, flags)
		if x.HasKey {
			b = putBytes(b, x.Key)
		}
		if len(x.Headers) > 0 {
			b = putHeaders(b, x.Headers)
		}
		b = putBytes(b, x.Body)
	}
	return b
}

// DecodePullAnswer decodes a pull's answer. Bodies and keys alias b.
func DecodePullAnswer(b []byte) (*BinaryPull, error) {
	r := &reader{b: b}
	r.kind(KindPullAnswer)
	p := &BinaryPull{Session: r.string(), Expires: int64(r.uvarint())}
	if p.Expires < 0 {
		r.fail("lease end out of range")
	}
	na := r.countUpTo(maxBinaryAssignments)
	p.Assignment = make([]Assignment, 0, na)
	for i := 0; i < na && r.err == nil; i++ {
		a := Assignment{Partition: r.partition("assignment", i), Epoch: r.uvarint()}
		switch r.byte() {
		case 0:
		case 1:
			a.Revoking = true
		default:
			r.fail("assignment %d: bad revoking flag", i)
		}
		a.Position, a.Committed, a.End = r.uvarint(), r.uvarint(), r.uvarint()
		p.Assignment = append(p.Assignment, a)
	}
	nr := r.countUpTo(MaxReadRecords)
	p.Records = make([]BinaryTopicRecord, 0, nr)
	for i := 0; i < nr && r.err == nil; i++ {
		x := BinaryTopicRecord{Partition: r.partition("record", i), Offset: r.uvarint(), Time: int64(r.uvarint())}
		if x.Time < 0 {
			r.fail("record %d: time out of range", i)
		}
		flags := r.byte()
		if flags&^3 != 0 {
			r.fail("record %d has unknown flags %#x", i, flags)
			break
		}
		if flags&1 != 0 {
			x.HasKey, x.Key = true, r.raw()
		}
		if flags&2 != 0 {
			x.Headers = r.headers("record", i)
		}
		x.Body = r.body()
		p.Records = append(p.Records, x)
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return p, nil
}
