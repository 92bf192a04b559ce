package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Storage is one replica's raft log and state: what raft reads (raft.Storage) and what
// the replica writes as it handles raft's output. In this slice it is Memory; the
// write-ahead log goes under it next. Nothing but the replica may write to it.
type Storage interface {
	raft.Storage
	// Save makes a snapshot received from the leader, new entries (an entry at index i
	// replaces every entry from i on) and the hard state durable, in that order, before
	// it returns: the replica sends no message until then. Any of them may be empty.
	Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error
	// SaveSnapshot records data, the machines' snapshot at the applied index i, as the
	// storage's snapshot, and may then discard the entries it covers.
	SaveSnapshot(i uint64, cs *pb.ConfState, data []byte) error
}

// Memory is a Storage in memory: raft's MemoryStorage, which survives what the
// simulation calls a crash (the Replica over it is dropped, the storage kept) as a disk
// would.
type Memory struct {
	*raft.MemoryStorage
	// Keep is how many entries before a snapshot's index stay in the log, so that a
	// follower a little behind is sent entries rather than the snapshot.
	Keep uint64
}

// NewMemory returns an empty Memory; Bootstrap makes it a member's.
func NewMemory() *Memory { return &Memory{MemoryStorage: raft.NewMemoryStorage()} }

// Save implements Storage.
func (s *Memory) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	if !raft.IsEmptySnap(snap) {
		if err := s.ApplySnapshot(snap); err != nil {
			return err
		}
	}
	if err := s.Append(ents); err != nil {
		return err
	}
	if !raft.IsEmptyHardState(hs) {
		return s.SetHardState(hs)
	}
	return nil
}

// SaveSnapshot implements Storage.
func (s *Memory) SaveSnapshot(i uint64, cs *pb.ConfState, data []byte) error {
	if _, err := s.CreateSnapshot(i, cs, data); err != nil {
		return err
	}
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	if i > s.Keep && i-s.Keep >= first {
		return s.Compact(i - s.Keep)
	}
	return nil
}

// bootstrapIndex is the index of the snapshot every member starts from.
const bootstrapIndex = 1

// Bootstrap makes an empty storage a founding member's of a cluster of voters (node
// ids, not 0): its log starts after a snapshot at index 1, term 1, of empty machines
// with that membership. Every founding member is bootstrapped alike, so they start from
// the same state, as raft recommends over its own Bootstrap, which writes entries.
func Bootstrap(s Storage, voters []uint64) error {
	return BootstrapLearner(s, voters, 0)
}

// BootstrapLearner is Bootstrap for a member that joins after the founders: the same
// snapshot at index 1, of the founders' voters, with the joining node a learner beside
// them (raft takes no snapshot that leaves its own node out), so that the leader's log
// from index 2 on — every change of membership since the founding, its own addition
// among them — follows it. learner 0 is Bootstrap.
func BootstrapLearner(s Storage, voters []uint64, learner uint64) error {
	if len(voters) == 0 {
		return errors.New("replica: bootstrap: no voters")
	}
	for _, v := range voters {
		if v == 0 {
			return errors.New("replica: bootstrap: node id 0")
		}
	}
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	snap, err := s.Snapshot()
	if err != nil {
		return err
	}
	if last != 0 || snap.GetMetadata().GetIndex() != 0 {
		return fmt.Errorf("replica: bootstrap: storage is not empty (last index %d)", last)
	}
	return s.Save(nil, nil, &pb.Snapshot{
		Metadata: &pb.SnapshotMetadata{
			Index:     new(uint64(bootstrapIndex)),
			Term:      new(uint64(1)),
			ConfState: bootConf(voters, learner),
		},
		Data: NewMachines().AppendSnapshot(nil),
	})
}

func bootConf(voters []uint64, learner uint64) *pb.ConfState {
	cs := &pb.ConfState{Voters: append([]uint64(nil), voters...)}
	if learner != 0 {
		cs.Learners = []uint64{learner}
	}
	return cs
}
