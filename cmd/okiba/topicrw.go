package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// topic publish and topic read.

type topicPublishCmd struct {
	app  *app
	name string
}

// publishBatchBytes bounds the bodies, keys and headers of one publish request, so that
// its JSON (escapes, base64) stays well under the server's 16 MiB request limit.
const publishBatchBytes = 2 << 20

// publishJSON is one line of topic publish --json.
type publishJSON struct {
	Record    int        `json:"record"` // 1 for the first record of the command
	Partition *int       `json:"partition,omitempty"`
	Offset    *uint64    `json:"offset,omitempty"`
	Duplicate bool       `json:"duplicate,omitempty"`
	Error     *api.Error `json:"error,omitempty"`
}

func (c *topicPublishCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba topic publish TOPIC [BODY...] [flags]

Publishes records and prints one line per record, in order: the partition and offset it
was given, followed by "(duplicate)" when its dedup id was already published within the
topic's dedup window (the partition and offset are then the original's and nothing new
was appended). A record is durable (on disk) when its line is printed.

Each BODY argument is one record. Without BODY (or with BODY "-") records are read from
stdin, one per line: the line ending (\n or \r\n) is not part of the record and empty
lines are skipped. They are published as they are read, in batches of what is at hand,
so a pipe that stays open (tail -f) is published as its lines come. --whole reads all
of stdin as one record instead, byte for byte, as okiba send does. Bodies and keys that
are not UTF-8 text are sent base64-encoded and arrive unchanged.

Placement: --partition P puts every record in partition P; else --key K puts them in
K's partition (Kafka's murmur2 of the key, so one key's records stay in order in one
partition); else records go round-robin over the partitions.

Each record gets its own result: a failed record is reported on stderr with its number
(1 for the first) and error, the others are published all the same, and the exit status
is 1 if any record failed.`, `
okiba topic publish orders '{"event":"OrderPlaced"}' --key order-42 --header type=OrderPlaced
okiba topic publish orders '{"event":"OrderPaid"}' --key order-42 --dedup-id pay-42
okiba topic publish events one two three --partition 0
tail -f app.log | okiba topic publish logs
okiba topic publish images --whole < picture.png`)
	key := f.String("key", "", "record `KEY`: records of one key go to one partition, in order (an empty key is a key)")
	partition := f.Int("partition", 0, "put the records in partition `P` (numbered from 0)")
	dedup := f.String("dedup-id", "", "dedup `ID` of the record: a repeat within the topic's dedup window is a duplicate")
	whole := f.Bool("whole", false, "read stdin as one record, byte for byte, instead of one record per line")
	var headers kvFlag
	f.Var(&headers, "header", "`KEY=VALUE` header, repeatable")
	asJSON := f.Bool("json", false, `print one JSON object per record: {"record","partition","offset","duplicate","error"}`)
	pos, err := f.parseArgs(args, 1, -1, "TOPIC [BODY...] [flags]")
	if err != nil {
		return err
	}
	given := f.given()
	bodies := pos[1:]
	fromStdin := len(bodies) == 0 || (len(bodies) == 1 && bodies[0] == "-")
	switch {
	case given["partition"] && *partition < 0:
		return f.fail("--partition must be 0 or more (partitions are numbered from 0), got %d", *partition)
	case !fromStdin && slices.Contains(bodies, "-"):
		return f.fail(`BODY "-" (stdin) cannot be mixed with other BODY arguments`)
	case *whole && !fromStdin:
		return f.fail("--whole reads the record from stdin: give no BODY with it")
	case *dedup != "" && len(bodies) > 1:
		return f.fail("--dedup-id names one record, but %d BODY arguments were given: publish them one by one, each with its own dedup id", len(bodies))
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	p := &publisher{c: c, cl: cl, fail: f.fail, topic: pos[0], asJSON: *asJSON,
		tmpl: client.Record{HasKey: given["key"], Key: []byte(*key), Headers: headers.m, DedupID: *dedup}}
	if given["partition"] {
		p.tmpl.Partition = partition
	}
	switch {
	case !fromStdin:
		for _, b := range bodies {
			if err := p.add(ctx, []byte(b)); err != nil {
				return err
			}
		}
	case *whole:
		if a.StdinTTY {
			fmt.Fprintln(a.Stderr, "reading the record from stdin; end it with Ctrl-D")
		}
		body, err := io.ReadAll(a.Stdin)
		if err != nil {
			return fmt.Errorf("read the record from stdin: %w", err)
		}
		if err := p.add(ctx, body); err != nil {
			return err
		}
	default:
		if a.StdinTTY {
			fmt.Fprintln(a.Stderr, "reading records from stdin, one per line; end with Ctrl-D")
		}
		if err := p.lines(ctx, a.Stdin); err != nil {
			return err
		}
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	if p.n == 0 {
		return f.fail("no records given (stdin had no lines that are not empty)")
	}
	if p.n > 1 && !*asJSON {
		fmt.Fprintf(a.Stdout, "published %d of %d\n", p.n-p.failed, p.n)
	}
	if p.failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// publisher gathers records into batches, publishes them, and reports each result.
type publisher struct {
	c      *topicPublishCmd
	cl     *client.Client
	fail   func(format string, args ...any) error // a usage error of the command
	topic  string
	asJSON bool
	tmpl   client.Record // every record but its body

	batch  []client.Record
	bytes  int
	n      int // records published or failed so far
	failed int
}

func (p *publisher) add(ctx context.Context, body []byte) error {
	if p.tmpl.DedupID != "" && p.n+len(p.batch) > 0 {
		return p.fail("--dedup-id names one record, but stdin has more than one line: publish them one by one, each with its own dedup id, or use --whole for one record")
	}
	size := len(body) + len(p.tmpl.Key)
	for k, v := range p.tmpl.Headers {
		size += len(k) + len(v)
	}
	if len(p.batch) == api.MaxPublishBatch || (len(p.batch) > 0 && p.bytes+size > publishBatchBytes) {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	r := p.tmpl
	r.Body = body
	p.batch = append(p.batch, r)
	p.bytes += size
	return nil
}

// lines publishes stdin one record per non-empty line. A batch is sent when it is full
// or when the input has nothing more at hand, so that a slow pipe is not held back.
func (p *publisher) lines(ctx context.Context, r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			if aerr := p.add(ctx, line); aerr != nil {
				return aerr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read records from stdin: %w", err)
		}
		// With --dedup-id there is one record: read on to make sure of it first.
		if br.Buffered() == 0 && p.tmpl.DedupID == "" {
			if err := p.flush(ctx); err != nil {
				return err
			}
		}
	}
}

func (p *publisher) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	a := p.c.app
	res, err := p.cl.PublishRecords(ctx, p.topic, p.batch)
	if err != nil {
		if p.n > 0 {
			fmt.Fprintf(a.Stderr, "okiba %s: the first %d records were processed as shown\n", p.c.name, p.n)
		}
		if client.IsCode(err, api.CodeTopicNotFound) {
			return fmt.Errorf("%w (create it with: okiba topic create %s)", err, p.topic)
		}
		return err
	}
	for i, r := range res {
		p.report(p.n+i+1, p.batch[i].Body, r)
	}
	p.n += len(res)
	p.batch, p.bytes = p.batch[:0], 0
	return nil
}

// report prints one record's result: successes on stdout, failures on stderr.
func (p *publisher) report(n int, body []byte, r client.Published) {
	a := p.c.app
	if r.Err != nil {
		p.failed++
	}
	if p.asJSON {
		out := publishJSON{Record: n}
		if r.Err != nil {
			if !errors.As(r.Err, &out.Error) {
				out.Error = &api.Error{Code: api.CodeInternal, Message: r.Err.Error()}
			}
		} else {
			out.Partition, out.Offset, out.Duplicate = &r.Partition, &r.Offset, r.Duplicate
		}
		_ = printJSON(a.Stdout, out)
		return
	}
	if r.Err != nil {
		fmt.Fprintf(a.Stderr, "okiba %s: record %d (%s): %v\n", p.c.name, n, preview(body, 40), r.Err)
		return
	}
	dup := ""
	if r.Duplicate {
		dup = " (duplicate)"
	}
	fmt.Fprintf(a.Stdout, "partition %d offset %d%s\n", r.Partition, r.Offset, dup)
}

// ---------------------------------------------------------------------------------------

type topicReadCmd struct {
	app  *app
	name string
}

// readBatch is how many records one read of a partition asks for.
const readBatch = 1000

func (c *topicReadCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags(c.name, `
Usage: okiba topic read TOPIC [--partition P] [--offset N|first|last] [--max N] [--follow] [--wait D] [--json]

Reads records by offset, without a consumer group: reading changes nothing, and every
reader sees every record. Each record is printed with its partition, offset, publish
time, key, headers and body.

--offset is where to start: first (the default) is the partition's start, its oldest
retained record; last is its end, the offset the next record gets, so that only new
records are read (useful with --follow); a number N is that offset, and needs
--partition on a topic of several partitions, since offsets are per partition.

Without --partition every partition is read. Without --follow the partitions are read
one after another, partition 0 first, each from --offset to its end in offset order;
the read stops at a partition's end, or, with --wait D, once no record came for D.
With --follow the partitions are read at once and records are printed as they arrive:
in offset order within a partition, with no order across partitions. --follow keeps
long-polling (--wait at a time) until interrupted (Ctrl-C), then exits with status 0.

--max N stops after N records in all. Records deleted by retention before they are read
are skipped with a note on stderr. --json prints one JSON object per line, the API's
record: partition, offset, time, key (or key_base64 for a key that is not UTF-8),
headers and body (or body_base64).`, `
okiba topic read orders
okiba topic read orders --partition 1 --offset 17 --max 10
okiba topic read orders --offset last --follow
okiba topic read orders --json | jq -r .body`)
	partition := f.Int("partition", 0, "read only partition `P` (numbered from 0)")
	offsetArg := f.String("offset", "first", "where to start: an `OFFSET` number, first (the partition's start) or last (its end)")
	maxN := f.Int("max", 0, "stop after `N` records in all; 0 = no limit")
	follow := f.Bool("follow", false, "keep reading and print records as they are published, until interrupted")
	wait := f.Duration("wait", 0, "wait up to this long at a partition's end for a record, 0..60s (default 0s: stop at the end; 30s with --follow)")
	asJSON := f.Bool("json", false, "print one JSON object per record and line (the API's record)")
	pos, err := f.parseArgs(args, 1, 1, "TOPIC [flags]")
	if err != nil {
		return err
	}
	given := f.given()
	var offset uint64
	from := *offsetArg
	if from != "first" && from != "last" {
		if offset, err = strconv.ParseUint(from, 10, 64); err != nil {
			return f.fail("--offset must be a number, first or last, got %q", from)
		}
		from = ""
	}
	switch {
	case given["partition"] && *partition < 0:
		return f.fail("--partition must be 0 or more (partitions are numbered from 0), got %d", *partition)
	case *maxN < 0:
		return f.fail("--max must be 0 (no limit) or more, got %d", *maxN)
	case *wait < 0 || *wait > api.MaxWait:
		return f.fail("--wait must be between 0s and 60s, got %v", *wait)
	}
	if *follow && !given["wait"] {
		*wait = 30 * time.Second
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	name := pos[0]
	t, err := cl.Topic(ctx, name)
	if err != nil {
		return err
	}
	parts := t.Partitions
	if given["partition"] {
		if *partition >= len(t.Partitions) {
			return &api.Error{Code: api.CodePartitionOutOfRange,
				Message: fmt.Sprintf("topic %q has partitions 0 to %d, not %d", name, len(t.Partitions)-1, *partition)}
		}
		parts = t.Partitions[*partition : *partition+1]
	} else if from == "" && len(parts) > 1 {
		return f.fail("--offset %d needs --partition: offsets are per partition, and topic %s has %d partitions", offset, name, len(parts))
	}
	r := &topicReader{app: a, cl: cl, topic: name, wait: *wait, follow: *follow, asJSON: *asJSON, max: *maxN}
	starts := make([]readStart, len(parts))
	for i, p := range parts {
		starts[i] = readStart{partition: p.Partition, offset: offset, explicit: from == "", start: p.Start}
		switch from {
		case "first":
			starts[i].offset = p.Start
		case "last":
			starts[i].offset = p.End
		}
	}
	if *follow {
		err = r.followAll(ctx, starts)
	} else {
		for _, s := range starts {
			if err = r.partition(ctx, s); err != nil || r.full() {
				break
			}
		}
	}
	if errors.Is(err, errEnough) {
		err = nil
	}
	if err == nil && r.printed == 0 && !*asJSON && !*follow {
		fmt.Fprintln(a.Stderr, "no records")
	}
	return err
}

// readStart is where the read of one partition begins.
type readStart struct {
	partition int
	offset    uint64
	explicit  bool   // the offset was given as a number
	start     uint64 // the partition's start before the read, for the hint
}

// hint says what to do about an explicit offset the partition does not have: one below
// its start (deleted by retention) or past its end.
func (s readStart) hint() string {
	if s.offset < s.start {
		return "read from the oldest retained record with --offset first"
	}
	return "read new records from the end with --offset last --follow"
}

// errEnough ends the reads once --max records are printed.
var errEnough = errors.New("enough records")

// topicReader reads partitions and prints their records; with --follow several
// partitions print through it at once.
type topicReader struct {
	app    *app
	cl     *client.Client
	fail   func(format string, args ...any) error // a usage error of the command
	topic  string
	wait   time.Duration
	follow bool
	asJSON bool
	max    int // 0: no limit

	mu      sync.Mutex
	printed int
}

func (r *topicReader) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max > 0 && r.printed >= r.max
}

// followAll reads every partition of starts at once until ctx ends (or --max is reached,
// or a read fails, which stops the others).
func (r *topicReader) followAll(ctx context.Context, starts []readStart) error {
	a := r.app
	if len(starts) == 1 {
		fmt.Fprintf(a.Stderr, "following topic %s partition %d from offset %d; stop with Ctrl-C\n", r.topic, starts[0].partition, starts[0].offset)
	} else {
		fmt.Fprintf(a.Stderr, "following topic %s, %d partitions; stop with Ctrl-C\n", r.topic, len(starts))
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, s := range starts {
		wg.Go(func() {
			if err := r.partition(rctx, s); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil // interrupted: the way a follow ends
	}
	return context.Cause(rctx)
}

// partition reads one partition from s until its end (or, following, until ctx ends),
// printing each record.
func (r *topicReader) partition(ctx context.Context, s readStart) error {
	off := s.offset
	for {
		n := readBatch
		if r.max > 0 {
			r.mu.Lock()
			n = min(n, r.max-r.printed)
			r.mu.Unlock()
			if n <= 0 {
				return errEnough
			}
		}
		b, err := r.cl.ReadPartition(ctx, r.topic, s.partition, client.ReadOptions{Offset: off, Max: n, Wait: r.wait})
		if err != nil {
			if client.IsCode(err, api.CodeOffsetOutOfRange) {
				if s.explicit && off == s.offset {
					return fmt.Errorf("%w (%s)", err, s.hint())
				}
				if next, ok := r.skipGone(ctx, s.partition, off); ok {
					off = next
					continue
				}
			}
			return err
		}
		for _, rec := range b.Records {
			if err := r.print(rec); err != nil {
				return err
			}
		}
		off = b.Next
		if !r.follow && (len(b.Records) == 0 || (off >= b.End && r.wait == 0)) {
			return nil
		}
	}
}

// skipGone moves a read past records that retention deleted before they were read, and
// says so on stderr.
func (r *topicReader) skipGone(ctx context.Context, partition int, off uint64) (uint64, bool) {
	t, err := r.cl.Topic(ctx, r.topic)
	if err != nil || partition >= len(t.Partitions) {
		return 0, false
	}
	p := t.Partitions[partition]
	if off >= p.Start {
		return 0, false // past the end: the topic was deleted and created again
	}
	r.mu.Lock()
	fmt.Fprintf(r.app.Stderr, "okiba topic read: offsets %d to %d of %s partition %d were deleted by retention before they were read; reading on from %d\n",
		off, p.Start-1, r.topic, partition, p.Start)
	r.mu.Unlock()
	return p.Start, true
}

// print writes one record, or returns errEnough when --max records are printed.
func (r *topicReader) print(rec client.TopicRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.max > 0 && r.printed >= r.max {
		return errEnough
	}
	w := r.app.Stdout
	var err error
	if r.asJSON {
		err = printJSON(w, wireRecord(rec))
	} else {
		if r.printed > 0 {
			fmt.Fprintln(w)
		}
		_, err = io.WriteString(w, formatRecord(rec, time.Now()))
	}
	if err != nil {
		return err
	}
	r.printed++
	if r.max > 0 && r.printed >= r.max {
		return errEnough
	}
	return nil
}

// wireRecord turns a record read back into the API's JSON record.
func wireRecord(rec client.TopicRecord) api.Record {
	out := api.Record{Partition: rec.Partition, Offset: rec.Offset, Time: rec.Time.UTC(), Headers: rec.Headers}
	out.Body, out.BodyBase64 = api.EncodeBody(rec.Body)
	if rec.HasKey {
		out.Key, out.KeyBase64 = api.EncodeBody(rec.Key)
	}
	return out
}

// formatRecord writes one record for a person to read.
func formatRecord(rec client.TopicRecord, now time.Time) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "partition %d offset %d\n", rec.Partition, rec.Offset)
	fmt.Fprintf(&b, "  time:      %s (%s ago)\n", rec.Time.UTC().Format(recordTime), age(now.Sub(rec.Time)))
	switch {
	case !rec.HasKey:
	case len(rec.Key) == 0:
		fmt.Fprintf(&b, "  key:       (empty)\n")
	case utf8.Valid(rec.Key):
		fmt.Fprintf(&b, "  key:       %s\n", printable(string(rec.Key)))
	default:
		fmt.Fprintf(&b, "  key:       (%d bytes, not UTF-8, base64) %s\n", len(rec.Key), base64.StdEncoding.EncodeToString(rec.Key))
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Headers)) {
		fmt.Fprintf(&b, "  header:    %s=%s\n", printable(k), printable(rec.Headers[k]))
	}
	if utf8.Valid(rec.Body) {
		fmt.Fprintf(&b, "  body (%d bytes):\n%s\n", len(rec.Body), indentBody(printable(string(rec.Body))))
	} else {
		fmt.Fprintf(&b, "  body (%d bytes, not UTF-8, base64):\n    %s\n", len(rec.Body), base64.StdEncoding.EncodeToString(rec.Body))
	}
	return b.String()
}
