package topic

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/internal/filter"
	"github.com/okiba/okiba/queue"
)

// Records of subscriptions.

// SubPutRecord creates a subscription (Cursors: each partition's first offset to take)
// or changes its filter (Cursors nil).
type SubPutRecord struct {
	Now     int64
	TopicID uint64
	SubID   uint64
	Name    string
	Queue   string
	QueueID uint64
	Filter  []byte // canonical policy; empty: every record
	Scope   filter.Scope
	Cursors []uint64
}

func (r *SubPutRecord) Kind() Kind  { return KindSubPut }
func (r *SubPutRecord) Time() int64 { return r.Now }

func (r *SubPutRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSubPut, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.SubID)
	b = codec.AppendString(b, r.Name)
	b = codec.AppendString(b, r.Queue)
	b = codec.AppendUvarint(b, r.QueueID)
	b = codec.AppendBytes(b, r.Filter)
	b = append(b, byte(r.Scope))
	b = codec.AppendUvarint(b, uint64(len(r.Cursors)))
	for _, c := range r.Cursors {
		b = codec.AppendUvarint(b, c)
	}
	return b
}

func (r *SubPutRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.SubID, r.Name, r.Queue, r.QueueID = now, d.Uvarint(), d.Uvarint(), d.String(), d.String(), d.Uvarint()
	r.Filter = bytes.Clone(d.Raw(codec.MaxBytes)) // the machine keeps it: never an alias of a replayed buffer
	r.Scope = filter.Scope(d.Byte())
	if n := d.Count(); n > 0 {
		r.Cursors = make([]uint64, n)
		for i := range r.Cursors {
			r.Cursors[i] = d.Uvarint()
		}
	}
}

func parsePolicy(src []byte, scope filter.Scope) (*filter.Policy, error) {
	if len(src) == 0 {
		return nil, nil
	}
	return filter.Parse(src, scope)
}

func (r *SubPutRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("subscription of unknown topic id %d", r.TopicID)
	}
	if r.SubID > m.lastSID {
		m.lastSID = r.SubID
	}
	policy, err := parsePolicy(r.Filter, r.Scope)
	if err != nil {
		return fmt.Errorf("subscription %q: %w", r.Name, err)
	}
	if s := t.subs[r.Name]; s != nil {
		if s.id != r.SubID {
			return fmt.Errorf("subscription %q of %q is id %d, record says %d", r.Name, t.name, s.id, r.SubID)
		}
		s.filter, s.scope, s.policy = r.Filter, r.Scope, policy
		return nil
	}
	if len(r.Cursors) != len(t.parts) {
		return fmt.Errorf("subscription %q of %q created with %d cursors for %d partitions", r.Name, t.name, len(r.Cursors), len(t.parts))
	}
	t.setSub(&subscription{id: r.SubID, name: r.Name, queue: r.Queue, queueID: r.QueueID, filter: r.Filter, scope: r.Scope,
		policy: policy, cursors: append([]uint64(nil), r.Cursors...), createdAt: r.Now})
	return nil
}

func (m *Machine) subOf(topicID, subID uint64) (*topicState, *subscription, error) {
	t := m.byID[topicID]
	if t == nil {
		return nil, nil, fmt.Errorf("record of unknown topic id %d", topicID)
	}
	subs := t.subsByID()
	if i, ok := slices.BinarySearchFunc(subs, subID, func(s *subscription, id uint64) int { return cmp.Compare(s.id, id) }); ok {
		return t, subs[i], nil
	}
	return nil, nil, fmt.Errorf("record of unknown subscription id %d of topic %q", subID, t.name)
}

// SubDeleteRecord deletes a subscription.
type SubDeleteRecord struct {
	Now     int64
	TopicID uint64
	SubID   uint64
}

func (r *SubDeleteRecord) Kind() Kind  { return KindSubDelete }
func (r *SubDeleteRecord) Time() int64 { return r.Now }

func (r *SubDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSubDelete, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	return codec.AppendUvarint(b, r.SubID)
}

func (r *SubDeleteRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.SubID = now, d.Uvarint(), d.Uvarint()
}

func (r *SubDeleteRecord) apply(m *Machine) error {
	t, s, err := m.subOf(r.TopicID, r.SubID)
	if err != nil {
		return err
	}
	t.dropSub(s)
	return nil
}

// FanoutTarget is one caught-up subscription's part in a publish: it moved past the
// record, and, when QueueID is not 0, took it into that queue.
type FanoutTarget struct {
	SubID   uint64
	QueueID uint64
	Delay   int64 // ms until the message is visible (its queue's delay)
}

// PublishFanoutRecord is a publish that caught-up subscriptions took part in: the record
// and, in the same durable outcome, a message in each matching subscription's queue. The
// messages' ids are BaseMsgID, BaseMsgID+1, … in the order of the targets that took it;
// they share the record's body, which lies here.
type PublishFanoutRecord struct {
	PublishRecord
	Topic     string
	BaseMsgID uint64
	Targets   []FanoutTarget
}

func (r *PublishFanoutRecord) Kind() Kind { return KindPublishFanout }

func (r *PublishFanoutRecord) AppendTo(b []byte) []byte {
	b = header(b, KindPublishFanout, r.Now)
	b = r.PublishRecord.appendFields(b)
	b = codec.AppendString(b, r.Topic)
	b = codec.AppendUvarint(b, r.BaseMsgID)
	b = codec.AppendUvarint(b, uint64(len(r.Targets)))
	for _, x := range r.Targets {
		b = codec.AppendUvarint(b, x.SubID)
		b = codec.AppendUvarint(b, x.QueueID)
		b = codec.AppendVarint(b, x.Delay)
	}
	return b
}

func (r *PublishFanoutRecord) decode(d *codec.Decoder, now int64) {
	r.PublishRecord.decode(d, now)
	r.Topic = d.String()
	r.BaseMsgID = d.Uvarint()
	n := d.Count()
	r.Targets = make([]FanoutTarget, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		r.Targets = append(r.Targets, FanoutTarget{SubID: d.Uvarint(), QueueID: d.Uvarint(), Delay: d.Varint()})
	}
}

func (r *PublishFanoutRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("publish to unknown topic id %d", r.TopicID)
	}
	// Check every target before changing anything.
	subs := make([]*subscription, len(r.Targets))
	for i, x := range r.Targets {
		_, s, err := m.subOf(r.TopicID, x.SubID)
		if err != nil {
			return err
		}
		if r.Partition < 0 || r.Partition >= len(s.cursors) || s.cursors[r.Partition] != r.Offset {
			return fmt.Errorf("fan-out of %s/%d@%d to subscription %q, which is not at that offset", t.name, r.Partition, r.Offset, s.name)
		}
		subs[i] = s
	}
	if err := r.PublishRecord.apply(m); err != nil {
		return err
	}
	var p queue.Payload
	id := r.BaseMsgID
	for i, x := range r.Targets {
		s := subs[i]
		s.cursors[r.Partition]++
		if x.QueueID == 0 {
			s.filtered++
			continue
		}
		if p.Body == nil {
			p = MessagePayload(r.Topic, &r.PublishRecord)
		}
		mp := p
		if m.queues.Ordered(x.QueueID) {
			mp.Group = groupOfKey(&r.PublishRecord)
		}
		if err := m.queues.ApplyImport(r.Now, queue.Import{QueueID: x.QueueID, MsgID: id, VisibleAt: r.Now + x.Delay}, &mp); err != nil {
			return err
		}
		s.delivered++
		id++
	}
	return nil
}

// CopyEntry is one record a copy takes into a subscription's queue.
type CopyEntry struct {
	Record PublishRecord
	Delay  int64
}

// SubCopyRecord moves a subscription that is behind from From to To in one partition,
// taking the records its filter passes (Entries, with message ids BaseMsgID, +1, …) into
// its queue. The records' bodies lie here, copied: the originals may be in partition
// files or gone to retention before the messages are.
type SubCopyRecord struct {
	Now       int64
	TopicID   uint64
	SubID     uint64
	Topic     string
	Partition int
	From, To  uint64
	BaseMsgID uint64
	Entries   []CopyEntry
}

func (r *SubCopyRecord) Kind() Kind  { return KindSubCopy }
func (r *SubCopyRecord) Time() int64 { return r.Now }

func (r *SubCopyRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSubCopy, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.SubID)
	b = codec.AppendString(b, r.Topic)
	b = codec.AppendUvarint(b, uint64(r.Partition))
	b = codec.AppendUvarint(b, r.From)
	b = codec.AppendUvarint(b, r.To-r.From)
	b = codec.AppendUvarint(b, r.BaseMsgID)
	b = codec.AppendUvarint(b, uint64(len(r.Entries)))
	for i := range r.Entries {
		e := &r.Entries[i]
		b = codec.AppendVarint(b, e.Delay)
		b = codec.AppendBytes(b, e.Record.AppendTo(nil))
	}
	return b
}

func (r *SubCopyRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.SubID, r.Topic = now, d.Uvarint(), d.Uvarint(), d.String()
	r.Partition = int(d.Uvarint() & 0xffff)
	r.From = d.Uvarint()
	r.To = r.From + d.Uvarint()
	r.BaseMsgID = d.Uvarint()
	n := d.Count()
	r.Entries = make([]CopyEntry, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		e := CopyEntry{Delay: d.Varint()}
		raw := d.Raw(codec.MaxBytes)
		if d.Err != nil {
			return
		}
		inner := &codec.Decoder{B: raw, Shared: d.Shared}
		if k := Kind(inner.Byte()); k != KindPublish {
			d.Fail(fmt.Errorf("copy holds a %s record, not a publish", k))
			return
		}
		e.Record.decode(inner, inner.Varint())
		if err := inner.Finish(); err != nil {
			d.Fail(fmt.Errorf("copy's record: %w", err))
			return
		}
		r.Entries = append(r.Entries, e)
	}
}

func (r *SubCopyRecord) apply(m *Machine) error {
	t, s, err := m.subOf(r.TopicID, r.SubID)
	if err != nil {
		return err
	}
	if r.Partition < 0 || r.Partition >= len(s.cursors) || s.cursors[r.Partition] != r.From || r.To > t.parts[r.Partition].next || r.To < r.From {
		return fmt.Errorf("copy of %s/%d %d..%d for subscription %q at %d", t.name, r.Partition, r.From, r.To, s.name, s.cursors[r.Partition])
	}
	ordered := m.queues.Ordered(s.queueID)
	for i := range r.Entries {
		e := &r.Entries[i]
		p := MessagePayload(r.Topic, &e.Record)
		if ordered {
			p.Group = groupOfKey(&e.Record)
		}
		if err := m.queues.ApplyImport(r.Now, queue.Import{QueueID: s.queueID, MsgID: r.BaseMsgID + uint64(i), VisibleAt: r.Now + e.Delay}, &p); err != nil {
			return err
		}
	}
	s.delivered += uint64(len(r.Entries))
	s.filtered += r.To - r.From - uint64(len(r.Entries))
	s.cursors[r.Partition] = r.To
	return nil
}
