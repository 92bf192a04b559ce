package main

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
)

type consumersCmd struct{ app *app }

func (c *consumersCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("consumers", `
Usage: okiba consumers QUEUE [--json]

Lists the receivers of a queue that the server saw in the last minute, or that have a
long poll waiting or leases held: each by its client's name (the Go client sends
host/pid unless its Options.Name says otherwise), else by its principal and address,
with the interface it came by (http, stream, sqs), its long polls waiting and the
leases it holds. It is the memory of the node asked: not replicated, empty after a
restart; the queue's in-flight count is the truth about leases.`, `
okiba consumers orders
okiba consumers orders --json | jq '.consumers[].name'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "QUEUE [--json]")
	if err != nil {
		return err
	}
	l, err := cl.Consumers(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, l)
	}
	if len(l.Consumers) == 0 {
		fmt.Fprintf(c.app.Stdout, "no receivers of %s seen in the last %s (%d in flight)\n", l.Queue, age(time.Duration(l.WindowMS)*time.Millisecond), l.InFlight)
		return nil
	}
	w := tabwriter.NewWriter(c.app.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "CONSUMER\tPRINCIPAL\tADDRESS\tVIA\tLAST SEEN\tRECEIVES\tWAITING\tLEASES\t")
	now := time.Now()
	for _, x := range l.Consumers {
		leases := strconv.Itoa(x.Leases)
		if x.LeasesCapped {
			leases += "+"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s ago\t%d\t%d\t%s\t\n", cmp.Or(x.Name, "-"), cmp.Or(x.Principal, "-"), x.Remote, x.Via,
			age(now.Sub(x.LastSeen)), x.Receives, x.Waiting, leases)
	}
	w.Flush()
	fmt.Fprintf(c.app.Stdout, "%d in flight in %s\n", l.InFlight, l.Queue)
	return nil
}
