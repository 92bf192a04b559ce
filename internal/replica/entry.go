package replica

import (
	"errors"
	"fmt"
	"math"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Entry format: the data of one raft entry of type EntryNormal, written by the leader
// that evaluated the commands it carries. Empty data is raft's own entry (a new leader's
// first entry of its term) and carries nothing. Version 1 carries one command:
//
//	+---------+-----------+---------+---------+---------+---------+------------------------+
//	| version | now       | node    | term    | seq     | count   | count × record          |
//	| u8 (1)  | varint ms | uvarint | uvarint | uvarint | uvarint | uvarint length | bytes |
//	+---------+-----------+---------+---------+---------+---------+------------------------+
//
// Version 2 carries several commands (at least two) of one leader, proposed one after
// the other in one term — what a leader's driver found queued at once — so that they
// cost one entry of the raft log, one append to each follower and one apply:
//
//	+---------+---------+---------+-----------+----------+------------------------------+
//	| version | node    | term    | first seq | commands | commands × command           |
//	| u8 (2)  | uvarint | uvarint | uvarint   | uvarint  | varint now | count | records |
//	+---------+---------+---------+-----------+----------+------------------------------+
//
// Command i has the id (node, term, first seq + i): a leader numbers its proposals with
// no gap, and an entry carries a run of them in order. Each keeps its own now and
// records, laid out as in version 1. A single command is always written as version 1,
// so a lone command has one encoding, and a node of an older okiba reads a log in which
// no commands were coalesced.
//
// now is the time the leader ran the command at (Unix milliseconds): never earlier than
// the now of any command before it in the log, and what every replica's machines see as
// the command's time. node, term and seq are the proposal's id (ProposalID): the leader
// that proposed it, the term it led, and a count of its proposals in that term from 1.
// The term makes the id unique for ever without a counter on disk: a node leads a term
// at most once, and a restarted node only leads later terms. It is always the term of
// the raft entry that carries it. Each record is one okiba record exactly as the
// machine's AppendTo wrote it, kind byte first: queue kinds 1..63, topic kinds 64..127,
// access kinds 0xC0..0xCF. The payload store's frames (0x80..0xBF) and the relocate
// records of older okibas are where one node's log keeps its own bodies; they are never
// replicated and a decoder refuses them, as it refuses another version, a zero id, a
// count or length past the input, an empty record, a version 2 entry of fewer than two
// commands or whose seqs overflow, trailing bytes and an overlong varint (an entry has
// one encoding).
const (
	entryVersion      = 1
	entryVersionBatch = 2
)

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

// AppendEntry appends the encoding of e, one command, to b (version 1).
func AppendEntry(b []byte, e *Entry) []byte {
	b = append(b, entryVersion)
	b = codec.AppendVarint(b, e.Now)
	b = codec.AppendUvarint(b, e.ID.Node)
	b = codec.AppendUvarint(b, e.ID.Term)
	b = codec.AppendUvarint(b, e.ID.Seq)
	return appendRecords(b, e.Records)
}

func appendRecords(b []byte, recs [][]byte) []byte {
	b = codec.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = codec.AppendBytes(b, r)
	}
	return b
}

// AppendEntries appends the encoding of es, commands of one raft entry, to b: version 1
// for one, version 2 for more. The commands must follow each other (Follows), as a
// leader's proposals of one term do; AppendEntries panics otherwise, or on none.
func AppendEntries(b []byte, es []*Entry) []byte {
	switch {
	case len(es) == 0:
		panic("replica: AppendEntries of no command")
	case len(es) == 1:
		return AppendEntry(b, es[0])
	}
	for i := 1; i < len(es); i++ {
		if !es[i].ID.Follows(es[i-1].ID) {
			panic(fmt.Sprintf("replica: AppendEntries: proposal %v does not follow %v", es[i].ID, es[i-1].ID))
		}
	}
	b = append(b, entryVersionBatch)
	b = codec.AppendUvarint(b, es[0].ID.Node)
	b = codec.AppendUvarint(b, es[0].ID.Term)
	b = codec.AppendUvarint(b, es[0].ID.Seq)
	b = codec.AppendUvarint(b, uint64(len(es)))
	for _, e := range es {
		b = codec.AppendVarint(b, e.Now)
		b = appendRecords(b, e.Records)
	}
	return b
}

// Follows says whether id is the proposal its node made right after prev, in the same
// term: the commands of one entry follow each other.
func (id ProposalID) Follows(prev ProposalID) bool {
	return id.Node == prev.Node && id.Term == prev.Term && prev.Seq != math.MaxUint64 && id.Seq == prev.Seq+1
}

// EntrySize is how many bytes e adds to a version 2 entry: what a leader counts when it
// bounds the commands it puts in one.
func EntrySize(e *Entry) int {
	return varintLen(zigzag(e.Now)) + recordsLen(e.Records)
}

// DecodeEntry decodes an entry of one command (version 1). The records alias data,
// which raft never changes once it has handed an entry over.
func DecodeEntry(data []byte) (*Entry, error) {
	if len(data) > 0 && data[0] == entryVersionBatch {
		return nil, fmt.Errorf("%w: version %d carries several commands (DecodeEntries)", ErrCorruptEntry, entryVersionBatch)
	}
	es, err := DecodeEntries(data)
	if err != nil {
		return nil, err
	}
	return es[0], nil
}

// DecodeEntries decodes an entry's data, of either version, into its commands, in the
// order they ran. The records alias data, which raft never changes once it has handed
// an entry over.
func DecodeEntries(data []byte) ([]*Entry, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty (raft's own entry has no records to decode)", ErrCorruptEntry)
	}
	v := data[0]
	if v != entryVersion && v != entryVersionBatch {
		if v > entryVersionBatch {
			return nil, fmt.Errorf("%w: version %d; this okiba reads %d and %d", ErrNewerEntry, v, entryVersion, entryVersionBatch)
		}
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptEntry, v)
	}
	d := &codec.Decoder{B: data[1:], Shared: true}
	var es []*Entry
	if v == entryVersion {
		e := &Entry{Now: d.Varint()}
		e.ID.Node = d.Uvarint()
		e.ID.Term = d.Uvarint()
		e.ID.Seq = d.Uvarint()
		checkID(d, e.ID)
		decodeCommand(d, e, "")
		es = []*Entry{e}
	} else {
		id := ProposalID{Node: d.Uvarint(), Term: d.Uvarint(), Seq: d.Uvarint()}
		checkID(d, id)
		n := d.Count()
		if d.Err == nil {
			switch {
			case n < 2:
				d.Fail(fmt.Errorf("%d commands in a version %d entry: one is written as version %d", n, entryVersionBatch, entryVersion))
			case id.Seq > math.MaxUint64-uint64(n-1):
				d.Fail(fmt.Errorf("%d commands from seq %d overflow the seq", n, id.Seq))
			}
		}
		if d.Err == nil {
			es = make([]*Entry, 0, n)
		}
		for i := 0; i < n && d.Err == nil; i++ {
			e := &Entry{Now: d.Varint(), ID: id}
			e.ID.Seq += uint64(i)
			decodeCommand(d, e, fmt.Sprintf("command %d: ", i))
			es = append(es, e)
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptEntry, err)
	}
	if n := entriesLen(es); n != len(data) {
		// Only an overlong varint makes the input longer than its entry's encoding.
		return nil, fmt.Errorf("%w: non-canonical encoding (%d bytes for an entry of %d)", ErrCorruptEntry, len(data), n)
	}
	return es, nil
}

func checkID(d *codec.Decoder, id ProposalID) {
	if d.Err == nil && (id.Node == 0 || id.Term == 0 || id.Seq == 0) {
		d.Fail(fmt.Errorf("proposal id %v has a zero part", id))
	}
}

// decodeCommand decodes the records of e, after its id and now; where prefixes its
// errors.
func decodeCommand(d *codec.Decoder, e *Entry, where string) {
	n := d.Count()
	if d.Err == nil && e.Now < 0 {
		d.Fail(fmt.Errorf("%snegative time %d", where, e.Now))
	}
	if n > 0 && d.Err == nil {
		e.Records = make([][]byte, 0, n)
	}
	for i := 0; i < n && d.Err == nil; i++ {
		r := d.Raw(uint64(len(d.B)))
		if d.Err != nil {
			break
		}
		if err := checkRecord(r); err != nil {
			d.Fail(fmt.Errorf("%srecord %d: %w", where, i, err))
			break
		}
		e.Records = append(e.Records, r)
	}
}

// entriesLen is the length of AppendEntries' encoding of es.
func entriesLen(es []*Entry) int {
	if len(es) == 1 {
		e := es[0]
		return 1 + varintLen(zigzag(e.Now)) + varintLen(e.ID.Node) + varintLen(e.ID.Term) +
			varintLen(e.ID.Seq) + recordsLen(e.Records)
	}
	id := es[0].ID
	n := 1 + varintLen(id.Node) + varintLen(id.Term) + varintLen(id.Seq) + varintLen(uint64(len(es)))
	for _, e := range es {
		n += EntrySize(e)
	}
	return n
}

func recordsLen(recs [][]byte) int {
	n := varintLen(uint64(len(recs)))
	for _, r := range recs {
		n += varintLen(uint64(len(r))) + len(r)
	}
	return n
}

func zigzag(v int64) uint64 { return uint64(v)<<1 ^ uint64(v>>63) }

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
