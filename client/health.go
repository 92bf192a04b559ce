package client

import (
	"context"

	"github.com/okiba/okiba/api"
)

// HealthStatus returns the server's health as /healthz answers it: "ok", or "degraded"
// (it serves; Reason says what is wrong). A server that does not serve answers an error.
func (c *Client) HealthStatus(ctx context.Context) (api.Health, error) {
	var h api.Health
	err := c.do(ctx, "GET", "/healthz", nil, &h)
	return h, err
}
