package access

import (
	"fmt"

	"github.com/okiba/okiba/internal/codec"
)

// Snapshot layout (version 1): the version, the latest logged time, the last secret id,
// then each principal by name, as a put record carries it. Two machines that applied the
// same records write the same bytes.
const snapshotVersion = 1

// AppendSnapshot appends the machine's state to b.
func (m *Machine) AppendSnapshot(b []byte) []byte {
	b = codec.AppendUvarint(b, snapshotVersion)
	b = codec.AppendVarint(b, m.now)
	b = codec.AppendUvarint(b, m.lastSecret)
	list := m.List()
	b = codec.AppendUvarint(b, uint64(len(list)))
	for i := range list {
		b = appendPrincipal(b, &list[i])
	}
	return b
}

// Restore rebuilds a machine from AppendSnapshot's bytes; empty input is a machine
// without principals (a checkpoint from before principals).
func Restore(b []byte) (*Machine, error) {
	m := New()
	if len(b) == 0 {
		return m, nil
	}
	d := &codec.Decoder{B: b}
	if v := d.Uvarint(); d.Err == nil && v != snapshotVersion {
		if v > snapshotVersion {
			return nil, fmt.Errorf("%w: version %d", ErrSnapshotNewer, v)
		}
		return nil, fmt.Errorf("access snapshot: unknown version %d", v)
	}
	m.now = d.Varint()
	m.lastSecret = d.Uvarint()
	n := d.Count()
	for i := 0; i < n && d.Err == nil; i++ {
		var p Principal
		decodePrincipal(d, &p)
		if d.Err == nil {
			if err := CheckName(p.Name); err != nil {
				d.Fail(err)
			}
			m.principals[p.Name] = &p
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("access snapshot: %w", err)
	}
	return m, nil
}
