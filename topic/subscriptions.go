package topic

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/okiba/okiba/internal/filter"
	"github.com/okiba/okiba/queue"
)

// Subscriptions: a subscription binds a topic to a queue with an optional filter. A
// subscription that is caught up (its cursor at a partition's end) takes every matching
// record into its queue in the publish's own record — one durable outcome, so that no
// subscriber gets a record another misses after a crash. One that is behind (created
// from an earlier offset, or paused because its queue was full) is moved forward by the
// broker in committed batches (Copy), like a redrive task, and joins the live path when
// it reaches the end, so that records of one key enter the queue in order. A full queue
// pauses its subscription: publishes are never refused or dropped for one slow
// subscriber. Records retention deletes before a subscription copied them are counted as
// lost.

// ErrSubscriptionNotFound and ErrInUse are the subscriptions' sentinels.
var (
	ErrSubscriptionNotFound = errors.New("subscription not found")
	ErrTopicInUse           = errors.New("topic is in use")
)

// InUseError reports a topic that has subscriptions or groups, deleted without force.
type InUseError struct {
	Topic         string
	Subscriptions []string
	Groups        []string
}

func (e *InUseError) Error() string {
	var has []string
	if len(e.Subscriptions) > 0 {
		has = append(has, fmt.Sprintf("subscriptions %s", strings.Join(e.Subscriptions, ", ")))
	}
	if len(e.Groups) > 0 {
		has = append(has, fmt.Sprintf("consumer groups %s", strings.Join(e.Groups, ", ")))
	}
	return fmt.Sprintf("topic %q has %s: delete them first, or delete the topic with force", e.Topic, strings.Join(has, " and "))
}

func (e *InUseError) Unwrap() error { return ErrTopicInUse }

// SubscriptionConfig is what a subscription is.
type SubscriptionConfig struct {
	// Queue is the queue records go into. Fixed at creation.
	Queue string
	// Filter is an SNS filter policy (internal/filter) in Scope; empty takes every record.
	Filter []byte
	Scope  filter.Scope
}

type subscription struct {
	id        uint64
	name      string
	queue     string
	queueID   uint64
	filter    []byte // canonical; nil: every record
	scope     filter.Scope
	policy    *filter.Policy
	cursors   []uint64 // per partition: the next offset to take
	lost      uint64
	delivered uint64
	filtered  uint64
	createdAt int64
}

// QueueInfo is what subscriptions need to know of a queue.
type QueueInfo struct {
	ID             uint64
	MaxMessageSize int64
	OrderedGroups  bool
	Delay          int64 // ms
}

// groupOfKey is the message group a record's key gives in an ordered queue: the key
// itself when it can be one (1..128 printable ASCII bytes), else the hex SHA-256 of it.
func groupOfKey(r *PublishRecord) string {
	if !r.HasKey {
		return ""
	}
	ok := len(r.Key) > 0 && len(r.Key) <= queue.MaxGroupLen
	for _, c := range r.Key {
		if c < 0x20 || c > 0x7e {
			ok = false
			break
		}
	}
	if ok {
		return string(r.Key)
	}
	sum := sha256.Sum256(r.Key)
	return hex.EncodeToString(sum[:])
}

// Subscribe creates a subscription, or changes the filter of an existing one (its queue
// cannot change). start gives each partition's first offset to take (a retained offset or
// the end); nil means from now (the ends). q describes the queue.
func (m *Machine) Subscribe(now int64, sink Sink, topicName, name string, cfg SubscriptionConfig, q QueueInfo, start []uint64) (bool, error) {
	now = m.clock(now)
	t, err := m.topic(topicName)
	if err != nil {
		return false, err
	}
	if err := queue.CheckName(name); err != nil {
		return false, &queue.NameError{Name: name, Of: "subscription"}
	}
	var canonical []byte
	if len(cfg.Filter) > 0 {
		p, err := filter.Parse(cfg.Filter, cfg.Scope)
		if err != nil {
			return false, err
		}
		canonical = p.Canonical()
	}
	if old := t.subs[name]; old != nil {
		if old.queue != cfg.Queue {
			return false, &queue.ConfigError{Field: "queue", Reason: fmt.Sprintf("subscription %q feeds queue %q; the queue is fixed at creation", name, old.queue)}
		}
		if string(old.filter) == string(canonical) && old.scope == cfg.Scope {
			return false, nil
		}
		m.emit(sink, &SubPutRecord{Now: now, TopicID: t.id, SubID: old.id, Name: name, Queue: old.queue, QueueID: old.queueID,
			Filter: canonical, Scope: cfg.Scope})
		return false, nil
	}
	if len(t.subs) >= m.limits.MaxSubscriptions {
		return false, &queue.LimitError{Limit: "max_subscriptions", Value: m.limits.MaxSubscriptions, What: fmt.Sprintf("topic %q has too many subscriptions: delete one first", t.name)}
	}
	if q.MaxMessageSize < t.cfg.MaxRecordSize {
		return false, &queue.ConfigError{Field: "queue", Reason: fmt.Sprintf("queue %q takes messages of at most %d bytes, below the topic's max_record_size %d: raise its max_message_size, or lower the topic's", cfg.Queue, q.MaxMessageSize, t.cfg.MaxRecordSize)}
	}
	cursors := make([]uint64, len(t.parts))
	for p := range t.parts {
		cursors[p] = t.parts[p].next
		if start != nil {
			if start[p] < t.parts[p].start || start[p] > t.parts[p].next {
				return false, &OffsetError{Topic: t.name, Partition: p, Offset: start[p], Start: t.parts[p].start, End: t.parts[p].next}
			}
			cursors[p] = start[p]
		}
	}
	m.emit(sink, &SubPutRecord{Now: now, TopicID: t.id, SubID: m.lastSID + 1, Name: name, Queue: cfg.Queue, QueueID: q.ID,
		Filter: canonical, Scope: cfg.Scope, Cursors: cursors})
	return true, nil
}

// Unsubscribe deletes a subscription; what it put into its queue stays there.
func (m *Machine) Unsubscribe(now int64, sink Sink, topicName, name string) error {
	now = m.clock(now)
	t, err := m.topic(topicName)
	if err != nil {
		return err
	}
	s := t.subs[name]
	if s == nil {
		return fmt.Errorf("%w: %q on topic %q", ErrSubscriptionNotFound, name, topicName)
	}
	m.emit(sink, &SubDeleteRecord{Now: now, TopicID: t.id, SubID: s.id})
	return nil
}

// SubscriptionsOf lists the subscriptions that feed a queue, as "topic/subscription".
func (m *Machine) SubscriptionsOf(queueName string) []string {
	var out []string
	for _, id := range m.topicIDs() {
		t := m.byID[id]
		for _, n := range sortedSubNames(t) {
			if t.subs[n].queue == queueName {
				out = append(out, t.name+"/"+n)
			}
		}
	}
	return out
}

// UnsubscribeQueue deletes every subscription that feeds a queue (the queue is being
// deleted with force).
func (m *Machine) UnsubscribeQueue(now int64, sink Sink, queueName string) {
	now = m.clock(now)
	for _, id := range m.topicIDs() {
		t := m.byID[id]
		for _, n := range sortedSubNames(t) {
			if s := t.subs[n]; s.queue == queueName {
				m.emit(sink, &SubDeleteRecord{Now: now, TopicID: t.id, SubID: s.id})
			}
		}
	}
}

func sortedSubNames(t *topicState) []string {
	names := make([]string, 0, len(t.subs))
	for n := range t.subs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// subsByID returns a topic's subscriptions in id order (the order fan-out visits them).
//
// The slice is the topic's own, kept until subs changes: callers read it and never
// change it.
func (t *topicState) subsByID() []*subscription {
	if t.byID == nil && len(t.subs) > 0 {
		out := make([]*subscription, 0, len(t.subs))
		for _, s := range t.subs {
			out = append(out, s)
		}
		slices.SortFunc(out, func(a, b *subscription) int { return cmp.Compare(a.id, b.id) })
		t.byID = out
	}
	return t.byID
}

// setSub adds s to the topic's subscriptions (or replaces the one of its name).
func (t *topicState) setSub(s *subscription) {
	if t.subs == nil {
		t.subs = make(map[string]*subscription)
	}
	t.subs[s.name] = s
	t.byID = nil
}

// dropSub removes s from the topic's subscriptions.
func (t *topicState) dropSub(s *subscription) {
	delete(t.subs, s.name)
	t.byID = nil
}

// matches reports whether a record passes a subscription's filter.
func (s *subscription) matches(r *PublishRecord, in *filter.Input) bool {
	if s.policy == nil {
		return true
	}
	if in.Headers == nil && len(r.Headers) > 0 {
		in.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			in.Headers[h.Name] = h.Value
		}
	}
	return s.policy.Match(*in)
}

// fanOut decides, for a record about to be appended at its partition's end, which
// caught-up subscriptions take it: each that it matches gets a prepared import (unless
// its queue is full: then it pauses, its cursor staying here); each it does not match
// just moves past it.
func (m *Machine) fanOut(now int64, t *topicState, r *PublishRecord) (targets []FanoutTarget, base uint64) {
	if len(t.subs) == 0 || m.queues == nil {
		return nil, 0
	}
	in := filter.Input{Key: string(r.Key), HasKey: r.HasKey, Body: r.Body}
	subs := t.subsByID()
	targets = make([]FanoutTarget, 0, len(subs))
	var prepared []queue.Import
	var p queue.Payload
	for _, s := range subs {
		if s.cursors[r.Partition] != r.Offset {
			continue // behind: the copier brings it here
		}
		if !s.matches(r, &in) {
			targets = append(targets, FanoutTarget{SubID: s.id})
			continue
		}
		if p.Body == nil {
			// The queues keep their messages' bodies: the record's from here on is a copy,
			// not the caller's bytes, which may be a whole request's (PublishInput.Body).
			r.Body = bytes.Clone(r.Body)
			p = MessagePayload(t.name, r)
		}
		imp, err := m.queues.PrepareImport(now, s.queue, &p, false, prepared)
		if err != nil {
			continue // full (or gone): paused here
		}
		if len(prepared) == 0 {
			base = imp.MsgID
			prepared = make([]queue.Import, 0, len(subs))
		}
		targets = append(targets, FanoutTarget{SubID: s.id, QueueID: imp.QueueID, Delay: imp.VisibleAt - now})
		prepared = append(prepared, imp)
	}
	return targets, base
}

// CopyPlan is what a subscription that is behind may copy next.
type CopyPlan struct {
	TopicID   uint64
	SubID     uint64
	Partition int
	From, To  uint64
}

// PlanCopy returns the next range a subscription that is behind may copy, at most max
// records of one partition, and false when it is caught up. The partition it starts
// looking at turns with the cursors (see turn), so every partition gets its share and
// two replicas that apply the same records plan the same copy.
func (m *Machine) PlanCopy(topicName, name string, max int) (CopyPlan, bool, error) {
	t, err := m.topic(topicName)
	if err != nil {
		return CopyPlan{}, false, err
	}
	s := t.subs[name]
	if s == nil {
		return CopyPlan{}, false, fmt.Errorf("%w: %q on topic %q", ErrSubscriptionNotFound, name, topicName)
	}
	n := len(t.parts)
	first := turn(s.cursors, n)
	for i := 0; i < n; i++ {
		p := (first + i) % n
		if c, end := s.cursors[p], t.parts[p].next; c < end {
			return CopyPlan{TopicID: t.id, SubID: s.id, Partition: p, From: c, To: min(end, c+uint64(max))}, true, nil
		}
	}
	return CopyPlan{}, false, nil
}

// Behind lists the subscriptions that are not caught up, as topic and name.
func (m *Machine) Behind() [][2]string {
	var out [][2]string
	for _, id := range m.topicIDs() {
		t := m.byID[id]
		for _, n := range sortedSubNames(t) {
			s := t.subs[n]
			for p := range t.parts {
				if s.cursors[p] < t.parts[p].next {
					out = append(out, [2]string{t.name, n})
					break
				}
			}
		}
	}
	return out
}

// Copy takes the records of a planned range (read by the broker, in offset order from
// plan.From) into the subscription's queue: those the filter passes, up to the first its
// queue refuses (full). Each record taken is one SubCopyRecord holding its body (the
// payload store keeps one body per message position), which also moves the cursor past
// the records the filter passed over before it. It reports how many records went into
// the queue, and whether the queue was full. A plan the subscription moved past meanwhile
// copies nothing.
func (m *Machine) Copy(now int64, sink Sink, plan CopyPlan, recs []*PublishRecord) (moved int, full bool, err error) {
	now = m.clock(now)
	t := m.byID[plan.TopicID]
	if t == nil {
		return 0, false, fmt.Errorf("%w: id %d", ErrTopicNotFound, plan.TopicID)
	}
	var s *subscription
	for _, x := range t.subs {
		if x.id == plan.SubID {
			s = x
		}
	}
	if s == nil || s.cursors[plan.Partition] != plan.From {
		return 0, false, nil
	}
	from, to := plan.From, plan.From
	for _, rec := range recs {
		if rec.Offset != to || rec.Offset >= t.parts[plan.Partition].next {
			break
		}
		in := filter.Input{Key: string(rec.Key), HasKey: rec.HasKey, Body: rec.Body}
		if !s.matches(rec, &in) {
			to++
			continue
		}
		p := MessagePayload(t.name, rec)
		imp, err := m.queues.PrepareImport(now, s.queue, &p, false, nil)
		if err != nil {
			full = true
			break
		}
		m.emit(sink, &SubCopyRecord{Now: now, TopicID: t.id, SubID: s.id, Topic: t.name, Partition: plan.Partition, From: from, To: to + 1,
			BaseMsgID: imp.MsgID, Entries: []CopyEntry{{Record: *rec, Delay: imp.VisibleAt - now}}})
		moved++
		to++
		from = to
	}
	if to > from { // filtered-out records after the last one taken
		m.emit(sink, &SubCopyRecord{Now: now, TopicID: t.id, SubID: s.id, Topic: t.name, Partition: plan.Partition, From: from, To: to})
	}
	return moved, full, nil
}

// SubscriptionInfo describes a subscription.
type SubscriptionInfo struct {
	Topic     string
	Name      string
	Queue     string
	Filter    []byte
	Scope     filter.Scope
	CreatedAt int64
	// Cursors are each partition's next offset to take; Lag is the records behind in
	// all, LostToRetention those retention deleted before they were taken.
	Cursors         []uint64
	Lag             uint64
	LostToRetention uint64
	Delivered       uint64
	Filtered        uint64
}

// Subscriptions describes a topic's subscriptions, by name.
func (m *Machine) Subscriptions(topicName string) ([]SubscriptionInfo, error) {
	t, err := m.topic(topicName)
	if err != nil {
		return nil, err
	}
	out := make([]SubscriptionInfo, 0, len(t.subs))
	for _, n := range sortedSubNames(t) {
		out = append(out, t.subs[n].info(t))
	}
	return out, nil
}

// Subscription describes one subscription.
func (m *Machine) Subscription(topicName, name string) (SubscriptionInfo, error) {
	t, err := m.topic(topicName)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	s := t.subs[name]
	if s == nil {
		return SubscriptionInfo{}, fmt.Errorf("%w: %q on topic %q", ErrSubscriptionNotFound, name, topicName)
	}
	return s.info(t), nil
}

func (s *subscription) info(t *topicState) SubscriptionInfo {
	si := SubscriptionInfo{Topic: t.name, Name: s.name, Queue: s.queue, Filter: s.filter, Scope: s.scope, CreatedAt: s.createdAt,
		Cursors: append([]uint64(nil), s.cursors...), LostToRetention: s.lost, Delivered: s.delivered, Filtered: s.filtered}
	for p := range t.parts {
		si.Lag += t.parts[p].next - s.cursors[p]
	}
	return si
}
