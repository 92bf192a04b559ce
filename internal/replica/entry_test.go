package replica

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/codec"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

func sampleEntry() *Entry {
	return &Entry{
		Now: 1_700_000_000_123,
		ID:  ProposalID{Node: 3, Term: 7, Seq: 42},
		Records: [][]byte{
			(&queue.QueueDeleteRecord{Now: 1_700_000_000_123, QueueID: 9}).AppendTo(nil),
			(&topic.TopicDeleteRecord{Now: 1_700_000_000_123, TopicID: 2}).AppendTo(nil),
			(&access.DeleteRecord{Now: 1_700_000_000_123, Name: "ci"}).AppendTo(nil),
		},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []*Entry{sampleEntry(), {Now: 0, ID: ProposalID{1, 1, 1}}} {
		b := AppendEntry(nil, e)
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("decode %v: %v", e.ID, err)
		}
		if got.Now != e.Now || got.ID != e.ID || len(got.Records) != len(e.Records) {
			t.Fatalf("decoded %+v, want %+v", got, e)
		}
		for i := range e.Records {
			if !bytes.Equal(got.Records[i], e.Records[i]) {
				t.Fatalf("record %d: %x, want %x", i, got.Records[i], e.Records[i])
			}
		}
		if again := AppendEntry(nil, got); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
	}
}

// Every way an entry can be wrong is refused, each with its own reason.
func TestDecodeEntryRefuses(t *testing.T) {
	good := AppendEntry(nil, sampleEntry())
	header := func(now int64, node, term, seq uint64, count uint64) []byte {
		b := []byte{entryVersion}
		b = codec.AppendVarint(b, now)
		b = codec.AppendUvarint(b, node)
		b = codec.AppendUvarint(b, term)
		b = codec.AppendUvarint(b, seq)
		return codec.AppendUvarint(b, count)
	}
	withRecord := func(r []byte) []byte { return codec.AppendBytes(header(5, 1, 1, 1, 1), r) }
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorruptEntry},
		{"newer version", append([]byte{entryVersionBatch + 1}, good[1:]...), ErrNewerEntry},
		{"version 0", append([]byte{0}, good[1:]...), ErrCorruptEntry},
		{"truncated", good[:len(good)-1], ErrCorruptEntry},
		{"trailing byte", append(append([]byte(nil), good...), 0), ErrCorruptEntry},
		{"zero node", header(5, 0, 1, 1, 0), ErrCorruptEntry},
		{"zero term", header(5, 1, 0, 1, 0), ErrCorruptEntry},
		{"zero seq", header(5, 1, 1, 0, 0), ErrCorruptEntry},
		{"negative time", header(-1, 1, 1, 1, 0), ErrCorruptEntry},
		{"count past the input", header(5, 1, 1, 1, 9), ErrCorruptEntry},
		{"record length past the input", append(header(5, 1, 1, 1, 1), 9, byte(queue.KindAck)), ErrCorruptEntry},
		{"empty record", withRecord(nil), ErrCorruptEntry},
		{"payload-store frame", withRecord([]byte{0x81, 1, 2}), ErrCorruptEntry},
		{"relocate record", withRecord([]byte{byte(queue.KindRelocate), 0}), ErrCorruptEntry},
		{"kind 0", withRecord([]byte{0, 0}), ErrCorruptEntry},
		{"kind past access", withRecord([]byte{0xD0, 0}), ErrCorruptEntry},
		{"overlong varint", []byte{entryVersion, 0x8a, 0x00, 1, 1, 1, 0}, ErrCorruptEntry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := DecodeEntry(c.data)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeEntry = %+v, %v; want %v", e, err, c.want)
			}
		})
	}
}

func sampleBatch() []*Entry {
	first := sampleEntry()
	return []*Entry{
		first,
		{Now: first.Now, ID: ProposalID{3, 7, 43}},
		{Now: first.Now + 5, ID: ProposalID{3, 7, 44}, Records: first.Records[:1]},
	}
}

// Several commands make one version 2 entry that decodes to each command with its own
// id, time and records; one command is still written as version 1.
func TestEntriesRoundTrip(t *testing.T) {
	for _, es := range [][]*Entry{sampleBatch(), sampleBatch()[:2], sampleBatch()[:1]} {
		b := AppendEntries(nil, es)
		if want := byte(entryVersion); len(es) > 1 {
			if b[0] != entryVersionBatch {
				t.Fatalf("%d commands: version %d", len(es), b[0])
			}
		} else if b[0] != want {
			t.Fatalf("one command: version %d, want %d", b[0], want)
		}
		got, err := DecodeEntries(b)
		if err != nil {
			t.Fatalf("decode %d commands: %v", len(es), err)
		}
		if len(got) != len(es) {
			t.Fatalf("decoded %d commands, want %d", len(got), len(es))
		}
		for i, e := range es {
			g := got[i]
			if g.Now != e.Now || g.ID != e.ID || len(g.Records) != len(e.Records) {
				t.Fatalf("command %d: %+v, want %+v", i, g, e)
			}
			for j := range e.Records {
				if !bytes.Equal(g.Records[j], e.Records[j]) {
					t.Fatalf("command %d, record %d: %x, want %x", i, j, g.Records[j], e.Records[j])
				}
			}
		}
		if again := AppendEntries(nil, got); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
		size := 1 + 3 + 1 // version, node 3, term 7, seq 42, count: one byte each
		for _, e := range es {
			size += EntrySize(e)
		}
		if len(es) > 1 && size != len(b) {
			t.Fatalf("EntrySize sums to %d bytes, the entry is %d", size, len(b))
		}
	}
	// A version 1 entry, as an older okiba wrote it, decodes to its one command.
	v1 := AppendEntry(nil, sampleEntry())
	if es, err := DecodeEntries(v1); err != nil || len(es) != 1 || es[0].ID != sampleEntry().ID {
		t.Fatalf("DecodeEntries(version 1) = %+v, %v", es, err)
	}
	if _, err := DecodeEntry(AppendEntries(nil, sampleBatch())); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("DecodeEntry of several commands = %v, want %v", err, ErrCorruptEntry)
	}
}

func TestAppendEntriesPanicsOnAGap(t *testing.T) {
	es := sampleBatch()
	es[2].ID.Seq++
	defer func() {
		if recover() == nil {
			t.Fatal("AppendEntries took commands whose seqs have a gap")
		}
	}()
	AppendEntries(nil, es)
}

// Every way a version 2 entry can be wrong is refused.
func TestDecodeEntriesRefuses(t *testing.T) {
	good := AppendEntries(nil, sampleBatch())
	header := func(node, term, seq, n uint64) []byte {
		b := []byte{entryVersionBatch}
		b = codec.AppendUvarint(b, node)
		b = codec.AppendUvarint(b, term)
		b = codec.AppendUvarint(b, seq)
		return codec.AppendUvarint(b, n)
	}
	empty := func(b []byte, now int64) []byte { return codec.AppendUvarint(codec.AppendVarint(b, now), 0) }
	two := func(node, term, seq uint64) []byte { return empty(empty(header(node, term, seq, 2), 5), 5) }
	withRecord := func(r []byte) []byte {
		return codec.AppendBytes(codec.AppendUvarint(codec.AppendVarint(empty(header(1, 1, 1, 2), 5), 5), 1), r)
	}
	if _, err := DecodeEntries(two(1, 1, 1)); err != nil {
		t.Fatalf("the cases' base entry is refused: %v", err)
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"newer version", append([]byte{entryVersionBatch + 1}, good[1:]...), ErrNewerEntry},
		{"truncated", good[:len(good)-1], ErrCorruptEntry},
		{"trailing byte", append(append([]byte(nil), good...), 0), ErrCorruptEntry},
		{"one command", empty(header(1, 1, 1, 1), 5), ErrCorruptEntry},
		{"no command", header(1, 1, 1, 0), ErrCorruptEntry},
		{"zero node", two(0, 1, 1), ErrCorruptEntry},
		{"zero term", two(1, 0, 1), ErrCorruptEntry},
		{"zero seq", two(1, 1, 0), ErrCorruptEntry},
		{"seq overflows", two(1, 1, math.MaxUint64), ErrCorruptEntry},
		{"negative time", empty(empty(header(1, 1, 1, 2), 5), -1), ErrCorruptEntry},
		{"commands past the input", empty(empty(header(1, 1, 1, 9), 5), 5), ErrCorruptEntry},
		{"record count past the input", codec.AppendUvarint(codec.AppendVarint(empty(header(1, 1, 1, 2), 5), 5), 9), ErrCorruptEntry},
		{"empty record", withRecord(nil), ErrCorruptEntry},
		{"payload-store frame", withRecord([]byte{0x81, 1, 2}), ErrCorruptEntry},
		{"relocate record", withRecord([]byte{byte(queue.KindRelocate), 0}), ErrCorruptEntry},
		{"overlong varint", append([]byte{entryVersionBatch, 0x81, 0x00}, two(1, 1, 1)[2:]...), ErrCorruptEntry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es, err := DecodeEntries(c.data)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeEntries = %+v, %v; want %v", es, err, c.want)
			}
		})
	}
}

// FuzzDecodeEntry: a decoder that accepts input gives commands that encode back to it.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(AppendEntry(nil, sampleEntry()))
	f.Add(AppendEntry(nil, &Entry{Now: 1, ID: ProposalID{1, 2, 3}}))
	f.Add([]byte{entryVersion, 0, 1, 1, 1, 1, 1, 6})
	f.Add(AppendEntries(nil, sampleBatch()))
	f.Add([]byte{entryVersionBatch, 1, 1, 1, 2, 0, 0, 2, 1, 1, 1, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := DecodeEntries(data)
		if err != nil {
			return
		}
		if again := AppendEntries(nil, es); !bytes.Equal(again, data) {
			t.Fatalf("decoded %x to %+v, which encodes to %x", data, es, again)
		}
		if len(es) == 1 {
			if e, err := DecodeEntry(data); err != nil || e.ID != es[0].ID {
				t.Fatalf("DecodeEntry(%x) = %+v, %v; DecodeEntries gave %+v", data, e, err, es[0])
			}
		}
	})
}
