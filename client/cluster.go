package client

import (
	"context"
	"net/url"

	"github.com/okiba/okiba/api"
)

// ClusterMembers lists a cluster's members (admin permission).
func (c *Client) ClusterMembers(ctx context.Context) ([]api.ClusterMember, error) {
	var out api.ClusterMembers
	err := c.do(ctx, "GET", "/v1/cluster/members", nil, &out)
	return out.Members, err
}

// AddClusterMember adds a member as a learner, which the leader promotes once it has
// caught up, and returns the members (admin permission).
func (c *Client) AddClusterMember(ctx context.Context, name, memberURL string) ([]api.ClusterMember, error) {
	var out api.ClusterMembers
	err := c.do(ctx, "POST", "/v1/cluster/members", api.ClusterMember{Name: name, URL: memberURL}, &out)
	return out.Members, err
}

// RemoveClusterMember removes a member and returns the members (admin permission). On
// the leader's own removal it hands the lead over first and answers unavailable: ask
// again.
func (c *Client) RemoveClusterMember(ctx context.Context, name string) ([]api.ClusterMember, error) {
	var out api.ClusterMembers
	err := c.do(ctx, "DELETE", "/v1/cluster/members/"+url.PathEscape(name), nil, &out)
	return out.Members, err
}
