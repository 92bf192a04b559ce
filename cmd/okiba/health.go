package main

import (
	"context"
	"fmt"
)

// healthCmd is okiba health: an exit status for containers' health checks and systemd.
type healthCmd struct{ app *app }

func (c *healthCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("health", `
Usage: okiba health [--server URL] [--json]

Asks the server's /healthz and exits 0 when it serves — "ok", or "degraded" with the
reason (it serves, and its operators should look) — and 1 when it does not answer or
answers that it has failed. /healthz needs no token. For a container's HEALTHCHECK or a
systemd ExecStartPost.`, `
okiba health
okiba health --server https://broker.internal:7070 --ca-cert /etc/okiba/ca.pem`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	_, cl, err := f.clientArgs(args, 0, 0, "[--json]")
	if err != nil {
		return err
	}
	h, err := cl.HealthStatus(ctx)
	if err != nil {
		return fmt.Errorf("%s does not serve: %w", cl.Server(), err)
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, h)
	}
	if h.Reason != "" {
		fmt.Fprintf(c.app.Stdout, "%s: %s\n", h.Status, h.Reason)
		return nil
	}
	fmt.Fprintln(c.app.Stdout, h.Status)
	return nil
}
