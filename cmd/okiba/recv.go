package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

type recvCmd struct{ app *app }

// recvJSON is one line of recv --json.
type recvJSON struct {
	Queue   string `json:"queue"`
	ID      string `json:"id"`
	Receipt string `json:"receipt"`
	// Body is the body as text; a body that is not UTF-8 has its invalid bytes replaced
	// here and comes exactly in BodyBase64.
	Body             string            `json:"body"`
	BodyBase64       string            `json:"body_base64,omitempty"`
	Group            string            `json:"group"`
	DedupID          string            `json:"dedup_id,omitempty"`
	Headers          map[string]string `json:"headers"`
	Deliveries       uint32            `json:"deliveries"`
	EnqueuedAt       time.Time         `json:"enqueued_at"`
	FirstDeliveredAt *time.Time        `json:"first_delivered_at,omitempty"`
	LeaseDeadline    *time.Time        `json:"lease_deadline,omitempty"` // none after --delete
	DeadLetter       *api.DeadLetter   `json:"dead_letter,omitempty"`
}

func toJSON(d client.Delivery) recvJSON {
	out := recvJSON{
		Queue: d.Queue, ID: d.ID, Receipt: d.Receipt, Group: d.Group, DedupID: d.DedupID,
		Headers: d.Headers, Deliveries: d.Deliveries, EnqueuedAt: d.EnqueuedAt, DeadLetter: d.DeadLetter,
	}
	if !d.LeaseDeadline.IsZero() {
		t := d.LeaseDeadline
		out.LeaseDeadline = &t
	}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if utf8.Valid(d.Body) {
		out.Body = string(d.Body)
	} else {
		out.Body = strings.ToValidUTF8(string(d.Body), "\uFFFD")
		out.BodyBase64 = base64.StdEncoding.EncodeToString(d.Body)
	}
	if !d.FirstDeliveredAt.IsZero() {
		t := d.FirstDeliveredAt
		out.FirstDeliveredAt = &t
	}
	return out
}

func (c *recvCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("recv", `
Usage: okiba recv QUEUE [--max N] [--wait D] [--visibility D] [--ack | --delete] [--json]

Receives up to --max messages, leasing them for --visibility: until the lease ends the
messages go to no one else; settle each with its receipt (okiba ack, nack, extend,
deadletter) or it is redelivered when the lease ends. With --ack the messages are acked
right after they are printed.

With --delete it is a receive-and-delete: the server settles the messages as it returns
them, in one durable record, so there are no receipts and no lease. At-most-once, on
purpose: if the answer is lost (the connection breaks, this process dies before printing)
the messages are lost too; okiba recv never repeats such a call.

--json prints one JSON object per line with queue, id, receipt, body, group, headers,
deliveries, enqueued_at, lease_deadline (and first_delivered_at, dedup_id, dead_letter
when set). body is the text; a body that is not valid UTF-8 also comes exactly as
body_base64. Without messages, nothing is printed on stdout and the exit status is 0.`, `
okiba recv orders
okiba recv orders --max 10 --wait 20s --visibility 2m
okiba recv orders --json | jq -r .receipt | okiba ack orders -
okiba recv orders --ack --json > drained.jsonl
okiba recv telemetry --max 100 --delete --json`)
	maxN := f.Int("max", 1, "receive up to `N` messages, 1..1000")
	wait := f.Duration("wait", 0, "long-poll up to this long for messages, 0..60s (default the queue's receive_wait)")
	vis := f.Duration("visibility", 0, "lease length, 0..12h (default the queue's visibility_timeout)")
	ack := f.Bool("ack", false, "ack the received messages after printing them")
	del := f.Bool("delete", false, "receive-and-delete: settled as they are returned, no receipts (at-most-once)")
	asJSON := f.Bool("json", false, "print one JSON object per message and line")
	pos, err := f.parseArgs(args, 1, 1, "QUEUE [flags]")
	if err != nil {
		return err
	}
	if *maxN < 1 || *maxN > api.MaxBatch {
		return f.fail("--max must be between 1 and %d, got %d", api.MaxBatch, *maxN)
	}
	given := f.given()
	if *del && (*ack || given["visibility"]) {
		return f.fail("--delete settles the messages as they are received: it takes neither --ack nor --visibility")
	}
	opts := client.ReceiveOptions{Max: *maxN, Delete: *del}
	if given["wait"] {
		if *wait < 0 || *wait > api.MaxWait {
			return f.fail("--wait must be between 0s and 60s, got %v", *wait)
		}
		opts.Wait = wait
	}
	if given["visibility"] {
		opts.Visibility = vis
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	queue := pos[0]
	ds, err := cl.Receive(ctx, queue, opts)
	if err != nil {
		return err
	}
	for i, d := range ds {
		if *asJSON {
			if err := printJSON(a.Stdout, toJSON(d)); err != nil {
				return err
			}
		} else {
			if i > 0 {
				fmt.Fprintln(a.Stdout)
			}
			printDelivery(a.Stdout, d)
		}
	}
	if len(ds) == 0 && !*asJSON {
		fmt.Fprintln(a.Stderr, "no messages")
	}
	if !*ack || len(ds) == 0 {
		return nil
	}
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
	}
	errs, err := cl.Ack(ctx, queue, receipts...)
	if err != nil {
		return fmt.Errorf("ack after receive: %w", err)
	}
	failed := 0
	for i, e := range errs {
		if e != nil {
			failed++
			fmt.Fprintf(a.Stderr, "okiba recv: ack of message %s failed: %v\n", ds[i].ID, e)
		}
	}
	if !*asJSON {
		fmt.Fprintf(a.Stdout, "acked %d of %d\n", len(ds)-failed, len(ds))
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// printDelivery writes one received message for a person to read.
func printDelivery(w io.Writer, d client.Delivery) {
	fmt.Fprintf(w, "message %s (delivery %d", d.ID, d.Deliveries)
	if d.Group != "" {
		fmt.Fprintf(w, ", group %s", printable(d.Group))
	}
	fmt.Fprintln(w, ")")
	now := time.Now()
	if d.Receipt == "" {
		fmt.Fprintf(w, "  receipt:   none (received and deleted)\n")
	} else {
		fmt.Fprintf(w, "  receipt:   %s\n", d.Receipt)
	}
	fmt.Fprintf(w, "  enqueued:  %s (%s ago)\n", d.EnqueuedAt.Format(time.RFC3339), age(now.Sub(d.EnqueuedAt)))
	if !d.LeaseDeadline.IsZero() {
		fmt.Fprintf(w, "  leased to: %s (%s from now)\n", d.LeaseDeadline.Format(time.RFC3339), age(d.LeaseDeadline.Sub(now)))
	}
	if d.DedupID != "" {
		fmt.Fprintf(w, "  dedup id:  %s\n", printable(d.DedupID))
	}
	if dl := d.DeadLetter; dl != nil {
		fmt.Fprintf(w, "  dead letter from %s: %s", dl.Source, printable(dl.Reason))
		if dl.Description != "" {
			fmt.Fprintf(w, " (%s)", printable(dl.Description))
		}
		fmt.Fprintf(w, " after %d deliveries, at %s\n", dl.Deliveries, dl.At.Format(time.RFC3339))
	}
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Fprintf(w, "  header:    %s=%s\n", printable(k), printable(d.Headers[k]))
	}
	if utf8.Valid(d.Body) {
		fmt.Fprintf(w, "  body (%d bytes):\n%s\n", len(d.Body), indentBody(printable(string(d.Body))))
	} else {
		fmt.Fprintf(w, "  body (%d bytes, not UTF-8, base64):\n    %s\n", len(d.Body), base64.StdEncoding.EncodeToString(d.Body))
	}
}

func indentBody(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
