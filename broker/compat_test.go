package broker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/queue"
)

// TestOpenWave1Fixture opens data directories written by the broker as it was before the
// reshape (testdata/wave1: made by make.sh, which builds gen/main.go at that commit) and
// checks that today's broker finds everything expect.json says they hold: every queue
// with its configuration and counters, every message with its state, the live leases
// (their receipts still extend and ack), the dedup entries, the dead letters with their
// reasons, and the redrive task, which resumes and completes. Two directories: one
// closed cleanly (everything in the final checkpoint) and one cut off by a power loss
// (a checkpoint and log records after it).
//
// A format change that cannot keep these passing needs a migration, not a new fixture.
func TestOpenWave1Fixture(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "wave1", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp wave1Expect
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatalf("expect.json: %v", err)
	}
	if len(exp.Fixtures) < 2 {
		t.Fatalf("expect.json describes %d fixtures, want the clean and the crashed one", len(exp.Fixtures))
	}
	for _, fx := range exp.Fixtures {
		t.Run(fx.Dir, func(t *testing.T) {
			t.Parallel() // each opens a copy of its fixture
			checkWave1(t, fx)
		})
	}
}

func checkWave1(t *testing.T, fx wave1Fixture) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "wave1", fx.Dir))); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.UnixMilli(fx.ClockMS))
	b, err := broker.Open(broker.Config{Dir: dir, Clock: clk, MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	rec := b.Recovery()
	if !rec.Checkpoint {
		t.Errorf("recovery did not use the checkpoint: %+v", rec)
	}
	if fx.ReplayedRecords > 0 && rec.Records == 0 {
		t.Errorf("recovery replayed no records after the checkpoint; the fixture has %d", fx.ReplayedRecords)
	}
	t.Logf("recovered %d queues, %d messages, %d records after the checkpoint (the writing broker replayed %d)",
		rec.Queues, rec.Messages, rec.Records, fx.ReplayedRecords)

	// Queues that a running redrive task reads or fills change under the test: the
	// broker resumes the task as soon as it opens.
	moving := map[string]bool{}
	for _, task := range fx.Tasks {
		if task.State != "running" {
			continue
		}
		moving[task.Source] = true
		if task.Target != "" {
			moving[task.Target] = true
		}
		for _, q := range fx.Queues {
			if q.Name != task.Source {
				continue
			}
			for _, m := range q.Messages {
				if m.Dead != nil && task.Target == "" {
					moving[m.Dead.SourceName] = true
				}
			}
		}
	}

	// Queues: the same names, ids, times, configurations and statistics.
	var names []string
	for _, qi := range b.Queues("") {
		names = append(names, qi.Name)
	}
	var want []string
	for _, q := range fx.Queues {
		want = append(want, q.Name)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("queues %v, want %v", names, want)
	}
	for _, q := range fx.Queues {
		qi, err := b.Queue(q.Name)
		if err != nil {
			t.Fatalf("queue %s: %v", q.Name, err)
		}
		got := wave1Queue{Name: qi.Name, ID: qi.ID, CreatedAtMS: qi.CreatedAt, UpdatedAtMS: qi.UpdatedAt,
			Config: w1Config(qi.Config), DeadLetterSources: qi.DeadLetterSources, Stats: w1Stats(qi.Stats)}
		wantQ := q
		wantQ.Messages = nil
		if moving[q.Name] {
			// Depths and the redrive counters move with the task: they are checked once it
			// has ended (checkMoved); here they must not have gone back.
			live, fixed := got.Stats.Counters, q.Stats.Counters
			if live.RedrivenIn < fixed.RedrivenIn || live.RedrivenOut < fixed.RedrivenOut {
				t.Errorf("queue %s: redriven in/out %d/%d, fewer than the fixture's %d/%d", q.Name,
					live.RedrivenIn, live.RedrivenOut, fixed.RedrivenIn, fixed.RedrivenOut)
			}
			live.RedrivenIn, live.RedrivenOut = fixed.RedrivenIn, fixed.RedrivenOut
			got.Stats = q.Stats
			got.Stats.Counters = live
		}
		if !reflect.DeepEqual(got, wantQ) {
			t.Errorf("queue %s:\n got %s\nwant %s", q.Name, js(got), js(wantQ))
		}
	}

	// Messages: in every queue the task does not touch, exactly those of the fixture. A
	// task's source is read before its targets, so that a message moving meanwhile is
	// seen in one of them at least.
	byQueue := map[string][]wave1Message{}
	for _, task := range fx.Tasks {
		if task.State == "running" {
			byQueue[task.Source] = peekAll(t, b, task.Source)
		}
	}
	for _, q := range fx.Queues {
		if _, ok := byQueue[q.Name]; !ok {
			byQueue[q.Name] = peekAll(t, b, q.Name)
		}
		if !moving[q.Name] {
			compareMessages(t, q.Name, byQueue[q.Name], q.Messages)
		}
	}
	// In the task's queues, every message of the fixture is where it was, as it was, or
	// (for the task's selection) already moved by the resumed task; nothing else appears.
	for _, task := range fx.Tasks {
		if task.State == "running" {
			checkMoving(t, fx, task, byQueue)
		}
	}
	for _, d := range fx.DeadLetters {
		if moving[d.Queue] {
			continue // checked with the task's messages
		}
		m, ok := find(byQueue[d.Queue], d.ID)
		if !ok || m.Dead == nil || m.Dead.SourceName != d.Source || m.Dead.Reason != d.Reason || m.Dead.Description != d.Description {
			t.Errorf("dead letter %s in %s (from %s, %s): found %s", d.ID, d.Queue, d.Source, d.Reason, js(m))
		}
	}

	// What a receive may hand out follows from the states: ordered groups with a message
	// in flight or a delayed head are held; every other ready message is deliverable.
	for _, q := range fx.Queues {
		if !moving[q.Name] {
			checkReceivable(t, b, q)
		}
	}

	// Dedup entries: re-sending answers the original id, as a duplicate.
	for _, d := range fx.Dedup {
		res, err := b.Send(ctx, d.Queue, []queue.SendInput{{Payload: queue.Payload{Body: []byte(d.Body), Group: d.Group, DedupID: d.DedupID}, Delay: -1}})
		if err != nil {
			t.Fatalf("dedup resend to %s: %v", d.Queue, err)
		}
		if r := res[0]; r.Err != nil || !r.Duplicate || queue.FormatID(r.ID) != d.ID {
			t.Errorf("dedup entry %q (group %q, body %q) of %s in %s lost: resend answered id %s, duplicate %v, error %v",
				d.DedupID, d.Group, d.Body, d.ID, d.Queue, queue.FormatID(r.ID), r.Duplicate, r.Err)
		}
	}

	// Receipts of ended leases are stale, not invalid: the receipt key survived.
	for _, s := range fx.StaleReceipts {
		errs, err := b.Ack(ctx, s.Queue, []string{s.Receipt})
		if err != nil {
			t.Fatalf("ack of a stale receipt in %s: %v", s.Queue, err)
		}
		if !errors.Is(errs[0], queue.ErrReceiptStale) {
			t.Errorf("receipt of %s in %s (delivery %d): ack answered %v, want stale", s.ID, s.Queue, s.Deliveries, errs[0])
		}
	}

	// Live leases: each receipt extends, then acks, then is stale.
	for _, l := range fx.Leases {
		errs, err := b.Extend(ctx, l.Queue, []string{l.Receipt}, time.Hour)
		if err != nil || errs[0] != nil {
			t.Errorf("extend of the lease on %s in %s: %v %v", l.ID, l.Queue, err, errs)
			continue
		}
		id := parseID(t, l.ID)
		pm, err := b.GetMessage(ctx, l.Queue, id)
		if err != nil {
			t.Errorf("lease on %s in %s: %v", l.ID, l.Queue, err)
			continue
		}
		if pm.State != queue.StateInFlight || pm.Deliveries != l.Deliveries || pm.VisibleAt != clk.Now().Add(time.Hour).UnixMilli() {
			t.Errorf("lease on %s in %s after extend: %s, %d deliveries, until %d; want in flight, %d, until %d",
				l.ID, l.Queue, pm.State, pm.Deliveries, pm.VisibleAt, l.Deliveries, clk.Now().Add(time.Hour).UnixMilli())
		}
		if errs, err := b.Ack(ctx, l.Queue, []string{l.Receipt}); err != nil || errs[0] != nil {
			t.Errorf("ack of the lease on %s in %s: %v %v", l.ID, l.Queue, err, errs)
		}
		if errs, err := b.Ack(ctx, l.Queue, []string{l.Receipt}); err != nil || !errors.Is(errs[0], queue.ErrReceiptStale) {
			t.Errorf("second ack of the lease on %s in %s: %v %v, want stale", l.ID, l.Queue, err, errs)
		}
	}

	// The redrive task: listed with its progress, then resumed to the end.
	tasks := map[uint64]queue.Task{}
	for _, task := range b.Tasks() {
		tasks[task.ID] = task
	}
	if len(tasks) != len(fx.Tasks) {
		t.Errorf("%d redrive tasks, want %d", len(tasks), len(fx.Tasks))
	}
	for _, want := range fx.Tasks {
		got, ok := tasks[want.ID]
		if !ok {
			t.Errorf("redrive task %d lost", want.ID)
			continue
		}
		g := w1Task(got)
		if want.State != "running" {
			if !reflect.DeepEqual(g, want) {
				t.Errorf("task %d:\n got %s\nwant %s", want.ID, js(g), js(want))
			}
			continue
		}
		if (g.State != "running" && g.State != "completed") || g.Moved < want.Moved || g.Cursor < want.Cursor {
			t.Errorf("task %d lost its progress: %s, want running (or completed) at or past %s", want.ID, js(g), js(want))
		}
		g.State, g.Moved, g.Skipped, g.Cursor, g.UpdatedAtMS = want.State, want.Moved, want.Skipped, want.Cursor, want.UpdatedAtMS
		if !reflect.DeepEqual(g, want) {
			t.Errorf("task %d:\n got %s\nwant %s", want.ID, js(g), js(want))
		}
		done := finishTask(t, b, clk, want.ID)
		if done.State != queue.TaskCompleted || done.Moved+done.Skipped != want.Total || done.Skipped != want.Skipped {
			t.Errorf("task %d ended %s with %d moved and %d skipped; want completed, %d moved", want.ID, done.State, done.Moved, done.Skipped, want.Total-want.Skipped)
		}
		checkMoved(t, b, fx, want)
	}
}

// checkMoving checks the queues of a running task while it may be moving messages: each
// message the fixture has in them is still there unchanged or, if it is one the task
// moves, already in its target as a redriven message; nothing else is there.
func checkMoving(t *testing.T, fx wave1Fixture, task wave1Task, byQueue map[string][]wave1Message) {
	t.Helper()
	src := fxQueue(fx, task.Source)
	seen := map[string]bool{}
	for _, want := range src.Messages {
		seen[want.ID] = true
		if got, ok := find(byQueue[task.Source], want.ID); ok {
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: message %s\n got %s\nwant %s", task.Source, want.ID, js(got), js(want))
			}
			continue
		}
		target := targetOf(task, want)
		got, ok := find(byQueue[target], want.ID)
		if !ok {
			t.Errorf("message %s of %s lost: neither there nor in %s", want.ID, task.Source, target)
			continue
		}
		checkRedriven(t, target, got, want)
	}
	for _, name := range targets(fx, task) {
		fq := fxQueue(fx, name)
		for _, want := range fq.Messages {
			seen[want.ID] = true
			got, ok := find(byQueue[name], want.ID)
			if !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: message %s\n got %s\nwant %s", name, want.ID, js(got), js(want))
			}
		}
		for _, got := range byQueue[name] {
			if !seen[got.ID] {
				t.Errorf("%s: unexpected message %s", name, js(got))
			}
		}
	}
	for _, got := range byQueue[task.Source] {
		if !seen[got.ID] {
			t.Errorf("%s: unexpected message %s", task.Source, js(got))
		}
	}
}

// checkRedriven checks a message moved by redrive against the dead letter it was: the
// same id, body, attributes, group and dedup id, delivered 0 times, ready, no longer a
// dead letter.
func checkRedriven(t *testing.T, queueName string, got, dead wave1Message) {
	t.Helper()
	w := dead
	w.Seq, w.EnteredAtMS, w.Dead, w.Deliveries, w.FirstDeliveredMS, w.VisibleAtMS, w.State =
		got.Seq, got.EnteredAtMS, nil, 0, 0, 0, "ready"
	if !reflect.DeepEqual(got, w) {
		t.Errorf("%s: redriven message %s\n got %s\nwant %s", queueName, dead.ID, js(got), js(w))
	}
}

// checkMoved checks, after a task has completed, that every message it was to move is
// in its target and the source and target counters account for the moves. The fixture's
// task selects every message of its source (no filter), and none is leased.
func checkMoved(t *testing.T, b *broker.Broker, fx wave1Fixture, task wave1Task) {
	t.Helper()
	src := fxQueue(fx, task.Source)
	now := map[string][]wave1Message{}
	get := func(name string) []wave1Message {
		if _, ok := now[name]; !ok {
			now[name] = peekAll(t, b, name)
		}
		return now[name]
	}
	for _, want := range src.Messages {
		if _, ok := find(get(task.Source), want.ID); ok {
			t.Errorf("message %s still in %s after the redrive completed", want.ID, task.Source)
			continue
		}
		target := targetOf(task, want)
		got, ok := find(get(target), want.ID)
		if !ok {
			t.Errorf("message %s lost by the redrive: not in %s", want.ID, target)
			continue
		}
		checkRedriven(t, target, got, want)
	}
	remaining := uint64(task.Total - task.Moved - task.Skipped)
	out, err := b.Queue(task.Source)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.Stats.RedrivenOut, src.Stats.Counters.RedrivenOut+remaining; got != want {
		t.Errorf("%s: redriven_out %d after the task, want %d", task.Source, got, want)
	}
	var in uint64
	for _, name := range targets(fx, task) {
		qi, err := b.Queue(name)
		if err != nil {
			t.Fatal(err)
		}
		in += qi.Stats.RedrivenIn - fxQueue(fx, name).Stats.Counters.RedrivenIn
	}
	if in != remaining {
		t.Errorf("targets of task %d received %d redriven messages after the fixture, want %d", task.ID, in, remaining)
	}
}

// checkReceivable receives until the queue has nothing deliverable and checks what came
// against the fixture's states.
func checkReceivable(t *testing.T, b *broker.Broker, q wave1Queue) {
	t.Helper()
	held := map[string]bool{}
	head := map[string]wave1Message{}
	for _, m := range q.Messages {
		if m.Group == "" || !q.Config.OrderedGroups {
			continue
		}
		if h, ok := head[m.Group]; !ok || m.Seq < h.Seq {
			head[m.Group] = m
		}
		if m.State == "in_flight" {
			held[m.Group] = true
		}
	}
	for g, h := range head {
		if h.State != "ready" {
			held[g] = true
		}
	}
	allowed, required := map[string]bool{}, map[string]bool{}
	for _, m := range q.Messages {
		if m.State != "ready" || q.Config.OrderedGroups && held[m.Group] {
			continue
		}
		allowed[m.ID] = true
		if !q.Config.OrderedGroups || m.Group == "" || head[m.Group].ID == m.ID {
			required[m.ID] = true
		}
	}
	got := map[string]bool{}
	for i := 0; ; i++ {
		ms, err := b.Receive(context.Background(), q.Name, broker.ReceiveOptions{Max: 1000, Wait: 0, Visibility: time.Hour})
		if err != nil {
			t.Fatalf("receive from %s: %v", q.Name, err)
		}
		if len(ms) == 0 {
			break
		}
		if i > len(q.Messages) {
			t.Fatalf("receive from %s keeps returning messages", q.Name)
		}
		for _, m := range ms {
			id := queue.FormatID(m.ID)
			if !allowed[id] || got[id] {
				t.Errorf("%s: received %s (%q), which the fixture's states do not allow", q.Name, id, m.Payload.Body)
			}
			got[id] = true
		}
	}
	for id := range required {
		if !got[id] {
			t.Errorf("%s: message %s is deliverable in the fixture but was not received", q.Name, id)
		}
	}
}

// finishTask drives the fake clock until redrive task id has ended: the task waits on the
// clock between batches to keep its rate. The clock moves a second at a time, and only
// when the task has made no progress for a while, so that it never runs far ahead.
func finishTask(t *testing.T, b *broker.Broker, clk *clock.Fake, id uint64) queue.Task {
	t.Helper()
	var task queue.Task
	var last int64 = -1
	stalled := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool {
		var err error
		if task, err = b.Task(id); err != nil {
			t.Fatal(err)
		}
		if task.State != queue.TaskRunning {
			return true
		}
		if task.Moved+task.Skipped != last {
			last, stalled = task.Moved+task.Skipped, time.Now()
		} else if time.Since(stalled) > 20*time.Millisecond {
			clk.Advance(time.Second)
			stalled = time.Now()
		}
		return false
	}, "redrive task %d to finish; %s", id, testkit.Lazy(func() string { return fmt.Sprintf("last seen %+v", task) }))
	return task
}

func targetOf(task wave1Task, m wave1Message) string {
	if task.Target != "" {
		return task.Target
	}
	if m.Dead != nil {
		return m.Dead.SourceName
	}
	return ""
}

// targets lists the queues task moves messages into.
func targets(fx wave1Fixture, task wave1Task) []string {
	var out []string
	for _, m := range fxQueue(fx, task.Source).Messages {
		if n := targetOf(task, m); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func fxQueue(fx wave1Fixture, name string) wave1Queue {
	for _, q := range fx.Queues {
		if q.Name == name {
			return q
		}
	}
	return wave1Queue{Name: name}
}

func compareMessages(t *testing.T, name string, got, want []wave1Message) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	for _, w := range want {
		g, ok := find(got, w.ID)
		if !ok {
			t.Errorf("%s: message %s lost: %s", name, w.ID, js(w))
		} else if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: message %s\n got %s\nwant %s", name, w.ID, js(g), js(w))
		}
	}
	for _, g := range got {
		if _, ok := find(want, g.ID); !ok {
			t.Errorf("%s: unexpected message %s", name, js(g))
		}
	}
	if len(got) == len(want) {
		t.Errorf("%s: messages in another order:\n got %s\nwant %s", name, js(got), js(want))
	}
}

func find(ms []wave1Message, id string) (wave1Message, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return wave1Message{}, false
}

func peekAll(t *testing.T, b *broker.Broker, name string) []wave1Message {
	t.Helper()
	out := []wave1Message{}
	var after uint64
	for {
		page, err := b.Peek(context.Background(), name, after, 1000)
		if err != nil {
			t.Fatalf("peek %s: %v", name, err)
		}
		for i := range page {
			out = append(out, w1Message(&page[i].MessageInfo, &page[i].Payload))
			after = page[i].Seq
		}
		if len(page) < 1000 {
			return out
		}
	}
}

func parseID(t *testing.T, s string) uint64 {
	t.Helper()
	var id uint64
	if _, err := fmt.Sscanf(s, "%016x", &id); err != nil || queue.FormatID(id) != s {
		t.Fatalf("bad message id %q in expect.json", s)
	}
	return id
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b))
}

// ---------------------------------------------------------------------------------------
// expect.json, as testdata/wave1/gen/main.go writes it (its types, renamed). The fixture
// does not change; today's types are converted into these.

type wave1Expect struct {
	Commit      string         `json:"commit"`
	SegmentSize int64          `json:"segment_size"`
	Fixtures    []wave1Fixture `json:"fixtures"`
}

type wave1Fixture struct {
	Dir             string            `json:"dir"`
	How             string            `json:"how"`
	ClockMS         int64             `json:"clock_ms"`
	ReplayedRecords int64             `json:"replayed_records"`
	Queues          []wave1Queue      `json:"queues"`
	Leases          []wave1Lease      `json:"leases"`
	StaleReceipts   []wave1Lease      `json:"stale_receipts"`
	Dedup           []wave1Dedup      `json:"dedup"`
	DeadLetters     []wave1DeadLetter `json:"dead_letters"`
	Tasks           []wave1Task       `json:"tasks"`
}

type wave1Queue struct {
	Name              string         `json:"name"`
	ID                uint64         `json:"id"`
	CreatedAtMS       int64          `json:"created_at_ms"`
	UpdatedAtMS       int64          `json:"updated_at_ms"`
	Config            wave1Config    `json:"config"`
	DeadLetterSources []string       `json:"dead_letter_sources,omitempty"`
	Stats             wave1Stats     `json:"stats"`
	Messages          []wave1Message `json:"messages,omitempty"`
}

type wave1Config struct {
	VisibilityTimeoutMS int64             `json:"visibility_timeout_ms"`
	MaxDeliveries       int               `json:"max_deliveries"`
	DeadLetterQueue     string            `json:"dead_letter_queue"`
	BackoffBaseMS       int64             `json:"backoff_base_ms"`
	BackoffMaxMS        int64             `json:"backoff_max_ms"`
	DelayMS             int64             `json:"delay_ms"`
	RetentionMS         int64             `json:"retention_ms"`
	DedupWindowMS       int64             `json:"dedup_window_ms"`
	DedupScope          string            `json:"dedup_scope"`
	ContentDedup        bool              `json:"content_dedup"`
	MaxMessages         int64             `json:"max_messages"`
	MaxBytes            int64             `json:"max_bytes"`
	MaxMessageSize      int64             `json:"max_message_size"`
	ReceiveWaitMS       int64             `json:"receive_wait_ms"`
	OrderedGroups       bool              `json:"ordered_groups"`
	Tags                map[string]string `json:"tags,omitempty"`
	Attrs               map[string]string `json:"attrs,omitempty"`
}

type wave1Stats struct {
	Ready    int64         `json:"ready"`
	Delayed  int64         `json:"delayed"`
	InFlight int64         `json:"in_flight"`
	Bytes    int64         `json:"bytes"`
	Groups   int           `json:"groups"`
	DedupIDs int           `json:"dedup_ids"`
	Counters wave1Counters `json:"counters"`
}

type wave1Counters struct {
	Sent              uint64            `json:"sent"`
	Acked             uint64            `json:"acked"`
	Nacked            uint64            `json:"nacked"`
	Delivered         uint64            `json:"delivered"`
	Redelivered       uint64            `json:"redelivered"`
	Extended          uint64            `json:"extended"`
	DeadLettered      uint64            `json:"dead_lettered"`
	Expired           uint64            `json:"expired"`
	DeadLetteredIn    uint64            `json:"dead_lettered_in"`
	Overflow          uint64            `json:"overflow"`
	RedrivenIn        uint64            `json:"redriven_in"`
	RedrivenOut       uint64            `json:"redriven_out"`
	Purged            uint64            `json:"purged"`
	Deleted           uint64            `json:"deleted"`
	WaitSum           uint64            `json:"wait_sum_ms"`
	WaitCount         uint64            `json:"wait_count"`
	SojournSum        uint64            `json:"sojourn_sum_ms"`
	SojournCount      uint64            `json:"sojourn_count"`
	ByReason          map[string]uint64 `json:"by_reason,omitempty"`
	DedupEvictedEarly uint64            `json:"dedup_evicted_early"`
}

type wave1Message struct {
	ID               string      `json:"id"`
	Seq              uint64      `json:"seq"`
	Body             *string     `json:"body,omitempty"`
	BodyBase64       *string     `json:"body_base64,omitempty"`
	Attrs            []wave1Attr `json:"attrs,omitempty"`
	Group            string      `json:"group,omitempty"`
	DedupID          string      `json:"dedup_id,omitempty"`
	State            string      `json:"state"`
	Deliveries       uint32      `json:"deliveries"`
	EnqueuedAtMS     int64       `json:"enqueued_at_ms"`
	EnteredAtMS      int64       `json:"entered_at_ms"`
	VisibleAtMS      int64       `json:"visible_at_ms,omitempty"`
	FirstDeliveredMS int64       `json:"first_delivered_ms,omitempty"`
	Size             int64       `json:"size"`
	Dead             *wave1Dead  `json:"dead,omitempty"`
}

type wave1Attr struct {
	Name        string  `json:"name"`
	Type        string  `json:"type"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

type wave1Dead struct {
	SourceName  string `json:"source"`
	Reason      string `json:"reason"`
	Description string `json:"description,omitempty"`
	AtMS        int64  `json:"at_ms"`
	Deliveries  uint32 `json:"deliveries"`
}

type wave1Lease struct {
	Queue      string `json:"queue"`
	ID         string `json:"id"`
	Deliveries uint32 `json:"deliveries"`
	DeadlineMS int64  `json:"deadline_ms"`
	Receipt    string `json:"receipt"`
}

type wave1Dedup struct {
	Queue   string `json:"queue"`
	DedupID string `json:"dedup_id,omitempty"`
	Group   string `json:"group,omitempty"`
	Body    string `json:"body"`
	ID      string `json:"id"`
}

type wave1DeadLetter struct {
	Queue       string `json:"queue"`
	ID          string `json:"id"`
	Source      string `json:"source"`
	Reason      string `json:"reason"`
	Description string `json:"description,omitempty"`
}

type wave1Task struct {
	ID          uint64   `json:"id"`
	Source      string   `json:"source"`
	Target      string   `json:"target,omitempty"`
	From        string   `json:"from,omitempty"`
	Reason      string   `json:"filter_reason,omitempty"`
	Group       string   `json:"filter_group,omitempty"`
	OlderThanMS int64    `json:"filter_older_than_ms,omitempty"`
	IDs         []string `json:"filter_ids,omitempty"`
	State       string   `json:"state"`
	Total       int64    `json:"total"`
	Moved       int64    `json:"moved"`
	Skipped     int64    `json:"skipped"`
	Rate        int      `json:"rate"`
	MaxSeq      uint64   `json:"max_seq"`
	Cursor      uint64   `json:"cursor"`
	CreatedAtMS int64    `json:"created_at_ms"`
	UpdatedAtMS int64    `json:"updated_at_ms"`
	Message     string   `json:"message,omitempty"`
}

func w1ms(d time.Duration) int64 { return d.Milliseconds() }

func w1Config(c queue.Config) wave1Config {
	return wave1Config{
		VisibilityTimeoutMS: w1ms(c.VisibilityTimeout), MaxDeliveries: c.MaxDeliveries, DeadLetterQueue: c.DeadLetterQueue,
		BackoffBaseMS: w1ms(c.BackoffBase), BackoffMaxMS: w1ms(c.BackoffMax), DelayMS: w1ms(c.Delay), RetentionMS: w1ms(c.Retention),
		DedupWindowMS: w1ms(c.DedupWindow), DedupScope: c.DedupScope.String(), ContentDedup: c.ContentDedup,
		MaxMessages: c.MaxMessages, MaxBytes: c.MaxBytes, MaxMessageSize: c.MaxMessageSize, ReceiveWaitMS: w1ms(c.ReceiveWait),
		OrderedGroups: c.OrderedGroups, Tags: c.Tags, Attrs: w1Attrs(c.Front),
	}
}

// w1Attrs gives a configuration's front attributes as expect.json has them: the map they
// were stored as before they had fields, under the keys the old code used. Each field is
// written under its own key, so an attribute read into the wrong field shows; entries
// kept in Unknown are written as "unknown:<key>", so a known attribute that was not
// recognised shows too (the fixture holds only keys the old code wrote).
func w1Attrs(a queue.FrontAttributes) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{
		"sqs.Policy":                       a.Policy,
		"sqs.RedriveAllowPolicy":           a.RedriveAllowPolicy,
		"sqs.KmsMasterKeyId":               a.KMSMasterKeyID,
		"sqs.KmsDataKeyReusePeriodSeconds": a.KMSDataKeyReusePeriod,
		"sqs.SqsManagedSseEnabled":         a.SQSManagedSSE,
		"sqs.FifoThroughputLimit":          a.FIFOThroughputLimit,
	} {
		if v != "" {
			m[k] = v
		}
	}
	for k, v := range a.Unknown {
		m["unknown:"+k] = v
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func w1Stats(s queue.Stats) wave1Stats {
	c := s.Counters
	return wave1Stats{
		Ready: s.Ready, Delayed: s.Delayed, InFlight: s.InFlight, Bytes: s.Bytes, Groups: s.Groups, DedupIDs: s.DedupIDs,
		Counters: wave1Counters{
			Sent: c.Sent, Acked: c.Acked, Nacked: c.Nacked, Delivered: c.Delivered, Redelivered: c.Redelivered,
			Extended: c.Extended, DeadLettered: c.DeadLettered, Expired: c.Expired, DeadLetteredIn: c.DeadLetteredIn,
			Overflow: c.Overflow, RedrivenIn: c.RedrivenIn, RedrivenOut: c.RedrivenOut, Purged: c.Purged, Deleted: c.Deleted,
			WaitSum: c.WaitSum, WaitCount: c.WaitCount, SojournSum: c.SojournSum, SojournCount: c.SojournCount,
			ByReason: c.ByReason, DedupEvictedEarly: c.DedupEvictedEarly,
		},
	}
}

func w1Text(b []byte) (*string, *string) {
	s := string(b)
	if utf8.ValidString(s) {
		return &s, nil
	}
	e := base64.StdEncoding.EncodeToString(b)
	return nil, &e
}

func w1Message(mi *queue.MessageInfo, p *queue.Payload) wave1Message {
	m := wave1Message{
		ID: queue.FormatID(mi.ID), Seq: mi.Seq, Group: mi.Group, DedupID: p.DedupID, State: mi.State.String(),
		Deliveries: mi.Deliveries, EnqueuedAtMS: mi.EnqueuedAt, EnteredAtMS: mi.EnteredAt, VisibleAtMS: mi.VisibleAt,
		FirstDeliveredMS: mi.FirstDelivered, Size: mi.Size,
	}
	m.Body, m.BodyBase64 = w1Text(p.Body)
	for _, a := range p.Attrs {
		w := wave1Attr{Name: a.Name, Type: a.Type}
		w.Value, w.ValueBase64 = w1Text(a.Value)
		m.Attrs = append(m.Attrs, w)
	}
	if d := mi.Dead; d != nil {
		m.Dead = &wave1Dead{SourceName: d.SourceName, Reason: d.Reason, Description: d.Description, AtMS: d.At, Deliveries: d.Deliveries}
	}
	return m
}

func w1Task(t queue.Task) wave1Task {
	w := wave1Task{
		ID: t.ID, Source: t.SourceName, Target: t.TargetName, From: t.FromName,
		Reason: t.Filter.Reason, Group: t.Filter.Group, OlderThanMS: t.Filter.OlderThan,
		State: t.State.String(), Total: t.Total, Moved: t.Moved, Skipped: t.Skipped, Rate: t.Rate,
		MaxSeq: t.MaxSeq, Cursor: t.Cursor, CreatedAtMS: t.CreatedAt, UpdatedAtMS: t.UpdatedAt, Message: t.Message,
	}
	for _, id := range t.Filter.IDs {
		w.IDs = append(w.IDs, queue.FormatID(id))
	}
	return w
}
