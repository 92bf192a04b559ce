package replica

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

const t0 = 1_700_000_000_000

// setUp is a command that touches all three machines: a queue, a topic subscribed into
// it (so that a publish's records put messages into the queue machine), a principal.
func setUp(now int64, m *Machines, b *Batch) any {
	cfg := queue.DefaultConfig()
	cfg.DeadLetterQueue = queue.NoDeadLetterQueue
	cfg.MaxDeliveries = 0
	if _, err := m.Queues().PutQueue(now, b.Queue(), "inbox", cfg); err != nil {
		return err
	}
	if _, err := m.Topics().PutTopic(now, b.Topic(), "news", topic.DefaultConfig()); err != nil {
		return err
	}
	qi, err := m.Queues().QueueMeta("inbox")
	if err != nil {
		return err
	}
	if _, err := m.Topics().Subscribe(now, b.Topic(), "news", "all", topic.SubscriptionConfig{Queue: "inbox"},
		topic.QueueInfo{ID: qi.ID, MaxMessageSize: qi.Config.MaxMessageSize, OrderedGroups: qi.Config.OrderedGroups}, nil); err != nil {
		return err
	}
	g, _ := access.ParseGrant("send queue:inbox")
	_, err = m.Access().Create(now, b.Access(), "ci", []access.Grant{g}, []byte("sealed"))
	return err
}

func publish(body string) Command {
	return func(now int64, m *Machines, b *Batch) any {
		res, err := m.Topics().Publish(now, b.Topic(), "news", []topic.PublishInput{{Partition: topic.AnyPartition, Body: []byte(body)}})
		if err != nil {
			return err
		}
		return res[0].Err
	}
}

func receive(now int64, m *Machines, b *Batch) any {
	ds, err := m.Queues().Receive(now, b.Queue(), "inbox", 10, 1000, 0)
	if err != nil {
		return err
	}
	return len(ds)
}

// Records go to their machine by kind: a replica that applies the entries another
// built by running commands ends in the same state.
func TestMachinesApplyRoutesRecords(t *testing.T) {
	live, follower := NewMachines(), NewMachines()
	kinds := map[string]bool{}
	for i, cmd := range []Command{setUp, publish("a"), publish("b"), receive} {
		now := int64(t0 + 1000*i)
		recs, ans := live.Run(now, cmd)
		if err, ok := ans.(error); ok && err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		for _, r := range recs {
			switch {
			case access.IsRecord(r):
				kinds["access"] = true
			case r[0] >= byte(topic.MinKind):
				kinds["topic"] = true
			default:
				kinds["queue"] = true
			}
		}
		if err := follower.ApplyEntry(&Entry{Now: now, ID: ProposalID{1, 1, uint64(i + 1)}, Records: recs}); err != nil {
			t.Fatalf("apply entry %d: %v", i, err)
		}
	}
	if len(kinds) != 3 {
		t.Fatalf("the commands emitted records of %v, want all three machines'", kinds)
	}
	if got := follower.Queues().Depth("inbox"); got != 2 {
		t.Fatalf("the follower's inbox holds %d messages from the topic, want 2", got)
	}
	if f, l := follower.AppendSnapshot(nil), live.AppendSnapshot(nil); !bytes.Equal(f, l) {
		t.Fatalf("the follower's machines differ from the live ones")
	}
	if follower.Now() != t0+3000 {
		t.Fatalf("follower's time %d, want %d", follower.Now(), t0+3000)
	}
}

func TestMachinesApplyRefusesNodeLocalFrames(t *testing.T) {
	m := NewMachines()
	for _, raw := range [][]byte{{0x81, 1, 2, 3}, {byte(queue.KindRelocate), 0}, {0xD0}, {}} {
		if err := m.Apply(raw); err == nil {
			t.Fatalf("Apply(%x) succeeded", raw)
		}
	}
}

// A snapshot restores to machines that write the same snapshot and are wired as new
// ones are: a publish still fans out into the queue machine.
func TestMachinesSnapshotRoundTrip(t *testing.T) {
	m := NewMachines()
	m.Run(t0, setUp)
	m.Run(t0+10, publish("a"))
	snap := m.AppendSnapshot(nil)
	r, err := RestoreMachines(snap)
	if err != nil {
		t.Fatal(err)
	}
	if again := r.AppendSnapshot(nil); !bytes.Equal(again, snap) {
		t.Fatalf("restored machines write another snapshot")
	}
	if _, ans := r.Run(t0+20, publish("b")); ans != nil {
		t.Fatalf("publish after restore: %v", ans)
	}
	if got := r.Queues().Depth("inbox"); got != 2 {
		t.Fatalf("inbox holds %d after a publish on restored machines, want 2", got)
	}
}

func TestRestoreMachinesRefuses(t *testing.T) {
	good := NewMachines().AppendSnapshot(nil)
	cases := map[string][]byte{
		"bad magic":     append([]byte("OKQS"), good[4:]...),
		"newer version": append(append([]byte(snapshotMagic), snapshotVersion+1), good[5:]...),
		"truncated":     good[:len(good)-1],
		"trailing byte": append(append([]byte(nil), good...), 0),
		"empty":         nil,
	}
	for name, b := range cases {
		if _, err := RestoreMachines(b); err == nil {
			t.Errorf("%s: restored", name)
		} else if name == "newer version" && !errors.Is(err, ErrNewerSnapshot) {
			t.Errorf("newer version: %v, want ErrNewerSnapshot", err)
		}
	}
	if _, err := RestoreMachines(good); err != nil {
		t.Fatalf("empty machines' snapshot: %v", err)
	}
}

// Run advances the stream's time to the command's, even when it emits nothing.
func TestRunKeepsTheTime(t *testing.T) {
	m := NewMachines()
	recs, ans := m.Run(t0, receive)
	if len(recs) != 0 || ans == nil || !strings.Contains(ans.(error).Error(), "not found") {
		t.Fatalf("receive from a missing queue: %d records, %v", len(recs), ans)
	}
	if m.Now() != t0 {
		t.Fatalf("Now = %d, want %d", m.Now(), t0)
	}
}
