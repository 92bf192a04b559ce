package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Consumer groups (package topic, groups.go, for the semantics): the broker attends a
// member, plans what it may be handed, reads those records without the lock, records what
// it handed out, and answers once that is durable.

// PutGroup creates a consumer group or changes its configuration; edit changes the
// configuration in place (okiba's defaults for a new group).
func (b *Broker) PutGroup(ctx context.Context, topicName, name string, edit func(cfg *topic.GroupConfig, exists bool) error) (GroupInfo, bool, error) {
	var created bool
	var info GroupInfo
	err := b.do(ctx, func(now int64) error {
		cfg := topic.DefaultGroupConfig()
		cur, err := b.t.Group(topicName, name)
		exists := err == nil
		if exists {
			cfg = cur.Config
		}
		if edit != nil {
			if err := edit(&cfg, exists); err != nil {
				return err
			}
		}
		if created, err = b.t.PutGroup(now, b.tsink, topicName, name, cfg); err != nil {
			return err
		}
		gi, err := b.t.Group(topicName, name)
		info = b.groupInfoLocked(gi, now)
		if err == nil && created {
			b.logger.Info("consumer group created", "topic", topicName, "group", name, "start", cfg.Start.String())
		}
		return err
	})
	if err != nil {
		return GroupInfo{}, false, err
	}
	b.fillLagTimes(&info)
	return info, created, nil
}

// DeleteGroup deletes a consumer group.
func (b *Broker) DeleteGroup(ctx context.Context, topicName, name string) error {
	return b.do(ctx, func(now int64) error {
		if err := b.t.DeleteGroup(now, b.tsink, topicName, name); err != nil {
			return err
		}
		b.logger.Info("consumer group deleted", "topic", topicName, "group", name)
		return nil
	})
}

// GroupInfo is a group with its lag.
type GroupInfo struct {
	topic.GroupInfo
	// LagRecords is the sum of the partitions' lag; LagSeconds the largest partition's
	// lag in time (now − publish time of its first uncommitted record).
	LagRecords uint64
	LagSeconds float64
	// PartitionLagSeconds is each partition's lag in time (0 when caught up).
	PartitionLagSeconds []float64
	LostToRetention     uint64
	// topicID and now, for fillLagTimes.
	topicID uint64
	now     int64
}

func (b *Broker) groupInfoLocked(gi topic.GroupInfo, now int64) GroupInfo {
	out := GroupInfo{GroupInfo: gi, now: now, PartitionLagSeconds: make([]float64, len(gi.Partitions))}
	out.topicID, _ = b.t.TopicID(gi.Topic)
	for _, p := range gi.Partitions {
		out.LagRecords += p.Lag
		out.LostToRetention += p.LostToRetention
	}
	return out
}

// fillLagTimes reads the publish time of each lagging partition's first uncommitted
// record (one small read each, without the lock).
func (b *Broker) fillLagTimes(gi *GroupInfo) {
	for i, p := range gi.Partitions {
		if p.Lag == 0 {
			continue
		}
		recs, err := b.store.ReadTopic(gi.topicID, p.Partition, p.Committed, p.End, 1, 1)
		if err != nil || len(recs) == 0 {
			continue // retention moved on meanwhile: the next look will say
		}
		lag := float64(gi.now-recs[0].Now) / 1000
		gi.PartitionLagSeconds[i] = max(lag, 0)
		gi.LagSeconds = max(gi.LagSeconds, gi.PartitionLagSeconds[i])
	}
}

// Group describes one consumer group with its lag.
func (b *Broker) Group(topicName, name string) (GroupInfo, error) {
	b.mu.Lock()
	gi, err := b.t.Group(topicName, name)
	if err != nil {
		b.mu.Unlock()
		return GroupInfo{}, err
	}
	info := b.groupInfoLocked(gi, b.nowLocked())
	b.mu.Unlock()
	b.fillLagTimes(&info)
	return info, nil
}

// Groups describes every consumer group of a topic.
func (b *Broker) Groups(topicName string) ([]GroupInfo, error) {
	b.mu.Lock()
	gis, err := b.t.Groups(topicName)
	if err != nil {
		b.mu.Unlock()
		return nil, err
	}
	now := b.nowLocked()
	out := make([]GroupInfo, len(gis))
	for i, gi := range gis {
		out[i] = b.groupInfoLocked(gi, now)
	}
	b.mu.Unlock()
	for i := range out {
		b.fillLagTimes(&out[i])
	}
	return out, nil
}

// PullOptions says who pulls and how much.
type PullOptions struct {
	Member string
	// Session is the one the member's last pull or heartbeat returned; 0 joins (or
	// rejoins: the member's partitions start again from the committed offsets).
	Session uint64
	// Max bounds the records (default 100, at most 10,000), MaxBytes their bytes
	// (default and most 16 MiB; at least one record if any is due).
	Max      int
	MaxBytes int
	// Wait is how long to wait for a record when none is due (a long poll, at most 60 s,
	// and at most half the member lease, so that waiting never costs the member its
	// partitions).
	Wait time.Duration
}

// Pulled is what a pull hands a member: its session, its assignment and records of the
// partitions it holds (not of those being revoked from it).
type Pulled struct {
	topic.Session
	Records []TopicRecord
}

// Pull attends the member (joining, renewing, letting go of revoked partitions,
// rebalancing) and hands it records of its partitions from their positions. It answers
// once what it handed out is durable: a commit of those offsets is then accepted.
func (b *Broker) Pull(ctx context.Context, topicName, groupName string, opts PullOptions) (Pulled, error) {
	if opts.Max == 0 {
		opts.Max = DefaultReadMax
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = MaxReadBytes
	}
	if err := CheckRead(ReadOptions{Max: opts.Max, MaxBytes: opts.MaxBytes, Wait: opts.Wait}); err != nil {
		return Pulled{}, err
	}
	deadline := b.clock.Now().Add(opts.Wait)
	for {
		var sess topic.Session
		var plan topic.PullPlan
		var wake chan struct{}
		err := b.do(ctx, func(now int64) error {
			var err error
			if sess, err = b.t.Attend(now, b.tsink, topicName, groupName, opts.Member, opts.Session); err != nil {
				return err
			}
			opts.Session = sess.Session
			if plan, err = b.t.PlanPull(topicName, groupName, opts.Member, opts.Max); err != nil {
				return err
			}
			gi, _ := b.t.Group(topicName, groupName)
			if limit := b.clock.Now().Add(gi.Config.MemberLease / 2); limit.Before(deadline) {
				deadline = limit
			}
			if len(plan.Ranges) == 0 && b.clock.Now().Before(deadline) {
				wake = b.readers[plan.TopicID]
				if wake == nil {
					wake = make(chan struct{})
					b.readers[plan.TopicID] = wake
				}
			}
			return nil
		})
		if err != nil {
			return Pulled{}, err
		}
		if len(plan.Ranges) == 0 {
			if wake == nil {
				return Pulled{Session: sess}, nil
			}
			if err := b.sleep(ctx, wake, deadline); err != nil {
				opts.Wait = 0
				deadline = b.clock.Now()
			}
			continue
		}
		recs, got, err := b.readRanges(plan, opts.MaxBytes)
		if err != nil {
			return Pulled{}, err
		}
		var ok []bool
		err = b.do(ctx, func(now int64) error {
			var err error
			ok, err = b.t.Handed(now, b.tsink, plan.TopicID, plan.GroupID, opts.Member, got)
			if err == nil {
				sess, _ = b.t.SessionOf(topicName, groupName, opts.Member)
			}
			return err
		})
		if err != nil {
			return Pulled{}, err
		}
		out := Pulled{Session: sess}
		n := 0
		for i, r := range got {
			if ok[i] {
				n += len(recs[r.Partition])
			}
		}
		if n > 0 {
			out.Records = make([]TopicRecord, 0, n)
		}
		for i, r := range got {
			if ok[i] {
				out.Records = append(out.Records, recs[r.Partition]...)
			}
		}
		return out, nil
	}
}

// readRanges reads each planned range, within maxBytes in all, and returns the records
// by partition and the ranges as far as they were read.
func (b *Broker) readRanges(plan topic.PullPlan, maxBytes int) (map[int][]TopicRecord, []topic.PullRange, error) {
	out := make(map[int][]TopicRecord, len(plan.Ranges))
	var got []topic.PullRange
	left := maxBytes
	for _, r := range plan.Ranges {
		if left <= 0 && len(got) > 0 {
			break
		}
		from := r.From
		for from < r.To && (left > 0 || from == r.From && len(got) == 0) {
			// The records go into the pull's answer and no further.
			recs, err := b.store.ReadTopicShared(plan.TopicID, r.Partition, from, r.To, int(r.To-from), max(left, 1))
			if err != nil {
				if errors.Is(err, payload.ErrRecordGone) {
					break // retention got there first: hand out what was read
				}
				return nil, nil, err
			}
			if len(recs) == 0 {
				break
			}
			out[r.Partition] = slices.Grow(out[r.Partition], len(recs))
			for _, pr := range recs {
				out[r.Partition] = append(out[r.Partition], TopicRecord{Partition: pr.Partition, Offset: pr.Offset, Time: pr.Now,
					HasKey: pr.HasKey, Key: pr.Key, Headers: pr.Headers, Body: pr.Body})
				in := pr.Input()
				left -= int(in.Size())
			}
			from = recs[len(recs)-1].Offset + 1
		}
		if from > r.From {
			got = append(got, topic.PullRange{Partition: r.Partition, Epoch: r.Epoch, From: r.From, To: from})
		}
	}
	return out, got, nil
}

// Heartbeat attends a member without handing it records: it renews the member's lease,
// lets go of partitions being revoked from it, and returns its assignment.
func (b *Broker) Heartbeat(ctx context.Context, topicName, groupName, member string, session uint64) (topic.Session, error) {
	var sess topic.Session
	err := b.do(ctx, func(now int64) error {
		var err error
		sess, err = b.t.Attend(now, b.tsink, topicName, groupName, member, session)
		return err
	})
	return sess, err
}

// Commit moves a group's committed offsets; see topic.Machine.Commit.
func (b *Broker) Commit(ctx context.Context, topicName, groupName, member string, session uint64, offs []topic.PartitionOffset) ([]error, error) {
	var errs []error
	err := b.do(ctx, func(now int64) error {
		var err error
		errs, err = b.t.Commit(now, b.tsink, topicName, groupName, member, session, offs)
		return err
	})
	return errs, err
}

// Leave removes a member from a group; its partitions go to the others.
func (b *Broker) Leave(ctx context.Context, topicName, groupName, member string, session uint64) error {
	return b.do(ctx, func(now int64) error {
		return b.t.Leave(now, b.tsink, topicName, groupName, member, session)
	})
}

// SeekTo says where a seek goes.
type SeekTo struct {
	// Partition is one partition, or -1 for all of them.
	Partition int
	// Exactly one of: First (each partition's start), Last (its end), Offset (needs
	// Partition), Time (the first record published at or after it).
	First, Last bool
	Offset      *uint64
	Time        *time.Time
}

// Seek moves a group's committed offsets; the partitions' epochs rise, so commits in
// flight from the old position are refused.
func (b *Broker) Seek(ctx context.Context, topicName, groupName string, to SeekTo) (GroupInfo, error) {
	n := 0
	for _, set := range []bool{to.First, to.Last, to.Offset != nil, to.Time != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return GroupInfo{}, &queue.ParamError{Field: "to", Reason: "give exactly one of first, last, offset or time"}
	}
	if to.Offset != nil && to.Partition < 0 {
		return GroupInfo{}, &queue.ParamError{Field: "offset", Reason: "needs a partition: a seek to an offset names the partition it is in"}
	}
	b.mu.Lock()
	ti, err := b.t.Topic(topicName)
	if err == nil {
		_, err = b.t.Group(topicName, groupName)
	}
	b.mu.Unlock()
	if err != nil {
		return GroupInfo{}, err
	}
	var parts []int
	if to.Partition >= 0 {
		if to.Partition >= len(ti.Partitions) {
			return GroupInfo{}, &topic.PartitionError{Topic: topicName, Partition: to.Partition, Partitions: len(ti.Partitions)}
		}
		parts = []int{to.Partition}
	} else {
		for p := range ti.Partitions {
			parts = append(parts, p)
		}
	}
	offs := make([]topic.PartitionOffset, 0, len(parts))
	for _, p := range parts {
		pi := ti.Partitions[p]
		var off uint64
		switch {
		case to.First:
			off = pi.Start
		case to.Last:
			off = pi.End
		case to.Offset != nil:
			off = *to.Offset
		default:
			if off, err = b.offsetAt(ti.ID, p, pi, to.Time.UnixMilli()); err != nil {
				return GroupInfo{}, err
			}
		}
		offs = append(offs, topic.PartitionOffset{Partition: p, Offset: off})
	}
	var info GroupInfo
	err = b.do(ctx, func(now int64) error {
		if err := b.t.SeekGroup(now, b.tsink, topicName, groupName, offs); err != nil {
			return err
		}
		gi, err := b.t.Group(topicName, groupName)
		info = b.groupInfoLocked(gi, now)
		b.logger.Info("consumer group sought", "topic", topicName, "group", groupName, "offsets", fmt.Sprint(offs))
		return err
	})
	if err != nil {
		return GroupInfo{}, err
	}
	b.fillLagTimes(&info)
	return info, nil
}

// offsetAt finds the first offset of a partition published at or after ms (the end if
// none): the segments narrow it to one, which is read from its start.
func (b *Broker) offsetAt(topicID uint64, p int, pi topic.PartitionInfo, ms int64) (uint64, error) {
	b.mu.Lock()
	name, _ := b.t.TopicByID(topicID)
	segs, err := b.t.Segments(name, p)
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for _, s := range segs {
		if s.Last < ms {
			continue
		}
		for off := s.Base; off < s.End(); {
			recs, err := b.store.ReadTopic(topicID, p, off, s.End(), 1000, MaxReadBytes)
			if err != nil {
				return 0, err
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				if r.Now >= ms {
					return r.Offset, nil
				}
			}
			off = recs[len(recs)-1].Offset + 1
		}
	}
	return pi.End, nil
}

// DeadLetterRecord writes a record a member could not handle into the group's
// dead-letter queue (topic.DeadLetterName, created when first needed) as a dead letter
// with the reason, and commits the offset after it, in one durable record.
func (b *Broker) DeadLetterRecord(ctx context.Context, topicName, groupName, member string, session uint64, partition int, offset, epoch uint64, reason, description string) error {
	b.mu.Lock()
	rg, err := b.t.ReadRange(topicName, partition, offset)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if offset >= rg.End {
		return &topic.OffsetError{Topic: topicName, Partition: partition, Offset: offset, Start: offset, End: rg.End}
	}
	recs, err := b.store.ReadTopic(rg.TopicID, partition, offset, offset+1, 1, MaxReadBytes)
	if err != nil {
		return err
	}
	if len(recs) != 1 {
		return fmt.Errorf("broker: record %s/%d@%d could not be read", topicName, partition, offset)
	}
	return b.do(ctx, func(now int64) error {
		dlq := topic.DeadLetterName(topicName, groupName)
		if _, err := b.m.QueueMeta(dlq); err != nil {
			cfg := queue.DeadLetterConfig(queue.Config{})
			if _, err := b.m.PutQueue(now, &b.sink, dlq, cfg); err != nil {
				return fmt.Errorf("create the group's dead-letter queue %q: %w", dlq, err)
			}
			b.logger.Info("dead-letter queue created", "queue", dlq, "topic", topicName, "group", groupName)
		}
		if err := b.t.DeadLetter(now, b.tsink, topicName, groupName, member, session, epoch, recs[0], dlq, reason, description); err != nil {
			return err
		}
		b.logger.Info("record dead-lettered", "topic", topicName, "group", groupName, "partition", partition, "offset", offset, "reason", reason)
		return nil
	})
}
