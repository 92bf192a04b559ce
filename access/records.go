package access

import (
	"fmt"

	"github.com/okiba/okiba/internal/codec"
)

// Record encoding, as the queues' and topics' records: a kind byte, the logged time as a
// varint of Unix milliseconds, then the fields, integers as varints, strings and bytes
// length-prefixed. A decoder refuses unknown kinds, truncated input and trailing bytes.
//
// A put carries the whole principal rather than what changed: principals are few and
// small, and a replica that applies a put holds exactly what the emitter held.

// Kind identifies a record type. Values are part of the on-disk format: never reuse one.
type RecordKind uint8

const (
	KindPut    RecordKind = 0xC0
	KindDelete RecordKind = 0xC1
)

// MinKind and MaxKind bound this package's record kinds in the log (the queue machine's
// are below 64, the topic machine's 64..127, the payload store's frames 0x80..0xBF).
const (
	MinKind RecordKind = 0xC0
	MaxKind RecordKind = 0xCF
)

func (k RecordKind) String() string {
	switch k {
	case KindPut:
		return "principal_put"
	case KindDelete:
		return "principal_delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one logged fact about principals.
type Record interface {
	Kind() RecordKind
	Time() int64
	AppendTo(b []byte) []byte
	apply(m *Machine) error
}

// PutRecord creates a principal or replaces it.
type PutRecord struct {
	Now       int64
	Principal Principal
}

func (r *PutRecord) Kind() RecordKind { return KindPut }
func (r *PutRecord) Time() int64      { return r.Now }

func (r *PutRecord) AppendTo(b []byte) []byte {
	b = append(b, byte(KindPut))
	b = codec.AppendVarint(b, r.Now)
	return appendPrincipal(b, &r.Principal)
}

func (r *PutRecord) apply(m *Machine) error {
	p := r.Principal.clone()
	if err := CheckName(p.Name); err != nil {
		return err
	}
	for _, s := range p.Secrets {
		m.lastSecret = max(m.lastSecret, s.ID)
	}
	m.principals[p.Name] = &p
	return nil
}

// DeleteRecord removes a principal.
type DeleteRecord struct {
	Now  int64
	Name string
}

func (r *DeleteRecord) Kind() RecordKind { return KindDelete }
func (r *DeleteRecord) Time() int64      { return r.Now }

func (r *DeleteRecord) AppendTo(b []byte) []byte {
	b = append(b, byte(KindDelete))
	b = codec.AppendVarint(b, r.Now)
	return codec.AppendString(b, r.Name)
}

func (r *DeleteRecord) apply(m *Machine) error {
	if _, ok := m.principals[r.Name]; !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, r.Name)
	}
	delete(m.principals, r.Name)
	return nil
}

// IsRecord reports whether a log record is one of this package's.
func IsRecord(raw []byte) bool {
	return len(raw) > 0 && raw[0] >= byte(MinKind) && raw[0] <= byte(MaxKind)
}

// DecodeRecord decodes one record; the result does not alias b.
func DecodeRecord(b []byte) (Record, error) {
	d := &codec.Decoder{B: b}
	k := RecordKind(d.Byte())
	now := d.Varint()
	var r Record
	switch k {
	case KindPut:
		pr := &PutRecord{Now: now}
		decodePrincipal(d, &pr.Principal)
		r = pr
	case KindDelete:
		r = &DeleteRecord{Now: now, Name: d.String()}
	default:
		if d.Err == nil {
			return nil, fmt.Errorf("decode record: unknown access kind %d", uint8(k))
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("decode %s record: %w", k, err)
	}
	return r, nil
}

// Apply changes the machine's state as the record says.
func (m *Machine) Apply(r Record) error {
	if t := r.Time(); t > m.now {
		m.now = t
	}
	if err := r.apply(m); err != nil {
		return err
	}
	m.applied++
	return nil
}

func appendPrincipal(b []byte, p *Principal) []byte {
	b = codec.AppendString(b, p.Name)
	b = codec.AppendVarint(b, p.Created)
	b = codec.AppendVarint(b, p.Updated)
	b = codec.AppendUvarint(b, uint64(len(p.Grants)))
	for _, g := range p.Grants {
		b = append(b, byte(g.Permission), byte(g.On.Kind))
		b = codec.AppendString(b, g.On.Glob)
	}
	b = codec.AppendUvarint(b, uint64(len(p.Secrets)))
	for _, s := range p.Secrets {
		b = codec.AppendUvarint(b, s.ID)
		b = codec.AppendBytes(b, s.Sealed)
		b = codec.AppendVarint(b, s.Created)
		b = codec.AppendVarint(b, s.Expires)
	}
	return b
}

func decodePrincipal(d *codec.Decoder, p *Principal) {
	p.Name = d.String()
	p.Created = d.Varint()
	p.Updated = d.Varint()
	if n := d.Count(); n > 0 {
		p.Grants = make(Grants, n)
		for i := range p.Grants {
			g := &p.Grants[i]
			g.Permission = Permission(d.Byte())
			g.On.Kind = Kind(d.Byte())
			g.On.Glob = d.String()
			if d.Err == nil {
				if err := g.check(); err != nil {
					d.Fail(err)
				}
			}
		}
	}
	if n := d.Count(); n > 0 {
		p.Secrets = make([]Secret, n)
		for i := range p.Secrets {
			s := &p.Secrets[i]
			s.ID = d.Uvarint()
			s.Sealed = d.Bytes()
			s.Created = d.Varint()
			s.Expires = d.Varint()
		}
	}
}
