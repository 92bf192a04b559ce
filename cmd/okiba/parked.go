package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"
)

// parkedCmd is okiba parked: a queue's parked groups (on_dead_letter park_group).
type parkedCmd struct{ app *app }

func (c *parkedCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("parked", `
Usage: okiba parked QUEUE [--json]

Lists the ordered groups of a queue that wait for a dead letter (the queue's
on_dead_letter is park_group): each with its blocking dead letter, the dead-letter queue
that holds it, since when, and how many of the group's messages wait. A group is
released when that dead letter is redriven back (it goes first), by okiba release, or
when the dead letter leaves its dead-letter queue otherwise (the server logs it).`, `
okiba parked orders
okiba parked orders --json | jq '.[].blocker'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "QUEUE [--json]")
	if err != nil {
		return err
	}
	ps, err := cl.Parked(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, ps)
	}
	if len(ps) == 0 {
		fmt.Fprintf(c.app.Stdout, "no parked groups in %s\n", pos[0])
		return nil
	}
	w := tabwriter.NewWriter(c.app.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP\tBLOCKED BY\tIN\tSINCE\tWAITING\t")
	for _, p := range ps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t\n", p.Group, p.Blocker, p.DeadLetterQueue, p.Since.Format(time.RFC3339), p.Messages)
	}
	w.Flush()
	return nil
}

// releaseCmd is okiba release: a parked group released by hand.
type releaseCmd struct{ app *app }

func (c *releaseCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("release", `
Usage: okiba release QUEUE GROUP

Releases a parked group by hand: its messages are delivered again, in order, and its
blocking dead letter stays in the dead-letter queue (redriven later, it joins the
group's tail). A group that is not parked is refused (not_parked).`, `
okiba release orders customer-7`)
	pos, cl, err := f.clientArgs(args, 2, 2, "QUEUE GROUP")
	if err != nil {
		return err
	}
	if err := cl.ReleaseGroup(ctx, pos[0], pos[1]); err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "released group %s of %s\n", pos[1], pos[0])
	return nil
}
