package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/okiba/okiba/access"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"pgregory.net/rapid"
)

// The property replication rests on: the semantic state is node-independent. One random
// sequence of commands drives two brokers whose logs differ — segment sizes, cache
// budgets, how often they compact, one of them restarted (cleanly or by a power loss)
// midway — and after every step both answered alike (leases compared, not receipts:
// receipt keys differ per data directory) and their semantic snapshots are byte-identical.
// Ticks, redrive steps, checkpoints (with compaction) and restarts are steps of the
// sequence, taken at the same logical time on both; both see one fake clock and draw
// jitter from equally seeded sources.
func TestBrokersWithDifferentLogsAgree(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewFake(time.UnixMilli(1_800_000_000_000))
		seed := rapid.Uint64().Draw(rt, "seed")
		h := &pair{t: rt, clk: clk}
		h.nodes[0] = h.open(rt, node{name: "a", fs: vfs.NewMemFS(), rand: mrand.NewPCG(seed, 1),
			cfg: Config{SegmentSize: 64 << 10, CacheBytes: -1, CompactRatio: 0.9, NoPrecreate: true, smallSegments: true, DedupTotal: 3}})
		h.nodes[1] = h.open(rt, node{name: "b", fs: vfs.NewMemFS(), rand: mrand.NewPCG(seed, 1),
			cfg: Config{SegmentSize: 256 << 10, CacheBytes: 256 << 20, CompactRatio: 0.01, smallSegments: true, DedupTotal: 3}})
		defer func() {
			for _, n := range h.nodes {
				n.b.Close()
			}
		}()
		cfg := queue.DefaultConfig()
		cfg.DeadLetterQueue = "q-dlq"
		cfg.VisibilityTimeout = time.Second
		cfg.MaxDeliveries = rapid.IntRange(0, 3).Draw(rt, "maxDeliveries")
		cfg.Retention = time.Duration(rapid.SampledFrom([]int{0, 6, 20}).Draw(rt, "retention")) * time.Second
		cfg.DedupWindow = time.Duration(rapid.SampledFrom([]int{0, 2}).Draw(rt, "dedup")) * time.Second
		cfg.OrderedGroups = rapid.Bool().Draw(rt, "ordered")
		cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, time.Second
		for _, n := range h.nodes {
			if _, _, err := n.b.PutQueue(ctx, "q", func(c *queue.Config, _ bool) error { *c = cfg; return nil }); err != nil {
				rt.Fatalf("PutQueue: %v", err)
			}
		}
		tcfg := topic.DefaultConfig()
		tcfg.Partitions = 2
		tcfg.SegmentBytes = topic.MinSegmentBytes
		tcfg.SegmentAge = 2 * time.Second
		tcfg.RetentionAge = time.Duration(rapid.SampledFrom([]int{0, 5, 30}).Draw(rt, "topicRetention")) * time.Second
		tcfg.RetentionRecords = rapid.SampledFrom([]int64{0, 20}).Draw(rt, "topicRecords")
		tcfg.DedupWindow = 2 * time.Second
		for _, n := range h.nodes {
			if _, _, err := n.b.PutTopic(ctx, "t", func(c *topic.Config, _ bool) error { *c = tcfg; return nil }); err != nil {
				rt.Fatalf("PutTopic: %v", err)
			}
		}
		fanMax := rapid.SampledFrom([]int64{0, 3}).Draw(rt, "fanMax")
		for _, n := range h.nodes {
			mustQueueOn(rt, n.b, "fan", fanMax)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"subscribe":    h.subscribe,
			"copy":         h.copy,
			"group pull":   h.groupPull,
			"group commit": h.groupCommit,
			"drain fan":    h.drainFan,
			"publish":      h.publish,
			"principal":    h.principal,
			"read":         h.read,
			"move":         h.move,
			"send":         h.send,
			"send more":    h.send, // sends fill segments, so that compaction and collection happen
			"receive":      h.receive,
			"receive more": h.receive,
			"ack":          h.ack,
			"nack":         h.nack,
			"extend":       h.extend,
			"deadletter":   h.deadLetter,
			"delete":       h.deleteMessage,
			"purge":        h.purge,
			"redrive":      h.redrive,
			"clock":        h.clock,
			"tick":         h.tick,
			"checkpoint":   h.checkpoint,
			"restart":      h.restart,
			"":             h.check,
		})
	})
}

type node struct {
	sessions map[string]uint64 // consumer group members' sessions on this node
	name     string
	fs       *vfs.MemFS
	rand     *mrand.PCG // the same seed on both; kept across restarts, so draws stay in step
	cfg      Config
	b        *Broker
}

type pair struct {
	t      *rapid.T
	clk    *clock.Fake
	nodes  [2]*node
	leases [][2]string // the receipts of one lease on each node
	ids    []uint64
	task   uint64
}

func (h *pair) open(t *rapid.T, n node) *node {
	c := n.cfg
	c.Dir, c.FS, c.Clock, c.manual = "/data", n.fs, h.clk, true
	c.FreeSpace = func(string) (int64, error) { return 1 << 40, nil }
	c.Rand = n.rand
	if n.sessions == nil {
		n.sessions = map[string]uint64{}
	}
	b, err := Open(c)
	if err != nil {
		t.Fatalf("open %s: %v", n.name, err)
	}
	n.b = b
	return &n
}

// both runs fn on each node and fails unless both answered the same (by describe).
func both[T any](h *pair, what string, fn func(n *node) (T, error), describe func(T) string) [2]T {
	var out [2]T
	var d [2]string
	for i, n := range h.nodes {
		v, err := fn(n)
		out[i] = v
		d[i] = fmt.Sprintf("%s / err %v", describe(v), err)
	}
	if d[0] != d[1] {
		h.t.Fatalf("%s answered differently:\n  a: %s\n  b: %s", what, d[0], d[1])
	}
	return out
}

func (h *pair) send(t *rapid.T) {
	k := rapid.IntRange(1, 3).Draw(t, "n")
	in := make([]queue.SendInput, k)
	for i := range in {
		size := rapid.SampledFrom([]int{0, 10, 3000, 60_000}).Draw(t, "size")
		in[i] = queue.SendInput{
			Payload: queue.Payload{
				Body:    bytes.Repeat([]byte{byte('a' + rapid.IntRange(0, 25).Draw(t, "fill"))}, size),
				Group:   rapid.SampledFrom([]string{"", "", "g1", "g2"}).Draw(t, "group"),
				DedupID: rapid.SampledFrom([]string{"", "", "", "d1", "d2"}).Draw(t, "dedup"),
			},
			Delay: rapid.SampledFrom([]int64{-1, 0, 500, 2500}).Draw(t, "delay"),
		}
	}
	res := both(h, "send", func(n *node) ([]queue.SendResult, error) {
		// Each broker keeps the slices it is given: hand each its own copy.
		c := make([]queue.SendInput, len(in))
		for i, x := range in {
			c[i] = x
			c[i].Payload = *x.Payload.Clone()
		}
		return n.b.Send(ctx, "q", c)
	}, func(rs []queue.SendResult) string { return fmt.Sprintf("%+v", rs) })
	for _, r := range res[0] {
		if r.Err == nil && !r.Duplicate {
			h.ids = append(h.ids, r.ID)
		}
	}
}

// describeMessages is what two brokers must agree on about received messages: everything
// but the receipt.
func describeMessages(ms []Message) string {
	var b bytes.Buffer
	for _, m := range ms {
		fmt.Fprintf(&b, "[%x seq %d deliv %d deadline %d enq %d first %d body %d×%.1q group %q dead %+v]",
			m.ID, m.Seq, m.Deliveries, m.LeaseDeadline.UnixMilli(), m.EnqueuedAt.UnixMilli(), m.FirstDelivered.UnixMilli(),
			len(m.Payload.Body), m.Payload.Body, m.Payload.Group, m.Dead)
	}
	return b.String()
}

func (h *pair) receive(t *rapid.T) {
	max := rapid.IntRange(1, 4).Draw(t, "max")
	vis := time.Duration(rapid.SampledFrom([]int{-1, 0, 300, 2000}).Draw(t, "vis")) * time.Millisecond
	q := rapid.SampledFrom([]string{"q", "q", "q-dlq"}).Draw(t, "queue")
	got := both(h, "receive", func(n *node) ([]Message, error) {
		return n.b.Receive(ctx, q, ReceiveOptions{Max: max, Wait: 0, Visibility: vis})
	}, describeMessages)
	for i := range got[0] {
		h.leases = append(h.leases, [2]string{got[0][i].Receipt, got[1][i].Receipt})
	}
}

func (h *pair) pick(t *rapid.T) []int {
	if len(h.leases) == 0 {
		t.Skip("no leases")
	}
	k := rapid.IntRange(1, 3).Draw(t, "leases")
	out := make([]int, k)
	for i := range out {
		out[i] = rapid.IntRange(0, len(h.leases)-1).Draw(t, "lease")
	}
	return out
}

func (h *pair) receipts(i int, picked []int) []string {
	out := make([]string, len(picked))
	for j, p := range picked {
		out[j] = h.leases[p][i]
	}
	return out
}

func describeErrs(errs []error) string { return fmt.Sprint(errs) }

func (h *pair) settleOn(t *rapid.T, what string, fn func(b *Broker, q string, receipts []string) ([]error, error)) {
	picked := h.pick(t)
	q := rapid.SampledFrom([]string{"q", "q-dlq"}).Draw(t, "queue")
	idx := map[*node]int{h.nodes[0]: 0, h.nodes[1]: 1}
	both(h, what, func(n *node) ([]error, error) {
		return fn(n.b, q, h.receipts(idx[n], picked))
	}, describeErrs)
}

func (h *pair) ack(t *rapid.T) {
	h.settleOn(t, "ack", func(b *Broker, q string, r []string) ([]error, error) { return b.Ack(ctx, q, r) })
}

func (h *pair) nack(t *rapid.T) {
	delay := time.Duration(rapid.SampledFrom([]int{-1, 0, 200, 1500}).Draw(t, "delay")) * time.Millisecond
	h.settleOn(t, "nack", func(b *Broker, q string, r []string) ([]error, error) { return b.Nack(ctx, q, r, delay) })
}

func (h *pair) extend(t *rapid.T) {
	vis := time.Duration(rapid.SampledFrom([]int{0, 500, 3000}).Draw(t, "vis")) * time.Millisecond
	h.settleOn(t, "extend", func(b *Broker, q string, r []string) ([]error, error) { return b.Extend(ctx, q, r, vis) })
}

func (h *pair) deadLetter(t *rapid.T) {
	reason := rapid.SampledFrom([]string{"poison", "bad_input"}).Draw(t, "reason")
	h.settleOn(t, "deadletter", func(b *Broker, q string, r []string) ([]error, error) {
		return b.DeadLetter(ctx, q, r, reason, "from the property test")
	})
}

func (h *pair) deleteMessage(t *rapid.T) {
	if len(h.ids) == 0 {
		t.Skip("no ids")
	}
	id := rapid.SampledFrom(h.ids).Draw(t, "id")
	q := rapid.SampledFrom([]string{"q", "q-dlq"}).Draw(t, "queue")
	both(h, "delete", func(n *node) (struct{}, error) { return struct{}{}, n.b.DeleteMessage(ctx, q, id) },
		func(struct{}) string { return "" })
}

func (h *pair) purge(t *rapid.T) {
	if rapid.IntRange(0, 5).Draw(t, "rarely") != 0 {
		t.Skip("purge is rare")
	}
	both(h, "purge", func(n *node) (int64, error) { return n.b.Purge(ctx, "q") }, func(v int64) string { return fmt.Sprint(v) })
}

func (h *pair) redrive(t *rapid.T) {
	if h.task == 0 {
		tasks := both(h, "start redrive", func(n *node) (queue.Task, error) {
			return n.b.StartRedrive(ctx, queue.RedriveSpec{Source: "q-dlq"})
		}, func(x queue.Task) string { return fmt.Sprintf("%d %d", x.ID, x.Total) })
		h.task = tasks[0].ID
		return
	}
	both(h, "redrive step", func(n *node) (time.Duration, error) { return n.b.redriveStep(ctx, h.task) },
		func(d time.Duration) string { return d.String() })
	tasks := both(h, "task", func(n *node) (queue.Task, error) { return n.b.Task(h.task) },
		func(x queue.Task) string { return fmt.Sprintf("%s moved %d skipped %d", x.State, x.Moved, x.Skipped) })
	if tasks[0].State != queue.TaskRunning {
		h.task = 0
	}
}

func (h *pair) clock(t *rapid.T) {
	h.clk.Advance(time.Duration(rapid.SampledFrom([]int{1, 10, 150, 500, 1000, 2600, 7000}).Draw(t, "dt")) * time.Millisecond)
}

func (h *pair) tick(*rapid.T) {
	for _, n := range h.nodes {
		n.b.mu.Lock()
		n.b.tickLocked(n.b.nowLocked())
		n.b.mu.Unlock()
	}
}

func (h *pair) checkpoint(*rapid.T) {
	for _, n := range h.nodes {
		if err := n.b.Checkpoint(context.Background()); err != nil {
			h.t.Fatalf("checkpoint %s: %v", n.name, err)
		}
	}
}

// restart stops one node, cleanly or by a power loss (only what was fsynced survives),
// and opens it again; the other brings its queues up to the same moment, as the
// restarted one does when it opens (advancing every queue to now).
func (h *pair) restart(t *rapid.T) {
	i := rapid.IntRange(0, 1).Draw(t, "node")
	n := h.nodes[i]
	if rapid.Bool().Draw(t, "crash") {
		fs := n.fs.Crash()
		n.b.Close() // the crashed copy is taken; this only stops the old process
		n.fs = fs
	} else if err := n.b.Close(); err != nil {
		t.Fatalf("close %s: %v", n.name, err)
	}
	h.nodes[i] = h.open(t, *n)
	other := h.nodes[1-i].b
	other.mu.Lock()
	other.m.AdvanceAll(other.nowLocked(), &other.sink)
	other.t.Tick(other.nowLocked(), other.tsink)
	other.lastTicket = ticket{w: other.sink.last}
	tk := other.lastTicket
	other.mu.Unlock()
	if err := tk.Wait(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// check compares the two semantic snapshots, after bringing every queue of both to now
// (the transitions time alone makes happen lazily, and a restart makes at once).
func (h *pair) check(t *rapid.T) {
	var snaps, tsnaps, asnaps [2][]byte
	for i, n := range h.nodes {
		n.b.mu.Lock()
		n.b.m.AdvanceAll(n.b.nowLocked(), &n.b.sink)
		n.b.t.Tick(n.b.nowLocked(), n.b.tsink)
		n.b.lastTicket = ticket{w: n.b.sink.last}
		snaps[i] = n.b.m.AppendSnapshot(nil)
		tsnaps[i] = n.b.t.AppendSnapshot(nil)
		asnaps[i] = n.b.a.AppendSnapshot(nil)
		ticket := n.b.lastTicket
		n.b.mu.Unlock()
		// What advancing wrote (a dead-lettering, an expiry) is made durable, as a
		// command's records are before it answers: a power loss next must not undo it.
		if err := ticket.Wait(ctx); err != nil {
			t.Fatalf("sync %s: %v", n.name, err)
		}
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatalf("semantic snapshots differ (%d and %d bytes)\n%x\n%x", len(snaps[0]), len(snaps[1]), snaps[0], snaps[1])
	}
	if !bytes.Equal(tsnaps[0], tsnaps[1]) {
		t.Fatalf("topic snapshots differ (%d and %d bytes)\n%x\n%x", len(tsnaps[0]), len(tsnaps[1]), tsnaps[0], tsnaps[1])
	}
	if !bytes.Equal(asnaps[0], asnaps[1]) {
		t.Fatalf("access snapshots differ (%d and %d bytes)\n%x\n%x", len(asnaps[0]), len(asnaps[1]), asnaps[0], asnaps[1])
	}
}

// principal changes a principal the same way on both nodes.
func (h *pair) principal(t *rapid.T) {
	name := rapid.SampledFrom([]string{"p1", "p2"}).Draw(t, "principal")
	g, _ := access.ParseGrant(rapid.SampledFrom([]string{"send queue:q*", "manage topic:*", "admin", "browse *"}).Draw(t, "grant"))
	sealed := []byte(rapid.SampledFrom([]string{"s1", "s2"}).Draw(t, "sealed"))
	keep := time.Duration(rapid.SampledFrom([]int{0, 1000, 5000}).Draw(t, "keep")) * time.Millisecond
	op := rapid.IntRange(0, 4).Draw(t, "op")
	both(h, "principal", func(n *node) (access.Principal, error) {
		switch op {
		case 0:
			return n.b.CreatePrincipal(ctx, name, []access.Grant{g}, sealed)
		case 1:
			return n.b.GrantPrincipal(ctx, name, []access.Grant{g})
		case 2:
			return n.b.RevokePrincipal(ctx, name, []access.Grant{g})
		case 3:
			return n.b.RotatePrincipal(ctx, name, sealed, keep)
		}
		return access.Principal{}, n.b.DeletePrincipal(ctx, name)
	}, func(p access.Principal) string { return fmt.Sprintf("%+v", p) })
}

func (h *pair) publish(t *rapid.T) {
	k := rapid.IntRange(1, 4).Draw(t, "n")
	in := make([]topic.PublishInput, k)
	for i := range in {
		size := rapid.SampledFrom([]int{0, 10, 3000, 20_000}).Draw(t, "size")
		in[i] = topic.PublishInput{Partition: topic.AnyPartition,
			Body:    bytes.Repeat([]byte{byte('a' + rapid.IntRange(0, 25).Draw(t, "fill"))}, size),
			DedupID: rapid.SampledFrom([]string{"", "", "", "d1", "d2"}).Draw(t, "dedup")}
		if rapid.Bool().Draw(t, "keyed") {
			in[i].HasKey, in[i].Key = true, []byte(rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(t, "key"))
		}
	}
	both(h, "publish", func(n *node) ([]topic.PublishResult, error) {
		c := make([]topic.PublishInput, len(in))
		for i, x := range in {
			c[i] = x
			c[i].Body = bytes.Clone(x.Body)
		}
		return n.b.Publish(ctx, "t", c)
	}, func(rs []topic.PublishResult) string { return fmt.Sprintf("%+v", rs) })
}

// read reads a partition from an offset on both nodes, whose records lie in different
// places (different log segments, moved or not): the answers must be the same.
func (h *pair) read(t *rapid.T) {
	p := rapid.IntRange(0, 1).Draw(t, "partition")
	ti, err := h.nodes[0].b.Topic("t")
	if err != nil {
		t.Fatal(err)
	}
	pi := ti.Partitions[p]
	off := pi.Start + uint64(rapid.IntRange(0, int(pi.End-pi.Start)).Draw(t, "from"))
	max := rapid.IntRange(1, 50).Draw(t, "max")
	both(h, "read", func(n *node) ([]TopicRecord, error) {
		var out []TopicRecord
		for o := off; o < pi.End && len(out) < max; {
			r, err := n.b.ReadTopic(ctx, "t", ReadOptions{Partition: p, Offset: o, Max: max - len(out)})
			if err != nil || len(r.Records) == 0 {
				return out, err
			}
			out = append(out, r.Records...)
			o = r.Records[len(r.Records)-1].Offset + 1
		}
		return out, nil
	}, func(rs []TopicRecord) string {
		var b bytes.Buffer
		for _, r := range rs {
			fmt.Fprintf(&b, "[%d@%d t%d key %v %q body %d×%.1q]", r.Partition, r.Offset, r.Time, r.HasKey, r.Key, len(r.Body), r.Body)
		}
		return b.String()
	})
}

// move runs one node's mover: the nodes' records then lie in different places.
func (h *pair) move(t *rapid.T) {
	n := h.nodes[rapid.IntRange(0, 1).Draw(t, "node")]
	for {
		_, more, err := n.b.store.MoveTopics(ctx)
		if err != nil {
			t.Fatalf("move on %s: %v", n.name, err)
		}
		if !more {
			return
		}
	}
}

func mustQueueOn(t *rapid.T, b *Broker, name string, max int64) {
	if _, _, err := b.PutQueue(ctx, name, func(c *queue.Config, _ bool) error {
		c.MaxMessages = max
		c.OrderedGroups = false
		return nil
	}); err != nil {
		t.Fatalf("PutQueue %s: %v", name, err)
	}
}

// subscribe creates (or changes the filter of) a subscription of "fan" or of "q".
func (h *pair) subscribe(t *rapid.T) {
	name := rapid.SampledFrom([]string{"s-fan", "s-q"}).Draw(t, "sub")
	q := map[string]string{"s-fan": "fan", "s-q": "q"}[name]
	cfg := topic.SubscriptionConfig{Queue: q}
	if rapid.Bool().Draw(t, "filtered") {
		cfg.Filter = []byte(`{"okiba-key":["a","b"]}`)
	}
	start := SubStart{First: rapid.Bool().Draw(t, "first")}
	both(h, "subscribe", func(n *node) (string, error) {
		si, created, err := n.b.Subscribe(ctx, "t", name, cfg, start)
		return fmt.Sprintf("%v %v %d", created, si.Cursors, si.Lag), err
	}, func(s string) string { return s })
}

// copy runs the copier of each subscription until it is caught up or its queue is
// full, on both nodes. One step may take fewer records on one node than on the other
// (a read stops where a node's partition files end and its tail begins), so the nodes
// are compared where the copier stops, as the copy loop runs it.
func (h *pair) copy(t *rapid.T) {
	for _, name := range []string{"s-fan", "s-q"} {
		both(h, "copy", func(n *node) (string, error) {
			for range 1000 {
				moved, full, err := n.b.copyStep(ctx, "t", name)
				if errors.Is(err, topic.ErrSubscriptionNotFound) {
					return "no subscription", nil
				}
				if err != nil || full || !moved {
					si, _ := n.b.Subscription("t", name)
					return fmt.Sprintf("full %v lag %d cursors %v", full, si.Lag, si.Cursors), err
				}
			}
			return "", fmt.Errorf("copier of %s did not stop", name)
		}, func(s string) string { return s })
	}
}

// drainFan receives and acks a few messages of "fan", making room for a paused
// subscription.
func (h *pair) drainFan(t *rapid.T) {
	got := both(h, "receive fan", func(n *node) ([]Message, error) {
		return n.b.Receive(ctx, "fan", ReceiveOptions{Max: 2, Visibility: time.Minute})
	}, describeMessages)
	for i, n := range h.nodes {
		var rs []string
		for _, m := range got[i] {
			rs = append(rs, m.Receipt)
		}
		if len(rs) > 0 {
			if _, err := n.b.Ack(ctx, "fan", rs); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// groupPull pulls for one of two members of group "g" (created on first use).
func (h *pair) groupPull(t *rapid.T) {
	member := rapid.SampledFrom([]string{"m1", "m2"}).Draw(t, "member")
	max := rapid.IntRange(1, 20).Draw(t, "max")
	fresh := rapid.IntRange(0, 4).Draw(t, "rejoin") == 0
	both(h, "group pull", func(n *node) (string, error) {
		if _, _, err := n.b.PutGroup(ctx, "t", "g", nil); err != nil {
			return "", err
		}
		session := n.sessions[member]
		if fresh {
			session = 0
		}
		p, err := n.b.Pull(ctx, "t", "g", PullOptions{Member: member, Session: session, Max: max})
		if err != nil {
			return "", err
		}
		n.sessions[member] = p.Session.Session
		var b bytes.Buffer
		fmt.Fprintf(&b, "session %d assigned %+v:", p.Session.Session, p.Assigned)
		for _, r := range p.Records {
			fmt.Fprintf(&b, " %d@%d", r.Partition, r.Offset)
		}
		return b.String(), nil
	}, func(s string) string { return s })
}

// groupCommit commits, for a member, its partitions' positions (what it was handed).
func (h *pair) groupCommit(t *rapid.T) {
	member := rapid.SampledFrom([]string{"m1", "m2"}).Draw(t, "member")
	both(h, "group commit", func(n *node) (string, error) {
		gi, err := n.b.Group("t", "g")
		if err != nil {
			return err.Error(), nil
		}
		var offs []topic.PartitionOffset
		for _, p := range gi.Partitions {
			if p.Owner == member {
				offs = append(offs, topic.PartitionOffset{Partition: p.Partition, Offset: p.Position, Epoch: p.Epoch})
			}
		}
		if len(offs) == 0 {
			return "nothing", nil
		}
		errs, err := n.b.Commit(ctx, "t", "g", member, n.sessions[member], offs)
		return fmt.Sprint(errs), err
	}, func(s string) string { return s })
}
