package client

import (
	"context"
	"net/url"
	"time"

	"github.com/okiba/okiba/api"
)

// Principals: who may call the server and what each may do (docs/api.md "Principals").
// Every call needs a client whose token is an admin's.

func ppath(name string, rest ...string) string {
	p := "/v1/principals/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreatePrincipal makes a principal with grants such as "send queue:orders-*" and
// returns it with its secret, which the server shows this once: keep it.
func (c *Client) CreatePrincipal(ctx context.Context, name string, grants ...string) (*api.IssuedSecret, error) {
	var out api.IssuedSecret
	if err := c.do(ctx, "POST", "/v1/principals", api.CreatePrincipalRequest{Name: name, Grants: grants}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Principals lists the principals: those made through the API, then those declared in
// the server's configuration (Declared). No secret is shown.
func (c *Client) Principals(ctx context.Context) ([]api.Principal, error) {
	var l api.PrincipalList
	if err := c.do(ctx, "GET", "/v1/principals", nil, &l); err != nil {
		return nil, err
	}
	return l.Principals, nil
}

// Principal returns one principal, without its secrets.
func (c *Client) Principal(ctx context.Context, name string) (*api.Principal, error) {
	var p api.Principal
	if err := c.do(ctx, "GET", ppath(name), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// DeletePrincipal removes a principal; its secrets stop working at once. Declared
// principals are the configuration's to remove.
func (c *Client) DeletePrincipal(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", ppath(name), nil, nil)
}

// GrantPrincipal adds grants to a principal and returns it as it now is; they take
// effect on its next request.
func (c *Client) GrantPrincipal(ctx context.Context, name string, grants ...string) (*api.Principal, error) {
	return c.changeGrants(ctx, name, "grant", grants)
}

// RevokePrincipal removes grants from a principal (one it does not hold is no error)
// and returns it as it now is.
func (c *Client) RevokePrincipal(ctx context.Context, name string, grants ...string) (*api.Principal, error) {
	return c.changeGrants(ctx, name, "revoke", grants)
}

func (c *Client) changeGrants(ctx context.Context, name, op string, grants []string) (*api.Principal, error) {
	var p api.Principal
	if err := c.do(ctx, "POST", ppath(name, op), api.GrantsRequest{Grants: grants}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// RotatePrincipal gives a principal a new secret and returns it; the current secrets
// stay valid for keep more, so that its programs can move to the new one (0 ends them
// now). A negative keep asks for the server's default, a day (api.DefaultRotateKeep).
func (c *Client) RotatePrincipal(ctx context.Context, name string, keep time.Duration) (*api.IssuedSecret, error) {
	var req api.RotateRequest
	if keep >= 0 {
		req.Keep = api.Ptr(keep)
	}
	var out api.IssuedSecret
	if err := c.do(ctx, "POST", ppath(name, "rotate"), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
