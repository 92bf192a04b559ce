package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// errShort is returned by the decoder when a field runs past the end of its input.
var errShort = errors.New("truncated")

// Limits that protect the decoder against absurd lengths in corrupt input.
const (
	maxDecodedString = 1 << 16
	maxDecodedBytes  = 64 << 20
	maxDecodedCount  = 1 << 24
)

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func appendVarint(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// decoder reads the fields appended above. The first error sticks; callers check err once
// at the end, so decoding code stays linear.
type decoder struct {
	b   []byte
	err error
	// shared: bytes() returns slices of b instead of copies (DecodeRecordShared).
	shared bool
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(errors.New("bad bool"))
	return false
}

// count reads a length and checks it against the remaining input (each element needs at
// least one byte) so that corrupt input cannot make us allocate gigabytes.
func (d *decoder) count() int {
	v := d.uvarint()
	if d.err == nil && (v > maxDecodedCount || v > uint64(len(d.b))) {
		d.fail(fmt.Errorf("count %d exceeds input", v))
		return 0
	}
	return int(v)
}

func (d *decoder) rawBytes(limit uint64) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > limit || n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("length %d exceeds input", n))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.rawBytes(maxDecodedString)) }

// bytes returns a copy, so the decoded value does not alias the (reused) input buffer.
func (d *decoder) bytes() []byte {
	raw := d.rawBytes(maxDecodedBytes)
	if raw == nil || d.shared {
		return raw
	}
	return append([]byte(nil), raw...)
}

func (d *decoder) int() int {
	v := d.varint()
	if v > math.MaxInt32 || v < math.MinInt32 {
		d.fail(fmt.Errorf("int %d out of range", v))
		return 0
	}
	return int(v)
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.b)))
	}
	return d.err
}

func appendStringMap(b []byte, m map[string]string) []byte {
	keys := sortedKeys(m)
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	return b
}

func (d *decoder) stringMap() map[string]string {
	n := d.count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		m[k] = d.string()
	}
	return m
}
