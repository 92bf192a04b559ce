package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/topic"
)

func pull(t *testing.T, b *Broker, member string, session uint64, max int) Pulled {
	t.Helper()
	p, err := b.Pull(ctx, "t", "g", PullOptions{Member: member, Session: session, Max: max})
	if err != nil {
		t.Fatalf("pull %s: %v", member, err)
	}
	return p
}

func held(s topic.Session) map[int]bool {
	out := map[int]bool{}
	for _, a := range s.Assigned {
		if !a.Revoking {
			out[a.Partition] = true
		}
	}
	return out
}

// commitAll commits, for each partition, the offset after the last record pulled.
func commitAll(t *testing.T, b *Broker, member string, p Pulled) {
	t.Helper()
	last := map[int]uint64{}
	for _, r := range p.Records {
		last[r.Partition] = r.Offset + 1
	}
	var offs []topic.PartitionOffset
	for _, a := range p.Assigned {
		if off, ok := last[a.Partition]; ok {
			offs = append(offs, topic.PartitionOffset{Partition: a.Partition, Offset: off, Epoch: a.Epoch})
		}
	}
	errs, err := b.Commit(ctx, "t", "g", member, p.Session.Session, offs)
	if err != nil {
		t.Fatalf("commit %s: %v", member, err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("commit %s %+v: %v", member, offs[i], e)
		}
	}
}

func TestGroupSharesPartitionsCommitsAndRebalances(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", func(c *topic.Config) { c.Partitions = 4 })
	if _, _, err := b.PutGroup(ctx, "t", "g", nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		publish(t, b, "t", fmt.Sprint("k", i%8), fmt.Sprint("r", i))
	}
	// One member holds everything and reads the whole history (start: first).
	a := pull(t, b, "a", 0, 1000)
	if len(held(a.Session)) != 4 || len(a.Records) != 40 {
		t.Fatalf("lone member: holds %v, got %d records", held(a.Session), len(a.Records))
	}
	// A second pull hands nothing new: what was handed is not handed twice.
	if again := pull(t, b, "a", a.Session.Session, 1000); len(again.Records) != 0 {
		t.Fatalf("second pull re-handed %d records", len(again.Records))
	}
	commitAll(t, b, "a", a)
	gi, _ := b.Group("t", "g")
	if gi.LagRecords != 0 {
		t.Fatalf("lag after committing everything: %d", gi.LagRecords)
	}

	// b joins: two of a's partitions are to move, but only when a lets go (cooperative).
	bp := pull(t, b, "b", 0, 100)
	if len(held(bp.Session)) != 0 {
		t.Fatalf("b holds %v before a let go", held(bp.Session))
	}
	a = pull(t, b, "a", a.Session.Session, 100) // a comes back: it lets go of the two
	if len(held(a.Session)) != 2 {
		t.Fatalf("a holds %v after letting go", held(a.Session))
	}
	bp = pull(t, b, "b", bp.Session.Session, 100)
	if len(held(bp.Session)) != 2 {
		t.Fatalf("b holds %v after a let go", held(bp.Session))
	}
	for p := range held(a.Session) {
		if held(bp.Session)[p] {
			t.Fatalf("partition %d held by both", p)
		}
	}

	// New records go to their partition's owner only; a commit by the wrong member, a stale
	// epoch or backwards is refused.
	for i := 0; i < 8; i++ {
		publish(t, b, "t", fmt.Sprint("k", i), fmt.Sprint("new", i))
	}
	a, bp = pull(t, b, "a", a.Session.Session, 100), pull(t, b, "b", bp.Session.Session, 100)
	if len(a.Records)+len(bp.Records) != 8 {
		t.Fatalf("a got %d, b got %d of 8", len(a.Records), len(bp.Records))
	}
	for _, r := range a.Records {
		if !held(a.Session)[r.Partition] {
			t.Fatalf("a handed a record of partition %d it does not hold", r.Partition)
		}
	}
	pa := a.Assigned[0]
	errs, _ := b.Commit(ctx, "t", "g", "b", bp.Session.Session, []topic.PartitionOffset{{Partition: pa.Partition, Offset: pa.Position, Epoch: pa.Epoch}})
	if !errors.Is(errs[0], topic.ErrEpochStale) {
		t.Fatalf("commit by another member: %v", errs[0])
	}
	errs, _ = b.Commit(ctx, "t", "g", "a", a.Session.Session, []topic.PartitionOffset{{Partition: pa.Partition, Offset: pa.Committed - 1, Epoch: pa.Epoch}})
	if !errors.Is(errs[0], topic.ErrOffsetRegressed) {
		t.Fatalf("commit backwards: %v", errs[0])
	}
	errs, _ = b.Commit(ctx, "t", "g", "a", a.Session.Session, []topic.PartitionOffset{{Partition: pa.Partition, Offset: pa.Position + 1, Epoch: pa.Epoch}})
	if !errors.Is(errs[0], topic.ErrOffsetOutOfRange) {
		t.Fatalf("commit past what was handed: %v", errs[0])
	}
	commitAll(t, b, "a", a)

	// b dies (no pull for its lease): its partitions go to a, from the committed offsets,
	// so what b was handed but never committed is handed again.
	clk.Advance(20 * time.Second)
	if _, err := b.Heartbeat(ctx, "t", "g", "a", a.Session.Session); err != nil {
		t.Fatal(err)
	}
	clk.Advance(11 * time.Second)
	testkit.Eventually(t, 10*time.Second, func() bool {
		gi, _ := b.Group("t", "g")
		return len(gi.Members) == 1
	}, "b's lease to end")
	a = pull(t, b, "a", a.Session.Session, 100)
	if len(held(a.Session)) != 4 || len(a.Records) != len(bp.Records) {
		t.Fatalf("after b died a holds %v and got %d records, b had %d uncommitted", held(a.Session), len(a.Records), len(bp.Records))
	}
	commitAll(t, b, "a", a)

	// Seek to the first record: everything is handed again; a commit of the old epoch is
	// refused.
	old := a.Assigned[0]
	if _, err := b.Seek(ctx, "t", "g", SeekTo{Partition: -1, First: true}); err != nil {
		t.Fatal(err)
	}
	errs, _ = b.Commit(ctx, "t", "g", "a", a.Session.Session, []topic.PartitionOffset{{Partition: old.Partition, Offset: old.Position, Epoch: old.Epoch}})
	if !errors.Is(errs[0], topic.ErrEpochStale) {
		t.Fatalf("commit from before the seek: %v", errs[0])
	}
	a = pull(t, b, "a", a.Session.Session, 1000)
	if len(a.Records) != 48 {
		t.Fatalf("after seeking to first, %d records, want 48", len(a.Records))
	}
	gi, _ = b.Group("t", "g")
	if gi.LagRecords != 48 || gi.LagSeconds < 31 {
		t.Fatalf("lag after the seek: %d records, %.1f s", gi.LagRecords, gi.LagSeconds)
	}
	// A seek by time lands on the first record published at or after it.
	at := time.Unix(1_700_000_000, 0).Add(31 * time.Second)
	gi, err := b.Seek(ctx, "t", "g", SeekTo{Partition: -1, Time: &at})
	if err != nil {
		t.Fatal(err)
	}
	if gi.LagRecords != 0 {
		t.Fatalf("seek to a time after every record: lag %d", gi.LagRecords)
	}
	if err := b.DeleteGroup(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pull(ctx, "t", "g", PullOptions{Member: "a", Session: a.Session.Session}); !errors.Is(err, topic.ErrGroupDeleted) {
		t.Fatalf("pull of a deleted group's member: %v", err)
	}
}

func TestGroupLosesToRetentionAndSaysSo(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := start(t, Config{Dir: t.TempDir(), Clock: clk, MinFreeBytes: -1})
	defer b.Close()
	mustTopic(t, b, "t", func(c *topic.Config) { c.RetentionAge = time.Minute; c.SegmentAge = 10 * time.Second })
	if _, _, err := b.PutGroup(ctx, "t", "g", nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		publish(t, b, "t", "", fmt.Sprint("r", i))
		clk.Advance(11 * time.Second)
	}
	clk.Advance(20 * time.Second)
	testkit.Eventually(t, 10*time.Second, func() bool {
		gi, _ := b.Group("t", "g")
		return gi.LostToRetention > 0
	}, "retention to pass the group")
	gi, _ := b.Group("t", "g")
	ti, _ := b.Topic("t")
	if gi.Partitions[0].Committed != ti.Partitions[0].Start || gi.LostToRetention != ti.Partitions[0].Start {
		t.Fatalf("group at %d lost %d; the partition starts at %d", gi.Partitions[0].Committed, gi.LostToRetention, ti.Partitions[0].Start)
	}
	p, err := b.Pull(ctx, "t", "g", PullOptions{Member: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) == 0 || p.Records[0].Offset != ti.Partitions[0].Start {
		t.Fatalf("after the loss the group reads from %+v", p.Records)
	}
}

func TestGroupDeadLettersAPoisonRecordAndMovesOn(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: fs, MinFreeBytes: -1, CacheBytes: -1}
	b := start(t, cfg)
	mustTopic(t, b, "t", nil)
	if _, _, err := b.PutGroup(ctx, "t", "g", nil); err != nil {
		t.Fatal(err)
	}
	in := []topic.PublishInput{
		{Partition: topic.AnyPartition, Body: []byte("fine")},
		{Partition: topic.AnyPartition, Body: []byte("poison"), HasKey: true, Key: []byte("k"), Headers: []topic.Header{{Name: "type", Value: "Bad"}}},
		{Partition: topic.AnyPartition, Body: []byte("after")},
	}
	if _, err := b.Publish(ctx, "t", in); err != nil {
		t.Fatal(err)
	}
	p := pull(t, b, "m", 0, 1)
	commitAll(t, b, "m", p)
	p = pull(t, b, "m", p.Session.Session, 1)
	if len(p.Records) != 1 || string(p.Records[0].Body) != "poison" {
		t.Fatalf("second pull: %+v", p.Records)
	}
	a := p.Assigned[0]
	// Not handed out yet: refused. Handed out: dead-lettered, and the group moves past it.
	if err := b.DeadLetterRecord(ctx, "t", "g", "m", p.Session.Session, 0, 2, a.Epoch, "max_failures", "x"); !errors.Is(err, topic.ErrOffsetOutOfRange) {
		t.Fatalf("dead letter of a record not handed out: %v", err)
	}
	if err := b.DeadLetterRecord(ctx, "t", "g", "m", p.Session.Session, 0, 1, a.Epoch, "max_failures", "failed 10 times: boom"); err != nil {
		t.Fatal(err)
	}
	gi, _ := b.Group("t", "g")
	if gi.Partitions[0].Committed != 2 {
		t.Fatalf("committed %d after the dead letter, want 2", gi.Partitions[0].Committed)
	}
	check := func(what string, b *Broker) {
		t.Helper()
		ms, err := b.Peek(ctx, topic.DeadLetterName("t", "g"), 0, 10)
		if err != nil || len(ms) != 1 {
			t.Fatalf("%s: dead-letter queue holds %v (%v)", what, ms, err)
		}
		m := ms[0]
		hdr := map[string]string{}
		for _, a := range m.Payload.Attrs {
			hdr[a.Name] = string(a.Value)
		}
		if string(m.Payload.Body) != "poison" || m.Dead == nil || m.Dead.Reason != "max_failures" ||
			hdr["type"] != "Bad" || hdr[topic.HeaderTopic] != "t" || hdr[topic.HeaderOffset] != "1" || hdr[topic.HeaderKey] != "k" {
			t.Fatalf("%s: dead letter %q dead %+v headers %v", what, m.Payload.Body, m.Dead, hdr)
		}
	}
	check("live", b)
	crashed := cfg
	crashed.FS = fs.Crash() // replays the dead letter's record from the log
	b2 := start(t, crashed)
	check("after a crash", b2)
	b2.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = start(t, cfg) // from the final checkpoint
	defer b.Close()
	check("after a restart", b)
	p2, err := b.Pull(ctx, "t", "g", PullOptions{Member: "m"})
	if err != nil || len(p2.Records) != 1 || string(p2.Records[0].Body) != "after" {
		t.Fatalf("after the dead letter the group reads %+v (%v)", p2.Records, err)
	}
}
