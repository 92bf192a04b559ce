package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// putTopic creates a topic with partitions and publishes n records round-robin over
// them, bodies prefix0 … prefix(n-1).
func putTopic(t testing.TB, c *client.Client, name string, partitions, n int, prefix string) {
	t.Helper()
	if _, err := c.PutTopic(context.Background(), name, api.TopicConfig{Partitions: &partitions}); err != nil {
		t.Fatalf("put topic %s: %v", name, err)
	}
	publish(t, c, name, prefix, 0, n)
}

// publish publishes records prefix<from> … prefix<to-1>, round-robin over the
// partitions.
func publish(t testing.TB, c *client.Client, topic, prefix string, from, to int) {
	t.Helper()
	for from < to {
		n := min(to-from, api.MaxPublishBatch)
		recs := make([]client.Record, n)
		for i := range recs {
			recs[i] = client.Record{Body: fmt.Appendf(nil, "%s%d", prefix, from+i)}
		}
		res, err := c.PublishRecords(context.Background(), topic, recs)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("publish: %v", r.Err)
			}
		}
		from += n
	}
}

func TestGroupCallsRoundTrip(t *testing.T) {
	t.Parallel()
	forEncodings(t, testGroupCallsRoundTrip)
}

func testGroupCallsRoundTrip(t *testing.T, opts client.Options) {
	srv := okibatest.New(t, okibatest.Options{})
	cl := clientFor(t, srv, opts)
	ctx := context.Background()
	putTopic(t, cl, "events", 2, 0, "")
	res, err := cl.PublishRecords(ctx, "events", []client.Record{
		{Partition: ptr(0), Body: []byte("a0"), Key: []byte("k"), HasKey: true, Headers: map[string]string{"h": "v"}},
		{Partition: ptr(0), Body: []byte{0xff}},
		{Partition: ptr(1), Body: []byte("b0")},
	})
	if err != nil || res[2].Err != nil {
		t.Fatalf("publish: %v %+v", err, res)
	}

	g, err := cl.PutGroup(ctx, "events", "g", api.GroupConfig{MemberLease: api.Ptr(5 * time.Second), MaxFailures: ptr(3)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Name != "g" || g.Topic != "events" || g.Config.MemberLease.D() != 5*time.Second || *g.Config.MaxFailures != 3 ||
		*g.Config.OnFailure != "dead_letter" || *g.Config.Start != "first" || len(g.Partitions) != 2 || g.LagRecords != 3 ||
		g.DeadLetterQueue != "events.g-dlq" {
		t.Fatalf("put group: %+v", g)
	}
	if _, err := cl.PutGroup(ctx, "events", "g", api.GroupConfig{OnFailure: ptr("block")}); err != nil {
		t.Fatal(err)
	}
	if g, err = cl.Group(ctx, "events", "g"); err != nil || *g.Config.OnFailure != "block" || *g.Config.MaxFailures != 3 {
		t.Fatalf("group after update: %+v, %v", g, err)
	}
	if _, err := cl.PutGroup(ctx, "events", "other", api.GroupConfig{Start: ptr("last")}); err != nil {
		t.Fatal(err)
	}
	gs, err := cl.Groups(ctx, "events")
	if err != nil || len(gs) != 2 || gs[0].Name != "g" || gs[1].Name != "other" || gs[1].LagRecords != 0 {
		t.Fatalf("groups: %+v, %v", gs, err)
	}

	// Join and pull everything.
	m := client.Member{Name: "w1"}
	p, err := cl.Pull(ctx, "events", "g", m, client.PullOptions{Max: 10, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.Session == "" || p.Expires.IsZero() || len(p.Assignment) != 2 || len(p.Records) != 3 {
		t.Fatalf("pull: %+v", p)
	}
	m.Session = p.Session
	byPart := map[int][]client.TopicRecord{}
	for _, r := range p.Records {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	if r := byPart[0]; len(r) != 2 || string(r[0].Body) != "a0" || string(r[0].Key) != "k" || !r[0].HasKey || r[0].Headers["h"] != "v" ||
		string(r[1].Body) != "\xff" || r[1].HasKey || r[1].Offset != 1 || r[0].Time.IsZero() {
		t.Fatalf("partition 0 records: %+v", r)
	}
	epoch := map[int]uint64{}
	for _, a := range p.Assignment {
		epoch[a.Partition] = a.Epoch
		if a.Revoking || a.Position != a.End || a.Committed != 0 {
			t.Fatalf("assignment after the pull: %+v", a)
		}
	}

	// Commit: per-offset results, as Ack's.
	errs, err := cl.Commit(ctx, "events", "g", m,
		api.CommitOffset{Partition: 0, Offset: 2, Epoch: epoch[0]},
		api.CommitOffset{Partition: 1, Offset: 1, Epoch: epoch[1] + 5},
		api.CommitOffset{Partition: 1, Offset: 9, Epoch: epoch[1]})
	if err != nil || len(errs) != 3 || errs[0] != nil || !client.IsCode(errs[1], api.CodeEpochStale) || !client.IsCode(errs[2], api.CodeOffsetOutOfRange) {
		t.Fatalf("commit: %v, %v", errs, err)
	}
	// One offset that fails: the request's status is its error's, and the result still
	// comes per offset.
	errs, err = cl.Commit(ctx, "events", "g", m, api.CommitOffset{Partition: 0, Offset: 1, Epoch: epoch[0]})
	if len(errs) != 1 || !client.IsCode(errs[0], api.CodeOffsetRegressed) {
		t.Fatalf("regressing commit: %v, %v", errs, err)
	}
	if _, err := cl.Commit(ctx, "events", "g", client.Member{Name: "w1", Session: "999"}, api.CommitOffset{Partition: 0, Offset: 2, Epoch: epoch[0]}); !client.IsCode(err, api.CodeMemberUnknown) {
		t.Fatalf("commit with a stale session: %v", err)
	}

	hb, err := cl.Heartbeat(ctx, "events", "g", m)
	if err != nil || hb.Session != m.Session || len(hb.Assignment) != 2 || len(hb.Records) != 0 {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	if g, err = cl.Group(ctx, "events", "g"); err != nil || g.Partitions[0].Committed != 2 || g.Partitions[1].Committed != 0 ||
		g.LagRecords != 1 || len(g.Members) != 1 || g.Members[0].Name != "w1" || g.Partitions[0].Owner != "w1" {
		t.Fatalf("group after commits: %+v, %v", g, err)
	}

	// Seek: one partition to an offset, all to first; out of range is refused.
	g, err = cl.Seek(ctx, "events", "g", api.SeekRequest{Partition: ptr(0), Offset: ptr(uint64(1))})
	if err != nil || g.Partitions[0].Committed != 1 || g.Partitions[0].Epoch == epoch[0] {
		t.Fatalf("seek to offset: %+v, %v", g, err)
	}
	if g, err = cl.Seek(ctx, "events", "g", api.SeekRequest{To: "last"}); err != nil || g.LagRecords != 0 {
		t.Fatalf("seek to last: %+v, %v", g, err)
	}
	if g, err = cl.Seek(ctx, "events", "g", api.SeekRequest{Time: ptr(time.Now().Add(-time.Hour))}); err != nil || g.LagRecords != 3 {
		t.Fatalf("seek to an hour ago: %+v, %v", g, err)
	}
	if _, err := cl.Seek(ctx, "events", "g", api.SeekRequest{Partition: ptr(1), Offset: ptr(uint64(7))}); !client.IsCode(err, api.CodeOffsetOutOfRange) {
		t.Fatalf("seek out of range: %v", err)
	}
	// After the seek the member's partitions have new epochs: it is handed them again.
	p, err = cl.Pull(ctx, "events", "g", m, client.PullOptions{Max: 10})
	if err != nil || len(p.Records) != 3 {
		t.Fatalf("pull after the seek: %+v, %v", p, err)
	}

	if err := cl.Leave(ctx, "events", "g", m); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Heartbeat(ctx, "events", "g", m); !client.IsCode(err, api.CodeMemberUnknown) {
		t.Fatalf("heartbeat after leaving: %v", err)
	}
	if err := cl.DeleteGroup(ctx, "events", "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Group(ctx, "events", "g"); !client.IsCode(err, api.CodeGroupNotFound) {
		t.Fatalf("deleted group: %v", err)
	}
	if _, err := cl.Pull(ctx, "events", "g", m, client.PullOptions{}); !client.IsCode(err, api.CodeGroupDeleted) {
		t.Fatalf("pull of a deleted group with a session: %v", err)
	}
	if _, err := cl.Groups(ctx, "missing"); !client.IsCode(err, api.CodeTopicNotFound) {
		t.Fatalf("groups of a missing topic: %v", err)
	}
}
