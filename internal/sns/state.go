package sns

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/topic"
)

// What SNS keeps of a topic or a subscription that okiba's own topics and
// subscriptions do not (RawMessageDelivery, RedrivePolicy, DisplayName, Policy, …) is
// kept in the reserved okiba topic okiba-sns: one record per change, keyed by the
// object (t/<topic> or s/<topic>/<subscription>), whose body is the object's whole set
// of attributes with the identity of the okiba object it belongs to (the topic's id and
// the subscription's creation time), so that a topic deleted and created again under
// the same name starts with none. A record is published (durably, replicated with the
// log) before the change is answered; each front reads the topic forward to its end
// before it reads attributes, so every node and every restart sees the latest record of
// each object. The topic keeps every record (retention forever): changes of attributes
// are rare and small. The SNS front hides it from ListTopics and refuses to create it.

// stateTopic is the reserved topic.
const stateTopic = "okiba-sns"

// stored is one object's attributes.
type stored struct {
	TopicID uint64            `json:"topic_id"`
	Created int64             `json:"created,omitempty"` // a subscription's creation time (Unix ms)
	Attrs   map[string]string `json:"attrs"`
}

// store is a front's reading of the state topic.
type store struct {
	mu      sync.Mutex
	topicID uint64 // the state topic's id as read; another id is another topic, read anew
	next    uint64
	objs    map[string]stored
}

func newStore() *store { return &store{objs: map[string]stored{}} }

// syncLocked reads the state topic forward to its end.
func (f *Front) syncLocked(ctx context.Context) error {
	s := f.state
	ti, err := f.b.Topic(stateTopic)
	if errors.Is(err, topic.ErrTopicNotFound) {
		s.topicID, s.next, s.objs = 0, 0, map[string]stored{}
		return nil
	}
	if err != nil {
		return err
	}
	if ti.ID != s.topicID {
		s.topicID, s.next, s.objs = ti.ID, ti.Partitions[0].Start, map[string]stored{}
	}
	for s.next < ti.Partitions[0].End {
		rd, err := f.b.ReadTopic(ctx, stateTopic, broker.ReadOptions{Offset: s.next, Max: broker.MaxReadMax})
		if err != nil {
			return err
		}
		if len(rd.Records) == 0 {
			break
		}
		for _, r := range rd.Records {
			var v stored
			if json.Unmarshal(r.Body, &v) == nil {
				s.objs[string(r.Key)] = v
			}
			s.next = r.Offset + 1
		}
	}
	return nil
}

// attrs returns the attributes kept for key of the okiba object (topicID, created),
// or none.
func (f *Front) attrs(ctx context.Context, key string, topicID uint64, created int64) (map[string]string, error) {
	f.state.mu.Lock()
	defer f.state.mu.Unlock()
	if err := f.syncLocked(ctx); err != nil {
		return nil, err
	}
	v, ok := f.state.objs[key]
	if !ok || v.TopicID != topicID || v.Created != created {
		return map[string]string{}, nil
	}
	return maps.Clone(v.Attrs), nil
}

// putAttrs keeps attrs as the attributes of key, durably, creating the state topic
// the first time.
func (f *Front) putAttrs(ctx context.Context, key string, topicID uint64, created int64, attrs map[string]string) error {
	body, err := json.Marshal(stored{TopicID: topicID, Created: created, Attrs: attrs})
	if err != nil {
		return err
	}
	if _, err := f.b.Topic(stateTopic); errors.Is(err, topic.ErrTopicNotFound) {
		if _, _, err := f.b.PutTopic(ctx, stateTopic, func(cfg *topic.Config, exists bool) error {
			if !exists {
				cfg.RetentionAge = 0 // forever
				cfg.DedupWindow = 0
				cfg.SegmentAge = 30 * 24 * time.Hour
			}
			return nil
		}); err != nil {
			return err
		}
	}
	res, err := f.b.Publish(ctx, stateTopic, []topic.PublishInput{{Key: []byte(key), HasKey: true, Body: body, Partition: topic.AnyPartition}})
	if err != nil {
		return err
	}
	return res[0].Err
}

func topicKey(name string) string         { return "t/" + name }
func subKey(topicName, sub string) string { return "s/" + topicName + "/" + sub }
