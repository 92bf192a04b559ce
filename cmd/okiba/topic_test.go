package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
)

func (h *harness) topic(name string) api.Topic {
	h.t.Helper()
	var t api.Topic
	if err := json.Unmarshal([]byte(h.ok("topic", "get", name, "--json")), &t); err != nil {
		h.t.Fatalf("topic get --json: %v", err)
	}
	return t
}

var publishedRE = regexp.MustCompile(`^partition (\d+) offset (\d+)( \(duplicate\))?$`)

// placed is one line of topic publish: where a record went.
type placed struct {
	partition int
	offset    uint64
	duplicate bool
}

// published parses the per-record lines of topic publish, ignoring the summary line.
func published(t *testing.T, out string) []placed {
	t.Helper()
	var ps []placed
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "published ") {
			continue
		}
		m := publishedRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("publish printed %q, want partition P offset N", l)
		}
		p, _ := strconv.Atoi(m[1])
		o, _ := strconv.ParseUint(m[2], 10, 64)
		ps = append(ps, placed{p, o, m[3] != ""})
	}
	return ps
}

func bodies(rs []api.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, deref(r.Body))
	}
	return out
}

// startCmd runs a command in the background, for commands that run until cancelled. Its
// output may be read while it runs; done yields the exit status.
func (h *harness) startCmd(ctx context.Context, args ...string) (stdout, stderr *testkit.SyncBuffer, done <-chan int) {
	stdout, stderr = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	ch := make(chan int, 1)
	a := &app{Stdout: stdout, Stderr: stderr, Stdin: strings.NewReader(""), Getenv: func(k string) string { return h.env[k] }}
	go func() { ch <- a.run(ctx, args) }()
	return stdout, stderr, ch
}

func TestTopicCreateUpdateGetListDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	out := h.ok("topic", "create", "orders", "--partitions", "3", "--retention", "24h", "--retention-bytes", "1MiB",
		"--retention-records", "100", "--discard", "new", "--max-record-size", "512KiB", "--dedup-window", "1m",
		"--segment-bytes", "8MiB", "--segment-age", "10m", "--tag", "team=a", "--tag", "tier=1")
	contains(t, "create", out, "created topic orders (partitions 3, retention 24h, max_record_size 512KiB)")
	tp := h.topic("orders")
	c := tp.Config
	if *c.Partitions != 3 || c.Retention.Age != 24*time.Hour || *c.RetentionBytes != 1<<20 || *c.RetentionRecords != 100 ||
		*c.Discard != "new" || *c.MaxRecordSize != 512<<10 || c.DedupWindow.D() != time.Minute || *c.SegmentBytes != 8<<20 ||
		c.SegmentAge.D() != 10*time.Minute || c.Tags["team"] != "a" || c.Tags["tier"] != "1" || len(tp.Partitions) != 3 {
		t.Fatalf("created topic: %+v", tp)
	}

	// create on an existing topic is an idempotent PUT: it updates and says so.
	out = h.ok("topic", "create", "orders", "--retention", "forever")
	contains(t, "create again", out, "updated topic orders: retention=forever")
	contains(t, "create unchanged", h.ok("topic", "create", "orders"), "updated topic orders: nothing changed (it exists)")
	// update sends only the flags given.
	out = h.ok("topic", "update", "orders", "--dedup-window", "0s", "--retention-records", "0", "--discard", "old", "--tag", "x=y")
	contains(t, "update", out, "updated topic orders: dedup_window=0s (off) discard=old retention_records=0 (none) tags=x=y")
	c = h.topic("orders").Config
	if !c.Retention.Forever || c.DedupWindow.D() != 0 || *c.RetentionRecords != 0 || *c.Discard != "old" || len(c.Tags) != 1 || c.Tags["x"] != "y" {
		t.Errorf("update not applied: %+v", c)
	}
	if *c.Partitions != 3 || *c.MaxRecordSize != 512<<10 || *c.RetentionBytes != 1<<20 || c.SegmentAge.D() != 10*time.Minute {
		t.Errorf("update changed fields it was not given: %+v", c)
	}

	// Refusals say what to do.
	r := h.fails(1, "topic", "update", "missing", "--retention", "1h")
	contains(t, "update missing", r.err, "okiba topic update: topic_not_found:", "okiba topic create missing")
	if _, err := h.srv.Client.Topic(context.Background(), "missing"); err == nil {
		t.Errorf("update of a missing topic created it")
	}
	r = h.fails(1, "topic", "update", "orders", "--partitions", "4")
	contains(t, "change partitions", r.err, "okiba topic update: invalid_config: partitions", "fixed at creation (3)", "create a new topic")
	r = h.fails(1, "topic", "create", "orders", "--partitions", "1")
	contains(t, "create with other partitions", r.err, "invalid_config: partitions")
	r = h.fails(2, "topic", "update", "orders")
	contains(t, "update nothing", r.err, "nothing to update", "okiba topic update -h")
	r = h.fails(1, "topic", "create", "bad*name")
	contains(t, "bad name", r.err, "okiba topic create: invalid_name:")
	r = h.fails(2, "topic", "create", "t", "--discard", "oldest")
	contains(t, "bad discard", r.err, `--discard must be old or new, got "oldest"`)
	r = h.fails(2, "topic", "create", "t", "--retention", "always")
	contains(t, "bad retention", r.err, `"always" is not a duration or forever`)
	r = h.fails(2, "topic", "create", "t", "--segment-bytes", "lots")
	contains(t, "bad size", r.err, `"lots" is not a size`)
	r = h.fails(1, "topic", "create", "t", "--partitions", "300")
	contains(t, "too many partitions", r.err, "invalid_config: partitions")

	h.ok("topic", "publish", "orders", "a", "b", "--partition", "1")
	out = h.ok("topic", "get", "orders")
	matches(t, "get", out, `Topic\s+orders`)
	matches(t, "get", out, `retention\s+forever\n`)
	matches(t, "get", out, `retention_bytes\s+1MiB\n`)
	matches(t, "get", out, `dedup_window\s+0s \(off\)`)
	matches(t, "get", out, `tags\s+x=y\n`)
	matches(t, "get", out, `PARTITION\s+START\s+END\s+RECORDS\s+BYTES\s+SEGMENTS\s+FIRST PUBLISH\s+LAST PUBLISH`)
	matches(t, "get", out, `\n\s+0\s+0\s+0\s+0\s+0\s+\d+\s+-\s+-\n`)
	matches(t, "get", out, `\n\s+1\s+0\s+2\s+2\s+2\s+1\s+\d{4}-\d\d-\d\dT\S+Z\s+\d{4}-\d\d-\d\dT\S+Z\n`)
	matches(t, "get", out, `published \(since creation\)\s+2\n`)

	h.ok("topic", "create", "audit")
	out = h.ok("topic", "list")
	matches(t, "list", out, `NAME\s+PARTITIONS\s+RECORDS\s+BYTES\s+PUBLISHED\s+RETENTION\s+NEWEST`)
	matches(t, "list", out, `audit\s+1\s+0\s+0\s+0\s+168h\s+-`)
	matches(t, "list", out, `orders\s+3\s+2\s+2\s+2\s+forever\s+\S+`)
	if out := h.ok("topic", "list", "--prefix", "au"); !strings.Contains(out, "audit") || strings.Contains(out, "orders") {
		t.Errorf("list --prefix au:\n%s", out)
	}
	var l api.TopicList
	if err := json.Unmarshal([]byte(h.ok("topic", "list", "--json")), &l); err != nil || len(l.Topics) != 2 || l.Topics[0].Name != "audit" {
		t.Errorf("list --json: %+v %v", l, err)
	}

	contains(t, "delete", h.ok("topic", "delete", "orders"), "deleted topic orders")
	r = h.fails(1, "topic", "get", "orders")
	contains(t, "get deleted", r.err, "okiba topic get: topic_not_found:")
	r = h.fails(1, "topic", "delete", "orders")
	contains(t, "delete again", r.err, "topic_not_found")
	h.ok("topic", "delete", "audit")
	r = h.run("topic", "list")
	if r.code != 0 || r.out != "" || !strings.Contains(r.err, "no topics") {
		t.Errorf("list without topics: %+v", r)
	}
}

func TestTopicPublishAndRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("topic", "create", "events", "--partitions", "4")

	// Records of one key land in one partition, in order.
	keyed := published(t, h.ok("topic", "publish", "events", "a", "b", "c", "--key", "user-7", "--header", "type=click"))
	if len(keyed) != 3 {
		t.Fatalf("published %d records, want 3", len(keyed))
	}
	kp := keyed[0].partition
	for i, p := range keyed {
		if p.partition != kp || p.offset != uint64(i) || p.duplicate {
			t.Fatalf("keyed records: %+v, want one partition, offsets 0, 1, 2", keyed)
		}
	}
	other := published(t, h.ok("topic", "publish", "events", "d", "--key", "user-7"))
	if other[0].partition != kp || other[0].offset != 3 {
		t.Fatalf("a later publish of the key went to %+v, want partition %d offset 3", other[0], kp)
	}

	// From stdin, one record per line; empty lines skipped, \r\n taken off; round robin.
	r := h.runWith(runOpts{stdin: "x\ny\r\n\nz\n"}, "topic", "publish", "events")
	if r.code != 0 {
		t.Fatalf("publish from stdin: %+v", r)
	}
	contains(t, "stdin publish", r.out, "published 3 of 3")
	rr := published(t, r.out)
	if len(rr) != 3 || rr[0].partition == rr[1].partition || rr[1].partition == rr[2].partition {
		t.Errorf("round robin placed %+v", rr)
	}
	// "-" reads stdin too, and a repeated dedup id answers the original's place.
	r = h.runWith(runOpts{stdin: "once\n"}, "topic", "publish", "events", "-", "--partition", "0", "--dedup-id", "d1")
	first := published(t, r.out)
	r = h.runWith(runOpts{stdin: "once again\n"}, "topic", "publish", "events", "--partition", "0", "--dedup-id", "d1")
	again := published(t, r.out)
	if r.code != 0 || len(again) != 1 || !again[0].duplicate || again[0].offset != first[0].offset || again[0].partition != 0 {
		t.Fatalf("duplicate publish: %+v then %+v (%+v)", first, again, r)
	}
	// --whole: all of stdin is one record, byte for byte.
	binary := "\x00\xff\xfe bin\nary\n"
	r = h.runWith(runOpts{stdin: binary}, "topic", "publish", "events", "--whole", "--partition", "3")
	if r.code != 0 {
		t.Fatalf("publish --whole: %+v", r)
	}
	whole := published(t, r.out)
	// --json: one object per record.
	pj := decodeLines[publishJSON](t, h.ok("topic", "publish", "events", "j1", "j2", "--partition", "2", "--json"))
	if len(pj) != 2 || pj[0].Record != 1 || pj[1].Record != 2 || pj[0].Partition == nil || *pj[0].Partition != 2 || pj[0].Error != nil {
		t.Errorf("publish --json: %+v", pj)
	}

	// Reading one partition from the start: the keyed records with their key and headers.
	recs := decodeLines[api.Record](t, h.ok("topic", "read", "events", "--partition", strconv.Itoa(kp), "--json"))
	var mine []api.Record
	for _, rec := range recs {
		if rec.Key != nil {
			mine = append(mine, rec)
		}
	}
	if got := bodies(mine); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("keyed records read back %q", got)
	}
	if mine[0].Offset != 0 || *mine[0].Key != "user-7" || mine[0].Headers["type"] != "click" || mine[0].Time.IsZero() || mine[0].Partition != kp {
		t.Errorf("first record: %+v", mine[0])
	}
	// From an offset, and with --max.
	if got := bodies(decodeLines[api.Record](t, h.ok("topic", "read", "events", "--partition", strconv.Itoa(kp), "--offset", "1", "--max", "2", "--json"))); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("read from offset 1, max 2: %q", got)
	}
	// From last: nothing yet, and it says so on stderr.
	r = h.run("topic", "read", "events", "--partition", "0", "--offset", "last")
	if r.code != 0 || r.out != "" || !strings.Contains(r.err, "no records") {
		t.Errorf("read from last: %+v", r)
	}
	if out := h.ok("topic", "read", "events", "--offset", "last", "--json"); out != "" {
		t.Errorf("read --json from last printed %q", out)
	}
	// The binary record comes back exactly.
	wr := decodeLines[api.Record](t, h.ok("topic", "read", "events", "--partition", "3", "--offset", strconv.FormatUint(whole[0].offset, 10), "--json"))
	if len(wr) != 1 || wr[0].BodyBase64 == nil || wr[0].Body != nil {
		t.Fatalf("binary record read back: %+v", wr)
	}
	if got, _ := base64.StdEncoding.DecodeString(*wr[0].BodyBase64); string(got) != binary {
		t.Errorf("binary record: %q, want %q", got, binary)
	}

	// Every partition, one after another: partition 0 first, each in offset order.
	all := decodeLines[api.Record](t, h.ok("topic", "read", "events", "--json"))
	if tp := h.topic("events"); int64(len(all)) != tp.Stats.Records || len(all) != 11 {
		t.Fatalf("read %d records of %d", len(all), tp.Stats.Records)
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if b.Partition < a.Partition || b.Partition == a.Partition && b.Offset != a.Offset+1 {
			t.Fatalf("records out of order: %d/%d before %d/%d", a.Partition, a.Offset, b.Partition, b.Offset)
		}
	}
	if got := decodeLines[api.Record](t, h.ok("topic", "read", "events", "--max", "3", "--json")); len(got) != 3 {
		t.Errorf("read --max 3 over every partition: %d records", len(got))
	}

	// For people: partition, offset, time, key, headers and body, terminal-safe.
	h.ok("topic", "publish", "events", "red\x1b[31m", "--partition", "1", "--key", "", "--header", "trace=1")
	out := h.ok("topic", "read", "events", "--partition", "1")
	contains(t, "read", out, "partition 1 offset 0\n", "  time:      ", "  key:       (empty)", "  header:    trace=1", "  body (8 bytes):\n    red\\x1b[31m")
	matches(t, "read", out, `time:      \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\S+ ago\)`)
	out = h.ok("topic", "read", "events", "--partition", "3")
	contains(t, "read binary", out, "body ("+strconv.Itoa(len(binary))+" bytes, not UTF-8, base64):\n    "+base64.StdEncoding.EncodeToString([]byte(binary)))
}

func TestTopicReadFollow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("topic", "create", "live", "--partitions", "2")
	h.ok("topic", "publish", "live", "old", "--partition", "0")

	// From last: only what is published after the follower has found the ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, done := h.startCmd(ctx, "topic", "read", "live", "--offset", "last", "--follow", "--json")
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Contains(stderr.String(), "following topic live, 2 partitions") }, "the follower to start")
	h.ok("topic", "publish", "live", "new 0", "--partition", "0")
	h.ok("topic", "publish", "live", "new 1", "--partition", "1")
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Count(stdout.String(), "\n") == 2 }, "both records to be printed")
	h.ok("topic", "publish", "live", "new 0 again", "--partition", "0")
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Count(stdout.String(), "\n") == 3 }, "the third record")
	cancel() // what Ctrl-C does
	if code := <-done; code != 0 {
		t.Fatalf("follow ended with exit %d, want 0\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	recs := decodeLines[api.Record](t, stdout.String())
	got := bodies(recs)
	slices.Sort(got)
	if !slices.Equal(got, []string{"new 0", "new 0 again", "new 1"}) {
		t.Fatalf("followed %q", got)
	}
	for _, rec := range recs {
		if want := map[string]uint64{"new 0": 1, "new 0 again": 2, "new 1": 0}[*rec.Body]; rec.Offset != want {
			t.Errorf("record %q at offset %d, want %d", *rec.Body, rec.Offset, want)
		}
	}

	// One partition from the start, human output: the old record at once, then one
	// published while the follower waits.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	stdout, stderr, done = h.startCmd(ctx2, "topic", "read", "live", "--partition", "0", "--follow")
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Contains(stdout.String(), "new 0 again") }, "the retained records")
	contains(t, "follow stderr", stderr.String(), "following topic live partition 0 from offset 0")
	h.ok("topic", "publish", "live", "late", "--partition", "0")
	testkit.Eventually(t, 15*time.Second, func() bool { return strings.Contains(stdout.String(), "partition 0 offset 3\n") }, "the record published while waiting")
	cancel2()
	if code := <-done; code != 0 {
		t.Fatalf("follow of one partition ended with exit %d\nstderr: %s", code, stderr)
	}
	contains(t, "follow", stdout.String(), "partition 0 offset 0\n", "    old\n", "    late\n")

	// --max ends a follow by itself.
	r := h.run("topic", "read", "live", "--follow", "--max", "2", "--json")
	if r.code != 0 || len(decodeLines[api.Record](t, r.out)) != 2 {
		t.Fatalf("follow --max 2: %+v", r)
	}
}

func TestTopicBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("topic", "create", "t", "--partitions", "2", "--max-record-size", "4")

	r := h.fails(1, "topic", "read", "missing")
	contains(t, "read missing", r.err, "okiba topic read: topic_not_found:")
	r = h.fails(1, "topic", "publish", "missing", "x")
	contains(t, "publish missing", r.err, "okiba topic publish: topic_not_found:", "okiba topic create missing")
	r = h.fails(1, "topic", "get", "missing")
	contains(t, "get missing", r.err, "okiba topic get: topic_not_found:")

	// Partitions the topic does not have.
	r = h.fails(1, "topic", "read", "t", "--partition", "9")
	contains(t, "read bad partition", r.err, "okiba topic read: partition_out_of_range:", "has partitions 0 to 1, not 9")
	r = h.fails(1, "topic", "publish", "t", "x", "--partition", "9")
	contains(t, "publish bad partition", r.err, `okiba topic publish: record 1 ("x"): partition_out_of_range:`, "has partitions 0 to 1, not 9")
	r = h.fails(2, "topic", "publish", "t", "x", "--partition", "-1")
	contains(t, "negative partition", r.err, "--partition must be 0 or more")
	r = h.fails(2, "topic", "read", "t", "--partition", "-1")
	contains(t, "negative partition", r.err, "--partition must be 0 or more")

	// Offsets.
	r = h.fails(2, "topic", "read", "t", "--offset", "latest")
	contains(t, "bad offset word", r.err, `okiba topic read: --offset must be a number, first or last, got "latest"`, "Run 'okiba topic read -h'")
	r = h.fails(2, "topic", "read", "t", "--offset", "-3")
	contains(t, "negative offset", r.err, "--offset must be a number, first or last")
	r = h.fails(2, "topic", "read", "t", "--offset", "5")
	contains(t, "offset without partition", r.err, "--offset 5 needs --partition", "topic t has 2 partitions")
	r = h.fails(1, "topic", "read", "t", "--partition", "0", "--offset", "5")
	contains(t, "offset past the end", r.err, "okiba topic read: offset_out_of_range:", "--offset last")
	r = h.fails(2, "topic", "read", "t", "--wait", "2m")
	contains(t, "bad wait", r.err, "--wait must be between 0s and 60s")
	r = h.fails(2, "topic", "read", "t", "--max", "-1")
	contains(t, "bad max", r.err, "--max must be 0")

	// A record the topic refuses fails alone; the others are published; exit 1.
	r = h.fails(1, "topic", "publish", "t", "ok", "too long", "--partition", "0")
	contains(t, "mixed stdout", r.out, "partition 0 offset 0\n", "published 1 of 2")
	contains(t, "mixed stderr", r.err, `okiba topic publish: record 2 ("too long"): record_too_large:`)
	pj := decodeLines[publishJSON](t, h.fails(1, "topic", "publish", "t", "too long", "--json").out)
	if len(pj) != 1 || pj[0].Error == nil || pj[0].Error.Code != api.CodeRecordTooLarge || pj[0].Partition != nil {
		t.Errorf("publish --json of a refused record: %+v", pj)
	}

	// Publish's own mistakes, caught before anything is sent.
	before := h.topic("t").Stats.Published
	r = h.fails(2, "topic", "publish", "t", "a", "b", "--dedup-id", "d")
	contains(t, "dedup of two", r.err, "--dedup-id names one record, but 2 BODY arguments were given")
	r = h.failsWith(runOpts{stdin: "a\nb\n"}, 2, "topic", "publish", "t", "--dedup-id", "d")
	contains(t, "dedup of stdin lines", r.err, "--dedup-id names one record, but stdin has more than one line")
	r = h.failsWith(runOpts{stdin: "\n\n"}, 2, "topic", "publish", "t")
	contains(t, "empty stdin", r.err, "no records given")
	r = h.fails(2, "topic", "publish", "t", "a", "-")
	contains(t, "stdin and bodies", r.err, `BODY "-" (stdin) cannot be mixed`)
	r = h.fails(2, "topic", "publish", "t", "a", "--whole")
	contains(t, "whole with a body", r.err, "--whole reads the record from stdin")
	r = h.fails(2, "topic", "publish", "t", "a", "--header", "novalue")
	contains(t, "bad header", r.err, `"novalue" is not KEY=VALUE`)
	if after := h.topic("t").Stats.Published; after != before {
		t.Errorf("refused command lines published %d records", after-before)
	}
	r = h.fails(2, "topic", "publish")
	contains(t, "no topic", r.err, "missing arguments: okiba topic publish TOPIC [BODY...] [flags]")
	r = h.fails(2, "topic", "frob")
	contains(t, "unknown subcommand", r.err, `okiba topic: unknown subcommand "frob"`)
}
