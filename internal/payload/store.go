// Package payload is the node's payload store: where the bodies of a broker's messages
// lie on this node's disk. The queue state machine is node-independent — two replicas
// fed the same records hold byte-identical state — so it keeps no file positions, no
// cache and no compaction decision; this store keeps all of them, for one node.
//
// The contract the broker builds on (docs/architecture.md, "The payload store"):
//
//   - Bodies are named by the machine's Refs (queue.Ref), which are not part of the
//     semantic state: the store's table is indexed by them, 8 bytes a message.
//   - A body lies in the write-ahead log, in the record that brought it (a send record)
//     or in a frame the store wrote when it moved it (compaction). Several messages may
//     share one body (a topic publish fanned out to queues): each names the same
//     position, and the position is live while any of them is.
//   - Relocations are the store's own frames in the log (first byte FrameRelocate,
//     outside the machine's record kinds), never records of the machine: they are
//     node-local and stay out of anything replicated.
//   - The store counts live messages and bytes per log segment, decides which segments
//     can be removed (none of its bodies, no reader) and which are sparse enough to
//     compact, and keeps a cache of bodies within a budget.
//   - Its checkpoint section (Section, Restore) lists positions in the machine's
//     canonical message order (queue.Machine.EachMessage), so it needs no key of its own;
//     Each streams every live body in chunks, for snapshots shipped to other nodes and for
//     backups.
//
// Locking: the store has its own mutex, taken after the broker's (the broker calls
// Added and Removed from inside the machine's commands, under its lock); it is never held
// during I/O but for appending a frame to the log, which copies into memory. Readers pin
// the segments they read from (Pin), so that a segment is not removed under them.
package payload

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// FrameRelocate is the first byte of a relocation frame: a body the store rewrote at the
// head of the log so that the sparse segment it lay in can be removed.
//
//	| 0x81 | uvarint message id | uvarint former position | payload (queue.AppendPayload) |
//
// Bytes 0x80..0xBF are the store's; the queue and topic machines' record kinds stay below
// (queue.MaxKind, topic.MaxKind), the access machine's above (access.MinKind).
const FrameRelocate byte = 0x81

// IsFrame reports whether a log record is one of the store's frames rather than a
// record of the machine.
func IsFrame(rec []byte) bool { return len(rec) > 0 && rec[0] >= 0x80 && rec[0] < 0xC0 }

// DefaultCacheBytes is the cache budget when Config.CacheBytes is zero.
const DefaultCacheBytes = 256 << 20

// Config configures a Store.
type Config struct {
	// Log holds the bodies. It may be set later with SetLog, once the log has been
	// replayed into the store (Open of the log needs the store, the store needs the log
	// only to read and to append).
	Log *wal.Log
	// CacheBytes bounds the bodies kept in memory; the rest are read from the log.
	// Defaults to DefaultCacheBytes; negative caches nothing.
	CacheBytes int64
	// FS and TopicsDir are where topic partitions' segment files go; an empty TopicsDir
	// keeps topic records in the log only (tests of the store alone).
	FS        vfs.FS
	TopicsDir string
}

// Usage counts the live messages whose body lies in one log segment.
type Usage struct {
	Messages int64
	Bytes    int64
}

// Store maps messages to their bodies on this node. The zero value is not usable; see New.
type Store struct {
	log     *wal.Log
	remover interface{ Remove(idx uint32) error }        // nil: log
	gate    func(ctx context.Context, pos wal.Pos) error // SetGate; nil: durable is enough
	budget  int64

	// cur is the position of the record being applied, and shared whether its payload
	// aliases a buffer the caller reuses. At sets them and Added reads them, both inside
	// the caller's serialisation of the machine, which orders them; nothing else touches
	// them, so they need no lock of the store's.
	cur    wal.Pos
	shared bool

	emptied atomic.Uint64 // Emptied

	mu     sync.Mutex
	table  [][]wal.Pos // by Ref: chunk, then slot; 0: no body
	live   []int32     // per chunk of table, its slots with a body: an empty chunk is given back
	segs   map[uint32]*Usage
	pins   map[uint32]int
	cache  map[queue.Ref]*queue.Payload
	cached int64
	last   wal.Ticket // of the last frame the store appended
	topics topicState
	err    error // of a callback, which cannot return one (fail)
	// moved collects relocations met while the log is replayed, applied by FinishReplay:
	// a frame names a body by its former position, and finding every message at a
	// position would need an index the store does not keep.
	moved map[wal.Pos]move
}

type move struct {
	to   wal.Pos
	size int64
}

// New returns an empty store.
func New(cfg Config) *Store {
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	return &Store{
		log: cfg.Log, budget: cfg.CacheBytes,
		segs: make(map[uint32]*Usage), pins: make(map[uint32]int),
		cache:  make(map[queue.Ref]*queue.Payload),
		topics: topicState{fs: cfg.FS, dir: cfg.TopicsDir},
	}
}

// SetLog names the log the bodies lie in, if Config.Log did not.
func (s *Store) SetLog(l *wal.Log) { s.log = l }

// SetRemover makes Collect release the segments it no longer needs through rm rather
// than remove them: a log with another owner (a cluster node's raft records) keeps a
// segment until that owner released it too (wal.Hold). Set with SetLog.
func (s *Store) SetRemover(rm interface{ Remove(idx uint32) error }) { s.remover = rm }

// SetGate makes the topic mover wait, beyond durability, until gate lets a position
// through before it moves records up to it into partition files: in a cluster, until
// they are committed. Set before the mover runs.
func (s *Store) SetGate(gate func(ctx context.Context, pos wal.Pos) error) { s.gate = gate }

// At says where the record about to be applied lies; shared says its payload aliases a
// buffer the caller reuses (replay), so that a cached body must be copied. The caller
// serialises it with the machine.
func (s *Store) At(pos wal.Pos, shared bool) { s.cur, s.shared = pos, shared }

// set points ref's slot at pos (0: no body), keeping each chunk's count of bodies and
// giving back a chunk left with none, so that the table follows the live messages as the
// machine's arena does.
func (s *Store) set(r queue.Ref, pos wal.Pos) {
	ci := int(r >> queue.RefShift)
	for len(s.table) <= ci {
		s.table = append(s.table, nil)
		s.live = append(s.live, 0)
	}
	if s.table[ci] == nil {
		if pos == 0 {
			return
		}
		s.table[ci] = make([]wal.Pos, queue.RefSlots)
	}
	at := &s.table[ci][r&(queue.RefSlots-1)]
	switch {
	case *at == 0 && pos != 0:
		s.live[ci]++
	case *at != 0 && pos == 0:
		if s.live[ci]--; s.live[ci] == 0 {
			s.table[ci] = nil
			return
		}
	}
	*at = pos
}

func (s *Store) get(r queue.Ref) wal.Pos {
	ci := int(r >> queue.RefShift)
	if ci >= len(s.table) || s.table[ci] == nil {
		return 0
	}
	return s.table[ci][r&(queue.RefSlots-1)]
}

func (s *Store) count(pos wal.Pos, msgs, bytes int64) {
	u := s.segs[pos.Segment()]
	if u == nil {
		u = &Usage{}
		s.segs[pos.Segment()] = u
	}
	u.Messages += msgs
	u.Bytes += bytes
	if u.Messages <= 0 {
		delete(s.segs, pos.Segment())
		s.emptied.Add(1)
	}
}

// Emptied counts the times a segment lost its last live body: a checkpoint after it
// lets the segment go (Collect), unless it is the log's head. The broker checkpoints on
// it when the disk is nearly full.
func (s *Store) Emptied() uint64 { return s.emptied.Load() }

// Added implements queue.Bodies: the message ref's body is in the record being applied.
func (s *Store) Added(ref queue.Ref, p *queue.Payload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := p.Size()
	s.set(ref, s.cur)
	s.count(s.cur, 1, size)
	if s.budget >= 0 && s.cached+size <= s.budget {
		if s.shared {
			p = p.Clone()
		}
		s.cache[ref] = p
		s.cached += size
	}
}

// Removed implements queue.Bodies: the message ref is gone; its body may be too.
func (s *Store) Removed(ref queue.Ref, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos := s.get(ref); pos != 0 {
		s.count(pos, -1, -size)
		s.set(ref, 0)
	}
	if _, ok := s.cache[ref]; ok {
		delete(s.cache, ref)
		s.cached -= size
	}
}

// ---------------------------------------------------------------------------------------
// Reading

// Cached returns ref's body if the cache holds it, and nil otherwise: a body the caller
// can hand over without reading the log. ref must name a live message; the caller
// serialises the call with the machine, as for Pin.
func (s *Store) Cached(ref queue.Ref) *queue.Payload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache[ref]
}

// Pin is a set of bodies captured for reading: their positions (or cached copies) and a
// hold on their segments until Release.
type Pin struct {
	s    *Store
	ents []pinned
}

type pinned struct {
	cached *queue.Payload
	pos    wal.Pos
}

// Pin captures the bodies of refs, which must name live messages; the caller serialises
// it with the machine (a Ref means nothing once the machine moves on). Reading them with
// Body may happen after, outside every lock.
func (s *Store) Pin(refs []queue.Ref) *Pin {
	p := &Pin{s: s, ents: make([]pinned, len(refs))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range refs {
		if c := s.cache[r]; c != nil {
			p.ents[i].cached = c
			continue
		}
		pos := s.get(r)
		p.ents[i].pos = pos
		if pos != 0 {
			s.pins[pos.Segment()]++
		}
	}
	return p
}

// Body returns the i-th pinned body, which must be message id's.
func (p *Pin) Body(i int, id uint64) (queue.Payload, error) {
	e := p.ents[i]
	if e.cached != nil {
		return *e.cached, nil
	}
	if e.pos == 0 {
		return queue.Payload{}, fmt.Errorf("payload: message %s has no body on this node", queue.FormatID(id))
	}
	return p.s.read(e.pos, id)
}

// Cached reports whether the i-th pinned body is a cached copy, which Body returns
// without reading the log.
func (p *Pin) Cached(i int) bool { return p.ents[i].cached != nil }

// Release lets the pinned segments go. A Pin is released once.
func (p *Pin) Release() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for _, e := range p.ents {
		if e.cached == nil && e.pos != 0 {
			seg := e.pos.Segment()
			if p.s.pins[seg]--; p.s.pins[seg] <= 0 {
				delete(p.s.pins, seg)
			}
		}
	}
	p.ents = nil
}

// read decodes the body of message id from the record or frame at pos.
func (s *Store) read(pos wal.Pos, id uint64) (queue.Payload, error) {
	raw, err := s.log.ReadAt(pos)
	if err != nil {
		return queue.Payload{}, fmt.Errorf("read message %s at %v: %w", queue.FormatID(id), pos, err)
	}
	got, p, err := decodeBodyOf(raw, id)
	if err != nil {
		return queue.Payload{}, fmt.Errorf("read message %s at %v: %w", queue.FormatID(id), pos, err)
	}
	if got != id && got != 0 {
		return queue.Payload{}, fmt.Errorf("read message %s at %v: found message %s there", queue.FormatID(id), pos, queue.FormatID(got))
	}
	return p, nil
}

// decodeBody reads the message id and body of a record that holds one: a send record (or
// an older okiba's relocate record), a topic record that put messages into queues, or a
// relocation frame. Id 0 means a body several messages share (a publish fanned out to
// queues): whoever reads it is one of them.
func decodeBody(raw []byte) (uint64, queue.Payload, error) { return decodeBodyOf(raw, 0) }

// decodeBodyOf is decodeBody for the reader of message id, which a topic record holding
// several messages needs to find its own.
func decodeBodyOf(raw []byte, id uint64) (uint64, queue.Payload, error) {
	if len(raw) > 0 && raw[0] >= byte(topic.MinKind) && raw[0] <= byte(topic.MaxKind) {
		got, p, err := topic.DecodeMessage(raw, id)
		if err == nil && got == 0 {
			got = id // a shared body: its readers are its users
		}
		return got, p, err
	}
	if !IsFrame(raw) {
		return queue.DecodePayload(raw)
	}
	f, err := decodeRelocate(raw)
	if err != nil {
		return 0, queue.Payload{}, err
	}
	p, err := queue.DecodePayloadBytes(f.payload)
	return f.id, p, err
}

// ---------------------------------------------------------------------------------------
// Replay

// ApplyFrame replays one of the store's frames found in the log at pos.
func (s *Store) ApplyFrame(pos wal.Pos, raw []byte) error {
	f, err := decodeRelocate(raw)
	if err != nil {
		return fmt.Errorf("payload frame at %v: %w", pos, err)
	}
	p, err := queue.DecodePayloadBytes(f.payload)
	if err != nil {
		return fmt.Errorf("payload frame at %v: %w", pos, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moved == nil {
		s.moved = make(map[wal.Pos]move)
	}
	s.moved[f.from] = move{to: pos, size: p.Size()}
	return nil
}

// Move points ref's body at pos: what a relocate record of an older okiba said, met in
// replay. size is the message's.
func (s *Store) Move(ref queue.Ref, pos wal.Pos, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.get(ref); old != 0 {
		s.count(old, -1, -size)
	}
	s.set(ref, pos)
	s.count(pos, 1, size)
}

// FinishReplay applies the relocations met in replay: every message whose body lay where
// a relocation frame says it came from now reads it from the frame (following moves of
// moves). One pass over the table, and only when the log held relocations.
func (s *Store) FinishReplay() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.moved) == 0 {
		return
	}
	for _, chunk := range s.table {
		for i, pos := range chunk {
			if pos == 0 {
				continue
			}
			mv, ok := s.moved[pos]
			if !ok {
				continue
			}
			to := mv.to
			for next, ok := s.moved[to]; ok; next, ok = s.moved[to] {
				to = next.to
			}
			s.count(pos, -1, -mv.size)
			s.count(to, 1, mv.size)
			chunk[i] = to
		}
	}
	s.moved = nil
}

// ---------------------------------------------------------------------------------------
// Checkpoints

const (
	sectionMagic   = "OKPS"
	sectionVersion = 1
	sectionChunk   = 1 << 20
)

// Section returns the store's checkpoint section and the segment usage of that moment.
// walk must call add for every message, in the machine's canonical order:
// queue.Machine.Snapshot does as it writes the semantic part, so that one pass under the
// broker's lock writes both, and the two describe the same moment. Taken under the
// store's lock, the section also agrees with the frames in the log before that moment.
//
//	"OKPS" | uvarint version | per message: varint (position − previous position) | u64 count
//
// It comes in pieces of about a megabyte, like the semantic snapshot.
func (s *Store) Section(walk func(add func(queue.Ref, int64))) ([][]byte, map[uint32]Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var done [][]byte
	b := make([]byte, 0, 4096)
	b = append(b, sectionMagic...)
	b = appendUvarint(b, sectionVersion)
	var prev wal.Pos
	var n uint64
	walk(func(r queue.Ref, _ int64) {
		pos := s.get(r)
		b = appendVarint(b, int64(pos-prev))
		prev = pos
		n++
		if len(b) >= sectionChunk-16 {
			done = append(done, b)
			b = make([]byte, 0, sectionChunk)
		}
	})
	b = binary.LittleEndian.AppendUint64(b, n)
	return append(done, b), s.usageLocked()
}

// Restore fills an empty store from a checkpoint section; walk must visit the messages in
// the order they had when the section was taken (queue.Machine.EachMessage).
func (s *Store) Restore(section []byte, walk func(visit func(queue.Ref, int64) bool)) error {
	if len(section) < len(sectionMagic)+8 || string(section[:len(sectionMagic)]) != sectionMagic {
		return errors.New("payload: checkpoint section: bad magic")
	}
	n := binary.LittleEndian.Uint64(section[len(section)-8:])
	d := decoder{b: section[len(sectionMagic) : len(section)-8]}
	if v := d.uvarint(); d.err == nil && v != sectionVersion {
		return fmt.Errorf("payload: checkpoint section version %d; this okiba reads %d", v, sectionVersion)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev wal.Pos
	var i uint64
	walk(func(r queue.Ref, size int64) bool {
		i++
		if i > n || d.err != nil {
			return false
		}
		pos := prev + wal.Pos(d.varint())
		prev = pos
		if pos != 0 {
			s.set(r, pos)
			s.count(pos, 1, size)
		}
		return true
	})
	if d.err != nil {
		return fmt.Errorf("payload: checkpoint section: %w", d.err)
	}
	if i != n || len(d.b) != 0 {
		return fmt.Errorf("payload: checkpoint section holds %d bodies for %d messages", n, i)
	}
	return nil
}

// Usage returns the live messages and bytes per log segment.
func (s *Store) Usage() map[uint32]Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usageLocked()
}

func (s *Store) usageLocked() map[uint32]Usage {
	out := make(map[uint32]Usage, len(s.segs))
	for k, v := range s.segs {
		out[k] = *v
	}
	return out
}

// ---------------------------------------------------------------------------------------
// Segments: removal and compaction

// Collect removes the log segments before the checkpoint at ckpt that held no body when
// it was taken (usage, from Section) and that no reader holds. It returns how many it
// removed and the first error.
func (s *Store) Collect(ckpt wal.Pos, usage map[uint32]Usage) (int, error) {
	removed := 0
	for _, seg := range s.log.Segments() {
		if seg.Index >= ckpt.Segment() {
			break
		}
		if usage[seg.Index].Messages > 0 {
			continue
		}
		// Nothing can start reading it now: no message of the checkpoint's had a body in
		// it, and bodies written since go to the log's head.
		s.mu.Lock()
		pinned := s.pins[seg.Index] > 0
		s.mu.Unlock()
		if pinned {
			continue
		}
		rm := s.remover
		if rm == nil {
			rm = s.log
		}
		if err := rm.Remove(seg.Index); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}

// Compact rewrites, at the head of the log, the live bodies of the segments before the
// checkpoint at ckpt whose live bytes are below ratio of segSize (usage from Section),
// oldest first, so that the next checkpoint lets those segments be removed. It returns how
// many bodies it moved once their frames are durable.
//
// A body that fails its checksum (a *wal.CorruptionError) cannot be moved: it stays where
// it lies, holding its segment, and the others are compacted all the same; Compact then
// returns an error wrapping the first such failure. Any other read error stops it.
func (s *Store) Compact(ctx context.Context, ckpt wal.Pos, usage map[uint32]Usage, ratio float64, segSize int64) (int, error) {
	var sparse []uint32
	for idx, u := range usage {
		if idx < ckpt.Segment() && float64(u.Bytes) < ratio*float64(segSize) {
			sparse = append(sparse, idx)
		}
	}
	if len(sparse) == 0 {
		return 0, nil
	}
	sort.Slice(sparse, func(i, j int) bool { return sparse[i] < sparse[j] })
	moved := 0
	var corrupt []error
	for _, seg := range sparse {
		bodies := s.bodiesIn(seg)
		for len(bodies) > 0 {
			if err := ctx.Err(); err != nil {
				return moved, err
			}
			// A batch ends between bodies, so that the messages sharing one move together.
			n := min(len(bodies), 256)
			for n < len(bodies) && bodies[n].pos == bodies[n-1].pos {
				n++
			}
			batch := bodies[:n]
			bodies = bodies[n:]
			// Read without the lock: the segment holds live bodies, so nobody removes it.
			raws := make(map[wal.Pos][]byte, len(batch))
			for _, u := range batch {
				if _, done := raws[u.pos]; done {
					continue
				}
				raw, err := s.log.ReadAt(u.pos)
				var ce *wal.CorruptionError
				if errors.As(err, &ce) {
					raws[u.pos] = nil // left where it lies; relocate passes over it
					corrupt = append(corrupt, err)
					continue
				}
				if err != nil {
					return moved, fmt.Errorf("payload: compaction read at %v: %w", u.pos, err)
				}
				raws[u.pos] = raw
			}
			k, err := s.relocate(batch, raws)
			moved += k
			if err != nil {
				return moved, err
			}
		}
	}
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if err := last.Wait(ctx); err != nil {
		return moved, err
	}
	if len(corrupt) > 0 {
		return moved, fmt.Errorf("payload: compaction left %d bodies that fail their checksum where they lie, and moved the rest (the first: %w)", len(corrupt), corrupt[0])
	}
	return moved, nil
}

// user is a message whose body lies at pos.
type user struct {
	pos wal.Pos
	ref queue.Ref
}

// bodiesIn lists the messages whose body lies in one segment, in log order: one pass
// over the table.
func (s *Store) bodiesIn(seg uint32) []user {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []user
	for ci, chunk := range s.table {
		for i, pos := range chunk {
			if pos != 0 && pos.Segment() == seg {
				out = append(out, user{pos, queue.Ref(ci<<queue.RefShift | i)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pos < out[j].pos })
	return out
}

// relocate appends a relocation frame for every body of batch still in use and points
// its messages at it, in one critical section, so that a checkpoint's section always
// agrees with the frames before its position. A message settled since it was listed (its
// Ref gone, or reused by another message, whose body lies elsewhere) is left alone.
func (s *Store) relocate(batch []user, raws map[wal.Pos][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	moved := 0
	var frame []byte
	for len(batch) > 0 {
		from := batch[0].pos
		n := 1
		for n < len(batch) && batch[n].pos == from {
			n++
		}
		var live []queue.Ref
		for _, u := range batch[:n] {
			if s.get(u.ref) == from {
				live = append(live, u.ref)
			}
		}
		batch = batch[n:]
		if len(live) == 0 || raws[from] == nil { // gone, or unreadable: left where it lies
			continue
		}
		id, p, err := decodeBody(raws[from])
		if err != nil {
			return moved, fmt.Errorf("payload: compaction found an unexpected record at %v: %w", from, err)
		}
		frame = appendRelocate(frame[:0], id, from, &p)
		to, t, err := s.log.Append(frame)
		if err != nil {
			return moved, err
		}
		s.last = t
		size := p.Size()
		for _, r := range live {
			s.set(r, to)
			s.count(from, -1, -size)
			s.count(to, 1, size)
		}
		moved += len(live)
	}
	return moved, nil
}

// Wait returns once every frame the store appended is durable.
func (s *Store) Wait(ctx context.Context) error {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	return last.Wait(ctx)
}

// ---------------------------------------------------------------------------------------
// Relocation frames

type relocateFrame struct {
	id      uint64
	from    wal.Pos
	payload []byte // aliases the frame
}

func appendRelocate(b []byte, id uint64, from wal.Pos, p *queue.Payload) []byte {
	b = append(b, FrameRelocate)
	b = appendUvarint(b, id)
	b = appendUvarint(b, uint64(from))
	return queue.AppendPayload(b, p)
}

func decodeRelocate(raw []byte) (relocateFrame, error) {
	if len(raw) == 0 {
		return relocateFrame{}, errors.New("empty payload frame")
	}
	if raw[0] != FrameRelocate {
		return relocateFrame{}, fmt.Errorf("unknown payload frame kind %#x", raw[0])
	}
	d := decoder{b: raw[1:]}
	f := relocateFrame{id: d.uvarint(), from: wal.Pos(d.uvarint())}
	if d.err != nil {
		return relocateFrame{}, d.err
	}
	f.payload = d.b
	return f, nil
}

// ---------------------------------------------------------------------------------------
// Scrubbing

// Live returns the position of every live body, once each, in log order: what a scrub
// reads back to check. The caller serialises it with the machine, as for Pin.
func (s *Store) Live() []wal.Pos {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wal.Pos
	for _, chunk := range s.table {
		for _, pos := range chunk {
			if pos != 0 {
				out = append(out, pos)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return slices.Compact(out)
}

// RefsIn returns the messages whose bodies lie in segment seg at offsets in [from, to):
// those a damaged stretch of the log holds. The caller serialises it with the machine.
func (s *Store) RefsIn(seg uint32, from, to int64) []queue.Ref {
	var out []queue.Ref
	for _, u := range s.bodiesIn(seg) {
		if off := int64(u.pos.Offset()); off >= from && off < to {
			out = append(out, u.ref)
		}
	}
	return out
}
