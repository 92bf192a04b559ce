package main

import (
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

// The topic group: create, update, get, list and delete topics (topic.go), publish records
// and read partitions (topicrw.go).

func topicGroup(a *app) command {
	return &group{app: a, name: "topic", usage: `
Usage: okiba topic SUBCOMMAND NAME [flags]

Manages topics and their records. A topic is a named, append-only log split into
partitions: a record is published once and read by offset, as often as readers like,
until retention deletes it. A topic's configuration is stored in full when it is
created; create and update send only the flags you give, so update changes just those
fields.` + clientHelp,
		subs: []entry{
			{"create", "create a topic (or update it if it exists)", func(a *app, n string) command { return &topicCmd{app: a, name: n, op: "create"} }},
			{"update", "change some fields of an existing topic", func(a *app, n string) command { return &topicCmd{app: a, name: n, op: "update"} }},
			{"get", "show a topic's configuration, partitions and counters", func(a *app, n string) command { return &topicGetCmd{app: a, name: n} }},
			{"list", "list topics with their record counts", func(a *app, n string) command { return &topicListCmd{app: a, name: n} }},
			{"delete", "delete a topic and its records", func(a *app, n string) command { return &topicDeleteCmd{app: a, name: n} }},
			{"publish", "publish records to a topic", func(a *app, n string) command { return &topicPublishCmd{app: a, name: n} }},
			{"read", "read records from a topic's partitions, or follow them", func(a *app, n string) command { return &topicReadCmd{app: a, name: n} }},
		}}
}

// retentionFlag is --retention: a duration, or forever.
type retentionFlag struct{ r api.Retention }

func (f *retentionFlag) String() string {
	if f == nil || (!f.r.Forever && f.r.Age == 0) {
		return ""
	}
	return retentionString(f.r)
}

func (f *retentionFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "forever" {
		f.r = api.Retention{Forever: true}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration or forever (examples: 168h, 30m, forever)", v)
	}
	f.r = api.Retention{Age: d, Forever: d == 0}
	return nil
}

func retentionString(r api.Retention) string {
	if r.Forever || r.Age == 0 {
		return "forever"
	}
	return human(r.Age)
}

// topicConfigFlags are the topic configuration flags of create and update.
type topicConfigFlags struct {
	partitions                                  int
	retention                                   retentionFlag
	retentionBytes, maxRecordSize, segmentBytes byteSize
	retentionRecords                            int64
	discard                                     string
	dedupWindow, segmentAge                     time.Duration
	tags                                        kvFlag
}

func (c *topicConfigFlags) register(f *flags) {
	f.IntVar(&c.partitions, "partitions", 0, "number of partitions, 1..256; fixed at creation (default 1)")
	f.Var(&c.retention, "retention", "keep records this `DURATION` (1s..87600h), or forever for no age limit (default 168h = 7 days)")
	f.Var(&c.retentionBytes, "retention-bytes", "delete the oldest segments (or refuse publishes, --discard new) beyond this `SIZE` of the whole topic; 0 = no limit")
	f.Int64Var(&c.retentionRecords, "retention-records", 0, "delete the oldest segments (or refuse publishes, --discard new) beyond this many records of the whole topic; 0 = no limit")
	f.StringVar(&c.discard, "discard", "", "`MODE` at --retention-bytes or --retention-records: old deletes the oldest segments, new refuses publishes (topic_full) (default old)")
	f.Var(&c.maxRecordSize, "max-record-size", "largest record `SIZE`, body plus key and headers, up to 1MiB (default 1MiB)")
	f.DurationVar(&c.dedupWindow, "dedup-window", 0, "a publish repeating a dedup id within this window is a duplicate, 0..168h; 0 = off (default 5m)")
	f.Var(&c.segmentBytes, "segment-bytes", "start a partition's next segment at this `SIZE`, 4KiB..1GiB (default 64MiB)")
	f.DurationVar(&c.segmentAge, "segment-age", 0, "start a partition's next segment when its newest began this long ago, 1s..720h (default 1h); retention deletes whole segments")
	f.Var(&c.tags, "tag", "`KEY=VALUE` label, repeatable; replaces the topic's whole tag set")
}

// config returns the fields given on the command line and their names, for the summary.
func (c *topicConfigFlags) config(f *flags) (api.TopicConfig, []string, error) {
	var cfg api.TopicConfig
	given := f.given()
	if given["discard"] && c.discard != "old" && c.discard != "new" {
		return cfg, nil, f.fail("--discard must be old or new, got %q", c.discard)
	}
	// "off" (which byteSize reads as -1) is no limit, as 0 is.
	limit := func(s byteSize) *int64 { n := max(int64(s), 0); return &n }
	if given["partitions"] {
		cfg.Partitions = &c.partitions
	}
	if given["retention"] {
		cfg.Retention = &c.retention.r
	}
	if given["retention-bytes"] {
		cfg.RetentionBytes = limit(c.retentionBytes)
	}
	if given["retention-records"] {
		cfg.RetentionRecords = &c.retentionRecords
	}
	if given["discard"] {
		cfg.Discard = &c.discard
	}
	if given["max-record-size"] {
		cfg.MaxRecordSize = (*int64)(&c.maxRecordSize)
	}
	if given["dedup-window"] {
		cfg.DedupWindow = api.Ptr(c.dedupWindow)
	}
	if given["segment-bytes"] {
		cfg.SegmentBytes = (*int64)(&c.segmentBytes)
	}
	if given["segment-age"] {
		cfg.SegmentAge = api.Ptr(c.segmentAge)
	}
	if given["tag"] {
		cfg.Tags = c.tags.m
	}
	var names []string
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
	return cfg, names, nil
}

// topicCmd is topic create and topic update: both PUT the given fields. create also
// creates; update refuses a topic that does not exist.
type topicCmd struct {
	app  *app
	name string
	op   string // create or update
}

const topicCreateUsage = `
Usage: okiba topic create NAME [flags]

Creates topic NAME with okiba's defaults for every field not given. If the topic exists
it is updated with the given fields instead (create is an idempotent PUT); the output
says which happened. Names are [A-Za-z0-9_-]{1,80}, as queues', in a namespace of their
own: a topic and a queue may share a name.

--partitions is fixed at creation, since a key's partition must never change: giving
another count for an existing topic is refused (invalid_config). With --retention
forever and neither --retention-bytes nor --retention-records, a topic keeps every
record.`

const topicUpdateUsage = `
Usage: okiba topic update NAME [flags]

Changes the given fields of an existing topic; every other field keeps its value.
Retention, discard, record size, dedup window, segment size and age and tags may change
(segments already begun keep the sizes they began with); --partitions may not.`

func (c *topicCmd) Run(ctx context.Context, args []string) error {
	usage, examples := topicCreateUsage, `
okiba topic create events
okiba topic create orders --partitions 3 --retention 720h --tag team=payments
okiba topic create audit --retention forever
okiba topic create metrics --retention-bytes 1GiB --discard new`
	if c.op == "update" {
		usage, examples = topicUpdateUsage, `
okiba topic update orders --retention 24h
okiba topic update orders --retention-records 1000000 --dedup-window 0s`
	}
	f := c.app.serverFlags(c.name, usage, examples)
	var cfgFlags topicConfigFlags
	cfgFlags.register(f)
	asJSON := f.Bool("json", false, "print the topic as the API's JSON")
	pos, err := f.parseArgs(args, 1, 1, "NAME [flags]")
	if err != nil {
		return err
	}
	cfg, fields, err := cfgFlags.config(f)
	if err != nil {
		return err
	}
	if c.op == "update" && len(fields) == 0 {
		return f.fail("nothing to update: give at least one field flag (see okiba topic update -h)")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	name := pos[0]
	// The PUT answers 201 or 200 but the client reports only the topic, so ask first.
	_, err = cl.Topic(ctx, name)
	exists := err == nil
	if err != nil && !client.IsCode(err, api.CodeTopicNotFound) {
		return err
	}
	if c.op == "update" && !exists {
		return fmt.Errorf("%w (create it with: okiba topic create %s)", err, name)
	}
	t, err := cl.PutTopic(ctx, name, cfg)
	if err != nil {
		return err // a change of partitions: the server says they are fixed, and what to do
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, t)
	}
	w := c.app.Stdout
	vals := topicConfigValues(t.Config)
	if !exists {
		fmt.Fprintf(w, "created topic %s (partitions %s, retention %s, max_record_size %s)\n",
			t.Name, vals["partitions"], vals["retention"], vals["max_record_size"])
		return nil
	}
	if len(fields) == 0 {
		fmt.Fprintf(w, "updated topic %s: nothing changed (it exists)\n", t.Name)
		return nil
	}
	parts := make([]string, len(fields))
	for i, name := range fields {
		parts[i] = name + "=" + vals[name]
	}
	fmt.Fprintf(w, "updated topic %s: %s\n", t.Name, strings.Join(parts, " "))
	return nil
}

// topicConfigValues renders every field of a topic configuration, keyed by its API name.
func topicConfigValues(c api.TopicConfig) map[string]string {
	sz := func(p *int64) string { return sizeString(deref(p)) }
	limit := func(p *int64, s string) string {
		if deref(p) == 0 {
			return "0 (none)"
		}
		return s
	}
	dedup := human(deref(c.DedupWindow).D())
	if dedup == "0s" {
		dedup += " (off)"
	}
	var tags []string
	for k, v := range c.Tags {
		tags = append(tags, k+"="+v)
	}
	sort.Strings(tags)
	return map[string]string{
		"partitions":        strconv.Itoa(deref(c.Partitions)),
		"retention":         retentionString(deref(c.Retention)),
		"retention_bytes":   limit(c.RetentionBytes, sz(c.RetentionBytes)),
		"retention_records": limit(c.RetentionRecords, strconv.FormatInt(deref(c.RetentionRecords), 10)),
		"discard":           deref(c.Discard),
		"max_record_size":   sz(c.MaxRecordSize),
		"dedup_window":      dedup,
		"segment_bytes":     sz(c.SegmentBytes),
		"segment_age":       human(deref(c.SegmentAge).D()),
		"hash":              deref(c.Hash),
		"tags":              cmp.Or(strings.Join(tags, ","), "-"),
	}
}

var topicConfigOrder = []string{
	"partitions", "retention", "retention_bytes", "retention_records", "discard",
	"max_record_size", "dedup_window", "segment_bytes", "segment_age", "hash", "tags",
}

// ---------------------------------------------------------------------------------------

type topicGetCmd struct {
	app  *app
	name string
}

func (c *topicGetCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba topic get NAME [--json]

Shows a topic's configuration, its partitions and its counters. A partition retains
offsets START to END-1; END is its high watermark, the offset its next record gets.
FIRST and LAST PUBLISH are the publish times of its oldest and newest retained records.`, `
okiba topic get orders
okiba topic get orders --json | jq '.partitions[] | .end'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--json]")
	if err != nil {
		return err
	}
	t, err := cl.Topic(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, t)
	}
	return printTopic(c.app.Stdout, t)
}

func printTopic(out io.Writer, t *api.Topic) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "Topic\t%s\n", t.Name)
	fmt.Fprintf(w, "Created\t%s\n", t.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "Updated\t%s\n", t.UpdatedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "\nConfiguration\t\n")
	vals := topicConfigValues(t.Config)
	for _, k := range topicConfigOrder {
		fmt.Fprintf(w, "  %s\t%s\n", k, vals[k])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPartitions\n")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "PARTITION\tSTART\tEND\tRECORDS\tBYTES\tSEGMENTS\tFIRST PUBLISH\tLAST PUBLISH\t")
	for _, p := range t.Partitions {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", p.Partition, p.Start, p.End, p.Records, p.Bytes, p.Segments,
			publishTime(p.FirstTime), publishTime(p.LastTime))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	st := t.Stats
	fmt.Fprintf(w, "\nCounters\t\n")
	fmt.Fprintf(w, "  records (retained)\t%d\n  bytes (retained)\t%d\n", st.Records, st.Bytes)
	fmt.Fprintf(w, "  published (since creation)\t%d\n  truncated by retention\t%d\n  dedup entries\t%d\n", st.Published, st.Truncated, st.DedupEntries)
	return w.Flush()
}

// recordTime is how record and publish times are shown: to the millisecond, which is
// what the broker keeps.
const recordTime = "2006-01-02T15:04:05.000Z07:00"

func publishTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(recordTime)
}

// ---------------------------------------------------------------------------------------

type topicListCmd struct {
	app  *app
	name string
}

func (c *topicListCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba topic list [--prefix P] [--json]

Lists topics, sorted by name, with their partition count, retained records and bytes,
records published since the topic was created, retention, and the age of their newest
record.`, `
okiba topic list
okiba topic list --prefix orders --json`)
	prefix := f.String("prefix", "", "only topics whose name starts with `PREFIX`")
	asJSON := f.Bool("json", false, "print the API's JSON")
	if _, err := f.parseArgs(args, 0, 0, "[--prefix P] [--json]"); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	ts, err := cl.Topics(ctx, *prefix)
	if err != nil {
		return err
	}
	now := time.Now()
	return printList(c.app, *asJSON, api.TopicList{Topics: ts}, ts, "no topics", tabwriter.AlignRight,
		"NAME\tPARTITIONS\tRECORDS\tBYTES\tPUBLISHED\tRETENTION\tNEWEST\t", func(t api.Topic) string {
			newest := "-"
			var last time.Time
			for _, p := range t.Partitions {
				if p.LastTime != nil && p.LastTime.After(last) {
					last = *p.LastTime
				}
			}
			if !last.IsZero() {
				newest = age(now.Sub(last))
			}
			return fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%s\t%s\t", t.Name, len(t.Partitions), t.Stats.Records, t.Stats.Bytes,
				t.Stats.Published, retentionString(deref(t.Config.Retention)), newest)
		})
}

// ---------------------------------------------------------------------------------------

type topicDeleteCmd struct {
	app  *app
	name string
}

func (c *topicDeleteCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba topic delete NAME [--force]

Deletes a topic with all its records. This cannot be undone. The name can be reused at
once; a new topic of that name starts again at offset 0. A topic with subscriptions or
consumer groups is refused unless --force, which deletes them too (what subscriptions
already put into queues stays there).`, `
okiba topic delete orders
okiba topic delete orders --force`)
	force := f.Bool("force", false, "also delete the topic's subscriptions and consumer groups")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--force]")
	if err != nil {
		return err
	}
	if err := cl.DeleteTopic(ctx, pos[0], *force); err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "deleted topic %s\n", pos[0])
	return nil
}
