package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
)

func subscriptionGroup(a *app) command {
	return &group{app: a, name: "subscription", usage: `
Usage: okiba subscription SUBCOMMAND TOPIC NAME [flags]

Manages subscriptions: a subscription feeds every record of a topic that its filter
passes into a queue, where it is an ordinary message (leases, dead letters, redrive).
A subscription that is caught up takes each record in the publish's own durable
record; one created from an earlier point copies in the background, then joins.` + clientHelp,
		subs: []entry{
			{"create", "subscribe a queue to a topic (or change the subscription's filter)", func(a *app, n string) command { return &subCreateCmd{app: a, name: n} }},
			{"get", "show a subscription's filter and progress", func(a *app, n string) command { return &subGetCmd{app: a, name: n} }},
			{"list", "list a topic's subscriptions", func(a *app, n string) command { return &subListCmd{app: a, name: n} }},
			{"delete", "delete a subscription", func(a *app, n string) command { return &subDeleteCmd{app: a, name: n} }},
		}}
}

type subCreateCmd struct {
	app  *app
	name string
}

func (c *subCreateCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba subscription create TOPIC NAME --queue QUEUE [--filter JSON] [--filter-scope attributes|body]
                                 [--start now|first | --start-time RFC3339]

Subscribes QUEUE (which must exist) to TOPIC under NAME. --filter is an SNS filter policy
(docs/filters.md) over the record's headers and key (okiba-key), or its JSON body with
--filter-scope body. --start first takes every retained record first; --start-time the
records published from then on; the default takes those published from now. On an
existing subscription, create changes the filter; the queue cannot change.`, `
okiba subscription create orders points --queue points --filter '{"type":["OrderPaid"]}'
okiba subscription create orders history --queue history --start first
okiba subscription create orders big --queue big --filter '{"total":[{"numeric":[">",100]}]}' --filter-scope body`)
	queueName := f.String("queue", "", "the `QUEUE` records go into (required)")
	filterJSON := f.String("filter", "", "an SNS filter `POLICY` (JSON); none takes every record")
	scope := f.String("filter-scope", "attributes", "what the filter matches: attributes (headers and key) or body (JSON)")
	start := f.String("start", "now", "where to start: now or first")
	startTime := f.String("start-time", "", "start at the first record published at or after `TIME` (RFC 3339)")
	asJSON := f.Bool("json", false, "print the subscription as the API's JSON")
	pos, err := f.parseArgs(args, 2, 2, "TOPIC NAME --queue QUEUE [flags]")
	if err != nil {
		return err
	}
	if *queueName == "" {
		return f.fail("--queue is required: the queue the subscription feeds")
	}
	req := api.SubscriptionRequest{Queue: *queueName, FilterScope: *scope, Start: *start}
	if *filterJSON != "" {
		if !json.Valid([]byte(*filterJSON)) {
			return f.fail("--filter is not JSON: give an SNS filter policy such as '{\"type\":[\"OrderPaid\"]}'")
		}
		req.Filter = json.RawMessage(*filterJSON)
	}
	if *startTime != "" {
		t, err := time.Parse(time.RFC3339, *startTime)
		if err != nil {
			return f.fail("--start-time %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", *startTime)
		}
		req.StartTime, req.Start = &t, ""
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	s, err := cl.Subscribe(ctx, pos[0], pos[1], req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, s)
	}
	fmt.Fprintf(c.app.Stdout, "subscription %s/%s feeds queue %s (%s behind)\n", s.Topic, s.Name, s.Queue, recordCount(s.Lag))
	return nil
}

type subGetCmd struct {
	app  *app
	name string
}

func (c *subGetCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba subscription get TOPIC NAME [--json]

Shows a subscription's queue, filter and progress: each partition's next offset to take,
how far behind it is, whether a full queue holds it back, and what it delivered,
passed over and lost to retention.`, `
okiba subscription get orders points`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 2, 2, "TOPIC NAME [--json]")
	if err != nil {
		return err
	}
	s, err := cl.Subscription(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, s)
	}
	printSubscription(c.app.Stdout, s)
	return nil
}

func printSubscription(out io.Writer, s *api.Subscription) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	filter := "(every record)"
	if len(s.Filter) > 0 {
		filter = string(s.Filter) + " on " + s.FilterScope
	}
	fmt.Fprintf(w, "Subscription\t%s/%s\n", s.Topic, s.Name)
	fmt.Fprintf(w, "Queue\t%s\n", s.Queue)
	fmt.Fprintf(w, "Filter\t%s\n", filter)
	fmt.Fprintf(w, "Created\t%s\n", s.CreatedAt.Format(time.RFC3339))
	state := "caught up"
	switch {
	case s.Lag > 0 && s.Paused:
		state = fmt.Sprintf("paused: %s behind, its queue is full", recordCount(s.Lag))
	case s.Lag > 0:
		state = fmt.Sprintf("copying: %s behind", recordCount(s.Lag))
	}
	fmt.Fprintf(w, "State\t%s\n", state)
	fmt.Fprintf(w, "Cursors\t%v\n", s.Cursors)
	fmt.Fprintf(w, "Delivered\t%d\nFiltered out\t%d\nLost to retention\t%d\n", s.Delivered, s.Filtered, s.LostToRetention)
	w.Flush()
}

type subListCmd struct {
	app  *app
	name string
}

func (c *subListCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba subscription list TOPIC [--json]

Lists a topic's subscriptions with their queue, lag and state.`, `
okiba subscription list orders`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "TOPIC [--json]")
	if err != nil {
		return err
	}
	subs, err := cl.Subscriptions(ctx, pos[0])
	if err != nil {
		return err
	}
	return printList(c.app, *asJSON, api.SubscriptionList{Subscriptions: subs}, subs, fmt.Sprintf("topic %s has no subscriptions", pos[0]), 0,
		"NAME\tQUEUE\tLAG\tPAUSED\tDELIVERED\tFILTERED\tLOST\tFILTER", func(s api.Subscription) string {
			filter := "-"
			if len(s.Filter) > 0 {
				filter = string(s.Filter)
			}
			return fmt.Sprintf("%s\t%s\t%d\t%v\t%d\t%d\t%d\t%s", s.Name, s.Queue, s.Lag, s.Paused, s.Delivered, s.Filtered, s.LostToRetention, filter)
		})
}

type subDeleteCmd struct {
	app  *app
	name string
}

func (c *subDeleteCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba subscription delete TOPIC NAME

Deletes a subscription. What it already put into its queue stays there.`, `
okiba subscription delete orders points`)
	pos, cl, err := f.clientArgs(args, 2, 2, "TOPIC NAME")
	if err != nil {
		return err
	}
	if err := cl.Unsubscribe(ctx, pos[0], pos[1]); err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "deleted subscription %s/%s\n", pos[0], pos[1])
	return nil
}

// recordCount says n records, in the singular for one.
func recordCount(n uint64) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}
