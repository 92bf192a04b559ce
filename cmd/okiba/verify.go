package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

const verifyUsage = `
Usage: okiba verify DATA-DIR

Checks a stopped broker's data directory offline: reads every frame of every log
segment and every checkpoint file, checks every checksum, and reports each damaged
frame with its file, its offset and the ids of the messages whose bodies lie in it (as
far as the latest checkpoint places them). It changes nothing.

verify refuses a directory a running okiba serve holds: a serving broker scrubs itself
(--scrub-every, --scrub-rate) and reports in its log and its metrics. It exits with 0
when nothing is damaged (the torn end of a write a crash cut short is not damage: the
next start cuts it off), and 1 otherwise; see docs/operations.md for what to do next.`

const verifyExamples = `
okiba verify /var/lib/okiba
okiba verify ./okiba-data && okiba serve --data ./okiba-data`

type verifyCmd struct{ app *app }

func (c *verifyCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("verify", verifyUsage, verifyExamples)
	pos, err := f.parseArgs(args, 1, 1, "DATA-DIR")
	if err != nil {
		return err
	}
	dir := pos[0]
	rep, err := broker.Verify(nil, dir)
	switch {
	case errors.Is(err, broker.ErrLocked):
		return fmt.Errorf("%w: a serving broker scrubs itself; stop it to verify offline", err)
	case err != nil:
		return err
	}
	out := c.app.Stdout
	records, bytes := 0, int64(0)
	for _, s := range rep.Log.Segments {
		records += s.Records
		bytes += s.Bytes
	}
	fmt.Fprintf(out, "checked %s: %d segments (%d records, %d bytes), %d checkpoints\n", dir, len(rep.Log.Segments), records, bytes, len(rep.Checkpoints))
	damaged := 0
	for _, d := range rep.Damaged {
		if d.Torn {
			fmt.Fprintf(out, "torn tail  %s at offset %d (a write a crash cut short: the next start cuts it off)\n", d.File, d.Offset)
			continue
		}
		damaged++
		fmt.Fprintf(out, "DAMAGED    %s at offset %d", d.File, d.Offset)
		if d.Next > d.Offset {
			fmt.Fprintf(out, " (to %d)", d.Next)
		}
		fmt.Fprintf(out, ": %s\n", d.Reason)
		if len(d.Messages) > 0 {
			fmt.Fprintf(out, "           bodies of messages %s\n", joinIDs(d.Messages))
		}
	}
	if damaged == 0 {
		fmt.Fprintln(out, "no damage found")
		return nil
	}
	if !rep.Indexed {
		fmt.Fprintln(out, "(no checkpoint could be read: the messages in damaged frames are not named)")
	}
	fmt.Fprintf(c.app.Stderr, "okiba verify: %d damaged frames in %s: restore the files from a backup, or see docs/operations.md (\"Verify and scrub\")\n", damaged, dir)
	return &exitError{code: 1}
}

func joinIDs(ids []uint64) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ", "
		}
		s += queue.FormatID(id)
	}
	return s
}
