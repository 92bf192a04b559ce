// Package codec is the byte encoding okiba's records and checkpoints share: varints
// (zig-zag for signed), length-prefixed strings and byte slices, counts checked against
// the input, sorted string maps. Appending never fails; decoding keeps the first error,
// so decoding code stays linear and callers check once at the end (Finish).
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrShort is the error of a field that runs past the end of its input.
var ErrShort = errors.New("truncated")

// Limits that protect a decoder against absurd lengths in corrupt input.
const (
	MaxString = 1 << 16
	MaxBytes  = 64 << 20
	MaxCount  = 1 << 24
)

func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func AppendVarint(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }

func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func AppendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendStringMap appends m's entries sorted by key, so equal maps encode equally.
func AppendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = AppendString(b, k)
		b = AppendString(b, m[k])
	}
	return b
}

// Decoder reads what the Append functions wrote. The first error sticks.
type Decoder struct {
	B   []byte
	Err error
	// Shared makes Bytes return slices of B instead of copies, for a caller that keeps
	// nothing beyond B's lifetime.
	Shared bool
}

// Fail records err unless an error is recorded already.
func (d *Decoder) Fail(err error) {
	if d.Err == nil {
		d.Err = err
	}
}

func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail(ErrShort)
		return 0
	}
	d.B = d.B[n:]
	return v
}

func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail(ErrShort)
		return 0
	}
	d.B = d.B[n:]
	return v
}

func (d *Decoder) Byte() byte {
	if d.Err != nil {
		return 0
	}
	if len(d.B) < 1 {
		d.Fail(ErrShort)
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}

func (d *Decoder) Bool() bool {
	switch d.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.Fail(errors.New("bad bool"))
	return false
}

// Int reads a varint that must fit in 32 bits.
func (d *Decoder) Int() int {
	v := d.Varint()
	if v > math.MaxInt32 || v < math.MinInt32 {
		d.Fail(fmt.Errorf("int %d out of range", v))
		return 0
	}
	return int(v)
}

// Count reads a length and checks it against the remaining input (each element needs at
// least one byte), so that corrupt input cannot make a decoder allocate gigabytes.
func (d *Decoder) Count() int {
	v := d.Uvarint()
	if d.Err == nil && (v > MaxCount || v > uint64(len(d.B))) {
		d.Fail(fmt.Errorf("count %d exceeds input", v))
		return 0
	}
	return int(v)
}

// Raw reads a length-prefixed slice of at most limit bytes, aliasing B.
func (d *Decoder) Raw(limit uint64) []byte {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > limit || n > uint64(len(d.B)) {
		d.Fail(fmt.Errorf("length %d exceeds input", n))
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

func (d *Decoder) String() string { return string(d.Raw(MaxString)) }

// Bytes returns a copy (unless Shared), so the value does not alias a reused input.
func (d *Decoder) Bytes() []byte {
	raw := d.Raw(MaxBytes)
	if raw == nil || d.Shared {
		return raw
	}
	return append([]byte(nil), raw...)
}

func (d *Decoder) StringMap() map[string]string {
	n := d.Count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.String()
		m[k] = d.String()
	}
	return m
}

// Finish reports the first error, or trailing bytes.
func (d *Decoder) Finish() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Fail(fmt.Errorf("%d trailing bytes", len(d.B)))
	}
	return d.Err
}
