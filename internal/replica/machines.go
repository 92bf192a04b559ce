package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Machines are one replica's state machines — the queues', the topics' and the
// principals' — fed one record stream, as the broker's log feeds them: a record goes to
// its machine by its first byte. They hold only replicated state: no payload store is
// attached (the machines keep no bodies without one), so equal records give equal
// snapshots on every replica.
//
// Besides the machines, Machines keeps the stream's time: the latest now of an entry
// applied (Now). Entries of commands that emitted nothing carry a time too, and the
// next leader must not stamp an earlier one.
type Machines struct {
	q   *queue.Machine
	t   *topic.Machine
	a   *access.Machine
	now int64
}

// NewMachines returns empty machines.
func NewMachines() *Machines {
	return join(queue.New(), topic.New(), access.New(), 0)
}

func join(q *queue.Machine, t *topic.Machine, a *access.Machine, now int64) *Machines {
	t.SetQueues(q) // a subscription's fan-out and a group's dead letter put messages into queues
	return &Machines{q: q, t: t, a: a, now: now}
}

// Queues, Topics and Access return the machines, for a Command to call their commands
// with the Batch's sinks, and for reads.
func (m *Machines) Queues() *queue.Machine  { return m.q }
func (m *Machines) Topics() *topic.Machine  { return m.t }
func (m *Machines) Access() *access.Machine { return m.a }

// Now is the latest time of an entry applied (Unix milliseconds).
func (m *Machines) Now() int64 { return m.now }

// A Command is one call of the machines, which a leader evaluates: it calls the
// machines' commands at now with b's sinks (they apply what they emit at once) and
// returns its answer, which the replica hands back once the entry holding what it
// emitted is committed. It must decide from now, the machines and what it captured
// when it was made, nothing else (no clock, no randomness, nothing it changes), so that
// run again on equal machines at the same now it emits the same records and answers
// the same: what the simulation's checker relies on. A command that emits nothing still
// takes an entry: its answer, which may have read what uncommitted entries before it
// did, waits like any other.
type Command func(now int64, m *Machines, b *Batch) any

// Run evaluates cmd at now and returns the records it emitted, which the machines have
// applied, and its answer. now must not be earlier than Now.
func (m *Machines) Run(now int64, cmd Command) ([][]byte, any) {
	b := &Batch{}
	ans := cmd(now, m, b)
	m.now = max(m.now, now)
	return b.recs, ans
}

// ApplyEntry applies an entry another replica's command emitted, record by record.
func (m *Machines) ApplyEntry(e *Entry) error {
	for i, r := range e.Records {
		if err := m.Apply(r); err != nil {
			return fmt.Errorf("entry %v, record %d: %w", e.ID, i, err)
		}
	}
	m.now = max(m.now, e.Now)
	return nil
}

// Apply applies one encoded record to its machine, chosen by its kind as the broker's
// replay chooses (broker/checkpoint.go): queue kinds below 64, topic kinds 64..127,
// access kinds 0xC0..0xCF. Anything else — a payload-store frame above all — is refused.
func (m *Machines) Apply(raw []byte) error {
	if err := checkRecord(raw); err != nil {
		return err
	}
	switch k := raw[0]; {
	case access.IsRecord(raw):
		r, err := access.DecodeRecord(raw)
		if err != nil {
			return err
		}
		return m.a.Apply(r)
	case k >= byte(topic.MinKind):
		r, err := topic.DecodeRecord(raw)
		if err != nil {
			return err
		}
		return m.t.Apply(r)
	default:
		r, err := queue.DecodeRecord(raw)
		if err != nil {
			return err
		}
		return m.q.Apply(r)
	}
}

// Batch collects, encoded, the records one command emits, in emission order.
type Batch struct{ recs [][]byte }

// Queue, Topic and Access are the sinks the machines' commands take.
func (b *Batch) Queue() queue.Sink   { return queueSink{b} }
func (b *Batch) Topic() topic.Sink   { return topicSink{b} }
func (b *Batch) Access() access.Sink { return accessSink{b} }

// Records are the records emitted so far.
func (b *Batch) Records() [][]byte { return b.recs }

type encoder interface{ AppendTo([]byte) []byte }

func (b *Batch) add(r encoder) { b.recs = append(b.recs, r.AppendTo(nil)) }

type queueSink struct{ b *Batch }
type topicSink struct{ b *Batch }
type accessSink struct{ b *Batch }

func (s queueSink) Emit(r queue.Record)   { s.b.add(r) }
func (s topicSink) Emit(r topic.Record)   { s.b.add(r) }
func (s accessSink) Emit(r access.Record) { s.b.add(r) }

// Snapshot format (version 1): the machines' own snapshots, each the same bytes on every
// replica that applied the same entries, and the stream's time:
//
//	"OKRS" | u8 version (1) | varint now | uvarint length | queue snapshot |
//	         uvarint length | topic snapshot | uvarint length | access snapshot
//
// It is the data of a raft snapshot. The payload store's bodies are not in it: a replica
// in this slice keeps none (docs/architecture.md, "Replication").
const (
	snapshotMagic   = "OKRS"
	snapshotVersion = 1
)

// ErrNewerSnapshot is returned by RestoreMachines for a snapshot of a newer format.
var ErrNewerSnapshot = errors.New("replica: snapshot from a newer okiba")

// AppendSnapshot appends the machines' snapshot to b.
func (m *Machines) AppendSnapshot(b []byte) []byte {
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = codec.AppendVarint(b, m.now)
	b = appendPart(b, m.q.AppendSnapshot(nil))
	b = appendPart(b, m.t.AppendSnapshot(nil))
	return appendPart(b, m.a.AppendSnapshot(nil))
}

func appendPart(b, part []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(part)))
	return append(b, part...)
}

// RestoreMachines rebuilds machines from AppendSnapshot's bytes (all of b).
func RestoreMachines(b []byte) (*Machines, error) {
	if len(b) < len(snapshotMagic)+1 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("replica: not a replica snapshot (bad magic)")
	}
	if v := b[len(snapshotMagic)]; v != snapshotVersion {
		if v > snapshotVersion {
			return nil, fmt.Errorf("%w: version %d; this okiba reads %d", ErrNewerSnapshot, v, snapshotVersion)
		}
		return nil, fmt.Errorf("replica: unknown snapshot version %d", v)
	}
	d := &codec.Decoder{B: b[len(snapshotMagic)+1:], Shared: true}
	now := d.Varint()
	qs := d.Raw(uint64(len(d.B)))
	ts := d.Raw(uint64(len(d.B)))
	as := d.Raw(uint64(len(d.B)))
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("replica: snapshot: %w", err)
	}
	q, err := queue.Restore(qs, nil)
	if err != nil {
		return nil, fmt.Errorf("replica: snapshot: %w", err)
	}
	t, err := topic.Restore(ts)
	if err != nil {
		return nil, fmt.Errorf("replica: snapshot: %w", err)
	}
	a, err := access.Restore(as)
	if err != nil {
		return nil, fmt.Errorf("replica: snapshot: %w", err)
	}
	return join(q, t, a, now), nil
}
