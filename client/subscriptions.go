package client

import (
	"context"
	"net/url"

	"github.com/okiba/okiba/api"
)

// Subscriptions: a subscription feeds a topic's records into a queue (docs/api.md
// "Subscriptions").

// Subscribe creates a subscription (or changes its filter): records of topic that pass
// the filter go into req.Queue.
func (c *Client) Subscribe(ctx context.Context, topic, name string, req api.SubscriptionRequest) (*api.Subscription, error) {
	var s api.Subscription
	if err := c.do(ctx, "PUT", tpath(topic, "subscriptions", url.PathEscape(name)), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Subscription returns one subscription with its progress.
func (c *Client) Subscription(ctx context.Context, topic, name string) (*api.Subscription, error) {
	var s api.Subscription
	if err := c.do(ctx, "GET", tpath(topic, "subscriptions", url.PathEscape(name)), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Subscriptions lists a topic's subscriptions.
func (c *Client) Subscriptions(ctx context.Context, topic string) ([]api.Subscription, error) {
	var l api.SubscriptionList
	if err := c.do(ctx, "GET", tpath(topic, "subscriptions"), nil, &l); err != nil {
		return nil, err
	}
	return l.Subscriptions, nil
}

// Unsubscribe deletes a subscription; what it put into its queue stays there.
func (c *Client) Unsubscribe(ctx context.Context, topic, name string) error {
	return c.do(ctx, "DELETE", tpath(topic, "subscriptions", url.PathEscape(name)), nil, nil)
}
