package cluster

import (
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3"
)

// A read answered from a leader's state must not be stale: a leader cut off from the
// others still believes it leads until its quorum check fails (an election timeout),
// while another may already lead and have committed more. ReadBarrier is raft's
// ReadIndex: the leader notes its commit index, confirms with a round of heartbeats that
// a quorum still follows it, and the read waits until that index is applied. Reads that
// arrive while a round is out wait for the next, so that a burst of reads costs two
// rounds, not one each.

// readRound is one ReadIndex: the reads that wait on it.
type readRound struct {
	id      uint64
	started time.Time
	index   uint64 // from raft's ReadState; 0 until it arrives
	waiters []chan error
}

// ReadBarrier returns once a read may be answered from this node's broker: it still
// leads, confirmed by a quorum after the call began, and its broker holds everything
// committed before. It answers ErrNoLeader when this node does not lead or cannot
// confirm it (within two election timeouts).
func (r *Raft) ReadBarrier(ctx context.Context) error {
	if r.Term() == 0 {
		return ErrNoLeader
	}
	done := make(chan error, 1)
	r.mu.Lock()
	r.nextReads = append(r.nextReads, done)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startReads issues the next round of reads if none is out (run's goroutine).
func (r *Raft) startReads() {
	if r.round != nil {
		if time.Since(r.round.started) > 2*time.Duration(r.cfg.ElectionTick)*r.cfg.Tick {
			r.endRound(ErrNoLeader) // raft dropped it: this node does not lead
		} else {
			return
		}
	}
	r.mu.Lock()
	waiting := r.nextReads
	r.nextReads = nil
	r.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	if r.term.Load() == 0 {
		for _, w := range waiting {
			w <- ErrNoLeader
		}
		return
	}
	r.rounds++
	r.round = &readRound{id: r.rounds, started: time.Now(), waiters: waiting}
	r.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, r.round.id))
}

// noteReadStates takes the index raft confirmed for the round out.
func (r *Raft) noteReadStates(states []raft.ReadState) {
	for _, rs := range states {
		if r.round != nil && len(rs.RequestCtx) == 8 && binary.BigEndian.Uint64(rs.RequestCtx) == r.round.id {
			r.round.index = max(rs.Index, 1)
		}
	}
}

// finishReads ends the round once its index is applied.
func (r *Raft) finishReads() {
	if r.round != nil && r.round.index != 0 && r.applied >= r.round.index {
		r.endRound(nil)
	}
}

func (r *Raft) endRound(err error) {
	for _, w := range r.round.waiters {
		w <- err
	}
	r.round = nil
}

// failReads ends every read waiting, at Close.
func (r *Raft) failReads() {
	if r.round != nil {
		r.endRound(ErrNoLeader)
	}
	r.mu.Lock()
	waiting := r.nextReads
	r.nextReads = nil
	r.mu.Unlock()
	for _, w := range waiting {
		w <- ErrNoLeader
	}
}
