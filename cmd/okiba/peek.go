package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// peekCmd is okiba peek: a look at a queue's messages that leases nothing, so that it
// can be run against a queue in production without delaying its consumers.
type peekCmd struct{ app *app }

func (c *peekCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("peek", `
Usage: okiba peek QUEUE [--limit N] [--state STATE | --deferred] [--json]

Lists QUEUE's messages in arrival order without leasing them: nothing is delivered,
nothing waits longer, and no delivery is counted. Each row shows the id, the state (ready,
delayed until, in flight until, or deferred), the deliveries so far, the group, when it was enqueued
and the start of the body. --json prints the API's message objects, one a line, with the
whole body. Needs the browse permission on the queue.`, `
okiba peek orders
okiba peek orders --state ready --limit 1000 --json | jq -r .body
okiba peek orders --state in_flight
okiba peek orders --deferred`)
	limit := f.Int("limit", 100, "show at most `N` messages")
	state := f.String("state", "", "only messages in this `STATE`: ready, delayed, in_flight or deferred (default all)")
	deferred := f.Bool("deferred", false, "only deferred messages (okiba defer; fetch them with okiba fetch): --state deferred")
	asJSON := f.Bool("json", false, "print one JSON object per message and line (the API's message objects)")
	pos, err := f.parseArgs(args, 1, 1, "QUEUE [--limit N] [--state STATE | --deferred] [--json]")
	if err != nil {
		return err
	}
	if *limit < 1 {
		return f.fail("--limit must be at least 1, got %d", *limit)
	}
	if *deferred {
		if *state != "" && *state != "deferred" {
			return f.fail("--deferred is --state deferred: give one of them")
		}
		*state = "deferred"
	}
	var states []string
	switch *state {
	case "":
	case "ready", "delayed", "in_flight", "deferred":
		states = []string{*state}
	default:
		return f.fail("--state must be ready, delayed, in_flight or deferred, got %q", *state)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	var msgs []api.Message
	for after := ""; len(msgs) < *limit; {
		page, err := cl.Peek(ctx, pos[0], client.PeekOptions{After: after, Limit: min(*limit-len(msgs), api.MaxBatch), States: states})
		if err != nil {
			return err
		}
		msgs = append(msgs, page.Messages...)
		if after = page.Next; after == "" {
			break
		}
	}
	if *asJSON {
		for _, m := range msgs {
			if err := printJSON(a.Stdout, m); err != nil {
				return err
			}
		}
		return nil
	}
	if len(msgs) == 0 {
		fmt.Fprintln(a.Stderr, "no messages")
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tDELIVERIES\tGROUP\tENQUEUED\tBODY")
	for _, m := range msgs {
		body, _ := client.Body(m)
		st := m.State
		if m.VisibleAt != nil && st != "ready" {
			st += " (" + age(m.VisibleAt.Sub(now)) + " more)"
		}
		group := "-"
		if m.Group != "" {
			group = printable(m.Group)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s ago\t%s\n", m.ID, st, m.Deliveries, group, age(now.Sub(m.EnqueuedAt)), preview(body, 40))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(msgs) == *limit {
		fmt.Fprintf(a.Stderr, "showing the first %d; see more with --limit\n", len(msgs))
	}
	return nil
}
