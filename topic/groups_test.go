package topic

import (
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/queue"
)

type nopSink struct{}

func (nopSink) Emit(Record) {}

// A partition revoked from a member stays with it, marked revoking, while it has
// records in flight: it moves once the member commits them, or a member lease after the
// revocation began when it never does.
func TestRevokedPartitionWaitsForTheCommit(t *testing.T) {
	t.Parallel()
	m := New()
	var now int64 = 1_700_000_000_000
	cfg := DefaultConfig()
	cfg.Partitions = 2
	if _, err := m.PutTopic(now, nopSink{}, "t", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Publish(now, nopSink{}, "t", []PublishInput{{Partition: 0, Body: []byte("a")}, {Partition: 1, Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	gc := DefaultGroupConfig()
	if _, err := m.PutGroup(now, nopSink{}, "t", "g", gc); err != nil {
		t.Fatal(err)
	}
	s1, err := m.Attend(now, nopSink{}, "t", "g", "m1", 0)
	if err != nil || len(s1.Assigned) != 2 {
		t.Fatalf("m1 alone: %+v %v", s1, err)
	}
	plan, err := m.PlanPull("t", "g", "m1", 10)
	if err != nil || len(plan.Ranges) != 2 {
		t.Fatalf("plan: %+v %v", plan, err)
	}
	if _, err := m.Handed(now, nopSink{}, plan.TopicID, plan.GroupID, "m1", plan.Ranges); err != nil {
		t.Fatal(err)
	}
	// m2 joins: partition 1 is m2's share, but m1 has its record in flight.
	s2, err := m.Attend(now, nopSink{}, "t", "g", "m2", 0)
	if err != nil || len(s2.Assigned) != 0 {
		t.Fatalf("m2 joining: %+v %v", s2, err)
	}
	held := func(s Session) map[int]bool {
		out := map[int]bool{}
		for _, a := range s.Assigned {
			out[a.Partition] = a.Revoking
		}
		return out
	}
	now += 1000
	s1, err = m.Attend(now, nopSink{}, "t", "g", "m1", s1.Session)
	if err != nil {
		t.Fatal(err)
	}
	if h := held(s1); len(h) != 2 || !h[1] || h[0] {
		t.Fatalf("m1 at its next call with partition 1 in flight: %v, want both, partition 1 revoking", h)
	}
	if plan, _ := m.PlanPull("t", "g", "m1", 10); len(plan.Ranges) != 0 {
		t.Fatalf("m1 is handed more of what it is losing: %+v", plan.Ranges)
	}
	// The commit of partition 1's record lets it go at once.
	var epoch uint64
	for _, a := range s1.Assigned {
		if a.Partition == 1 {
			epoch = a.Epoch
		}
	}
	if errs, err := m.Commit(now, nopSink{}, "t", "g", "m1", s1.Session, []PartitionOffset{{Partition: 1, Offset: 1, Epoch: epoch}}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if s2, _ = m.SessionOf("t", "g", "m2"); len(s2.Assigned) != 1 || s2.Assigned[0].Partition != 1 || s2.Assigned[0].Position != 1 {
		t.Fatalf("m2 after m1's commit: %+v", s2.Assigned)
	}

	// a3 joins (sorted first, it takes a share: m2's); m2 holds partition 1 with a record
	// in flight that it never commits.
	if _, err := m.Publish(now, nopSink{}, "t", []PublishInput{{Partition: 1, Body: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	s2, _ = m.Attend(now, nopSink{}, "t", "g", "m2", s2.Session)
	plan, _ = m.PlanPull("t", "g", "m2", 10)
	if _, err := m.Handed(now, nopSink{}, plan.TopicID, plan.GroupID, "m2", plan.Ranges); err != nil || len(plan.Ranges) != 1 {
		t.Fatalf("m2's pull: %+v %v", plan, err)
	}
	if _, err := m.Attend(now, nopSink{}, "t", "g", "a3", 0); err != nil {
		t.Fatal(err)
	}
	s2, _ = m.Attend(now, nopSink{}, "t", "g", "m2", s2.Session)
	if h := held(s2); !h[1] {
		t.Fatalf("m2 lost partition 1 with its record in flight: %v", h)
	}
	// A lease later (m2 renewing all along), it goes regardless.
	for range 3 {
		now += gc.MemberLease.Milliseconds() / 3
		for _, x := range []string{"m1", "m2", "a3"} {
			if s, ok := m.SessionOf("t", "g", x); ok {
				if _, err := m.Attend(now, nopSink{}, "t", "g", x, s.Session); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if s2, _ = m.SessionOf("t", "g", "m2"); len(s2.Assigned) != 0 {
		t.Fatalf("m2 still holds partition 1 a lease after its revocation: %+v", s2.Assigned)
	}
	if s3, _ := m.SessionOf("t", "g", "a3"); len(s3.Assigned) != 1 || s3.Assigned[0].Position != 1 {
		t.Fatalf("a3 after the revocation: %+v, want partition 1 from its committed offset 1", s3.Assigned)
	}
}

// A group whose dead-letter queue's name would be too long is refused at creation, with
// a message that says why, and nothing is created.
func TestGroupNameLeavesRoomForItsDeadLetterQueue(t *testing.T) {
	t.Parallel()
	m := New()
	topicName := strings.Repeat("t", 60)
	if _, err := m.PutTopic(0, nopSink{}, topicName, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	ok := strings.Repeat("g", queue.MaxNameLen-len(topicName)-len(".-dlq"))
	if _, err := m.PutGroup(0, nopSink{}, topicName, ok, DefaultGroupConfig()); err != nil {
		t.Fatalf("a group whose dead-letter queue name is exactly %d bytes: %v", queue.MaxNameLen, err)
	}
	_, err := m.PutGroup(0, nopSink{}, topicName, ok+"g", DefaultGroupConfig())
	var ne *queue.NameError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "dead-letter queue") {
		t.Fatalf("one byte more: %v, want a name error about the dead-letter queue", err)
	}
	if gs, _ := m.Groups(topicName); len(gs) != 1 {
		t.Fatalf("%d groups after the refusal, want 1", len(gs))
	}
}
