package replica_test

import (
	"errors"
	"testing"

	"github.com/okiba/okiba/internal/replica"
)

func TestBootstrapRefuses(t *testing.T) {
	if err := replica.Bootstrap(replica.NewMemory(), nil); err == nil {
		t.Errorf("bootstrapped a cluster of no voters")
	}
	if err := replica.Bootstrap(replica.NewMemory(), []uint64{1, 0}); err == nil {
		t.Errorf("bootstrapped a voter 0")
	}
	st := replica.NewMemory()
	if err := replica.Bootstrap(st, []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := replica.Bootstrap(st, []uint64{1, 2, 3}); err == nil {
		t.Errorf("bootstrapped a storage twice")
	}
}

func TestNewRefuses(t *testing.T) {
	st := replica.NewMemory()
	if _, err := replica.New(replica.Config{ID: 1, Storage: st}); err == nil {
		t.Errorf("a replica over a storage never bootstrapped")
	}
	if err := replica.Bootstrap(st, []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]replica.Config{
		"no id":            {Storage: st},
		"no storage":       {ID: 1},
		"election <= beat": {ID: 1, Storage: st, ElectionTick: 2, HeartbeatTick: 2},
	} {
		if _, err := replica.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// A follower refuses commands, naming the leader it knows; a leader whose first entry
// of its term is not yet committed refuses them as unavailable.
func TestProposeRefusals(t *testing.T) {
	s := newSim(t, simConfig{nodes: 3, seed: 21})
	l := s.readyLeader()
	for _, n := range s.nodes {
		if n == l {
			continue
		}
		_, err := n.r.Propose(s.clock, command(opTick{}))
		var nl *replica.NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != l.id {
			t.Fatalf("node %d: Propose = %v; want a NotLeaderError naming %d", n.id, err, l.id)
		}
	}
	// Cut the leader off, let another win, and catch the new leader before its first
	// entry of the term is committed: it knows it leads, and does not take commands.
	s.isolate(l.id)
	var fresh *node
	s.until("a new leader is elected", func() bool {
		for _, n := range s.nodes {
			if n != l && n.r.Status().Lead == n.id {
				fresh = n
				return true
			}
		}
		return false
	})
	if st := fresh.r.Status(); st.Leader {
		t.Fatalf("node %d takes commands as soon as it is elected: %+v", fresh.id, st)
	}
	if _, err := fresh.r.Propose(s.clock, command(opTick{})); !errors.Is(err, replica.ErrUnavailable) {
		t.Fatalf("a leader before its first commit: Propose = %v, want ErrUnavailable", err)
	}
	s.heal()
	if r := s.do(s.readyLeader(), opPutQueue{name: "jobs"}); r.text != "created=true ok" {
		t.Fatalf("put_queue once a leader is ready: %s", r.text)
	}
	s.finish()
}
