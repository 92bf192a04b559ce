package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

func (h *harness) group(topic, name string) api.Group {
	h.t.Helper()
	var g api.Group
	if err := json.Unmarshal([]byte(h.ok("group", "get", topic, name, "--json")), &g); err != nil {
		h.t.Fatalf("group get --json: %v", err)
	}
	return g
}

func committed(g api.Group) []uint64 {
	var out []uint64
	for _, p := range g.Partitions {
		out = append(out, p.Committed)
	}
	return out
}

func TestGroupCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("topic", "create", "orders", "--partitions", "2")
	h.ok("topic", "publish", "orders", "a0", "a1", "a2", "--partition", "0")
	h.ok("topic", "publish", "orders", "b0", "b1", "--partition", "1")

	out := h.ok("group", "create", "orders", "billing")
	contains(t, "create", out, "created group orders/billing (start first, member_lease 30s, on_failure dead_letter, max_failures 10); dead letters go to orders.billing-dlq")
	if g := h.group("orders", "billing"); g.LagRecords != 5 || g.DeadLetterQueue != "orders.billing-dlq" {
		t.Fatalf("created group: %+v", g)
	}
	// create on an existing group is an idempotent PUT: it updates and says so.
	contains(t, "update", h.ok("group", "create", "orders", "billing", "--max-failures", "3", "--on-failure", "block", "--member-lease", "1m"),
		"updated group orders/billing: max_failures=3 member_lease=1m on_failure=block")
	contains(t, "unchanged", h.ok("group", "create", "orders", "billing"), "updated group orders/billing: nothing changed (it exists)")
	if c := h.group("orders", "billing").Config; *c.MaxFailures != 3 || *c.OnFailure != "block" || c.MemberLease.D() != time.Minute || *c.Start != "first" {
		t.Fatalf("updated config: %+v", c)
	}
	h.ok("group", "create", "orders", "audit", "--start", "last")
	if g := h.group("orders", "audit"); g.LagRecords != 0 || committed(g)[0] != 3 {
		t.Fatalf("a group starting at last: %+v", g)
	}

	// Refusals say what to do.
	contains(t, "start of an existing group", h.fails(1, "group", "create", "orders", "billing", "--start", "last").err,
		"okiba group create: invalid_request:", "seek")
	contains(t, "bad start", h.fails(2, "group", "create", "orders", "x", "--start", "middle").err, `--start must be first or last, got "middle"`)
	contains(t, "bad on-failure", h.fails(2, "group", "create", "orders", "x", "--on-failure", "retry").err, "--on-failure must be dead_letter or block")
	contains(t, "bad lease", h.fails(1, "group", "create", "orders", "x", "--member-lease", "10m").err, "okiba group create: invalid_config:")
	contains(t, "missing topic", h.fails(1, "group", "create", "nope", "x").err, "okiba group create: topic_not_found:")
	contains(t, "one argument", h.fails(2, "group", "create", "orders").err, "missing arguments: okiba group create TOPIC GROUP")

	// A member takes the partitions and commits partition 0 up to 2.
	ctx := context.Background()
	m := client.Member{Name: "worker-1"}
	p, err := h.srv.Client.Pull(ctx, "orders", "billing", m, client.PullOptions{Max: 10})
	if err != nil || len(p.Records) != 5 {
		t.Fatalf("pull: %+v, %v", p, err)
	}
	m.Session = p.Session
	epoch := map[int]uint64{}
	for _, a := range p.Assignment {
		epoch[a.Partition] = a.Epoch
	}
	if errs, err := h.srv.Client.Commit(ctx, "orders", "billing", m, api.CommitOffset{Partition: 0, Offset: 2, Epoch: epoch[0]}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", errs, err)
	}

	out = h.ok("group", "get", "orders", "billing")
	matches(t, "get", out, `Group\s+orders/billing\n`)
	matches(t, "get", out, `Lag\s+3 records, \S+\n`)
	matches(t, "get", out, `Dead-letter queue\s+orders.billing-dlq\n`)
	matches(t, "get", out, `on_failure\s+block\n`)
	matches(t, "get", out, `PARTITION\s+COMMITTED\s+POSITION\s+END\s+LAG\s+LAG TIME\s+OWNER\s+PENDING\s+EPOCH\s+LOST`)
	matches(t, "get", out, `\n\s+0\s+2\s+3\s+3\s+1\s+\S+\s+worker-1\s+-\s+\d+\s+0\s*\n`)
	matches(t, "get", out, `\n\s+1\s+0\s+2\s+2\s+2\s+\S+\s+worker-1\s+-\s+\d+\s+0\s*\n`)
	matches(t, "get", out, `NAME\s+SESSION\s+JOINED\s+LEASE ENDS IN\nworker-1\s+`+m.Session+`\s+\S+\s+\S+\n`)

	out = h.ok("group", "list", "orders")
	matches(t, "list", out, `NAME\s+MEMBERS\s+LAG\s+LAG TIME\s+LOST\s+ON FAILURE`)
	matches(t, "list", out, `\naudit\s+0\s+0\s+0s\s+0\s+dead_letter\n`)
	matches(t, "list", out, `\nbilling\s+1\s+3\s+\S+\s+0\s+block\n`)
	var l api.GroupList
	if err := json.Unmarshal([]byte(h.ok("group", "list", "orders", "--json")), &l); err != nil || len(l.Groups) != 2 || l.Groups[0].Name != "audit" {
		t.Fatalf("list --json: %+v %v", l, err)
	}

	// Seek: every partition to last, one to an offset, every one to a time, to first.
	out = h.ok("group", "seek", "orders", "billing", "--to", "last")
	contains(t, "seek last", out, "moved group orders/billing to last, every partition; 0 records to handle")
	if c := committed(h.group("orders", "billing")); c[0] != 3 || c[1] != 2 {
		t.Fatalf("after seek to last: committed %v", c)
	}
	contains(t, "seek offset", h.ok("group", "seek", "orders", "billing", "--to", "1", "--partition", "0"),
		"moved group orders/billing to offset 1, partition 0; 2 records to handle")
	if c := committed(h.group("orders", "billing")); c[0] != 1 || c[1] != 2 {
		t.Fatalf("after seek of partition 0 to 1: committed %v", c)
	}
	// The member's commit from before the seek is refused: its epoch is gone.
	if errs, _ := h.srv.Client.Commit(ctx, "orders", "billing", m, api.CommitOffset{Partition: 0, Offset: 3, Epoch: epoch[0]}); len(errs) != 1 || !client.IsCode(errs[0], api.CodeEpochStale) {
		t.Fatalf("commit after the seek: %v", errs)
	}
	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	contains(t, "seek time", h.ok("group", "seek", "orders", "billing", "--time", hourAgo), "to time "+hourAgo+", every partition; 5 records to handle")
	h.ok("group", "seek", "orders", "billing", "--to", "last")
	h.ok("group", "seek", "orders", "billing", "--to", "first")
	if c := committed(h.group("orders", "billing")); c[0] != 0 || c[1] != 0 {
		t.Fatalf("after seek to first: committed %v", c)
	}
	contains(t, "seek neither", h.fails(2, "group", "seek", "orders", "billing").err, "give either --to first|last|OFFSET or --time RFC3339")
	contains(t, "seek both", h.fails(2, "group", "seek", "orders", "billing", "--to", "first", "--time", hourAgo).err, "give either")
	contains(t, "seek bad to", h.fails(2, "group", "seek", "orders", "billing", "--to", "start").err, `--to must be first, last or an offset, got "start"`)
	contains(t, "seek bad time", h.fails(2, "group", "seek", "orders", "billing", "--time", "yesterday").err, "is not an RFC 3339 time")
	contains(t, "seek out of range", h.fails(1, "group", "seek", "orders", "billing", "--to", "9", "--partition", "1").err,
		"okiba group seek: offset_out_of_range:")
	var g api.Group
	if err := json.Unmarshal([]byte(h.ok("group", "seek", "orders", "billing", "--to", "2", "--partition", "1", "--json")), &g); err != nil ||
		g.Partitions[1].Committed != 2 {
		t.Fatalf("seek --json: %+v %v", g, err)
	}

	contains(t, "delete", h.ok("group", "delete", "orders", "billing"), "deleted group orders/billing")
	contains(t, "get deleted", h.fails(1, "group", "get", "orders", "billing").err, "okiba group get: group_not_found:")
	h.ok("group", "delete", "orders", "audit")
	contains(t, "empty list", h.run("group", "list", "orders").err, "topic orders has no consumer groups")
	contains(t, "list of a missing topic", h.fails(1, "group", "list", "nope").err, "topic_not_found")
}
