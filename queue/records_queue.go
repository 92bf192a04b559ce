package queue

import (
	"fmt"
	"maps"
	"time"
)

// Records that shape queues and the machine: create, reconfigure, delete, limits.

// QueuePutRecord creates a queue or replaces its configuration. A configuration with
// OnDeadLetter set is written as KindQueuePut2, the same fields and one byte more, so
// that every other configuration keeps the bytes older okibas read.
type QueuePutRecord struct {
	Now     int64
	QueueID uint64
	Name    string
	Config  Config
	v2      bool // decoding a KindQueuePut2
}

func (r *QueuePutRecord) Kind() Kind {
	if r.Config.OnDeadLetter != MoveOn {
		return KindQueuePut2
	}
	return KindQueuePut
}
func (r *QueuePutRecord) Time() int64 { return r.Now }

func (r *QueuePutRecord) AppendTo(b []byte) []byte {
	k := r.Kind()
	b = header(b, k, r.Now)
	b = appendUvarint(b, r.QueueID)
	b = appendString(b, r.Name)
	b = appendConfig(b, &r.Config)
	if k == KindQueuePut2 {
		b = append(b, byte(r.Config.OnDeadLetter))
	}
	return b
}

func (r *QueuePutRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
	r.Name = d.string()
	r.Config = d.config()
	if r.v2 {
		r.Config.OnDeadLetter = DeadLetterAction(d.byte())
		if d.err == nil && r.Config.OnDeadLetter == MoveOn {
			d.fail(fmt.Errorf("queue_put2 of queue %q without on_dead_letter: written as queue_put", r.Name))
		}
	}
}

func (r *QueuePutRecord) apply(m *Machine) error {
	if r.QueueID > m.lastQID {
		m.lastQID = r.QueueID
	}
	if q := m.byID[r.QueueID]; q != nil {
		if q.name != r.Name {
			return fmt.Errorf("queue id %d is %q, record says %q", r.QueueID, q.name, r.Name)
		}
		m.settle(q, r.Now)
		q.cfg = r.Config.Clone()
		if q.cfg.OnDeadLetter != ParkGroup {
			m.releaseAll(q)
		}
		q.updatedAt = r.Now
		q.retCursor = 0
		m.reschedule(q)
		return nil
	}
	if m.queues[r.Name] != nil {
		return fmt.Errorf("queue %q exists with another id", r.Name)
	}
	q := m.newQueueState(r.QueueID)
	q.name, q.cfg, q.createdAt, q.updatedAt = r.Name, r.Config.Clone(), r.Now, r.Now
	m.queues[r.Name] = q
	m.byID[r.QueueID] = q
	return nil
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
	b = appendStringMap(b, c.Front.stored())
	return b
}

// frontFields are the keys under which FrontAttributes are stored. The attributes are
// written as one string map, sorted by key like every map, the same bytes as when they
// were an untyped map, so these keys are part of the format: never rename one.
var frontFields = [...]struct {
	key   string
	field func(*FrontAttributes) *string
}{
	{"sqs.Policy", func(a *FrontAttributes) *string { return &a.Policy }},
	{"sqs.RedriveAllowPolicy", func(a *FrontAttributes) *string { return &a.RedriveAllowPolicy }},
	{"sqs.KmsMasterKeyId", func(a *FrontAttributes) *string { return &a.KMSMasterKeyID }},
	{"sqs.KmsDataKeyReusePeriodSeconds", func(a *FrontAttributes) *string { return &a.KMSDataKeyReusePeriod }},
	{"sqs.SqsManagedSseEnabled", func(a *FrontAttributes) *string { return &a.SQSManagedSSE }},
	{"sqs.FifoThroughputLimit", func(a *FrontAttributes) *string { return &a.FIFOThroughputLimit }},
}

// frontKey reports whether k is the stored key of a field of FrontAttributes.
func frontKey(k string) bool {
	var a FrontAttributes
	return a.field(k) != nil
}

// stored returns the attributes as the map they are stored as: the fields that are
// set, under their keys, and the Unknown entries as they were read.
func (a *FrontAttributes) stored() map[string]string {
	m := maps.Clone(a.Unknown)
	for _, f := range frontFields {
		if v := *f.field(a); v != "" {
			if m == nil {
				m = make(map[string]string, len(frontFields))
			}
			m[f.key] = v
		}
	}
	return m
}

// frontAttributes reads the stored map back: known keys into their fields, every other
// entry into Unknown. A known key with an empty value is the same as no key: the fields
// have no other way to say "not set".
func frontAttributes(m map[string]string) FrontAttributes {
	var a FrontAttributes
	for k, v := range m {
		if p := a.field(k); p != nil {
			*p = v
			continue
		}
		if a.Unknown == nil {
			a.Unknown = make(map[string]string)
		}
		a.Unknown[k] = v
	}
	return a
}

func (a *FrontAttributes) field(key string) *string {
	for _, f := range frontFields {
		if f.key == key {
			return f.field(a)
		}
	}
	return nil
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
	c.Front = frontAttributes(d.stringMap())
	return c
}

// QueueDeleteRecord deletes a queue and every message in it.
type QueueDeleteRecord struct {
	Now     int64
	QueueID uint64
}

func (r *QueueDeleteRecord) Kind() Kind  { return KindQueueDelete }
func (r *QueueDeleteRecord) Time() int64 { return r.Now }

func (r *QueueDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindQueueDelete, r.Now)
	return appendUvarint(b, r.QueueID)
}

func (r *QueueDeleteRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.QueueID = d.uvarint()
}

func (r *QueueDeleteRecord) apply(m *Machine) error {
	q, err := m.touch(r.QueueID, r.Now)
	if err != nil {
		return err
	}
	m.forgetParked(q)
	q.msgs.each(0, func(x *message) bool {
		m.drop(x)
		return true
	})
	for _, e := range q.dedup.m {
		m.dedup.drop(e.expires)
	}
	delete(m.queues, q.name)
	delete(m.byID, q.id)
	m.dropQueueState(q)
	for _, t := range m.tasks {
		if t.State == TaskRunning && (t.Source == q.id || t.Target == q.id) {
			t.State = TaskFailed
			t.Message = fmt.Sprintf("queue %q was deleted", q.name)
			t.UpdatedAt = r.Now
		}
	}
	m.pruneTasks()
	return nil
}

// LimitsRecord sets the machine's limits (Limits): replicated configuration, so that
// every replica, and every replay, bounds dedup entries and finished tasks alike.
type LimitsRecord struct {
	Now    int64
	Limits Limits
}

func (r *LimitsRecord) Kind() Kind  { return KindLimits2 }
func (r *LimitsRecord) Time() int64 { return r.Now }

// AppendTo writes the record as KindLimits2, which carries DedupTotal; KindLimits,
// without it, is read (DedupTotal is then its default), never written.
func (r *LimitsRecord) AppendTo(b []byte) []byte {
	b = header(b, KindLimits2, r.Now)
	return appendLimits(b, &r.Limits)
}

func (r *LimitsRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.Limits = d.limits(true)
}

// limitsV1Record is a KindLimits record of an okiba before DedupTotal.
type limitsV1Record struct{ LimitsRecord }

func (r *limitsV1Record) Kind() Kind { return KindLimits }

func (r *limitsV1Record) AppendTo(b []byte) []byte {
	b = header(b, KindLimits, r.Now)
	for _, v := range []int{r.Limits.DedupCap, r.Limits.MaxTasks, r.Limits.MaxQueues, r.Limits.MaxInFlight} {
		b = appendUvarint(b, uint64(v))
	}
	return b
}

func (r *limitsV1Record) decode(d *decoder, now int64) {
	r.Now = now
	r.Limits = d.limits(false)
	r.Limits.DedupTotal = DefaultDedupTotal
}

func (r *LimitsRecord) apply(m *Machine) error {
	if err := r.Limits.validate(); err != nil {
		return err
	}
	m.limits = r.Limits
	m.pruneTasks()
	return nil
}

func appendLimits(b []byte, l *Limits) []byte {
	b = appendUvarint(b, uint64(l.DedupCap))
	b = appendUvarint(b, uint64(l.MaxTasks))
	b = appendUvarint(b, uint64(l.MaxQueues))
	b = appendUvarint(b, uint64(l.MaxInFlight))
	return appendUvarint(b, uint64(l.DedupTotal))
}

// limits reads appendLimits' fields; withTotal false reads the four of the formats
// before DedupTotal.
func (d *decoder) limits(withTotal bool) Limits {
	var l Limits
	fields := []*int{&l.DedupCap, &l.MaxTasks, &l.MaxQueues, &l.MaxInFlight}
	if withTotal {
		fields = append(fields, &l.DedupTotal)
	}
	for _, p := range fields {
		v := d.uvarint()
		if v > maxLimit {
			d.fail(fmt.Errorf("limit %d out of range", v))
		}
		*p = int(v)
	}
	return l
}
