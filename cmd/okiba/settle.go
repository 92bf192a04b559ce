package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
)

// settleCmd is ack, nack, extend, deadletter and defer: one receipt operation on a list of
// receipts, with a result per receipt.
type settleCmd struct {
	app *app
	op  string
}

func newSettle(a *app, name string) command { return &settleCmd{app: a, op: name} }

var settleHelp = map[string]struct{ usage, examples, done string }{
	"ack": {`
Usage: okiba ack QUEUE RECEIPT... [flags]

Acks (settles) received messages: they are removed from the queue for good.`, `
okiba ack orders AAEAAAAB…
okiba recv orders --max 10 --json | jq -r .receipt | okiba ack orders -`, "acked"},
	"nack": {`
Usage: okiba nack QUEUE RECEIPT... [--delay D] [--error TEXT] [flags]

Releases received messages for redelivery: visible again after --delay, or after the
queue's backoff (random, growing with the delivery count) when --delay is not given.
A message whose deliveries reach the queue's max_deliveries is dead-lettered instead.
--error records why the handler failed (up to 1024 bytes) with the message: okiba explain
shows it, and it becomes the dead letter's description if this was the last delivery.`, `
okiba nack orders AAEAAAAB…
okiba nack orders AAEAAAAB… --delay 0s
okiba nack orders AAEAAAAB… --error 'payment gateway timed out'`, "nacked"},
	"extend": {`
Usage: okiba extend QUEUE RECEIPT... --visibility D [flags]

Sets the leases of received messages to end --visibility from now (shorter or longer
than before); the receipts stay valid.`, `
okiba extend orders AAEAAAAB… --visibility 5m`, "extended"},
	"deadletter": {`
Usage: okiba deadletter QUEUE RECEIPT... --reason R [--description D] [flags]

Moves received messages to the queue's dead-letter queue at once, recording the reason
(and description) with them; see them with okiba dlq list.`, `
okiba deadletter orders AAEAAAAB… --reason invalid-json --description 'unexpected EOF at byte 17'`, "dead-lettered"},
	"defer": {`
Usage: okiba defer QUEUE RECEIPT... [flags]

Sets received messages aside: their leases end, no receive returns them, and only okiba
fetch, by id, takes them again (okiba peek QUEUE --deferred lists them). A message keeps
its id, delivery count and retention: a deferred message past the queue's retention goes
to the dead-letter queue (reason expired). In an ordered group, deferring the head lets
the group move on.`, `
okiba defer orders AAEAAAAB…
okiba fetch orders 6889c50bd0c00001`, "deferred"},
}

func (c *settleCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	h := settleHelp[c.op]
	f := a.serverFlags(c.op, h.usage+`

RECEIPT "-" reads receipts from stdin, one per line. Each receipt gets its own result;
a stale receipt (receipt_stale: its lease ended, or the message was settled or
redelivered) changes nothing. The exit status is 1 if any receipt failed.`, h.examples)
	var (
		delay, vis                      *time.Duration
		reason, description, handlerErr *string
	)
	switch c.op {
	case "nack":
		delay = f.Duration("delay", 0, "visible again after this long (default the queue's backoff)")
		handlerErr = f.String("error", "", "why the handler failed, `TEXT` recorded with the message (up to 1024 bytes)")
	case "extend":
		vis = f.Duration("visibility", 0, "required: the lease's new length from now, 0..12h")
	case "deadletter":
		reason = f.String("reason", "", "required: `REASON` recorded with the dead letter (up to 128 bytes)")
		description = f.String("description", "", "`TEXT` recorded with the dead letter (up to 1024 bytes)")
	}
	asJSON := f.Bool("json", false, `print one JSON object per receipt: {"receipt","ok","error"}`)
	pos, err := f.parseArgs(args, 2, -1, "QUEUE RECEIPT... [flags]")
	if err != nil {
		return err
	}
	given := f.given()
	if c.op == "extend" && !given["visibility"] {
		return f.fail("--visibility is required: the lease's new length from now, such as --visibility 5m")
	}
	if c.op == "deadletter" && *reason == "" {
		return f.fail("--reason is required, such as --reason invalid-payload")
	}
	queue := pos[0]
	var receipts []string
	for _, r := range pos[1:] {
		if r != "-" {
			receipts = append(receipts, r)
			continue
		}
		lines, err := readLines(a.Stdin)
		if err != nil {
			return fmt.Errorf("read receipts from stdin: %w", err)
		}
		receipts = append(receipts, lines...)
	}
	if len(receipts) == 0 {
		return f.fail("no receipts given (stdin was empty)")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	if !given["delay"] {
		delay = nil // nack: the queue's backoff
	} else if err := checkDelay(f, *delay); err != nil {
		return err
	}
	failed := 0
	for start := 0; start < len(receipts); start += api.MaxBatch {
		batch := receipts[start:min(start+api.MaxBatch, len(receipts))]
		var errs []error
		switch c.op {
		case "ack":
			errs, err = cl.Ack(ctx, queue, batch...)
		case "nack":
			errs, err = cl.NackError(ctx, queue, delay, *handlerErr, batch...)
		case "extend":
			errs, err = cl.Extend(ctx, queue, *vis, batch...)
		case "deadletter":
			errs, err = cl.DeadLetter(ctx, queue, *reason, *description, batch...)
		case "defer":
			errs, err = cl.Defer(ctx, queue, batch...)
		}
		if err != nil {
			if start > 0 {
				fmt.Fprintf(a.Stderr, "okiba %s: the first %d receipts were processed as shown\n", c.op, start)
			}
			return err
		}
		for i, e := range errs {
			if e != nil {
				failed++
			}
			c.report(batch[i], e, *asJSON)
		}
	}
	if len(receipts) > 1 && !*asJSON {
		fmt.Fprintf(a.Stdout, "%s %d of %d\n", h.done, len(receipts)-failed, len(receipts))
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// report prints one receipt's result: successes on stdout, failures on stderr.
func (c *settleCmd) report(receipt string, err error, asJSON bool) {
	a := c.app
	if asJSON {
		out := struct {
			Receipt string     `json:"receipt"`
			OK      bool       `json:"ok"`
			Error   *api.Error `json:"error,omitempty"`
		}{Receipt: receipt, OK: err == nil}
		if err != nil && !errors.As(err, &out.Error) {
			out.Error = &api.Error{Code: api.CodeInternal, Message: err.Error()}
		}
		_ = printJSON(a.Stdout, out)
		return
	}
	if err != nil {
		fmt.Fprintf(a.Stderr, "okiba %s: %s: %v\n", c.op, short(receipt), err)
		return
	}
	fmt.Fprintf(a.Stdout, "%s %s\n", settleHelp[c.op].done, short(receipt))
}
