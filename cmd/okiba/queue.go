package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

func queueGroup(a *app) command {
	return &group{app: a, name: "queue", usage: `
Usage: okiba queue SUBCOMMAND NAME [flags]

Manages queues. A queue's configuration is stored in full when it is created; create
and update send only the flags you give, so update changes just those fields.` + clientHelp,
		subs: []entry{
			{"create", "create a queue (refused if it exists with another configuration)", func(a *app, n string) command { return &queueCmd{app: a, name: n, op: "create"} }},
			{"update", "change some fields of an existing queue", func(a *app, n string) command { return &queueCmd{app: a, name: n, op: "update"} }},
			{"get", "show a queue's configuration and statistics", func(a *app, n string) command { return &queueGetCmd{app: a, name: n} }},
			{"list", "list queues with their message counts", func(a *app, n string) command { return &queueListCmd{app: a, name: n} }},
			{"delete", "delete a queue and its messages", func(a *app, n string) command { return &queueDeleteCmd{app: a, name: n} }},
			{"purge", "remove every message of a queue", func(a *app, n string) command { return &queuePurgeCmd{app: a, name: n} }},
		}}
}

// configFlags are the queue configuration flags of create and update.
type configFlags struct {
	visibility, backoffBase, backoffMax, delay, retention, dedupWindow, receiveWait time.Duration
	maxDeliveries                                                                   int
	maxMessages                                                                     int64
	maxBytes, maxMessageSize                                                        byteSize
	dlq, dedupScope, onDeadLetter                                                   string
	contentDedup, orderedGroups                                                     bool
	tags                                                                            kvFlag
}

func (c *configFlags) register(f *flags) {
	f.DurationVar(&c.visibility, "visibility-timeout", 0, "lease length on receive, 0..12h (okiba's default 30s)")
	f.IntVar(&c.maxDeliveries, "max-deliveries", 0, "dead-letter a message after this many deliveries end without an ack; 0 = never (default 10)")
	f.StringVar(&c.dlq, "dead-letter-queue", "", "`NAME` of the dead-letter queue, or none (default NAME-dlq, created with the queue if missing)")
	f.DurationVar(&c.backoffBase, "backoff-base", 0, "base of the random retry delay after a nack without a delay (default 1s)")
	f.DurationVar(&c.backoffMax, "backoff-max", 0, "cap of the retry delay (default 5m)")
	f.DurationVar(&c.delay, "delay", 0, "initial invisibility of new messages, 0..168h (default 0s)")
	f.DurationVar(&c.retention, "retention", 0, "how long a message may stay; 0 = unlimited (default 336h = 14 days)")
	f.DurationVar(&c.dedupWindow, "dedup-window", 0, "a send repeating a dedup id within this window is a duplicate; 0 = off (default 5m)")
	f.StringVar(&c.dedupScope, "dedup-scope", "", "`SCOPE` of dedup ids: queue or group (default queue)")
	f.BoolVar(&c.contentDedup, "content-dedup", false, "use the SHA-256 of the body as the dedup id when a send gives none")
	f.Int64Var(&c.maxMessages, "max-messages", 0, "refuse sends beyond this many ready, delayed and in-flight messages; 0 = unlimited")
	f.Var(&c.maxBytes, "max-bytes", "refuse sends beyond this `SIZE` of messages (512MiB, …); 0 = unlimited")
	f.Var(&c.maxMessageSize, "max-message-size", "largest message `SIZE`, body plus headers, up to 1MiB (default 1MiB)")
	f.DurationVar(&c.receiveWait, "receive-wait", 0, "long-poll wait of a receive that gives none, 0..60s (default 0s)")
	f.StringVar(&c.onDeadLetter, "on-dead-letter", "", "`ACTION` when an ordered group's head is dead-lettered: move_on, or park_group (the rest waits until it is redriven back or released; needs a dead-letter queue) (default move_on)")
	f.BoolVar(&c.orderedGroups, "ordered-groups", false, "deliver messages of a group strictly in order; fixed at creation (default true)")
	f.Var(&c.tags, "tag", "`KEY=VALUE` label, repeatable; replaces the queue's whole tag set")
}

// config returns the fields given on the command line and their names, for the summary.
func (c *configFlags) config(f *flags) (api.QueueConfig, []string) {
	var cfg api.QueueConfig
	var names []string
	given := f.given()
	dur := func(flag string, v time.Duration, dst **api.Duration) {
		if given[flag] {
			*dst = api.Ptr(v)
		}
	}
	dur("visibility-timeout", c.visibility, &cfg.VisibilityTimeout)
	dur("backoff-base", c.backoffBase, &cfg.BackoffBase)
	dur("backoff-max", c.backoffMax, &cfg.BackoffMax)
	dur("delay", c.delay, &cfg.Delay)
	dur("retention", c.retention, &cfg.Retention)
	dur("dedup-window", c.dedupWindow, &cfg.DedupWindow)
	dur("receive-wait", c.receiveWait, &cfg.ReceiveWait)
	if given["max-deliveries"] {
		cfg.MaxDeliveries = &c.maxDeliveries
	}
	if given["dead-letter-queue"] {
		cfg.DeadLetterQueue = &c.dlq
	}
	if given["dedup-scope"] {
		cfg.DedupScope = &c.dedupScope
	}
	if given["content-dedup"] {
		cfg.ContentDedup = &c.contentDedup
	}
	if given["max-messages"] {
		cfg.MaxMessages = &c.maxMessages
	}
	if given["max-bytes"] {
		cfg.MaxBytes = (*int64)(&c.maxBytes)
	}
	if given["max-message-size"] {
		cfg.MaxMessageSize = (*int64)(&c.maxMessageSize)
	}
	if given["ordered-groups"] {
		cfg.OrderedGroups = &c.orderedGroups
	}
	if given["on-dead-letter"] {
		cfg.OnDeadLetter = &c.onDeadLetter
	}
	if given["tag"] {
		cfg.Tags = c.tags.m
	}
	for name := range given {
		switch name {
		case "server", "token", "json":
		case "tag":
			names = append(names, "tags")
		default:
			names = append(names, strings.ReplaceAll(name, "-", "_"))
		}
	}
	sort.Strings(names)
	return cfg, names
}

// queueCmd is queue create and queue update: both PUT the given fields. create also
// creates; update refuses a queue that does not exist.
type queueCmd struct {
	app  *app
	name string
	op   string // create or update
}

const queueCreateUsage = `
Usage: okiba queue create NAME [flags]

Creates queue NAME with okiba's defaults for every field not given. If the queue exists
with the configuration this would create, nothing changes (create can be run again);
if it exists with another, create is refused (queue_exists, naming the fields that
differ) and the queue is left as it is: change it with okiba queue update. Names are
[A-Za-z0-9_-]{1,80}, optionally ending in .fifo.`

const queueUpdateUsage = `
Usage: okiba queue update NAME [flags]

Changes the given fields of an existing queue; every other field keeps its value.`

func (c *queueCmd) Run(ctx context.Context, args []string) error {
	usage, examples := queueCreateUsage, `
okiba queue create orders
okiba queue create orders --visibility-timeout 1m --max-deliveries 5 --dead-letter-queue orders-failed
okiba queue create audit --dead-letter-queue none --retention 0s --tag team=payments`
	if c.op == "update" {
		usage, examples = queueUpdateUsage, `
okiba queue update orders --visibility-timeout 45s
okiba queue update orders --max-messages 100000 --max-bytes 512MiB`
	}
	f := c.app.serverFlags(c.name, usage, examples)
	var cfgFlags configFlags
	cfgFlags.register(f)
	asJSON := f.Bool("json", false, "print the queue as the API's JSON")
	pos, err := f.parseArgs(args, 1, 1, "NAME [flags]")
	if err != nil {
		return err
	}
	cfg, fields := cfgFlags.config(f)
	if c.op == "update" && len(fields) == 0 {
		return f.fail("nothing to update: give at least one field flag (see okiba queue update -h)")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	name := pos[0]
	// The PUT answers 201 or 200 but the client reports only the queue, so ask first.
	_, err = cl.Queue(ctx, name)
	exists := err == nil
	if err != nil && !client.IsCode(err, api.CodeQueueNotFound) {
		return err
	}
	if c.op == "update" && !exists {
		return fmt.Errorf("%w (create it with: okiba queue create %s)", err, name)
	}
	var q *api.Queue
	if c.op == "create" {
		q, err = cl.CreateQueue(ctx, name, cfg)
		if client.IsCode(err, api.CodeQueueExists) {
			return fmt.Errorf("%w (okiba queue update %s … changes it)", err, name)
		}
	} else {
		q, err = cl.PutQueue(ctx, name, cfg)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, q)
	}
	w := c.app.Stdout
	if !exists {
		fmt.Fprintf(w, "created queue %s (dead_letter_queue %s, visibility_timeout %s, max_deliveries %d)\n",
			q.Name, deref(q.Config.DeadLetterQueue), human(deref(q.Config.VisibilityTimeout).D()), deref(q.Config.MaxDeliveries))
		return nil
	}
	if c.op == "create" {
		fmt.Fprintf(w, "queue %s exists with this configuration: nothing changed\n", q.Name)
		return nil
	}
	if len(fields) == 0 {
		fmt.Fprintf(w, "updated queue %s: nothing changed (it exists)\n", q.Name)
		return nil
	}
	vals := configValues(q.Config)
	parts := make([]string, len(fields))
	for i, name := range fields {
		parts[i] = name + "=" + vals[name]
	}
	fmt.Fprintf(w, "updated queue %s: %s\n", q.Name, strings.Join(parts, " "))
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// configValues renders every field of a queue configuration, keyed by its API name.
func configValues(c api.QueueConfig) map[string]string {
	d := func(p *api.Duration) string { return human(deref(p).D()) }
	sz := func(p *int64) string {
		if deref(p) == 0 {
			return "0 (unlimited)"
		}
		b := byteSize(deref(p))
		return b.String()
	}
	zeroIs := func(s, what string) string {
		if s == "0s" || s == "0" {
			return s + " (" + what + ")"
		}
		return s
	}
	var tags []string
	for k, v := range c.Tags {
		tags = append(tags, k+"="+v)
	}
	sort.Strings(tags)
	return map[string]string{
		"visibility_timeout": d(c.VisibilityTimeout),
		"max_deliveries":     zeroIs(strconv.Itoa(deref(c.MaxDeliveries)), "never"),
		"dead_letter_queue":  deref(c.DeadLetterQueue),
		"backoff_base":       d(c.BackoffBase),
		"backoff_max":        d(c.BackoffMax),
		"delay":              d(c.Delay),
		"retention":          zeroIs(d(c.Retention), "unlimited"),
		"dedup_window":       zeroIs(d(c.DedupWindow), "off"),
		"dedup_scope":        deref(c.DedupScope),
		"content_dedup":      strconv.FormatBool(deref(c.ContentDedup)),
		"max_messages":       zeroIs(strconv.FormatInt(deref(c.MaxMessages), 10), "unlimited"),
		"max_bytes":          sz(c.MaxBytes),
		"max_message_size":   sz(c.MaxMessageSize),
		"receive_wait":       d(c.ReceiveWait),
		"ordered_groups":     strconv.FormatBool(deref(c.OrderedGroups)),
		"on_dead_letter":     cmp.Or(deref(c.OnDeadLetter), "move_on"),
		"tags":               cmp.Or(strings.Join(tags, ","), "-"),
	}
}

var configOrder = []string{
	"visibility_timeout", "max_deliveries", "dead_letter_queue", "backoff_base", "backoff_max",
	"delay", "retention", "dedup_window", "dedup_scope", "content_dedup", "max_messages",
	"max_bytes", "max_message_size", "receive_wait", "ordered_groups", "on_dead_letter", "tags",
}

// ---------------------------------------------------------------------------------------

type queueGetCmd struct {
	app  *app
	name string
}

func (c *queueGetCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba queue get NAME [--json]

Shows a queue's configuration, message counts, counters and rates.`, `
okiba queue get orders
okiba queue get orders --json | jq .stats.ready`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--json]")
	if err != nil {
		return err
	}
	q, err := cl.Queue(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, q)
	}
	printQueue(c.app.Stdout, q)
	return nil
}

func printQueue(out io.Writer, q *api.Queue) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	st := q.Stats
	fmt.Fprintf(w, "Queue\t%s\n", q.Name)
	fmt.Fprintf(w, "Created\t%s\n", q.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "Updated\t%s\n", q.UpdatedAt.Format(time.RFC3339))
	if len(q.DeadLetterSources) > 0 {
		fmt.Fprintf(w, "Dead-letter queue of\t%s\n", strings.Join(q.DeadLetterSources, ", "))
	}
	fmt.Fprintf(w, "\nConfiguration\t\n")
	vals := configValues(q.Config)
	for _, k := range configOrder {
		fmt.Fprintf(w, "  %s\t%s\n", k, vals[k])
	}
	fmt.Fprintf(w, "\nMessages\t\n")
	fmt.Fprintf(w, "  ready\t%d\n  delayed\t%d\n  in flight\t%d\n", st.Ready, st.Delayed, st.InFlight)
	fmt.Fprintf(w, "  bytes\t%d\n  groups\t%d\n", st.Bytes, st.Groups)
	fmt.Fprintf(w, "  oldest ready\t%s\n", oldest(st.OldestReadyAgeMS))
	if dlq := deref(q.Config.DeadLetterQueue); dlq != "none" {
		fmt.Fprintf(w, "  dead letters\t%d (in %s)\n", st.DeadLetters, dlq)
	}
	fmt.Fprintf(w, "\nCounters since start\t\n")
	counters := []struct {
		name string
		v    uint64
	}{
		{"sent", st.Sent}, {"delivered", st.Delivered}, {"redelivered", st.Redelivered},
		{"acked", st.Acked}, {"nacked", st.Nacked}, {"extended", st.Extended},
		{"dead-lettered", st.DeadLettered}, {"dead-lettered in", st.DeadLetteredIn},
		{"expired", st.Expired}, {"redriven in", st.RedrivenIn}, {"redriven out", st.RedrivenOut},
		{"purged", st.Purged}, {"deleted", st.Deleted}, {"overflow", st.Overflow},
		{"dedup hits", st.DedupHits}, {"refused (full)", st.Refused}, {"dedup evicted early", st.DedupEvictedEarly},
	}
	for _, ct := range counters {
		fmt.Fprintf(w, "  %s\t%d\n", ct.name, ct.v)
	}
	if len(st.DeadLetteredBy) > 0 {
		var rs []string
		for r, n := range st.DeadLetteredBy {
			rs = append(rs, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(rs)
		fmt.Fprintf(w, "  dead-lettered by reason\t%s\n", strings.Join(rs, " "))
	}
	printRates(w, st)
	w.Flush()
}

func oldest(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return age(time.Duration(ms) * time.Millisecond)
}

// printRates writes the rates and Little's law block of one queue.
func printRates(w io.Writer, st api.Stats) {
	r := st.Rates
	if r.WindowMS > 0 {
		fmt.Fprintf(w, "\nRates per second (last %s)\t\n", age(time.Duration(r.WindowMS)*time.Millisecond))
	} else {
		fmt.Fprintf(w, "\nRates per second (no samples yet)\t\n")
	}
	fmt.Fprintf(w, "  sent\t%s\n  delivered\t%s\n  acked\t%s\n  nacked\t%s\n  dead-lettered\t%s\n  expired\t%s\n",
		rate(r.Sent), rate(r.Delivered), rate(r.Acked), rate(r.Nacked), rate(r.DeadLettered), rate(r.Expired))
	fmt.Fprintf(w, "\nLittle's law (L = λW)\tL\tλ/s\tW measured\tW estimated (L/λ)\n")
	for _, row := range []struct {
		name string
		l    api.LittlesLaw
	}{{"  waiting (ready → first delivery)", st.Waiting}, {"  in system (enqueue → ack)", st.InSystem}} {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", row.name, row.l.L, rate(row.l.Lambda), msDur(row.l.MeasuredMS), msDur(row.l.EstimatedMS))
	}
}

// ---------------------------------------------------------------------------------------

type queueListCmd struct {
	app  *app
	name string
}

func (c *queueListCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba queue list [--prefix P] [--json]

Lists queues, sorted by name, with their message counts: ready, delayed, in flight,
dead letters (messages in the queue's dead-letter queue) and the age of the oldest ready
message.`, `
okiba queue list
okiba queue list --prefix orders --json`)
	prefix := f.String("prefix", "", "only queues whose name starts with `PREFIX`")
	asJSON := f.Bool("json", false, "print the API's JSON")
	if _, err := f.parseArgs(args, 0, 0, "[--prefix P] [--json]"); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	qs, err := cl.Queues(ctx, *prefix)
	if err != nil {
		return err
	}
	return printList(c.app, *asJSON, api.QueueList{Queues: qs}, qs, "no queues", tabwriter.AlignRight,
		"NAME\tREADY\tDELAYED\tIN FLIGHT\tDEAD LETTERS\tOLDEST\t", func(q api.Queue) string {
			dl := strconv.FormatInt(q.Stats.DeadLetters, 10)
			if deref(q.Config.DeadLetterQueue) == "none" {
				dl = "-"
			}
			return fmt.Sprintf("%s\t%d\t%d\t%d\t%s\t%s\t", q.Name, q.Stats.Ready, q.Stats.Delayed, q.Stats.InFlight, dl, oldest(q.Stats.OldestReadyAgeMS))
		})
}

// ---------------------------------------------------------------------------------------

type queueDeleteCmd struct {
	app  *app
	name string
}

func (c *queueDeleteCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba queue delete NAME [--force] [--yes]

Deletes a queue with all its messages; receipts of its in-flight messages become stale.
The name can be reused at once. A queue that holds messages is deleted only once
confirmed: on a terminal okiba asks; otherwise (scripts, pipes) --yes is required. A
queue that is another queue's dead-letter queue is refused (queue_in_use) unless --force.`, `
okiba queue delete orders
okiba queue delete orders --yes
okiba queue delete orders-dlq --force --yes`)
	force := f.Bool("force", false, "delete even if other queues use it as their dead-letter queue")
	yes := f.Bool("yes", false, "do not ask for confirmation when the queue holds messages")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--force] [--yes]")
	if err != nil {
		return err
	}
	if !*yes {
		q, err := cl.Queue(ctx, pos[0])
		if err != nil {
			return err
		}
		if n := stored(q.Stats); n > 0 {
			if !c.app.StdinTTY {
				return f.fail("queue %s holds %d messages: deleting it needs confirmation and stdin is not a terminal: pass --yes", pos[0], n)
			}
			fmt.Fprintf(c.app.Stderr, "Delete queue %s and its %d messages (ready %d, delayed %d, in flight %d)? This cannot be undone. [y/N] ",
				pos[0], n, q.Stats.Ready, q.Stats.Delayed, q.Stats.InFlight)
			answer, _ := bufio.NewReader(c.app.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				fmt.Fprintln(c.app.Stderr, "not deleted")
				return &exitError{code: 1}
			}
		}
	}
	if err := cl.DeleteQueue(ctx, pos[0], *force); err != nil {
		if client.IsCode(err, api.CodeQueueInUse) {
			return fmt.Errorf("%w (delete it anyway with --force)", err)
		}
		return err
	}
	fmt.Fprintf(c.app.Stdout, "deleted queue %s\n", pos[0])
	return nil
}

// ---------------------------------------------------------------------------------------

type queuePurgeCmd struct {
	app  *app
	name string
}

func (c *queuePurgeCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba queue purge NAME [--yes]

Removes every message of a queue: ready, delayed and in flight (their receipts become
stale). This cannot be undone. On a terminal okiba asks for confirmation; otherwise
(scripts, pipes) --yes is required.`, `
okiba queue purge orders
okiba queue purge orders --yes`)
	yes := f.Bool("yes", false, "do not ask for confirmation")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--yes]")
	if err != nil {
		return err
	}
	name := pos[0]
	if !*yes {
		if err := c.confirm(ctx, f, cl, name); err != nil {
			return err
		}
	}
	n, err := cl.Purge(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "purged %d messages from %s\n", n, name)
	return nil
}

// confirm asks on the terminal whether to purge queue name.
func (c *queuePurgeCmd) confirm(ctx context.Context, f *flags, cl *client.Client, name string) error {
	if !c.app.StdinTTY {
		return f.fail("purging %s needs confirmation and stdin is not a terminal: pass --yes", name)
	}
	q, err := cl.Queue(ctx, name)
	if err != nil {
		return err
	}
	st := q.Stats
	fmt.Fprintf(c.app.Stderr, "Purge %d messages (ready %d, delayed %d, in flight %d) from queue %s? This cannot be undone. [y/N] ",
		stored(st), st.Ready, st.Delayed, st.InFlight, name)
	answer, _ := bufio.NewReader(c.app.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		fmt.Fprintln(c.app.Stderr, "not purged")
		return &exitError{code: 1}
	}
	return nil
}
