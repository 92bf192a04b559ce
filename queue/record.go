package queue

import (
	"fmt"
)

// Record encoding (version 1; each record is one payload of a wal frame, whose length
// and CRC the wal package adds):
//
//	+------+-----------+---------------------------------------------+
//	| kind | now       | fields, in the order of the record's struct  |
//	| u8   | varint ms |                                             |
//	+------+-----------+---------------------------------------------+
//
// Integers are varints (zig-zag for signed), times after "now" are deltas from it,
// strings and byte slices are a uvarint length then the bytes, lists a uvarint count then
// the elements, sequence lists delta-encoded, maps as sorted key/value pairs. A decoder
// refuses unknown kinds, truncated input and trailing bytes. New fields go into new record
// kinds (or a new format version), never into existing ones.
//
// Kinds 1 to 63 are this machine's and 64 to 127 the topic machine's (package topic); a
// first byte of 128 or more is never a record of either (the broker keeps that range for
// frames of its own, such as the payload store's, which never reach Apply).

// Kind identifies a record type. Values are part of the on-disk format: never reuse one.
type Kind uint8

const (
	KindQueuePut        Kind = 1
	KindQueueDelete     Kind = 2
	KindSend            Kind = 3
	KindDeliver         Kind = 4
	KindExtend          Kind = 5
	KindAck             Kind = 6
	KindNack            Kind = 7
	KindDeadLetter      Kind = 8
	KindRemove          Kind = 9
	KindPurge           Kind = 10
	KindTaskCreate      Kind = 11
	KindTaskMove        Kind = 12
	KindTaskEnd         Kind = 13
	KindRelocate        Kind = 14 // written by okiba before the payload store; read, never written
	KindLimits          Kind = 15 // before DedupTotal: read, never written
	KindLimits2         Kind = 16
	KindDeliverDelete   Kind = 17
	KindProducer        Kind = 18 // a producer's request answered (producers.go)
	KindNackError       Kind = 19 // a nack whose items carry the handler's error (NackRecord.Errors)
	KindDefer           Kind = 20 // leased messages set aside (defer.go)
	KindReceiveDeferred Kind = 21 // deferred messages fetched by id and leased (defer.go)
	KindQueuePut2       Kind = 22 // a queue_put whose configuration has on_dead_letter set (park.go)
	KindGroupRelease    Kind = 23 // a parked group released by hand (park.go)
)

// MaxKind is the highest kind this package can ever use.
const MaxKind Kind = 63

// kinds is every record kind: its name and an empty record to decode into. A new kind is
// one entry here and one type with its methods (Kind, Time, AppendTo, decode, apply) in
// records_*.go, next to each other.
var kinds = [...]struct {
	name string
	new  func() Record
}{
	KindQueuePut:        {"queue_put", func() Record { return new(QueuePutRecord) }},
	KindQueueDelete:     {"queue_delete", func() Record { return new(QueueDeleteRecord) }},
	KindSend:            {"send", func() Record { return new(SendRecord) }},
	KindDeliver:         {"deliver", func() Record { return new(DeliverRecord) }},
	KindExtend:          {"extend", func() Record { return new(ExtendRecord) }},
	KindAck:             {"ack", func() Record { return new(AckRecord) }},
	KindNack:            {"nack", func() Record { return new(NackRecord) }},
	KindDeadLetter:      {"dead_letter", func() Record { return new(DeadLetterRecord) }},
	KindRemove:          {"remove", func() Record { return new(RemoveRecord) }},
	KindPurge:           {"purge", func() Record { return new(PurgeRecord) }},
	KindTaskCreate:      {"task_create", func() Record { return new(TaskCreateRecord) }},
	KindTaskMove:        {"task_move", func() Record { return new(TaskMoveRecord) }},
	KindTaskEnd:         {"task_end", func() Record { return new(TaskEndRecord) }},
	KindRelocate:        {"relocate", func() Record { return new(RelocateRecord) }},
	KindLimits:          {"limits_v1", func() Record { return new(limitsV1Record) }},
	KindLimits2:         {"limits", func() Record { return new(LimitsRecord) }},
	KindDeliverDelete:   {"deliver_delete", func() Record { return new(DeliverDeleteRecord) }},
	KindProducer:        {"producer", func() Record { return new(ProducerRecord) }},
	KindNackError:       {"nack_error", func() Record { return &NackRecord{Errors: []string{}} }},
	KindDefer:           {"defer", func() Record { return new(DeferRecord) }},
	KindReceiveDeferred: {"receive_deferred", func() Record { return new(ReceiveDeferredRecord) }},
	KindQueuePut2:       {"queue_put2", func() Record { return &QueuePutRecord{v2: true} }},
	KindGroupRelease:    {"group_release", func() Record { return new(GroupReleaseRecord) }},
}

func (k Kind) String() string {
	if int(k) < len(kinds) && kinds[k].new != nil {
		return kinds[k].name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one logged fact. Records describe the outcome of a decision (which message
// was leased until when, where a dead letter went), never the command that led to it, so
// replaying them needs no clock and no randomness: the machine's state after replay is the
// state it had live. Every record carries the logged time (Unix milliseconds) at which it
// took effect. Records hold no node-local fact (where a body lies on this node's disk):
// two replicas applying the same records hold the same state.
type Record interface {
	Kind() Kind
	Time() int64
	// AppendTo appends the encoded record (kind byte first) to b.
	AppendTo(b []byte) []byte
	// decode reads the fields after the header; now is the header's time.
	decode(d *decoder, now int64)
	// apply changes the machine's state as the record says (see Machine.Apply).
	apply(m *Machine) error
}

func header(b []byte, k Kind, now int64) []byte {
	b = append(b, byte(k))
	return appendVarint(b, now)
}

// DecodeRecord decodes one record. The result does not alias b.
func DecodeRecord(b []byte) (Record, error) {
	return decodeRecord(&decoder{b: b})
}

// DecodeRecordShared decodes one record whose payload (body and attribute values) stays
// in b: a restart reads every send record of the log since the checkpoint and keeps few
// of their bodies, and copying each one was most of its time. The caller must not let the
// record outlive b's contents (the payload store copies what it caches).
func DecodeRecordShared(b []byte) (Record, error) {
	return decodeRecord(&decoder{b: b, shared: true})
}

func decodeRecord(d *decoder) (Record, error) {
	k := Kind(d.byte())
	now := d.varint()
	if d.err != nil {
		return nil, fmt.Errorf("decode record: %w", d.err)
	}
	if int(k) >= len(kinds) || kinds[k].new == nil {
		return nil, fmt.Errorf("decode record: unknown kind %d", uint8(k))
	}
	r := kinds[k].new()
	r.decode(d, now)
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("decode %s record: %w", k, err)
	}
	return r, nil
}

// DecodePayload extracts the message id and payload from a send record, or from a
// relocate record of an older okiba: the records a message body can be read back from.
func DecodePayload(b []byte) (msgID uint64, p Payload, err error) {
	r, err := DecodeRecord(b)
	if err != nil {
		return 0, Payload{}, err
	}
	switch x := r.(type) {
	case *SendRecord:
		return x.MsgID, x.Payload, nil
	case *RelocateRecord:
		return x.MsgID, x.Payload, nil
	}
	return 0, Payload{}, fmt.Errorf("record at payload position is a %s record, not send or relocate", r.Kind())
}

// ---------------------------------------------------------------------------------------
// Field encodings shared by several records

func appendSeqs(b []byte, seqs []uint64) []byte {
	b = appendUvarint(b, uint64(len(seqs)))
	prev := uint64(0)
	for _, s := range seqs {
		// Delta-encode: seqs in one record are usually ascending and close together.
		b = appendVarint(b, int64(s-prev))
		prev = s
	}
	return b
}

func (d *decoder) seqs() []uint64 {
	n := d.count()
	out := make([]uint64, 0, n)
	prev := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		prev += uint64(d.varint())
		out = append(out, prev)
	}
	return out
}

func appendSeqTimes(b []byte, items []SeqTime, now int64) []byte {
	b = appendUvarint(b, uint64(len(items)))
	prev := uint64(0)
	for _, it := range items {
		b = appendVarint(b, int64(it.Seq-prev))
		prev = it.Seq
		b = appendVarint(b, it.Time-now)
	}
	return b
}

func (d *decoder) seqTimes(now int64) []SeqTime {
	n := d.count()
	out := make([]SeqTime, 0, n)
	prev := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		prev += uint64(d.varint())
		out = append(out, SeqTime{Seq: prev, Time: now + d.varint()})
	}
	return out
}

// AppendPayload appends a payload's encoding as send records carry it; DecodePayloadBytes
// reads it back. The payload store writes relocated bodies in this encoding.
func AppendPayload(b []byte, p *Payload) []byte { return appendPayload(b, p) }

// DecodePayloadBytes decodes a payload encoded by AppendPayload, filling all of b.
func DecodePayloadBytes(b []byte) (Payload, error) {
	d := &decoder{b: b}
	p := d.payload()
	return p, d.finish()
}

func appendPayload(b []byte, p *Payload) []byte {
	b = appendString(b, p.Group)
	b = appendString(b, p.DedupID)
	b = appendUvarint(b, uint64(len(p.Attrs)))
	for _, a := range p.Attrs {
		b = appendString(b, a.Name)
		b = appendString(b, a.Type)
		b = appendBytes(b, a.Value)
	}
	return appendBytes(b, p.Body)
}

func (d *decoder) payload() Payload {
	var p Payload
	p.Group = d.string()
	p.DedupID = d.string()
	if n := d.count(); n > 0 {
		p.Attrs = make([]Attr, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			var a Attr
			a.Name = d.string()
			a.Type = d.string()
			a.Value = d.bytes()
			p.Attrs = append(p.Attrs, a)
		}
	}
	p.Body = d.bytes()
	if p.Body == nil && d.err == nil {
		p.Body = []byte{}
	}
	return p
}
