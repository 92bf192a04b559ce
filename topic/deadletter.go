package topic

import (
	"fmt"
	"strconv"

	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/queue"
)

// Queues is what the topic machine needs of the queue machine: to put a message into a
// queue as part of one of its own records (a group's dead-lettered record), so that the
// message and the record's other effects are one durable outcome.
type Queues interface {
	PrepareImport(now int64, queue string, p *queue.Payload, dead bool, before []queue.Import) (queue.Import, error)
	ApplyImport(now int64, imp queue.Import, p *queue.Payload) error
	// Ordered reports whether a queue orders its groups (a record's key is then the
	// message's group).
	Ordered(queueID uint64) bool
}

// SetQueues names the queue machine records put messages into.
func (m *Machine) SetQueues(q Queues) { m.queues = q }

// Headers okiba adds to a message made from a topic record: a consumer, or an inbox
// keyed by record, can tell where it came from.
const (
	HeaderTopic     = "okiba-topic"
	HeaderPartition = "okiba-partition"
	HeaderOffset    = "okiba-offset"
	HeaderRecordID  = "okiba-record-id"
	HeaderKey       = "okiba-key"
)

// RecordID names one record for ever: the topic's id (a topic created again under the
// same name has another), the partition and the offset.
func RecordID(topicID uint64, partition int, offset uint64) string {
	return strconv.FormatUint(topicID, 16) + "-" + strconv.Itoa(partition) + "-" + strconv.FormatUint(offset, 10)
}

// MessagePayload is a topic record as a queue message carries it: its body, its headers
// and okiba's (topic, partition, offset, record id, and the key when there is one). The
// slices alias r.
func MessagePayload(topicName string, r *PublishRecord) queue.Payload {
	// The values of okiba's headers and copies of the record's go into one buffer sized
	// for all of them, so that appends never move it and each value is a slice of it:
	// two allocations a message where a conversion each made eight, on the path of
	// every fan-out (each subscription's message carries the same attributes).
	n := len(topicName) + 3*20 + 16 + 2 // partition and offset (twice), the id's hex and dashes
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	cut := func(from int) []byte { return buf[from:len(buf):len(buf)] }
	p := queue.Payload{Body: r.Body, Attrs: make([]queue.Attr, 0, len(r.Headers)+5)}
	for _, h := range r.Headers {
		at := len(buf)
		buf = append(buf, h.Value...)
		p.Attrs = append(p.Attrs, queue.Attr{Name: h.Name, Type: "String", Value: cut(at)})
	}
	if r.HasKey {
		p.Attrs = append(p.Attrs, queue.Attr{Name: HeaderKey, Type: "Binary", Value: r.Key})
	}
	at := len(buf)
	buf = append(buf, topicName...)
	p.Attrs = append(p.Attrs, queue.Attr{Name: HeaderTopic, Type: "String", Value: cut(at)})
	at = len(buf)
	buf = strconv.AppendInt(buf, int64(r.Partition), 10)
	p.Attrs = append(p.Attrs, queue.Attr{Name: HeaderPartition, Type: "String", Value: cut(at)})
	at = len(buf)
	buf = strconv.AppendUint(buf, r.Offset, 10)
	p.Attrs = append(p.Attrs, queue.Attr{Name: HeaderOffset, Type: "String", Value: cut(at)})
	at = len(buf)
	buf = strconv.AppendUint(buf, r.TopicID, 16)
	buf = append(buf, '-')
	buf = strconv.AppendInt(buf, int64(r.Partition), 10)
	buf = append(buf, '-')
	buf = strconv.AppendUint(buf, r.Offset, 10)
	p.Attrs = append(p.Attrs, queue.Attr{Name: HeaderRecordID, Type: "String", Value: cut(at)})
	return p
}

// DeadLetter writes a record a member could not handle into the group's dead-letter
// queue (dlq, which must exist), with the reason, and commits the offset after it, in one
// record. The member must hold the partition under epoch, and the record must have been
// handed out and not be committed yet. r is the record, as the broker read it.
func (m *Machine) DeadLetter(now int64, sink Sink, topicName, groupName, memberName string, session uint64, epoch uint64, r *PublishRecord, dlq, reason, description string) error {
	now = m.clock(now)
	if m.queues == nil {
		return fmt.Errorf("topic: no queues to dead-letter into")
	}
	t, err := m.topic(topicName)
	if err != nil {
		return err
	}
	g := t.groups[groupName]
	if g == nil {
		return fmt.Errorf("%w: %q on topic %q", ErrGroupDeleted, groupName, topicName)
	}
	if x := g.members[memberName]; x == nil || x.session != session {
		return &MemberError{Group: g.name, Member: memberName, Reason: "its lease ended, it left, or the session is not its pull's"}
	}
	if r.Partition < 0 || r.Partition >= len(g.parts) || r.TopicID != t.id {
		return &PartitionError{Topic: t.name, Partition: r.Partition, Partitions: len(g.parts)}
	}
	gp := &g.parts[r.Partition]
	switch {
	case gp.owner != memberName || gp.epoch != epoch:
		return &EpochError{Group: g.name, Partition: r.Partition, Epoch: epoch, Current: gp.epoch, Owner: gp.owner}
	case r.Offset < gp.committed:
		return &RegressError{Group: g.name, Partition: r.Partition, Offset: r.Offset, Committed: gp.committed}
	case r.Offset >= gp.position:
		return &OffsetError{Topic: t.name, Partition: r.Partition, Offset: r.Offset, Start: gp.committed, End: gp.position, Group: g.name}
	}
	if len(reason) == 0 || len(reason) > queue.MaxReasonLen || len(description) > queue.MaxDescriptionLen {
		return &queue.InvalidError{Field: "reason", Reason: fmt.Sprintf("a reason is 1 to %d bytes and a description at most %d", queue.MaxReasonLen, queue.MaxDescriptionLen)}
	}
	p := MessagePayload(t.name, r)
	imp, err := m.queues.PrepareImport(now, dlq, &p, true, nil)
	if err != nil {
		return err
	}
	m.emit(sink, &GroupDeadLetterRecord{Now: now, TopicID: t.id, GroupID: g.id, Record: *r, QueueID: imp.QueueID, MsgID: imp.MsgID,
		Reason: reason, Description: description, Topic: t.name, Group: g.name})
	return nil
}

// GroupDeadLetterRecord puts a topic record into a group's dead-letter queue as a dead
// letter, and commits the offset after it. It holds the record (the message's body lies
// here, as a send's lies in its send record).
type GroupDeadLetterRecord struct {
	Now         int64
	TopicID     uint64
	GroupID     uint64
	Topic       string // the topic's and group's names at the time: the message's headers and
	Group       string // description say them, and the message outlives both
	Record      PublishRecord
	QueueID     uint64
	MsgID       uint64
	Reason      string
	Description string
}

func (r *GroupDeadLetterRecord) Kind() Kind  { return KindGroupDeadLetter }
func (r *GroupDeadLetterRecord) Time() int64 { return r.Now }

func (r *GroupDeadLetterRecord) AppendTo(b []byte) []byte {
	b = header(b, KindGroupDeadLetter, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Topic)
	b = codec.AppendString(b, r.Group)
	b = codec.AppendUvarint(b, r.QueueID)
	b = codec.AppendUvarint(b, r.MsgID)
	b = codec.AppendString(b, r.Reason)
	b = codec.AppendString(b, r.Description)
	return codec.AppendBytes(b, r.Record.AppendTo(nil))
}

func (r *GroupDeadLetterRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID, r.Topic, r.Group = now, d.Uvarint(), d.Uvarint(), d.String(), d.String()
	r.QueueID, r.MsgID, r.Reason, r.Description = d.Uvarint(), d.Uvarint(), d.String(), d.String()
	raw := d.Raw(codec.MaxBytes)
	if d.Err != nil {
		return
	}
	inner := &codec.Decoder{B: raw, Shared: d.Shared}
	if k := Kind(inner.Byte()); k != KindPublish {
		d.Fail(fmt.Errorf("dead letter holds a %s record, not a publish", k))
		return
	}
	r.Record.decode(inner, inner.Varint())
	if err := inner.Finish(); err != nil {
		d.Fail(fmt.Errorf("dead letter's record: %w", err))
	}
}

// Payload returns the dead letter's message id and payload (aliasing r).
func (r *GroupDeadLetterRecord) Payload() (uint64, queue.Payload) {
	return r.MsgID, MessagePayload(r.Topic, &r.Record)
}

// DecodeMessage decodes the payload of message id from a record of this package that
// holds queue messages' bodies (a group's dead letter, a publish fanned out, a
// subscription's copy), for the payload store, and reports the id it found there. A
// publish fanned out holds one body that several messages share: for id 0 it returns it
// with id 0, "shared".
func DecodeMessage(raw []byte, id uint64) (uint64, queue.Payload, error) {
	rec, err := DecodeRecord(raw)
	if err != nil {
		return 0, queue.Payload{}, err
	}
	switch x := rec.(type) {
	case *GroupDeadLetterRecord:
		got, p := x.Payload()
		return got, p, nil
	case *PublishFanoutRecord:
		n := uint64(0)
		for _, t := range x.Targets {
			if t.QueueID != 0 {
				n++
			}
		}
		if id == 0 || id >= x.BaseMsgID && id < x.BaseMsgID+n {
			return id, MessagePayload(x.Topic, &x.PublishRecord), nil
		}
		return x.BaseMsgID, queue.Payload{}, nil
	case *SubCopyRecord:
		if len(x.Entries) == 1 {
			return x.BaseMsgID, MessagePayload(x.Topic, &x.Entries[0].Record), nil
		}
		return 0, queue.Payload{}, fmt.Errorf("a copy of %d records is not one message's body", len(x.Entries))
	}
	return 0, queue.Payload{}, fmt.Errorf("a %s record holds no message", rec.Kind())
}

// DecodePublish decodes the publish a record holds: a publish, or a publish fanned out.
// With shared, the record aliases raw.
func DecodePublish(raw []byte, shared bool) (*PublishRecord, error) {
	var rec Record
	var err error
	if shared {
		rec, err = DecodeRecordShared(raw)
	} else {
		rec, err = DecodeRecord(raw)
	}
	if err != nil {
		return nil, err
	}
	switch x := rec.(type) {
	case *PublishRecord:
		return x, nil
	case *PublishFanoutRecord:
		return &x.PublishRecord, nil
	}
	return nil, fmt.Errorf("a %s record is not a publish", rec.Kind())
}

func (r *GroupDeadLetterRecord) apply(m *Machine) error {
	t, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	rec := &r.Record
	if rec.Partition < 0 || rec.Partition >= len(g.parts) {
		return fmt.Errorf("dead letter of partition %d of group %q with %d", rec.Partition, g.name, len(g.parts))
	}
	gp := &g.parts[rec.Partition]
	if rec.Offset < gp.committed || rec.Offset >= gp.position {
		return fmt.Errorf("group %q partition %d: dead letter of %d outside %d..%d", g.name, rec.Partition, rec.Offset, gp.committed, gp.position)
	}
	if m.queues == nil {
		return fmt.Errorf("dead letter of group %q: no queues", g.name)
	}
	p := MessagePayload(r.Topic, rec)
	dead := &queue.DeadInfo{SourceName: t.name, Reason: r.Reason, At: r.Now,
		Description: deadLetterDescription(r.Group, t.name, rec.Partition, rec.Offset, r.Description)}
	if err := m.queues.ApplyImport(r.Now, queue.Import{QueueID: r.QueueID, MsgID: r.MsgID, VisibleAt: r.Now, Dead: dead}, &p); err != nil {
		return err
	}
	gp.committed = rec.Offset + 1
	g.commits++
	return nil
}

// deadLetterDescription says where a dead-lettered record came from, then why.
func deadLetterDescription(group, topic string, partition int, offset uint64, why string) string {
	d := fmt.Sprintf("from group %s, %s/%d offset %d", group, topic, partition, offset)
	if why != "" {
		d += ": " + why
	}
	return d
}
