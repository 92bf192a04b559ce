package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// A checkpoint's payload (inside the wal's checkpoint file) holds two parts: the
// machine's semantic snapshot, the same on every node that applied the same records, and
// the payload store's section, this node's own (where each message's body lies):
//
//	"OKBC" | u8 version (1) | u64 length of the semantic part | semantic snapshot | store section
//
// The semantic length is fixed-width so that the header can be written before the parts,
// which are written as the pieces they were built in. okiba before the payload store
// wrote the semantic snapshot alone ("OKQS"), with each message's log position inside;
// restore still reads that.
const (
	checkpointMagic   = "OKBC"
	checkpointVersion = 1
	checkpointHeader  = len(checkpointMagic) + 1 + 8
)

// checkpointPieces returns the pieces of a checkpoint payload.
func checkpointPieces(semantic, section [][]byte) [][]byte {
	n := 0
	for _, c := range semantic {
		n += len(c)
	}
	h := make([]byte, 0, checkpointHeader)
	h = append(h, checkpointMagic...)
	h = append(h, checkpointVersion)
	h = binary.LittleEndian.AppendUint64(h, uint64(n))
	out := make([][]byte, 0, 1+len(semantic)+len(section))
	out = append(out, h)
	out = append(out, semantic...)
	return append(out, section...)
}

// restore rebuilds the machine and the payload store from a checkpoint payload.
func (b *Broker) restore(ckpt []byte) (*queue.Machine, error) {
	if len(ckpt) >= 4 && string(ckpt[:4]) == "OKQS" {
		// Before the payload store: the snapshot held each message's log position.
		return queue.Restore(ckpt, func(ref queue.Ref, size int64, pos uint64) {
			b.store.Move(ref, wal.Pos(pos), size)
		})
	}
	if len(ckpt) < checkpointHeader || string(ckpt[:len(checkpointMagic)]) != checkpointMagic {
		return nil, errors.New("not an okiba checkpoint (bad magic)")
	}
	if v := ckpt[len(checkpointMagic)]; v != checkpointVersion {
		if v > checkpointVersion {
			return nil, fmt.Errorf("%w: checkpoint version %d; this okiba reads %d", ErrNewerFormat, v, checkpointVersion)
		}
		return nil, fmt.Errorf("unknown checkpoint version %d", v)
	}
	n := binary.LittleEndian.Uint64(ckpt[len(checkpointMagic)+1:])
	rest := ckpt[checkpointHeader:]
	if n > uint64(len(rest)) {
		return nil, fmt.Errorf("checkpoint says its semantic part is %d bytes, but %d follow", n, len(rest))
	}
	m, err := queue.Restore(rest[:n], nil)
	if err != nil {
		return nil, err
	}
	if err := b.store.Restore(rest[n:], m.EachMessage); err != nil {
		return nil, err
	}
	return m, nil
}

// replay applies one record of the log met at start-up: the payload store's frames go to
// the store, the machine's records to the machine (the store learns where each lies).
func (b *Broker) replay(p wal.Pos, raw []byte) error {
	if payload.IsFrame(raw) {
		return b.store.ApplyFrame(p, raw)
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
