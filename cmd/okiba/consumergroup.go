package main

import (
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

// The group commands: consumer groups of a topic — create (or update), get, list,
// delete, and seek, which moves a group's committed offsets. Members are processes that
// pull (client.ConsumeGroup); these commands only look at and steer the group.

func consumerGroupCommands(a *app) command {
	return &group{app: a, name: "group", usage: `
Usage: okiba group SUBCOMMAND TOPIC [GROUP] [flags]

Manages consumer groups. A consumer group reads a topic at its own pace: it keeps one
committed offset per partition (the next offset to read) and hands each partition to
one of its members at a time, so one key's records are handled in order by one member.
Members join by pulling (the Go client's ConsumeGroup runs one); the broker spreads the
partitions over the live members. A record a member cannot handle goes to the group's
dead-letter queue, TOPIC.GROUP-dlq.` + clientHelp,
		subs: []entry{
			{"create", "create a consumer group (or update it if it exists)", func(a *app, n string) command { return &groupCreateCmd{app: a, name: n} }},
			{"get", "show a group's partitions, offsets, lag and members", func(a *app, n string) command { return &groupGetCmd{app: a, name: n} }},
			{"list", "list a topic's consumer groups with their lag", func(a *app, n string) command { return &groupListCmd{app: a, name: n} }},
			{"delete", "delete a consumer group", func(a *app, n string) command { return &groupDeleteCmd{app: a, name: n} }},
			{"seek", "move a group's committed offsets: replay or skip", func(a *app, n string) command { return &groupSeekCmd{app: a, name: n} }},
		}}
}

type groupCreateCmd struct {
	app  *app
	name string
}

func (c *groupCreateCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba group create TOPIC GROUP [--start first|last] [--member-lease DURATION]
                          [--on-failure dead_letter|block] [--max-failures N]

Creates consumer group GROUP of TOPIC with okiba's defaults for every field not given.
If the group exists it is updated with the given fields instead (create is an
idempotent PUT); the output says which happened. Names are [A-Za-z0-9_-]{1,80}.

--start is where a new group begins: first (the default) reads every retained record —
a new projection reads the whole history — and last only what is published from now
on. It counts at creation only: move an existing group with okiba group seek.
--on-failure and --max-failures tell the members' runtime what to do with a record
that keeps failing: dead_letter moves it, after N failures, to TOPIC.GROUP-dlq and goes
on; block retries it for ever, its partition waiting behind it.`, `
okiba group create orders billing
okiba group create orders audit --start last --member-lease 1m
okiba group create orders billing --on-failure block
okiba group create orders billing --max-failures 3`)
	start := f.String("start", "", "where a new group begins: first or last (default first)")
	lease := f.Duration("member-lease", 0, "a member that neither pulls nor heartbeats for this `DURATION` loses its partitions, 1s..5m (default 30s)")
	onFailure := f.String("on-failure", "", "`MODE` for a record that keeps failing: dead_letter or block (default dead_letter)")
	maxFailures := f.Int("max-failures", 0, "failures of one record before on_failure applies, 1..1000 (default 10)")
	asJSON := f.Bool("json", false, "print the group as the API's JSON")
	pos, err := f.parseArgs(args, 2, 2, "TOPIC GROUP [flags]")
	if err != nil {
		return err
	}
	given := f.given()
	var cfg api.GroupConfig
	var fields []string
	if given["start"] {
		if *start != "first" && *start != "last" {
			return f.fail("--start must be first or last, got %q", *start)
		}
		cfg.Start, fields = start, append(fields, "start")
	}
	if given["member-lease"] {
		cfg.MemberLease, fields = api.Ptr(*lease), append(fields, "member_lease")
	}
	if given["on-failure"] {
		if *onFailure != "dead_letter" && *onFailure != "block" {
			return f.fail("--on-failure must be dead_letter or block, got %q", *onFailure)
		}
		cfg.OnFailure, fields = onFailure, append(fields, "on_failure")
	}
	if given["max-failures"] {
		cfg.MaxFailures, fields = maxFailures, append(fields, "max_failures")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	topicName, name := pos[0], pos[1]
	// The PUT answers 201 or 200 but the client reports only the group, so ask first.
	_, err = cl.Group(ctx, topicName, name)
	exists := err == nil
	if err != nil && !client.IsCode(err, api.CodeGroupNotFound) {
		return err // topic_not_found among others
	}
	g, err := cl.PutGroup(ctx, topicName, name, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, g)
	}
	w := c.app.Stdout
	vals := groupConfigValues(g.Config)
	switch {
	case !exists:
		fmt.Fprintf(w, "created group %s/%s (start %s, member_lease %s, on_failure %s, max_failures %s); dead letters go to %s\n",
			g.Topic, g.Name, vals["start"], vals["member_lease"], vals["on_failure"], vals["max_failures"], g.DeadLetterQueue)
	case len(fields) == 0:
		fmt.Fprintf(w, "updated group %s/%s: nothing changed (it exists)\n", g.Topic, g.Name)
	default:
		sort.Strings(fields)
		parts := make([]string, len(fields))
		for i, k := range fields {
			parts[i] = k + "=" + vals[k]
		}
		fmt.Fprintf(w, "updated group %s/%s: %s\n", g.Topic, g.Name, strings.Join(parts, " "))
	}
	return nil
}

// groupConfigValues renders every field of a group's configuration, keyed by its API
// name.
func groupConfigValues(c api.GroupConfig) map[string]string {
	return map[string]string{
		"start":        deref(c.Start),
		"member_lease": human(deref(c.MemberLease).D()),
		"on_failure":   deref(c.OnFailure),
		"max_failures": strconv.Itoa(deref(c.MaxFailures)),
	}
}

var groupConfigOrder = []string{"start", "member_lease", "on_failure", "max_failures"}

// ---------------------------------------------------------------------------------------

type groupGetCmd struct {
	app  *app
	name string
}

func (c *groupGetCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba group get TOPIC GROUP [--json]

Shows a consumer group: its configuration, each partition's committed offset (the next
to read), position (how far it has been handed out under its current epoch), end, lag
in records and in time (now − the publish time of its first uncommitted record), owner,
and the member it moves to (PENDING) once its owner lets go; then the live members and
when their leases end. LOST counts records retention deleted before the group
committed past them.`, `
okiba group get orders billing
okiba group get orders billing --json | jq '.partitions[] | .lag_records'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 2, 2, "TOPIC GROUP [--json]")
	if err != nil {
		return err
	}
	g, err := cl.Group(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, g)
	}
	return printGroup(c.app.Stdout, g, time.Now())
}

func printGroup(out io.Writer, g *api.Group, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "Group\t%s/%s\n", g.Topic, g.Name)
	fmt.Fprintf(w, "Created\t%s\n", g.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "Lag\t%d records, %s\n", g.LagRecords, lagTime(g.LagSeconds))
	fmt.Fprintf(w, "Lost to retention\t%d\n", g.LostToRetention)
	fmt.Fprintf(w, "Dead-letter queue\t%s\n", g.DeadLetterQueue)
	fmt.Fprintf(w, "\nConfiguration\t\n")
	vals := groupConfigValues(g.Config)
	for _, k := range groupConfigOrder {
		fmt.Fprintf(w, "  %s\t%s\n", k, vals[k])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPartitions\n")
	if err := printGroupPartitions(out, g); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nMembers\n")
	if len(g.Members) == 0 {
		fmt.Fprintln(out, "  none: no process is consuming the group")
		return nil
	}
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSESSION\tJOINED\tLEASE ENDS IN")
	for _, m := range g.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Name, m.Session, m.Joined.Format(time.RFC3339), age(m.Expires.Sub(now)))
	}
	return w.Flush()
}

func printGroupPartitions(out io.Writer, g *api.Group) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "PARTITION\tCOMMITTED\tPOSITION\tEND\tLAG\tLAG TIME\tOWNER\tPENDING\tEPOCH\tLOST\t")
	for _, p := range g.Partitions {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t\n", p.Partition, p.Committed, p.Position, p.End, p.LagRecords,
			lagTime(p.LagSeconds), dash(p.Owner), dash(p.Pending), p.Epoch, p.LostToRetention)
	}
	return w.Flush()
}

func lagTime(seconds float64) string {
	if seconds <= 0 {
		return "0s"
	}
	return age(time.Duration(seconds * float64(time.Second)))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ---------------------------------------------------------------------------------------

type groupListCmd struct {
	app  *app
	name string
}

func (c *groupListCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba group list TOPIC [--json]

Lists a topic's consumer groups, sorted by name, with their live members, lag in
records and in time, records lost to retention, and on_failure.`, `
okiba group list orders
okiba group list orders --json`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "TOPIC [--json]")
	if err != nil {
		return err
	}
	gs, err := cl.Groups(ctx, pos[0])
	if err != nil {
		return err
	}
	return printList(c.app, *asJSON, api.GroupList{Groups: gs}, gs, fmt.Sprintf("topic %s has no consumer groups", pos[0]), 0,
		"NAME\tMEMBERS\tLAG\tLAG TIME\tLOST\tON FAILURE", func(g api.Group) string {
			return fmt.Sprintf("%s\t%d\t%d\t%s\t%d\t%s", g.Name, len(g.Members), g.LagRecords, lagTime(g.LagSeconds), g.LostToRetention,
				deref(g.Config.OnFailure))
		})
}

// ---------------------------------------------------------------------------------------

type groupDeleteCmd struct {
	app  *app
	name string
}

func (c *groupDeleteCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba group delete TOPIC GROUP

Deletes a consumer group and its committed offsets. This cannot be undone: a group
created again under the name starts afresh (at --start). Its members' next calls get
group_deleted, which ends a ConsumeGroup. Its dead-letter queue stays.`, `
okiba group delete orders billing`)
	pos, cl, err := f.clientArgs(args, 2, 2, "TOPIC GROUP")
	if err != nil {
		return err
	}
	if err := cl.DeleteGroup(ctx, pos[0], pos[1]); err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "deleted group %s/%s\n", pos[0], pos[1])
	return nil
}

// ---------------------------------------------------------------------------------------

type groupSeekCmd struct {
	app  *app
	name string
}

func (c *groupSeekCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba group seek TOPIC GROUP (--to first|last|OFFSET | --time RFC3339) [--partition P]

Moves a group's committed offsets, for every partition or only --partition P: to the
first retained record (replay everything), the last (skip to what is published from
now), an offset, or the first record published at or after a time. The members are
handed records from there at their next pull; what they were handling before is not
committed (the partitions' epochs rise, so commits in flight are refused). Prints each
partition's offsets after the move.`, `
okiba group seek orders billing --to first
okiba group seek orders billing --to last
okiba group seek orders billing --to 120 --partition 2
okiba group seek orders billing --time 2026-12-01T09:00:00Z`)
	to := f.String("to", "", "where to: `first|last|OFFSET`")
	at := f.String("time", "", "to the first record published at or after `TIME` (RFC 3339)")
	partition := f.Int("partition", 0, "only partition `P` (default every partition)")
	asJSON := f.Bool("json", false, "print the group after the move as the API's JSON")
	pos, err := f.parseArgs(args, 2, 2, "TOPIC GROUP (--to first|last|OFFSET | --time RFC3339) [--partition P]")
	if err != nil {
		return err
	}
	var req api.SeekRequest
	var where string
	switch {
	case (*to == "") == (*at == ""):
		return f.fail("give either --to first|last|OFFSET or --time RFC3339")
	case *to == "first" || *to == "last":
		req.To, where = *to, *to
	case *to != "":
		off, err := strconv.ParseUint(*to, 10, 64)
		if err != nil {
			return f.fail("--to must be first, last or an offset, got %q", *to)
		}
		req.Offset, where = &off, "offset "+*to
	default:
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return f.fail("--time %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", *at)
		}
		req.Time, where = &t, "time "+t.Format(time.RFC3339Nano)
	}
	scope := "every partition"
	if f.given()["partition"] {
		req.Partition, scope = partition, fmt.Sprintf("partition %d", *partition)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	g, err := cl.Seek(ctx, pos[0], pos[1], req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, g)
	}
	fmt.Fprintf(c.app.Stdout, "moved group %s/%s to %s, %s; %d records to handle\n", g.Topic, g.Name, where, scope, g.LagRecords)
	return printGroupPartitions(c.app.Stdout, g)
}
