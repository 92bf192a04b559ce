package queue

import (
	"fmt"
	"time"
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

// Kind identifies a record type. Values are part of the on-disk format: never reuse one.
type Kind uint8

const (
	KindQueuePut    Kind = 1
	KindQueueDelete Kind = 2
	KindSend        Kind = 3
	KindDeliver     Kind = 4
	KindExtend      Kind = 5
	KindAck         Kind = 6
	KindNack        Kind = 7
	KindDeadLetter  Kind = 8
	KindRemove      Kind = 9
	KindPurge       Kind = 10
	KindTaskCreate  Kind = 11
	KindTaskMove    Kind = 12
	KindTaskEnd     Kind = 13
	KindRelocate    Kind = 14
)

var kindNames = map[Kind]string{
	KindQueuePut: "queue_put", KindQueueDelete: "queue_delete", KindSend: "send",
	KindDeliver: "deliver", KindExtend: "extend", KindAck: "ack", KindNack: "nack",
	KindDeadLetter: "dead_letter", KindRemove: "remove", KindPurge: "purge",
	KindTaskCreate: "task_create", KindTaskMove: "task_move", KindTaskEnd: "task_end",
	KindRelocate: "relocate",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one logged fact. Records describe the outcome of a decision (which message
// was leased until when, where a dead letter went), never the command that led to it, so
// replaying them needs no clock and no randomness: the machine's state after replay is the
// state it had live. Every record carries the logged time (Unix milliseconds) at which it
// took effect.
type Record interface {
	Kind() Kind
	Time() int64
	// AppendTo appends the encoded record (kind byte first) to b.
	AppendTo(b []byte) []byte
}

// QueuePutRecord creates a queue or replaces its configuration.
type QueuePutRecord struct {
	Now     int64
	QueueID uint64
	Name    string
	Config  Config
}

// QueueDeleteRecord deletes a queue and every message in it.
type QueueDeleteRecord struct {
	Now     int64
	QueueID uint64
}

// SendRecord enqueues one message. It holds the payload: a message's body is read back
// from the position of its SendRecord (or of its latest RelocateRecord).
type SendRecord struct {
	Now       int64
	QueueID   uint64
	MsgID     uint64
	VisibleAt int64
	Payload   Payload
}

// RelocateRecord rewrites a live message's payload at the head of the log so that an old,
// sparse segment can be deleted. It changes nothing but where the payload is read from.
type RelocateRecord struct {
	Now     int64
	QueueID uint64
	Seq     uint64
	MsgID   uint64
	Payload Payload
}

// DeliverRecord leases messages of one queue until Deadline; each delivery count grows by one.
type DeliverRecord struct {
	Now      int64
	QueueID  uint64
	Deadline int64
	Seqs     []uint64
}

// ExtendRecord moves lease deadlines.
type ExtendRecord struct {
	Now     int64
	QueueID uint64
	Items   []SeqTime
}

// SeqTime pairs a message (by its queue sequence) with a time.
type SeqTime struct {
	Seq  uint64
	Time int64
}

// AckRecord settles leased messages: they leave the queue.
type AckRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

// NackRecord ends leases early; each message becomes visible at its time.
type NackRecord struct {
	Now     int64
	QueueID uint64
	Items   []SeqTime
}

// DeadLetterRecord moves messages from a queue into its dead-letter queue, or, with
// Target 0 (a queue without DLQ, only for reason expired), removes them with this record
// as the durable trace.
type DeadLetterRecord struct {
	Now         int64
	QueueID     uint64
	Target      uint64
	Reason      string
	Description string
	Seqs        []uint64
}

// RemoveRecord removes messages without dead-lettering them: delete by id by an operator.
type RemoveRecord struct {
	Now     int64
	QueueID uint64
	Seqs    []uint64
}

// PurgeRecord removes every message of a queue.
type PurgeRecord struct {
	Now     int64
	QueueID uint64
}

// TaskCreateRecord starts a redrive task.
type TaskCreateRecord struct {
	Now    int64
	TaskID uint64
	Source uint64
	Target uint64 // 0: each message back to its recorded source queue
	Filter RedriveFilter
	MaxSeq uint64 // messages that entered Source after the task started are not moved
	Total  int64  // matching messages when the task started
	Rate   int    // messages per second, 0 = as fast as possible
}

// TaskMoveRecord moves one committed batch of a redrive task and advances its cursor.
type TaskMoveRecord struct {
	Now     int64
	TaskID  uint64
	Cursor  uint64
	Skipped int64
	Items   []SeqTarget
}

// SeqTarget names a message of the task's source and the queue it moves to.
type SeqTarget struct {
	Seq    uint64
	Target uint64
}

// TaskEndRecord finishes a redrive task.
type TaskEndRecord struct {
	Now     int64
	TaskID  uint64
	State   TaskState
	Message string
}

func (r *QueuePutRecord) Kind() Kind    { return KindQueuePut }
func (r *QueueDeleteRecord) Kind() Kind { return KindQueueDelete }
func (r *SendRecord) Kind() Kind        { return KindSend }
func (r *RelocateRecord) Kind() Kind    { return KindRelocate }
func (r *DeliverRecord) Kind() Kind     { return KindDeliver }
func (r *ExtendRecord) Kind() Kind      { return KindExtend }
func (r *AckRecord) Kind() Kind         { return KindAck }
func (r *NackRecord) Kind() Kind        { return KindNack }
func (r *DeadLetterRecord) Kind() Kind  { return KindDeadLetter }
func (r *RemoveRecord) Kind() Kind      { return KindRemove }
func (r *PurgeRecord) Kind() Kind       { return KindPurge }
func (r *TaskCreateRecord) Kind() Kind  { return KindTaskCreate }
func (r *TaskMoveRecord) Kind() Kind    { return KindTaskMove }
func (r *TaskEndRecord) Kind() Kind     { return KindTaskEnd }

func (r *QueuePutRecord) Time() int64    { return r.Now }
func (r *QueueDeleteRecord) Time() int64 { return r.Now }
func (r *SendRecord) Time() int64        { return r.Now }
func (r *RelocateRecord) Time() int64    { return r.Now }
func (r *DeliverRecord) Time() int64     { return r.Now }
func (r *ExtendRecord) Time() int64      { return r.Now }
func (r *AckRecord) Time() int64         { return r.Now }
func (r *NackRecord) Time() int64        { return r.Now }
func (r *DeadLetterRecord) Time() int64  { return r.Now }
func (r *RemoveRecord) Time() int64      { return r.Now }
func (r *PurgeRecord) Time() int64       { return r.Now }
func (r *TaskCreateRecord) Time() int64  { return r.Now }
func (r *TaskMoveRecord) Time() int64    { return r.Now }
func (r *TaskEndRecord) Time() int64     { return r.Now }

func header(b []byte, k Kind, now int64) []byte {
	b = append(b, byte(k))
	return appendVarint(b, now)
}

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

func appendConfig(b []byte, c *Config) []byte {
	b = appendVarint(b, c.VisibilityTimeout.Milliseconds())
	b = appendVarint(b, int64(c.MaxDeliveries))
	b = appendString(b, c.DeadLetterQueue)
	b = appendVarint(b, c.BackoffBase.Milliseconds())
	b = appendVarint(b, c.BackoffMax.Milliseconds())
	b = appendVarint(b, c.Delay.Milliseconds())
	b = appendVarint(b, c.Retention.Milliseconds())
	b = appendVarint(b, c.DedupWindow.Milliseconds())
	b = append(b, byte(c.DedupScope))
	b = appendBool(b, c.ContentDedup)
	b = appendVarint(b, c.MaxMessages)
	b = appendVarint(b, c.MaxBytes)
	b = appendVarint(b, c.MaxMessageSize)
	b = appendVarint(b, c.ReceiveWait.Milliseconds())
	b = appendBool(b, c.OrderedGroups)
	b = appendStringMap(b, c.Tags)
	b = appendStringMap(b, c.Attrs)
	return b
}

func (d *decoder) duration() time.Duration { return time.Duration(d.varint()) * time.Millisecond }

func (d *decoder) config() Config {
	var c Config
	c.VisibilityTimeout = d.duration()
	c.MaxDeliveries = d.int()
	c.DeadLetterQueue = d.string()
	c.BackoffBase = d.duration()
	c.BackoffMax = d.duration()
	c.Delay = d.duration()
	c.Retention = d.duration()
	c.DedupWindow = d.duration()
	c.DedupScope = DedupScope(d.byte())
	c.ContentDedup = d.bool()
	c.MaxMessages = d.varint()
	c.MaxBytes = d.varint()
	c.MaxMessageSize = d.varint()
	c.ReceiveWait = d.duration()
	c.OrderedGroups = d.bool()
	c.Tags = d.stringMap()
	c.Attrs = d.stringMap()
	return c
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

func (r *QueuePutRecord) AppendTo(b []byte) []byte {
	b = header(b, KindQueuePut, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendString(b, r.Name)
	return appendConfig(b, &r.Config)
}

func (r *QueueDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindQueueDelete, r.Now)
	return appendUvarint(b, r.QueueID)
}

func (r *SendRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSend, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.MsgID)
	b = appendVarint(b, r.VisibleAt-r.Now)
	return appendPayload(b, &r.Payload)
}

func (r *RelocateRecord) AppendTo(b []byte) []byte {
	b = header(b, KindRelocate, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.Seq)
	b = appendUvarint(b, r.MsgID)
	return appendPayload(b, &r.Payload)
}

func (r *DeliverRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDeliver, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendVarint(b, r.Deadline-r.Now)
	return appendSeqs(b, r.Seqs)
}

func (r *ExtendRecord) AppendTo(b []byte) []byte {
	b = header(b, KindExtend, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqTimes(b, r.Items, r.Now)
}

func (r *AckRecord) AppendTo(b []byte) []byte {
	b = header(b, KindAck, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *NackRecord) AppendTo(b []byte) []byte {
	b = header(b, KindNack, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqTimes(b, r.Items, r.Now)
}

func (r *DeadLetterRecord) AppendTo(b []byte) []byte {
	b = header(b, KindDeadLetter, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendUvarint(b, r.Target)
	b = appendString(b, r.Reason)
	b = appendString(b, r.Description)
	return appendSeqs(b, r.Seqs)
}

func (r *RemoveRecord) AppendTo(b []byte) []byte {
	b = header(b, KindRemove, r.Now)
	b = appendUvarint(b, r.QueueID)
	return appendSeqs(b, r.Seqs)
}

func (r *PurgeRecord) AppendTo(b []byte) []byte {
	b = header(b, KindPurge, r.Now)
	return appendUvarint(b, r.QueueID)
}

func appendFilter(b []byte, f *RedriveFilter) []byte {
	b = appendUvarint(b, f.From)
	b = appendString(b, f.Reason)
	b = appendString(b, f.Group)
	b = appendVarint(b, f.OlderThan)
	b = appendUvarint(b, uint64(len(f.IDs)))
	for _, id := range f.IDs {
		b = appendUvarint(b, id)
	}
	return b
}

func (d *decoder) filter() RedriveFilter {
	var f RedriveFilter
	f.From = d.uvarint()
	f.Reason = d.string()
	f.Group = d.string()
	f.OlderThan = d.varint()
	if n := d.count(); n > 0 {
		f.IDs = make([]uint64, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			f.IDs = append(f.IDs, d.uvarint())
		}
	}
	return f
}

func (r *TaskCreateRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskCreate, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = appendUvarint(b, r.Source)
	b = appendUvarint(b, r.Target)
	b = appendFilter(b, &r.Filter)
	b = appendUvarint(b, r.MaxSeq)
	b = appendVarint(b, r.Total)
	return appendVarint(b, int64(r.Rate))
}

func (r *TaskMoveRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskMove, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = appendUvarint(b, r.Cursor)
	b = appendVarint(b, r.Skipped)
	b = appendUvarint(b, uint64(len(r.Items)))
	prev := uint64(0)
	for _, it := range r.Items {
		b = appendVarint(b, int64(it.Seq-prev))
		prev = it.Seq
		b = appendUvarint(b, it.Target)
	}
	return b
}

func (r *TaskEndRecord) AppendTo(b []byte) []byte {
	b = header(b, KindTaskEnd, r.Now)
	b = appendUvarint(b, r.TaskID)
	b = append(b, byte(r.State))
	return appendString(b, r.Message)
}

// DecodeRecord decodes one record. The result does not alias b.
func DecodeRecord(b []byte) (Record, error) {
	return decodeRecord(&decoder{b: b})
}

// DecodeRecordShared decodes one record whose payload (body and attribute values) stays
// in b, for replay through Machine.ApplyShared: a restart reads every send record of the
// log since the checkpoint and keeps few of their bodies, and copying each one was most
// of its time.
func DecodeRecordShared(b []byte) (Record, error) {
	return decodeRecord(&decoder{b: b, shared: true})
}

func decodeRecord(d *decoder) (Record, error) {
	k := Kind(d.byte())
	now := d.varint()
	var r Record
	switch k {
	case KindQueuePut:
		x := &QueuePutRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Name = d.string()
		x.Config = d.config()
		r = x
	case KindQueueDelete:
		r = &QueueDeleteRecord{Now: now, QueueID: d.uvarint()}
	case KindSend:
		x := &SendRecord{Now: now}
		x.QueueID = d.uvarint()
		x.MsgID = d.uvarint()
		x.VisibleAt = now + d.varint()
		x.Payload = d.payload()
		r = x
	case KindRelocate:
		x := &RelocateRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Seq = d.uvarint()
		x.MsgID = d.uvarint()
		x.Payload = d.payload()
		r = x
	case KindDeliver:
		x := &DeliverRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Deadline = now + d.varint()
		x.Seqs = d.seqs()
		r = x
	case KindExtend:
		x := &ExtendRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Items = d.seqTimes(now)
		r = x
	case KindAck:
		x := &AckRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Seqs = d.seqs()
		r = x
	case KindNack:
		x := &NackRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Items = d.seqTimes(now)
		r = x
	case KindDeadLetter:
		x := &DeadLetterRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Target = d.uvarint()
		x.Reason = d.string()
		x.Description = d.string()
		x.Seqs = d.seqs()
		r = x
	case KindRemove:
		x := &RemoveRecord{Now: now}
		x.QueueID = d.uvarint()
		x.Seqs = d.seqs()
		r = x
	case KindPurge:
		r = &PurgeRecord{Now: now, QueueID: d.uvarint()}
	case KindTaskCreate:
		x := &TaskCreateRecord{Now: now}
		x.TaskID = d.uvarint()
		x.Source = d.uvarint()
		x.Target = d.uvarint()
		x.Filter = d.filter()
		x.MaxSeq = d.uvarint()
		x.Total = d.varint()
		x.Rate = d.int()
		r = x
	case KindTaskMove:
		x := &TaskMoveRecord{Now: now}
		x.TaskID = d.uvarint()
		x.Cursor = d.uvarint()
		x.Skipped = d.varint()
		n := d.count()
		x.Items = make([]SeqTarget, 0, n)
		prev := uint64(0)
		for i := 0; i < n && d.err == nil; i++ {
			prev += uint64(d.varint())
			x.Items = append(x.Items, SeqTarget{Seq: prev, Target: d.uvarint()})
		}
		r = x
	case KindTaskEnd:
		x := &TaskEndRecord{Now: now}
		x.TaskID = d.uvarint()
		x.State = TaskState(d.byte())
		x.Message = d.string()
		r = x
	default:
		if d.err != nil {
			return nil, fmt.Errorf("decode record: %w", d.err)
		}
		return nil, fmt.Errorf("decode record: unknown kind %d", uint8(k))
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("decode %s record: %w", k, err)
	}
	return r, nil
}

// DecodePayload extracts the message id and payload from a send or relocate record, the
// two records a message body is read back from.
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
