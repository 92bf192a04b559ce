package replica

import (
	"bytes"
	"errors"
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
		{"newer version", append([]byte{entryVersion + 1}, good[1:]...), ErrNewerEntry},
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

// FuzzDecodeEntry: a decoder that accepts input gives an entry that encodes back to it.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(AppendEntry(nil, sampleEntry()))
	f.Add(AppendEntry(nil, &Entry{Now: 1, ID: ProposalID{1, 2, 3}}))
	f.Add([]byte{entryVersion, 0, 1, 1, 1, 1, 1, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		if again := AppendEntry(nil, e); !bytes.Equal(again, data) {
			t.Fatalf("decoded %x to %+v, which encodes to %x", data, e, again)
		}
	})
}
