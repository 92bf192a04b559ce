package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// A checkpoint's payload (inside the wal's checkpoint file) holds the machines' semantic
// snapshots, the same on every node that applied the same records, and the payload
// store's sections, this node's own (where each message's body and each topic record
// lies):
//
//	"OKBC" | u8 version (4) | u64 length | queue snapshot | u64 length | topic snapshot |
//	       u64 length | access snapshot | u64 length | store section | u64 applied |
//	       store topic section
//
// applied is, on a node of a cluster, the index of the last committed entry the
// checkpoint holds (0 on a single node); a replay after it applies only the entries that
// follow (replication.go). Version 3 had no applied index.
// Lengths are fixed-width so that a header can be written before its part, which is
// written as the pieces it was built in. Version 2 (before principals) had no access
// snapshot; version 1 (before topics) had the queue snapshot
// and the store section only; okiba before the payload store wrote the queue snapshot
// alone ("OKQS"), with each message's log position inside. Restore reads all three.
const (
	checkpointMagic   = "OKBC"
	checkpointVersion = 4
	checkpointHeader  = len(checkpointMagic) + 1 + 8
)

func size(pieces [][]byte) uint64 {
	n := 0
	for _, c := range pieces {
		n += len(c)
	}
	return uint64(n)
}

// checkpointPieces returns the pieces of a checkpoint payload.
func checkpointPieces(semantic [][]byte, topics, principals []byte, section [][]byte, applied uint64, topicSection []byte) [][]byte {
	h := make([]byte, 0, checkpointHeader)
	h = append(h, checkpointMagic...)
	h = append(h, checkpointVersion)
	h = binary.LittleEndian.AppendUint64(h, size(semantic))
	out := make([][]byte, 0, 5+len(semantic)+len(section))
	out = append(out, h)
	out = append(out, semantic...)
	out = append(out, binary.LittleEndian.AppendUint64(nil, uint64(len(topics))), topics)
	out = append(out, binary.LittleEndian.AppendUint64(nil, uint64(len(principals))), principals)
	out = append(out, binary.LittleEndian.AppendUint64(nil, size(section)))
	out = append(out, section...)
	out = append(out, binary.LittleEndian.AppendUint64(nil, applied))
	return append(out, topicSection)
}

// restore rebuilds the machines and the payload store from a checkpoint payload.
func (b *Broker) restore(ckpt []byte) (*queue.Machine, *topic.Machine, *access.Machine, error) {
	if len(ckpt) >= 4 && string(ckpt[:4]) == "OKQS" {
		// Before the payload store: the snapshot held each message's log position.
		m, err := queue.Restore(ckpt, func(ref queue.Ref, size int64, pos uint64) {
			b.store.Move(ref, wal.Pos(pos), size)
		})
		return m, topic.New(), access.New(), err
	}
	if len(ckpt) < checkpointHeader || string(ckpt[:len(checkpointMagic)]) != checkpointMagic {
		return nil, nil, nil, errors.New("not an okiba checkpoint (bad magic)")
	}
	v := ckpt[len(checkpointMagic)]
	if v > checkpointVersion {
		return nil, nil, nil, fmt.Errorf("%w: checkpoint version %d; this okiba reads %d", ErrNewerFormat, v, checkpointVersion)
	}
	if v < 1 {
		return nil, nil, nil, fmt.Errorf("unknown checkpoint version %d", v)
	}
	rest := ckpt[len(checkpointMagic)+1:]
	part := func(what string) ([]byte, error) {
		if len(rest) < 8 {
			return nil, fmt.Errorf("checkpoint ends before its %s", what)
		}
		n := binary.LittleEndian.Uint64(rest)
		rest = rest[8:]
		if n > uint64(len(rest)) {
			return nil, fmt.Errorf("checkpoint says its %s is %d bytes, but %d follow", what, n, len(rest))
		}
		p := rest[:n]
		rest = rest[n:]
		return p, nil
	}
	qsnap, err := part("queue snapshot")
	if err != nil {
		return nil, nil, nil, err
	}
	var tsnap, asnap, section, topicSection []byte
	if v == 1 {
		section = rest
	} else {
		if tsnap, err = part("topic snapshot"); err != nil {
			return nil, nil, nil, err
		}
		if v >= 3 {
			if asnap, err = part("access snapshot"); err != nil {
				return nil, nil, nil, err
			}
		}
		if section, err = part("store section"); err != nil {
			return nil, nil, nil, err
		}
		if v >= 4 {
			if len(rest) < 8 {
				return nil, nil, nil, errors.New("checkpoint ends before its applied index")
			}
			b.applied = binary.LittleEndian.Uint64(rest)
			rest = rest[8:]
		}
		topicSection = rest
	}
	m, err := queue.Restore(qsnap, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := b.store.Restore(section, m.EachMessage); err != nil {
		return nil, nil, nil, err
	}
	t := topic.New()
	if v >= 2 {
		if t, err = topic.Restore(tsnap); err != nil {
			return nil, nil, nil, err
		}
		if err := b.store.RestoreTopics(topicSection); err != nil {
			return nil, nil, nil, err
		}
	}
	a, err := access.Restore(asnap)
	if err != nil {
		return nil, nil, nil, err
	}
	return m, t, a, nil
}

// replay applies one record of the log met at start-up: the payload store's frames go to
// the store, the machine's records to the machine (the store learns where each lies).
func (b *Broker) replay(p wal.Pos, raw []byte) error {
	if payload.IsFrame(raw) {
		return b.store.ApplyFrame(p, raw)
	}
	if access.IsRecord(raw) {
		r, err := access.DecodeRecord(raw)
		if err != nil {
			return fmt.Errorf("record at %v: %w", p, err)
		}
		b.store.At(p, true)
		if err := b.a.Apply(r); err != nil {
			return fmt.Errorf("record at %v (%s): %w", p, r.Kind(), err)
		}
		return nil
	}
	if len(raw) > 0 && raw[0] >= byte(topic.MinKind) {
		r, err := topic.DecodeRecordShared(raw)
		if err != nil {
			return fmt.Errorf("record at %v: %w", p, err)
		}
		b.store.At(p, true)
		if err := b.t.Apply(r); err != nil {
			return fmt.Errorf("record at %v (%s): %w", p, r.Kind(), err)
		}
		return nil
	}
	r, err := queue.DecodeRecordShared(raw)
	if err != nil {
		return fmt.Errorf("record at %v: %w", p, err)
	}
	b.store.At(p, true)
	if err := b.m.Apply(r); err != nil {
		return fmt.Errorf("record at %v (%s): %w", p, r.Kind(), err)
	}
	if rl, ok := r.(*queue.RelocateRecord); ok {
		// An older okiba's compaction: the body now lies here.
		if ref, ok := b.m.MessageRef(rl.QueueID, rl.Seq, rl.MsgID); ok {
			b.store.Move(ref, p, rl.Payload.Size())
		}
	}
	return nil
}
