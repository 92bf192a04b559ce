package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/okiba/okiba/api"
)

// explainCmd is okiba explain: why a message is, or is not, being delivered now.
type explainCmd struct{ app *app }

func (c *explainCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("explain", `
Usage: okiba explain QUEUE ID [--json]
       okiba explain QUEUE --dedup-id DEDUP_ID [--group GROUP] [--json]

Says in words, then in fields, why a message is or is not being delivered now: ready and
next in line or behind N others, delayed until, leased until (by which delivery),
waiting behind its ordered group's head, deferred (since when; okiba fetch takes it),
dead-lettered (why, when, where to), gone
(acked, purged, deleted, expired, redriven: the broker remembers the last 256 messages
each queue settled), or deduplicated into another message (by dedup id). With what the
broker keeps of its history: deliveries, first and last delivery, nacks and the last
nack's delay, the handler's last error. Reads only; needs the browse permission.`, `
okiba explain orders 0190a4c2e3f40001
okiba explain orders --dedup-id order-7
okiba explain orders 0190a4c2e3f40001 --json | jq .state`)
	dedup := f.String("dedup-id", "", "explain by `DEDUP_ID` instead of a message id")
	grp := f.String("group", "", "the `GROUP` of --dedup-id, on a queue whose dedup scope is the group")
	asJSON := f.Bool("json", false, "print the API's explanation object")
	min := 2
	if dedupGiven(args) {
		min = 1
	}
	pos, err := f.parseArgs(args, min, 2, "QUEUE ID [--json]")
	if err != nil {
		return err
	}
	if len(pos) == 2 && *dedup != "" {
		return f.fail("give a message ID or --dedup-id, not both")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	var ex *api.Explanation
	if *dedup != "" {
		ex, err = cl.ExplainDedup(ctx, pos[0], *dedup, *grp)
	} else {
		ex, err = cl.Explain(ctx, pos[0], pos[1])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(a.Stdout, ex)
	}
	printExplanation(a.Stdout, ex)
	return nil
}

// dedupGiven says whether args hold --dedup-id, which makes the ID optional.
func dedupGiven(args []string) bool {
	for _, a := range args {
		if a == "--dedup-id" || a == "-dedup-id" || len(a) > 11 && (a[:11] == "--dedup-id=" || a[:10] == "-dedup-id=") {
			return true
		}
	}
	return false
}

func printExplanation(w io.Writer, ex *api.Explanation) {
	fmt.Fprintln(w, ex.Summary)
	row := func(k string, v any) { fmt.Fprintf(w, "  %-18s %v\n", k, v) }
	row("state", ex.State)
	if ex.ID != "" {
		row("id", ex.ID)
	}
	if ex.Group != "" {
		row("group", ex.Group)
	}
	if ex.Ahead != nil {
		n := fmt.Sprint(*ex.Ahead)
		if !ex.AheadExact {
			n = "at least " + n
		}
		row("ahead", n)
	}
	if ex.Until != nil {
		row("until", ex.Until.Format(time.RFC3339Nano))
	}
	if ex.Delivery != 0 {
		row("delivery", ex.Delivery)
	}
	if b := ex.Blocker; b != nil {
		row("waiting for", b.ID+" ("+b.State+")")
	}
	if ex.At != nil {
		label := "at"
		if ex.State == "deferred" {
			label = "deferred since"
		}
		row(label, ex.At.Format(time.RFC3339Nano))
	}
	if ex.How != "" {
		row("how", ex.How)
	}
	if ex.To != "" {
		row("to", ex.To)
	}
	if d := ex.DeadLetter; d != nil {
		row("dead letter", fmt.Sprintf("from %s, reason %s, %s", d.Source, d.Reason, d.At.Format(time.RFC3339)))
		if d.Description != "" {
			row("description", d.Description)
		}
	}
	if ex.Into != "" {
		row("duplicate of", ex.Into)
	}
	if h := ex.History; h != nil {
		row("deliveries", h.Deliveries)
		if h.FirstDeliveredAt != nil {
			row("first delivered", h.FirstDeliveredAt.Format(time.RFC3339Nano))
		}
		if h.LastDeliveredAt != nil {
			row("last delivered", h.LastDeliveredAt.Format(time.RFC3339Nano))
		}
		if h.Nacks > 0 {
			row("nacks", fmt.Sprintf("%d (last delay %v)", h.Nacks, h.LastNackDelay.D()))
		}
		if h.LastError != "" {
			row("last error", h.LastError)
		}
	}
}
