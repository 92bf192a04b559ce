package wal

import "fmt"

// Pos is the position of a record in the log: the segment index in the high
// 32 bits and the byte offset of the record's frame inside the segment file
// in the low 32 bits. Positions grow strictly in append order, across
// segments, so they compare with < and can be stored by the caller (in a
// checkpoint, or in an index from message id to payload) and read back with
// [Log.ReadAt]. The zero Pos means "the beginning of the log".
//
// One exception to "strictly": a record that Open drops as a torn tail was
// never durable, so its position is given to the next record appended. Do
// not keep the position of a record whose ticket did not complete. The same
// goes for records that Salvage cuts off, which a state rebuilt by Open no
// longer refers to.
type Pos uint64

// MakePos builds a Pos from a segment index and an offset.
func MakePos(segment, offset uint32) Pos { return Pos(uint64(segment)<<32 | uint64(offset)) }

// Segment returns the segment index.
func (p Pos) Segment() uint32 { return uint32(p >> 32) }

// Offset returns the byte offset inside the segment file.
func (p Pos) Offset() uint32 { return uint32(p) }

// String formats p as "segment:offset", both in decimal.
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Segment(), p.Offset()) }
