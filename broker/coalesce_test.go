package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// entryRepl is a Replication that commits every proposal at once, into the entry at
// index: the proposals made while index stays put share one entry, as a cluster's
// driver coalesces them. It remembers each proposal's entry and records, as the raft
// log would.
type entryRepl struct {
	mu        sync.Mutex
	index     uint64
	committed map[[2]uint64]uint64
	records   map[[2]uint64][][]byte
}

func newEntryRepl() *entryRepl {
	return &entryRepl{index: 2, committed: map[[2]uint64]uint64{}, records: map[[2]uint64][][]byte{}}
}

func (r *entryRepl) Term() uint64 { return 1 }
func (r *entryRepl) Seal()        {}

func (r *entryRepl) Propose(term, seq uint64, _ int64, recs [][]byte) *Proposal {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.committed[[2]uint64{term, seq}] = r.index
	r.records[[2]uint64{term, seq}] = recs
	p := NewProposal()
	p.Resolve(r.index, nil)
	return p
}

func (r *entryRepl) Committed(term, seq uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.committed[[2]uint64{term, seq}]
	return i, ok
}

// A leader's log that lost the end of a committed entry of several of its proposals (a
// power loss before the log's tail was durable) replays the first of them; CompleteEntry
// applies the rest behind their own markers, and a later replay takes all of them, each
// once. What does not follow the replay's last proposal is refused and changes nothing.
func TestCompleteEntryAppliesWhatTheLogLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repl := newEntryRepl()
	fs := vfs.NewMemFS()
	b, err := Open(Config{Dir: "/d", FS: fs, Replication: repl})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, _, err := b.PutQueue(ctx, "jobs", func(*queue.Config, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	repl.mu.Lock()
	repl.index = 3 // the three sends share entry 3: proposals 1/2, 1/3, 1/4
	repl.mu.Unlock()
	send := func(b *Broker, body string) {
		t.Helper()
		res, err := b.Send(ctx, "jobs", []queue.SendInput{{Payload: queue.Payload{Body: []byte(body)}, Delay: -1}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
	}
	send(b, "m0")
	lost := fs.Crash() // m0 is durable, what follows is not yet
	send(b, "m1")
	send(b, "m2")

	ready := func(b *Broker) int64 {
		t.Helper()
		qi, err := b.Queue("jobs")
		if err != nil {
			t.Fatal(err)
		}
		return qi.Stats.Ready
	}
	b2, err := Open(Config{Dir: "/d", FS: lost, Replication: repl})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if idx, term, seq := b2.ReplayedOwn(); idx != 3 || term != 1 || seq != 2 {
		t.Fatalf("ReplayedOwn = %d, %d/%d; want entry 3, proposal 1/2", idx, term, seq)
	}
	if n := ready(b2); n != 1 {
		t.Fatalf("the log that lost its tail holds %d messages, want 1", n)
	}
	rest := func(seqs ...uint64) []OwnCommand {
		var out []OwnCommand
		for _, s := range seqs {
			out = append(out, OwnCommand{Term: 1, Seq: s, Records: repl.records[[2]uint64{1, s}]})
		}
		return out
	}
	for name, c := range map[string]struct {
		index uint64
		cmds  []OwnCommand
	}{
		"a gap":           {3, rest(4)},
		"a repeat":        {3, rest(2, 3, 4)},
		"another entry":   {4, rest(3, 4)},
		"another term":    {3, []OwnCommand{{Term: 2, Seq: 3}}},
		"out of its turn": {3, rest(4, 3)},
	} {
		if err := b2.CompleteEntry(c.index, c.cmds); err == nil {
			t.Fatalf("CompleteEntry took %s", name)
		}
		if n := ready(b2); n != 1 {
			t.Fatalf("a refused CompleteEntry (%s) left %d messages, want 1", name, n)
		}
	}
	if err := b2.CompleteEntry(3, rest(3, 4)); err != nil {
		t.Fatalf("CompleteEntry: %v", err)
	}
	if n := ready(b2); n != 3 {
		t.Fatalf("after CompleteEntry the broker holds %d messages, want 3", n)
	}
	if err := b2.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	b3, err := Open(Config{Dir: "/d", FS: lost.Crash(), Replication: repl})
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close()
	if idx, term, seq := b3.ReplayedOwn(); idx != 3 || term != 1 || seq != 4 {
		t.Fatalf("replayed again: ReplayedOwn = %d, %d/%d; want entry 3, proposal 1/4", idx, term, seq)
	}
	ms, err := b3.Peek(ctx, "jobs", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("replayed again: %d messages, want 3", len(ms))
	}
	for i, m := range ms {
		if want := fmt.Sprintf("m%d", i); string(m.Payload.Body) != want {
			t.Fatalf("message %d is %q, want %q", i, m.Payload.Body, want)
		}
	}
	if err := b3.CompleteEntry(3, rest(4)); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("CompleteEntry of what the replay applied: %v, want a refusal", err)
	}
}
