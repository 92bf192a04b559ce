package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

func dlqGroup(a *app) command {
	return &group{app: a, name: "dlq", usage: `
Usage: okiba dlq SUBCOMMAND QUEUE [flags]

Works with the dead letters of QUEUE, the source queue: okiba finds its dead-letter
queue from its configuration (dead_letter_queue).` + clientHelp,
		subs: []entry{
			{"list", "list the dead letters of a queue", func(a *app, n string) command { return &dlqListCmd{app: a, name: n} }},
			{"redrive", "move dead letters back (or elsewhere), following the task", func(a *app, n string) command { return &dlqRedriveCmd{app: a, name: n} }},
			{"tasks", "list redrive tasks and their progress", func(a *app, n string) command { return &dlqTasksCmd{app: a, name: n} }},
			{"cancel", "cancel a running redrive task", func(a *app, n string) command { return &dlqCancelCmd{app: a, name: n} }},
			{"delete", "delete dead letters for good, by id", func(a *app, n string) command { return &dlqDeleteCmd{app: a, name: n} }},
		}}
}

// deadLetterQueue returns the name of source's dead-letter queue and the queue itself,
// which is nil when it does not exist (it is created again with the next dead letter).
func deadLetterQueue(ctx context.Context, cl *client.Client, source string) (string, *api.Queue, error) {
	q, err := cl.Queue(ctx, source)
	if err != nil {
		return "", nil, err
	}
	dlq := deref(q.Config.DeadLetterQueue)
	if dlq == "none" || dlq == "" {
		if len(q.DeadLetterSources) > 0 {
			return "", nil, fmt.Errorf("%s is itself the dead-letter queue of %s: give the source queue, as in okiba dlq list %s",
				source, strings.Join(q.DeadLetterSources, ", "), q.DeadLetterSources[0])
		}
		return "", nil, fmt.Errorf("queue %s has no dead-letter queue (dead_letter_queue is none)", source)
	}
	dq, err := cl.Queue(ctx, dlq)
	if client.IsCode(err, api.CodeQueueNotFound) {
		return dlq, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return dlq, dq, nil
}

// stored is the number of messages a queue holds: ready, delayed and in flight.
func stored(st api.Stats) int64 { return st.Ready + st.Delayed + st.InFlight }

// ---------------------------------------------------------------------------------------

type dlqListCmd struct {
	app  *app
	name string
}

func (c *dlqListCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba dlq list QUEUE [--limit N] [--json]

Lists the messages in QUEUE's dead-letter queue, oldest first, without leasing them: id,
reason, deliveries, the queue it came from, when it was dead-lettered, the description
and the start of the body. A dead-letter queue shared by several queues holds their
dead letters too; the SOURCE column tells them apart.`, `
okiba dlq list orders
okiba dlq list orders --limit 1000 --json | jq -r 'select(.dead_letter.reason=="max_deliveries") | .id'`)
	limit := f.Int("limit", 100, "show at most `N` messages")
	asJSON := f.Bool("json", false, "print one JSON object per message and line (the API's message objects)")
	pos, err := f.parseArgs(args, 1, 1, "QUEUE [--limit N] [--json]")
	if err != nil {
		return err
	}
	if *limit < 1 {
		return f.fail("--limit must be at least 1, got %d", *limit)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	dlq, dq, err := deadLetterQueue(ctx, cl, pos[0])
	if err != nil {
		return err
	}
	if dq == nil {
		if !*asJSON {
			fmt.Fprintf(a.Stderr, "no dead letters: %s's dead-letter queue %s does not exist (it is created again with the next dead letter)\n", pos[0], dlq)
		}
		return nil
	}
	var msgs []api.Message
	after := ""
	for len(msgs) < *limit {
		page, err := cl.Peek(ctx, dlq, client.PeekOptions{After: after, Limit: min(*limit-len(msgs), api.MaxBatch)})
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
	total := stored(dq.Stats)
	fmt.Fprintf(a.Stdout, "%s: %d dead letters", dlq, total)
	if int64(len(msgs)) < total {
		fmt.Fprintf(a.Stdout, " (showing the first %d; see more with --limit)", len(msgs))
	}
	fmt.Fprintln(a.Stdout)
	if len(msgs) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tREASON\tDELIVERIES\tSOURCE\tDEAD-LETTERED AT\tDESCRIPTION\tBODY")
	for _, m := range msgs {
		body, _ := client.Body(m)
		reason, deliveries, source, at, desc := "-", m.Deliveries, "-", "-", ""
		if dl := m.DeadLetter; dl != nil {
			reason, deliveries, source = printable(dl.Reason), dl.Deliveries, dl.Source
			at, desc = dl.At.Format(time.RFC3339), printable(dl.Description)
		}
		if len([]rune(desc)) > 40 {
			desc = string([]rune(desc)[:40]) + "…"
		}
		desc = strings.ReplaceAll(strings.ReplaceAll(desc, "\n", " "), "\t", " ")
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.ID, reason, deliveries, source, at, desc, preview(body, 40))
	}
	return w.Flush()
}

// ---------------------------------------------------------------------------------------

type dlqRedriveCmd struct {
	app  *app
	name string
}

func (c *dlqRedriveCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba dlq redrive QUEUE [--to NAME] [--reason R] [--rate N] [--no-wait] [flags]

Starts a redrive task that moves the messages of QUEUE's dead-letter queue back to
QUEUE (or to --to), then follows it with a progress bar until it ends. Moved messages
keep their id, group, dedup id and headers; their delivery count starts again at 0.
The task is durable: it runs in the broker, survives restarts, and moves messages that
are in the dead-letter queue when it starts. If the dead-letter queue is shared with
other queues, only the messages dead-lettered from QUEUE are moved.

Ctrl-C while following cancels the task (messages already moved stay moved). To start a
task and leave it running, use --no-wait; follow it with okiba dlq tasks and stop it
with okiba dlq cancel TASK.`, `
okiba dlq redrive orders
okiba dlq redrive orders --reason max_deliveries --rate 100
okiba dlq redrive orders --to orders-replay --no-wait`)
	to := f.String("to", "", "move to queue `NAME` instead of back to QUEUE")
	reason := f.String("reason", "", "move only dead letters with this `REASON`")
	group := f.String("group", "", "move only messages of this message group `KEY`")
	olderThan := f.Duration("older-than", 0, "move only messages first enqueued longer ago than this")
	rateN := f.Int("rate", 0, "move at most `N` messages per second; 0 = as fast as possible")
	noWait := f.Bool("no-wait", false, "start the task, print its id and return")
	pos, err := f.parseArgs(args, 1, 1, "QUEUE [flags]")
	if err != nil {
		return err
	}
	if *rateN < 0 {
		return f.fail("--rate must be 0 or more, got %d", *rateN)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	source := pos[0]
	dlq, dq, err := deadLetterQueue(ctx, cl, source)
	if err != nil {
		return err
	}
	if dq == nil {
		fmt.Fprintf(a.Stdout, "nothing to redrive: %s's dead-letter queue %s does not exist\n", source, dlq)
		return nil
	}
	if stored(dq.Stats) == 0 {
		fmt.Fprintf(a.Stdout, "nothing to redrive: %s is empty\n", dlq)
		return nil
	}
	// Without --to each message goes back to the queue it was dead-lettered from.
	req := api.RedriveRequest{To: *to, Reason: *reason, Group: *group, Rate: *rateN}
	if f.given()["older-than"] {
		req.OlderThan = api.Ptr(*olderThan)
	}
	if shared(dq.DeadLetterSources, source) {
		req.From = source // only this queue's dead letters; the others stay
	}
	// Start the task even if Ctrl-C comes meanwhile: once it exists we must know its id
	// to cancel it (follow does that when ctx is done).
	t, err := cl.Redrive(context.WithoutCancel(ctx), dlq, req)
	if err != nil {
		return err
	}
	if t.Total == 0 {
		fmt.Fprintf(a.Stdout, "nothing to redrive: %s holds no dead letters from %s that match\n", dlq, source)
		return nil
	}
	fmt.Fprintf(a.Stdout, "redrive task %s started: %d messages from %s to %s\n", t.ID, t.Total, dlq, destination(t))
	if *noWait {
		fmt.Fprintf(a.Stdout, "follow it with: okiba dlq tasks; cancel it with: okiba dlq cancel %s\n", t.ID)
		return nil
	}
	return follow(ctx, a, cl, t)
}

// shared reports whether a dead-letter queue also serves queues other than source.
func shared(sources []string, source string) bool {
	for _, s := range sources {
		if s != source {
			return true
		}
	}
	return false
}

// pollEvery is how often a followed redrive task is asked for its progress.
const pollEvery = 200 * time.Millisecond

// follow shows a task's progress until it ends. If ctx ends first (Ctrl-C), it asks the
// server to cancel the task.
func follow(ctx context.Context, a *app, cl *client.Client, t *api.RedriveTask) error {
	p := &progress{w: a.Stderr, tty: a.StderrTTY, last: -1}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for t.State == "running" {
		p.draw(t)
		select {
		case <-ctx.Done():
			p.end()
			return cancelTask(a, cl, t)
		case <-tick.C:
		}
		nt, err := cl.RedriveTask(ctx, t.ID)
		if ctx.Err() != nil {
			continue // cancel on the next turn
		}
		if err != nil {
			p.end()
			return fmt.Errorf("follow redrive task %s: %w (it keeps running; see okiba dlq tasks)", t.ID, err)
		}
		t = nt
	}
	p.draw(t)
	p.end()
	return finished(a, t)
}

func destination(t *api.RedriveTask) string {
	if t.To == "" {
		return "their source queues"
	}
	return t.To
}

// finished reports how a task ended; any end but completed is an error.
func finished(a *app, t *api.RedriveTask) error {
	msg := fmt.Sprintf("redrive task %s %s: moved %d of %d messages from %s to %s", t.ID, t.State, t.Moved, t.Total, t.Source, destination(t))
	if t.Skipped > 0 {
		msg += fmt.Sprintf(" (%d skipped: gone or not matching)", t.Skipped)
	}
	if t.Message != "" {
		msg += ": " + t.Message
	}
	if t.State == "completed" {
		fmt.Fprintln(a.Stdout, msg)
		return nil
	}
	return errors.New(msg)
}

// cancelTask asks the server to cancel a task after an interrupt.
func cancelTask(a *app, cl *client.Client, t *api.RedriveTask) error {
	fmt.Fprintf(a.Stderr, "interrupted: cancelling redrive task %s\n", t.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ct, err := cl.CancelRedrive(ctx, t.ID)
	if client.IsCode(err, api.CodeTaskFinished) {
		if ct, err = cl.RedriveTask(ctx, t.ID); err == nil {
			return finished(a, ct) // it ended before the cancel arrived
		}
	}
	if err != nil {
		return fmt.Errorf("could not cancel redrive task %s, it may still be running (okiba dlq cancel %s): %w", t.ID, t.ID, err)
	}
	fmt.Fprintf(a.Stderr, "redrive task %s cancelled after moving %d of %d messages\n", ct.ID, ct.Moved, ct.Total)
	return &exitError{code: 130}
}

// progress draws a task's progress: a bar redrawn in place on a terminal, a line per
// change otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	last  int64
	drawn bool
}

const barWidth = 30

func (p *progress) draw(t *api.RedriveTask) {
	done := t.Moved + t.Skipped
	if !p.tty {
		if done != p.last {
			fmt.Fprintf(p.w, "redrive %s: %d/%d moved\n", t.ID, t.Moved, t.Total)
			p.last = done
		}
		return
	}
	frac := 1.0
	if t.Total > 0 {
		frac = min(1, float64(done)/float64(t.Total))
	}
	n := int(frac * barWidth)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d moved (%3.0f%%)", strings.Repeat("#", n), strings.Repeat(".", barWidth-n), t.Moved, t.Total, frac*100)
	p.drawn = true
}

// end finishes the bar's line.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// ---------------------------------------------------------------------------------------

type dlqTasksCmd struct {
	app  *app
	name string
}

func (c *dlqTasksCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba dlq tasks [--json]

Lists redrive tasks, newest first, with their state (running, completed, cancelled,
failed) and progress.`, `
okiba dlq tasks
okiba dlq tasks --json | jq '.[] | select(.state=="running") | .id'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	if _, err := f.parseArgs(args, 0, 0, "[--json]"); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	ts, err := cl.RedriveTasks(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		if ts == nil {
			ts = []api.RedriveTask{}
		}
		return printJSONIndent(a.Stdout, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(a.Stderr, "no redrive tasks")
		return nil
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TASK\tSTATE\tFROM\tTO\tMOVED\tTOTAL\tSKIPPED\tSTARTED\tMESSAGE")
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", t.ID, t.State, t.Source, destination(&t), t.Moved, t.Total, t.Skipped, t.CreatedAt.Format(time.RFC3339), t.Message)
	}
	return w.Flush()
}

type dlqCancelCmd struct {
	app  *app
	name string
}

func (c *dlqCancelCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba dlq cancel TASK

Cancels a running redrive task; messages already moved stay moved.`, `
okiba dlq cancel 7`)
	pos, cl, err := f.clientArgs(args, 1, 1, "TASK")
	if err != nil {
		return err
	}
	t, err := cl.CancelRedrive(ctx, pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "redrive task %s cancelled after moving %d of %d messages\n", t.ID, t.Moved, t.Total)
	return nil
}

// ---------------------------------------------------------------------------------------

type dlqDeleteCmd struct {
	app  *app
	name string
}

func (c *dlqDeleteCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba dlq delete QUEUE ID...

Deletes dead letters of QUEUE for good, by the ids okiba dlq list shows: for the ones
no redrive can fix. ID "-" reads ids from stdin, one per line. The ids say exactly what
goes, so nothing asks for confirmation; to empty the whole dead-letter queue, okiba queue
purge it (which asks). Each id gets its own result; the exit status is 1 if any failed.`, `
okiba dlq delete orders 6889c50bd0c00001
okiba dlq list orders --json | jq -r 'select(.dead_letter.reason=="invalid-card") | .id' | okiba dlq delete orders -`)
	pos, err := f.parseArgs(args, 2, -1, "QUEUE ID...")
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
	cl, err := f.client()
	if err != nil {
		return err
	}
	dlq, dq, err := deadLetterQueue(ctx, cl, pos[0])
	if err != nil {
		return err
	}
	if dq == nil {
		return fmt.Errorf("%s's dead-letter queue %s does not exist: there are no dead letters to delete", pos[0], dlq)
	}
	failed := 0
	for _, id := range ids {
		if err := cl.DeleteMessage(ctx, dlq, id); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed++
			fmt.Fprintf(a.Stderr, "okiba %s: %s: %v\n", c.name, id, err)
		}
	}
	fmt.Fprintf(a.Stdout, "deleted %d of %d from %s\n", len(ids)-failed, len(ids), dlq)
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}
