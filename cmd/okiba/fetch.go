package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// fetchCmd is okiba fetch: deferred messages taken again by id (okiba defer set them
// aside), each under a new lease.
type fetchCmd struct{ app *app }

func (c *fetchCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("fetch", `
Usage: okiba fetch QUEUE ID... [--visibility D] [--json]

Fetches deferred messages by id (okiba defer set them aside; okiba peek --deferred lists
them) and leases each for --visibility: they are printed as okiba recv prints, with a
receipt to ack, nack or defer again. Each fetch counts a delivery, and max_deliveries
applies; a nack, or a lease that ends, returns the message to deferred. An id that names no
deferred message of the queue answers not_deferred. ID "-" reads ids from stdin, one per
line. The exit status is 1 if any id failed.`, `
okiba fetch orders 6889c50bd0c00001
okiba peek orders --deferred --json | jq -r .id | okiba fetch orders - --json`)
	vis := f.Duration("visibility", 0, "lease length, 0..12h (default the queue's visibility_timeout)")
	asJSON := f.Bool("json", false, "print one JSON object per message and line (as okiba recv --json)")
	pos, err := f.parseArgs(args, 2, -1, "QUEUE ID... [flags]")
	if err != nil {
		return err
	}
	ids, err := readIDs(pos[1:], a.Stdin)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return f.fail("no ids given (stdin was empty)")
	}
	var visibility *time.Duration
	if f.given()["visibility"] {
		visibility = vis
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	queue := pos[0]
	failed, printed := 0, 0
	for start := 0; start < len(ids); start += api.MaxBatch {
		batch := ids[start:min(start+api.MaxBatch, len(ids))]
		res, err := cl.ReceiveDeferred(ctx, queue, visibility, batch...)
		if err != nil {
			if start > 0 {
				fmt.Fprintf(a.Stderr, "okiba fetch: the first %d ids were fetched as shown\n", start)
			}
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				failed++
				var e *api.Error
				if errors.As(r.Err, &e) && e.Code == api.CodeNotDeferred {
					fmt.Fprintf(a.Stderr, "okiba fetch: %s: not deferred in %s (see okiba peek %s --deferred)\n", r.ID, queue, queue)
				} else {
					fmt.Fprintf(a.Stderr, "okiba fetch: %s: %v\n", r.ID, r.Err)
				}
				continue
			}
			if *asJSON {
				if err := printJSON(a.Stdout, toJSON(r.Delivery)); err != nil {
					return err
				}
			} else {
				if printed > 0 {
					fmt.Fprintln(a.Stdout)
				}
				printDelivery(a.Stdout, r.Delivery)
			}
			printed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}
