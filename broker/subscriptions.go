package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Subscriptions (package topic, subscriptions.go, for the semantics). The broker resolves
// where a new subscription starts, and runs the copier (copyLoop), which moves the
// subscriptions that are behind forward in committed batches.

// SubStart says where a new subscription starts taking records.
type SubStart struct {
	// From now (the default: every partition's end), from the first retained record, from
	// the first record published at or after Time, or from Offsets (one per partition).
	First   bool
	Time    *time.Time
	Offsets []uint64
}

// SubscriptionInfo is a subscription with whether its queue's fullness holds it back.
type SubscriptionInfo struct {
	topic.SubscriptionInfo
	// Paused: behind, and the last copy stopped at a full queue.
	Paused bool
}

// Subscribe creates a subscription from topic to cfg.Queue (which must exist), or
// changes an existing one's filter.
func (b *Broker) Subscribe(ctx context.Context, topicName, name string, cfg topic.SubscriptionConfig, start SubStart) (SubscriptionInfo, bool, error) {
	b.mu.Lock()
	ti, err := b.t.Topic(topicName)
	b.mu.Unlock()
	if err != nil {
		return SubscriptionInfo{}, false, err
	}
	var offs []uint64
	switch {
	case start.Offsets != nil:
		if len(start.Offsets) != len(ti.Partitions) {
			return SubscriptionInfo{}, false, &queue.ParamError{Field: "start_offsets", Reason: fmt.Sprintf("gives %d offsets for topic %q of %d partitions: give one per partition, in partition order", len(start.Offsets), topicName, len(ti.Partitions))}
		}
		offs = start.Offsets
	case start.First:
		for _, p := range ti.Partitions {
			offs = append(offs, p.Start)
		}
	case start.Time != nil:
		for p, pi := range ti.Partitions {
			off, err := b.offsetAt(ti.ID, p, pi, start.Time.UnixMilli())
			if err != nil {
				return SubscriptionInfo{}, false, err
			}
			offs = append(offs, off)
		}
	}
	var created bool
	var info SubscriptionInfo
	err = b.do(ctx, func(now int64) error {
		qi, err := b.m.QueueMeta(cfg.Queue)
		if err != nil {
			return err
		}
		q := topic.QueueInfo{ID: qi.ID, MaxMessageSize: qi.Config.MaxMessageSize, OrderedGroups: qi.Config.OrderedGroups, Delay: qi.Config.Delay.Milliseconds()}
		if created, err = b.t.Subscribe(now, b.tsink, topicName, name, cfg, q, offs); err != nil {
			return err
		}
		si, err := b.t.Subscription(topicName, name)
		info = SubscriptionInfo{SubscriptionInfo: si}
		if created {
			b.logger.Info("subscription created", "topic", topicName, "subscription", name, "queue", cfg.Queue, "behind", si.Lag)
		}
		return err
	})
	if err != nil {
		return SubscriptionInfo{}, false, err
	}
	kick(b.kickCopy)
	return info, created, nil
}

// Unsubscribe deletes a subscription.
func (b *Broker) Unsubscribe(ctx context.Context, topicName, name string) error {
	return b.do(ctx, func(now int64) error {
		if err := b.t.Unsubscribe(now, b.tsink, topicName, name); err != nil {
			return err
		}
		delete(b.paused, topicName+"/"+name)
		b.logger.Info("subscription deleted", "topic", topicName, "subscription", name)
		return nil
	})
}

// Subscriptions describes a topic's subscriptions.
func (b *Broker) Subscriptions(topicName string) ([]SubscriptionInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sis, err := b.t.Subscriptions(topicName)
	if err != nil {
		return nil, err
	}
	out := make([]SubscriptionInfo, len(sis))
	for i, si := range sis {
		out[i] = SubscriptionInfo{SubscriptionInfo: si, Paused: si.Lag > 0 && b.paused[topicName+"/"+si.Name]}
	}
	return out, nil
}

// Subscription describes one subscription.
func (b *Broker) Subscription(topicName, name string) (SubscriptionInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	si, err := b.t.Subscription(topicName, name)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	return SubscriptionInfo{SubscriptionInfo: si, Paused: si.Lag > 0 && b.paused[topicName+"/"+name]}, nil
}

// copyBatch bounds the records one copy step reads.
const copyBatch = 256

// copyLoop moves every subscription that is behind forward, one committed batch at a
// time, until none is; a subscription whose queue is full waits and tries again.
func (b *Broker) copyLoop(ctx context.Context) {
	for {
		b.mu.Lock()
		behind := b.t.Behind()
		if !b.leadsLocked() {
			behind = nil // a follower's subscriptions move with the leader's entries
		}
		b.mu.Unlock()
		progress, waiting := false, false
		for _, s := range behind {
			moved, full, err := b.copyStep(ctx, s[0], s[1])
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, topic.ErrSubscriptionNotFound) && !errors.Is(err, topic.ErrTopicNotFound) {
					b.logger.Error("subscription copy failed", "topic", s[0], "subscription", s[1], "error", err)
				}
				waiting = true
				continue
			}
			progress = progress || moved
			waiting = waiting || full
		}
		if progress && ctx.Err() == nil {
			continue
		}
		var timer <-chan time.Time
		var t interface{ Stop() bool }
		if waiting {
			tm := b.clock.NewTimer(200 * time.Millisecond)
			timer, t = tm.C(), tm
		}
		select {
		case <-ctx.Done():
		case <-b.kickCopy:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// copyStep copies one batch of a subscription: plan under the lock, read without it,
// copy under it. moved reports whether its cursor moved; full whether its queue stopped it.
func (b *Broker) copyStep(ctx context.Context, topicName, name string) (moved, full bool, err error) {
	b.mu.Lock()
	plan, ok, err := b.t.PlanCopy(topicName, name, copyBatch)
	b.mu.Unlock()
	if err != nil || !ok {
		return false, false, err
	}
	recs, err := b.store.ReadTopic(plan.TopicID, plan.Partition, plan.From, plan.To, copyBatch, 4<<20)
	if err != nil && !errors.Is(err, payload.ErrRecordGone) {
		return false, false, err
	}
	if len(recs) == 0 {
		return false, false, nil // retention moved the partition on meanwhile: the next plan starts there
	}
	err = b.do(ctx, func(now int64) error {
		before, _ := b.t.Subscription(topicName, name)
		_, f, err := b.t.Copy(now, b.tsink, plan, recs)
		after, _ := b.t.Subscription(topicName, name)
		full = f
		moved = after.Lag < before.Lag
		b.paused[topicName+"/"+name] = f
		return err
	})
	return moved, full, err
}
