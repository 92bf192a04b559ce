package service

import (
	"context"
	"encoding/json"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/filter"
	"github.com/okiba/okiba/topic"
)

// Subscribe creates a subscription or changes its filter. Besides manage on the topic
// (the route's), it needs send on the queue it feeds.
func (s *Service) Subscribe(ctx context.Context, topicName, name string, in api.SubscriptionRequest) (api.Subscription, bool, *api.Error) {
	if in.Queue == "" {
		return api.Subscription{}, false, Invalid("queue is required: the queue the subscription feeds")
	}
	// The subscription sends the topic's records into its queue on the caller's behalf.
	if err := auth.Require(ctx, access.Send, access.QueueNamed(in.Queue)); err != nil {
		return api.Subscription{}, false, s.errorOf(err)
	}
	cfg := topic.SubscriptionConfig{Queue: in.Queue}
	switch in.FilterScope {
	case "", "attributes":
	case "body":
		cfg.Scope = filter.Body
	default:
		return api.Subscription{}, false, Invalid("filter_scope must be attributes or body, got %q", in.FilterScope)
	}
	if len(in.Filter) > 0 && string(in.Filter) != "null" {
		cfg.Filter = in.Filter
	}
	var start broker.SubStart
	n := 0
	switch in.Start {
	case "", "now":
	case "first":
		start.First = true
		n++
	default:
		return api.Subscription{}, false, Invalid("start must be now or first (or give start_time or start_offsets), got %q", in.Start)
	}
	if in.StartTime != nil {
		start.Time = in.StartTime
		n++
	}
	if in.StartOffset != nil {
		start.Offsets = in.StartOffset
		n++
	}
	if n > 1 {
		return api.Subscription{}, false, Invalid("give one of start, start_time and start_offsets")
	}
	si, created, err := s.b.Subscribe(ctx, topicName, name, cfg, start)
	if err != nil {
		return api.Subscription{}, false, s.errorOf(err)
	}
	return wireSubscription(si), created, nil
}

// Unsubscribe deletes a subscription.
func (s *Service) Unsubscribe(ctx context.Context, topicName, name string) *api.Error {
	if err := s.b.Unsubscribe(ctx, topicName, name); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// Subscription describes one subscription.
func (s *Service) Subscription(topicName, name string) (api.Subscription, *api.Error) {
	si, err := s.b.Subscription(topicName, name)
	if err != nil {
		return api.Subscription{}, s.errorOf(err)
	}
	return wireSubscription(si), nil
}

// Subscriptions lists a topic's subscriptions.
func (s *Service) Subscriptions(ctx context.Context, topicName string) ([]api.Subscription, *api.Error) {
	sis, err := s.b.Subscriptions(topicName)
	if err != nil {
		return nil, s.errorOf(err)
	}
	out := make([]api.Subscription, len(sis))
	for i, si := range sis {
		out[i] = wireSubscription(si)
	}
	return out, nil
}

func wireSubscription(si broker.SubscriptionInfo) api.Subscription {
	out := api.Subscription{Topic: si.Topic, Name: si.Name, Queue: si.Queue, FilterScope: si.Scope.String(),
		CreatedAt: time.UnixMilli(si.CreatedAt).UTC(), Cursors: si.Cursors, Lag: si.Lag, Paused: si.Paused,
		Delivered: si.Delivered, Filtered: si.Filtered, LostToRetention: si.LostToRetention}
	if len(si.Filter) > 0 {
		out.Filter = json.RawMessage(si.Filter)
	}
	return out
}
