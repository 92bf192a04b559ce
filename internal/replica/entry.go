package replica

import (
	"errors"
	"fmt"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Entry format (version 1): the data of one raft entry of type EntryNormal, written by
// the leader that evaluated one command. Empty data is raft's own entry (a new leader's
// first entry of its term) and carries nothing.
//
//	+---------+-----------+---------+---------+---------+---------+------------------------+
//	| version | now       | node    | term    | seq     | count   | count × record          |
//	| u8 (1)  | varint ms | uvarint | uvarint | uvarint | uvarint | uvarint length | bytes |
//	+---------+-----------+---------+---------+---------+---------+------------------------+
//
// now is the time the leader ran the command at (Unix milliseconds): never earlier than
// the now of any entry before it in the log, and what every replica's machines see as
// the command's time. node, term and seq are the proposal's id (ProposalID): the leader
// that proposed it, the term it led, and a count of its proposals in that term from 1.
// The term makes the id unique for ever without a counter on disk: a node leads a term
// at most once, and a restarted node only leads later terms. It is always the term of
// the raft entry that carries it. Each record is one okiba record exactly as the
// machine's AppendTo wrote it, kind byte first: queue kinds 1..63, topic kinds 64..127,
// access kinds 0xC0..0xCF. The payload store's frames (0x80..0xBF) and the relocate
// records of older okibas are where one node's log keeps its own bodies; they are never
// replicated and a decoder refuses them, as it refuses another version, a zero id, a
// count or length past the input, an empty record, trailing bytes and an overlong
// varint (an entry has one encoding).
const entryVersion = 1

// Errors of DecodeEntry. ErrCorruptEntry wraps every refusal but a newer version's.
var (
	ErrCorruptEntry = errors.New("replica: corrupt entry")
	ErrNewerEntry   = errors.New("replica: entry from a newer okiba")
)

// ProposalID names one proposal for ever: the node that proposed it, the term it led
// when it did, and its sequence among that node's proposals of that term (from 1). A
// leader recognises its own proposals by it when they come back committed.
type ProposalID struct {
	Node, Term, Seq uint64
}

func (id ProposalID) String() string { return fmt.Sprintf("%d/%d/%d", id.Node, id.Term, id.Seq) }

// Entry is one decoded entry: a command's outcome as records, at the time it ran.
type Entry struct {
	Now     int64
	ID      ProposalID
	Records [][]byte
}

// AppendEntry appends e's encoding to b.
func AppendEntry(b []byte, e *Entry) []byte {
	b = append(b, entryVersion)
	b = codec.AppendVarint(b, e.Now)
	b = codec.AppendUvarint(b, e.ID.Node)
	b = codec.AppendUvarint(b, e.ID.Term)
	b = codec.AppendUvarint(b, e.ID.Seq)
	b = codec.AppendUvarint(b, uint64(len(e.Records)))
	for _, r := range e.Records {
		b = codec.AppendBytes(b, r)
	}
	return b
}

// DecodeEntry decodes an entry's data. The records alias data, which raft never
// changes once it has handed an entry over.
func DecodeEntry(data []byte) (*Entry, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty (raft's own entry has no records to decode)", ErrCorruptEntry)
	}
	if v := data[0]; v != entryVersion {
		if v > entryVersion {
			return nil, fmt.Errorf("%w: version %d; this okiba reads %d", ErrNewerEntry, v, entryVersion)
		}
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptEntry, v)
	}
	d := &codec.Decoder{B: data[1:], Shared: true}
	e := &Entry{Now: d.Varint()}
	e.ID.Node = d.Uvarint()
	e.ID.Term = d.Uvarint()
	e.ID.Seq = d.Uvarint()
	n := d.Count()
	if d.Err == nil {
		switch {
		case e.Now < 0:
			d.Fail(fmt.Errorf("negative time %d", e.Now))
		case e.ID.Node == 0 || e.ID.Term == 0 || e.ID.Seq == 0:
			d.Fail(fmt.Errorf("proposal id %v has a zero part", e.ID))
		}
	}
	if n > 0 {
		e.Records = make([][]byte, 0, n)
	}
	for i := 0; i < n && d.Err == nil; i++ {
		r := d.Raw(uint64(len(d.B)))
		if d.Err != nil {
			break
		}
		if err := checkRecord(r); err != nil {
			d.Fail(fmt.Errorf("record %d: %w", i, err))
			break
		}
		e.Records = append(e.Records, r)
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptEntry, err)
	}
	if n := entryLen(e); n != len(data) {
		// Only an overlong varint makes the input longer than its entry's encoding.
		return nil, fmt.Errorf("%w: non-canonical encoding (%d bytes for an entry of %d)", ErrCorruptEntry, len(data), n)
	}
	return e, nil
}

// entryLen is the length of AppendEntry's encoding of e.
func entryLen(e *Entry) int {
	n := 1 + varintLen(uint64(e.Now)<<1^uint64(e.Now>>63)) + varintLen(e.ID.Node) + varintLen(e.ID.Term) +
		varintLen(e.ID.Seq) + varintLen(uint64(len(e.Records)))
	for _, r := range e.Records {
		n += varintLen(uint64(len(r))) + len(r)
	}
	return n
}

func varintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// checkRecord says whether a record may travel in the replicated stream, by its kind.
func checkRecord(r []byte) error {
	if len(r) == 0 {
		return errors.New("empty record")
	}
	k := r[0]
	switch {
	case k == byte(queue.KindRelocate):
		return errors.New("a relocate record is one node's compaction, never replicated")
	case k >= 1 && k <= byte(queue.MaxKind),
		k >= byte(topic.MinKind) && k <= byte(topic.MaxKind),
		k >= byte(access.MinKind) && k <= byte(access.MaxKind):
		return nil
	case k >= 0x80 && k <= 0xBF:
		return fmt.Errorf("kind 0x%02x is a payload-store frame, node-local, never replicated", k)
	}
	return fmt.Errorf("unknown record kind 0x%02x", k)
}
