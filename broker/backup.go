package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/internal/export"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// A backup is an export (internal/export) of the broker at one moment: the machines'
// semantic snapshots, every live body in the queue machine's canonical order, every
// retained topic record, and the data directory's secret (so that receipts, console
// sessions and principals' sealed secrets stay valid in the restored copy). It holds
// nothing of where this node keeps its bytes: a restore writes them its own way. The
// contents of each frame, after the package's framing:
//
//	Header:      uvarint contents version (2) | varint now (Unix ms) | uvarint broker
//	             format | uvarint queues | uvarint messages | uvarint partitions |
//	             uvarint applied (from version 2: on a node of a cluster, the index of
//	             the last committed entry the backup holds; 0 elsewhere)
//	Secret:      the 32+ bytes of <data>/secret
//	Queues, Topics, Access: the machines' snapshots, in pieces that concatenate
//	Bodies:      (uvarint message id | uvarint length | payload)*, canonical order
//	TopicRecord: uvarint topic id | uvarint partition | (uvarint offset | uvarint
//	             length | publish record)*, offsets dense and ascending
//	End:         uvarint messages | uvarint topic records
const backupContents = 2

// backupContentsV1 is the first version, without the applied index; still read.
const backupContentsV1 = 1

// bodiesPerFrame bounds the bytes of bodies one Bodies frame gathers.
const bodiesPerFrame = 1 << 20

// BackupInfo says what a backup holds.
type BackupInfo struct {
	// At is the moment the backup is of: every send answered before it began is in it.
	At           time.Time
	Queues       int
	Messages     int64
	Partitions   int
	TopicRecords int64
	Bytes        int64 // of the export stream
	// Applied is, for a backup of a cluster's node, the index of the last committed
	// entry it holds (a raft snapshot's state, internal/cluster); 0 elsewhere.
	Applied uint64
}

// ErrBackupRace: a topic's retention deleted records, or the topic was deleted, while a
// backup was reading it. Nothing is wrong with the broker: take the backup again.
var ErrBackupRace = errors.New("a topic's retention deleted records while the backup read them: take the backup again")

type backupPart struct {
	topicID    uint64
	name       string
	part       int
	start, end uint64
}

// Backup writes a consistent backup of the broker to w while it keeps serving: the
// state is captured in one critical section (the machines' snapshots, and a hold on
// every live body's segment so that collection and compaction cannot take one away),
// and written out after it, with no lock held. What it holds is durable before the
// first byte is written. A writer that stops (a broken connection) ends the backup
// with its error; the holds go with it.
func (b *Broker) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	b.mu.Lock()
	if err := b.usableLocked(); err != nil {
		b.mu.Unlock()
		return BackupInfo{}, err
	}
	now := b.nowLocked()
	var refs []queue.Ref
	semantic := b.m.Snapshot(func(ref queue.Ref, _ int64) { refs = append(refs, ref) })
	ids := make([]uint64, len(refs))
	for i, r := range refs {
		ids[i] = b.m.RefID(r)
	}
	topics, principals := b.t.AppendSnapshot(nil), b.a.AppendSnapshot(nil)
	var parts []backupPart
	for _, ti := range b.t.Topics("") {
		for _, p := range ti.Partitions {
			parts = append(parts, backupPart{topicID: ti.ID, name: ti.Name, part: p.Partition, start: p.Start, end: p.End})
		}
	}
	queues := len(b.m.Queues(""))
	pin := b.store.Pin(refs)
	t, applied := b.lastTicket, b.applied
	if t.p != nil {
		b.repl.Seal() // the state ends with an entry: t.p's index says what it holds
	}
	b.mu.Unlock()
	defer pin.Release()
	if err := t.Wait(ctx); err != nil {
		return BackupInfo{}, err
	}
	if t.p != nil {
		// A leader's machines hold its proposals: the backup is of committed state once
		// the last of them is, at its index (as a checkpoint).
		idx, _ := t.p.Wait(ctx)
		applied = max(applied, idx)
	}

	info := BackupInfo{At: time.UnixMilli(now), Queues: queues, Messages: int64(len(refs)), Partitions: len(parts), Applied: applied}
	ew := export.NewWriter(w)
	h := codec.AppendUvarint(nil, backupContents)
	h = codec.AppendVarint(h, now)
	h = codec.AppendUvarint(h, FormatVersion)
	h = codec.AppendUvarint(h, uint64(queues))
	h = codec.AppendUvarint(h, uint64(len(refs)))
	h = codec.AppendUvarint(h, uint64(len(parts)))
	h = codec.AppendUvarint(h, applied)
	if err := ew.Frame(export.Header, h); err != nil {
		return info, err
	}
	if err := ew.Frame(export.Secret, b.secret); err != nil {
		return info, err
	}
	for _, piece := range semantic {
		if err := ew.Frame(export.Queues, piece); err != nil {
			return info, err
		}
	}
	if err := ew.Frame(export.Topics, topics); err != nil {
		return info, err
	}
	if err := ew.Frame(export.Access, principals); err != nil {
		return info, err
	}
	var buf []byte
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return info, err
		}
		p, err := pin.Body(i, id)
		if err != nil {
			return info, fmt.Errorf("backup: %w", err)
		}
		buf = codec.AppendUvarint(buf, id)
		buf = codec.AppendBytes(buf, queue.AppendPayload(nil, &p))
		if len(buf) >= bodiesPerFrame || i == len(ids)-1 {
			if err := ew.Frame(export.Bodies, buf); err != nil {
				return info, err
			}
			buf = buf[:0]
		}
	}
	for _, p := range parts {
		n, err := b.backupPartition(ctx, ew, p)
		info.TopicRecords += n
		if err != nil {
			return info, err
		}
	}
	end := codec.AppendUvarint(nil, uint64(info.Messages))
	end = codec.AppendUvarint(end, uint64(info.TopicRecords))
	if err := ew.Frame(export.End, end); err != nil {
		return info, err
	}
	err := ew.Flush()
	info.Bytes = ew.Written()
	return info, err
}

// backupPartition writes one partition's retained records, in frames of about a
// megabyte.
func (b *Broker) backupPartition(ctx context.Context, ew *export.Writer, p backupPart) (int64, error) {
	var n int64
	for from := p.start; from < p.end; {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		recs, err := b.store.ReadTopic(p.topicID, p.part, from, p.end, 4096, bodiesPerFrame)
		if err != nil && len(recs) == 0 {
			if errors.Is(err, payload.ErrRecordGone) {
				return n, fmt.Errorf("%w (topic %s, partition %d, offset %d)", ErrBackupRace, p.name, p.part, from)
			}
			return n, fmt.Errorf("backup: topic %s, partition %d: %w", p.name, p.part, err)
		}
		f := codec.AppendUvarint(nil, p.topicID)
		f = codec.AppendUvarint(f, uint64(p.part))
		for _, r := range recs {
			if r.Offset != from {
				return n, fmt.Errorf("backup: topic %s, partition %d: read offset %d where %d belongs", p.name, p.part, r.Offset, from)
			}
			f = codec.AppendUvarint(f, r.Offset)
			f = codec.AppendBytes(f, r.AppendTo(nil))
			from++
			n++
		}
		if err := ew.Frame(export.TopicRecord, f); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Restore writes the backup read from r into a new data directory, cfg.Dir, which must
// not exist or be empty: a restore never overwrites data. It builds the directory beside
// it under another name and renames it into place only once all of it is durable, so
// that a restore that fails leaves no half-made directory at cfg.Dir. The restored
// directory holds what the backup holds, its secret too; open it with Open.
func Restore(cfg Config, r io.Reader) (BackupInfo, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return BackupInfo{}, err
	}
	fs := cfg.FS
	if names, err := fs.ReadDir(cfg.Dir); err == nil && len(names) > 0 {
		return BackupInfo{}, fmt.Errorf("restore: %s is not empty: a restore writes a new data directory and never overwrites one", cfg.Dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return BackupInfo{}, fmt.Errorf("restore: %w", err)
	}
	tmp := cfg.Dir + ".restoring-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	info, err := restoreInto(cfg, tmp, r)
	if err != nil {
		_ = removeAll(fs, tmp)
		return info, err
	}
	_ = fs.Remove(cfg.Dir) // empty, or absent
	if err := fs.Rename(tmp, cfg.Dir); err != nil {
		_ = removeAll(fs, tmp)
		return info, fmt.Errorf("restore: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(cfg.Dir)); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	return info, nil
}

func restoreInto(cfg Config, dir string, r io.Reader) (BackupInfo, error) {
	var info BackupInfo
	er := export.NewReader(r)
	next := func(want export.Kind) ([]byte, error) {
		k, data, err := er.Next()
		if err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if k != want {
			return nil, fmt.Errorf("restore: %w: a %s frame where the %s belongs", export.ErrCorrupt, k, want)
		}
		return data, nil
	}
	h, err := next(export.Header)
	if err != nil {
		return info, err
	}
	d := &codec.Decoder{B: h}
	version := d.Uvarint()
	if d.Err == nil && version != backupContents && version != backupContentsV1 {
		return info, fmt.Errorf("restore: %w: backup contents version %d; this okiba reads %d and %d", export.ErrNewer, version, backupContentsV1, backupContents)
	}
	info.At = time.UnixMilli(d.Varint())
	if v := d.Uvarint(); d.Err == nil && v > FormatVersion {
		return info, fmt.Errorf("restore: %w: the backup is of format %d; this okiba reads %d", ErrNewerFormat, v, FormatVersion)
	}
	info.Queues, info.Messages, info.Partitions = int(d.Uvarint()), int64(d.Uvarint()), int(d.Uvarint())
	if version >= 2 {
		info.Applied = d.Uvarint()
	}
	if err := d.Finish(); err != nil {
		return info, fmt.Errorf("restore: %w: header: %v", export.ErrCorrupt, err)
	}
	secret, err := next(export.Secret)
	if err != nil {
		return info, err
	}
	if len(secret) < 32 {
		return info, fmt.Errorf("restore: %w: a secret of %d bytes", export.ErrCorrupt, len(secret))
	}
	if err := cfg.FS.MkdirAll(filepath.Join(dir, "topics"), vfs.DirMode); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	if err := vfs.WriteFile(cfg.FS, filepath.Join(dir, "secret"), vfs.FileMode, secret); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	// The machines' snapshots, each in pieces, in order.
	var qs, ts, as []byte
	k, data, err := er.Next()
	for ; err == nil && k == export.Queues; k, data, err = er.Next() {
		qs = append(qs, data...)
	}
	for ; err == nil && k == export.Topics; k, data, err = er.Next() {
		ts = append(ts, data...)
	}
	for ; err == nil && k == export.Access; k, data, err = er.Next() {
		as = append(as, data...)
	}
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	m, err := queue.Restore(qs, nil)
	if err != nil {
		return info, fmt.Errorf("restore: queues: %w", err)
	}
	t, err := topic.Restore(ts)
	if err != nil {
		return info, fmt.Errorf("restore: topics: %w", err)
	}
	a, err := access.Restore(as)
	if err != nil {
		return info, fmt.Errorf("restore: principals: %w", err)
	}
	if got := m.MessageCount(); got != info.Messages {
		return info, fmt.Errorf("restore: %w: the header says %d messages, the snapshot holds %d", export.ErrCorrupt, info.Messages, got)
	}

	// A broker on the new directory, running nothing in the background, takes the
	// machines; the bodies and records go where it keeps them.
	cfg.Dir = dir
	cfg.manual = true
	b, err := Open(cfg)
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	fail := func(err error) (BackupInfo, error) {
		b.Close()
		return info, err
	}
	b.mu.Lock()
	b.m, b.t, b.a = m, t, a
	b.m.SetReleaseLog(b.logRelease)
	b.applied = info.Applied // the checkpoint says which entry the state is of
	b.m.SetBodies(b.store)
	b.t.SetBodies(b.store)
	b.t.SetQueues(b.m)
	var refs []queue.Ref
	b.m.EachMessage(func(ref queue.Ref, _ int64) bool { refs = append(refs, ref); return true })
	b.mu.Unlock()

	i := 0
	var topicRecords int64
	for ; err == nil && k == export.Bodies; k, data, err = er.Next() {
		bd := &codec.Decoder{B: data}
		for len(bd.B) > 0 && bd.Err == nil {
			id, raw := bd.Uvarint(), bd.Bytes()
			if bd.Err != nil {
				break
			}
			if i >= len(refs) {
				return fail(fmt.Errorf("restore: %w: more bodies than the %d messages", export.ErrCorrupt, len(refs)))
			}
			if want := m.RefID(refs[i]); id != want {
				return fail(fmt.Errorf("restore: %w: body %d is of message %s where %s belongs", export.ErrCorrupt, i, queue.FormatID(id), queue.FormatID(want)))
			}
			p, perr := queue.DecodePayloadBytes(raw)
			if perr != nil {
				return fail(fmt.Errorf("restore: %w: body of message %s: %v", export.ErrCorrupt, queue.FormatID(id), perr))
			}
			// p aliases the reader's buffer; the store copies the frame it writes.
			if perr := b.store.Place(refs[i], id, &p); perr != nil {
				return fail(fmt.Errorf("restore: %w", perr))
			}
			i++
		}
		if bd.Err != nil {
			return fail(fmt.Errorf("restore: %w: bodies: %v", export.ErrCorrupt, bd.Err))
		}
	}
	if err == nil && i != len(refs) {
		err = fmt.Errorf("%w: %d bodies for %d messages", export.ErrCorrupt, i, len(refs))
	}
	for ; err == nil && k == export.TopicRecord; k, data, err = er.Next() {
		n, perr := restorePartition(b, t, data)
		topicRecords += n
		if perr != nil {
			return fail(fmt.Errorf("restore: %w", perr))
		}
	}
	if err == nil && k != export.End {
		err = fmt.Errorf("%w: a %s frame where the end belongs", export.ErrCorrupt, k)
	}
	if err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	ed := &codec.Decoder{B: data}
	msgs, recs := ed.Uvarint(), ed.Uvarint()
	if err := ed.Finish(); err != nil || int64(msgs) != info.Messages || int64(recs) != topicRecords {
		return fail(fmt.Errorf("restore: %w: the end says %d messages and %d topic records, the backup held %d and %d",
			export.ErrCorrupt, msgs, recs, info.Messages, topicRecords))
	}
	info.TopicRecords = topicRecords
	info.Bytes = er.Read()
	if err := b.store.SyncTopics(); err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	if err := b.Checkpoint(context.Background()); err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	if err := b.Close(); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	return info, nil
}

// restorePartition places one TopicRecord frame's records.
func restorePartition(b *Broker, t *topic.Machine, data []byte) (int64, error) {
	d := &codec.Decoder{B: data}
	id, part := d.Uvarint(), int(d.Uvarint())
	var n int64
	for len(d.B) > 0 && d.Err == nil {
		off, raw := d.Uvarint(), d.Bytes()
		if d.Err != nil {
			break
		}
		pr, err := topic.DecodePublish(raw, true)
		if err != nil || pr.TopicID != id || pr.Partition != part || pr.Offset != off {
			return n, fmt.Errorf("%w: topic record %d/%d@%d does not hold its publish", export.ErrCorrupt, id, part, off)
		}
		seg, ok := t.SegmentAt(id, part, off)
		if !ok {
			return n, fmt.Errorf("%w: topic record %d/%d@%d is not retained by the snapshot", export.ErrCorrupt, id, part, off)
		}
		if err := b.store.PlaceTopic(id, part, off, seg.Base == off, raw); err != nil {
			return n, err
		}
		n++
	}
	if d.Err != nil {
		return n, fmt.Errorf("%w: topic records: %v", export.ErrCorrupt, d.Err)
	}
	return n, nil
}

// removeAll removes dir and everything under it: what a failed restore made.
func removeAll(fs vfs.FS, dir string) error {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return fs.Remove(dir)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if st, err := fs.Stat(p); err == nil && st.IsDir() {
			if err := removeAll(fs, p); err != nil {
				return err
			}
			continue
		}
		if err := fs.Remove(p); err != nil {
			return err
		}
	}
	return fs.Remove(dir)
}
