package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
)

// FormatVersion is the segment and checkpoint format version this package
// writes and the newest it reads.
const FormatVersion = 1

const (
	segmentMagic    = "OKIBALOG"
	segmentExt      = ".wal"
	tmpExt          = ".tmp"
	headerSize      = 32 // segment header
	frameHeaderSize = 8  // len uint32 | crc uint32
	frameAlign      = 8

	// MinSegmentSize and MaxSegmentSize bound Options.SegmentSize. The
	// maximum keeps every offset, including the end of a full segment,
	// inside the 32 bits a Pos has for it.
	MinSegmentSize = 1 << 10
	MaxSegmentSize = 1 << 31
)

// castagnoli is the CRC32C table; crc32 computes it once and hands back the
// same read-only table to every caller.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentName returns the file name of segment idx: eight lowercase hex
// digits, so that names sort by index.
func segmentName(idx uint32) string { return fmt.Sprintf("%08x%s", idx, segmentExt) }

// parseSegmentName accepts exactly the names segmentName produces.
func parseSegmentName(name string) (uint32, bool) {
	if len(name) != 8+len(segmentExt) || name[8:] != segmentExt {
		return 0, false
	}
	var idx uint32
	for _, c := range []byte(name[:8]) {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		idx = idx<<4 | uint32(d)
	}
	return idx, idx != 0
}

// encodeSegmentHeader returns the 32-byte header of segment idx, preallocated to capacity
// bytes.
func encodeSegmentHeader(idx uint32, capacity int64) []byte {
	h := make([]byte, headerSize)
	copy(h, segmentMagic)
	binary.LittleEndian.PutUint32(h[8:], FormatVersion)
	binary.LittleEndian.PutUint32(h[12:], 0) // flags
	binary.LittleEndian.PutUint64(h[16:], uint64(idx))
	binary.LittleEndian.PutUint32(h[24:], uint32(capacity))
	binary.LittleEndian.PutUint32(h[28:], crc32.Checksum(h[:28], castagnoli))
	return h
}

// checkSegmentSize refuses a segment file shorter than the size it was created with: a
// segment is preallocated in full before it is renamed into place, so a short one was cut
// by something outside okiba, and the records that stood beyond its end are lost. (A
// capacity of 0 is a header from before the field existed.)
func checkSegmentSize(hdr []byte, file string, size int64) error {
	if len(hdr) < headerSize {
		return nil
	}
	want := int64(binary.LittleEndian.Uint32(hdr[24:]))
	if want != 0 && size < want {
		return &CorruptionError{File: file, Offset: size, Reason: fmt.Sprintf(
			"the file is %d bytes but was created with %d: it was truncated, and any record that stood beyond %d is lost "+
				"(to accept that loss and start, extend the file back with zeros: truncate -s %d %s)", size, want, size, want, file)}
	}
	return nil
}

// checkSegmentHeader validates the header of file, which should be segment
// idx. The version is checked before the checksum, so that a newer binary
// may lay out the rest of its header differently and still be reported as
// "newer" rather than "corrupt".
func checkSegmentHeader(b []byte, file string, idx uint32) error {
	if len(b) < headerSize {
		return &CorruptionError{File: file, Offset: 0, Reason: fmt.Sprintf("file is %d bytes, shorter than the %d-byte header", len(b), headerSize)}
	}
	if string(b[:8]) != segmentMagic {
		return &CorruptionError{File: file, Offset: 0, Reason: fmt.Sprintf("bad magic %q, want %q", b[:8], segmentMagic)}
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if v > FormatVersion {
		return fmt.Errorf("%w: %s has format version %d, this binary supports up to version %d", ErrNewerFormat, file, v, FormatVersion)
	}
	if crc, want := binary.LittleEndian.Uint32(b[28:]), crc32.Checksum(b[:28], castagnoli); crc != want {
		return &CorruptionError{File: file, Offset: 0, Reason: fmt.Sprintf("header checksum %#08x, want %#08x", crc, want)}
	}
	if v == 0 {
		return &CorruptionError{File: file, Offset: 8, Reason: "format version 0"}
	}
	if flags := binary.LittleEndian.Uint32(b[12:]); flags != 0 {
		return fmt.Errorf("%w: %s has flags %#x, which format version %d does not define", ErrNewerFormat, file, flags, FormatVersion)
	}
	if got := binary.LittleEndian.Uint64(b[16:]); got != uint64(idx) {
		return &CorruptionError{File: file, Offset: 16, Reason: fmt.Sprintf("header is for segment %d, but the file name says %d", got, idx)}
	}
	return nil
}

func align8(n int64) int64 { return (n + frameAlign - 1) &^ (frameAlign - 1) }

// frameSize is the bytes a record of n payload bytes occupies on disk.
func frameSize(n int) int64 { return align8(frameHeaderSize + int64(n)) }

// frameCRC is the CRC32C of the four length bytes followed by the payload:
// covering the length means a corrupted length cannot point at a payload
// that happens to match.
func frameCRC(n uint32, payload []byte) uint32 {
	var l [4]byte
	binary.LittleEndian.PutUint32(l[:], n)
	return crc32.Update(crc32.Checksum(l[:], castagnoli), castagnoli, payload)
}

// putFrameHeader fills the 8-byte header in front of payload and returns the
// zero padding the frame needs after it.
func putFrameHeader(hdr []byte, payload []byte) int {
	n := uint32(len(payload))
	binary.LittleEndian.PutUint32(hdr[0:], n)
	binary.LittleEndian.PutUint32(hdr[4:], frameCRC(n, payload))
	return int(frameSize(len(payload))) - frameHeaderSize - len(payload)
}

// frameStatus classifies the 8-byte-aligned slot at some offset of a segment.
type frameStatus int

const (
	frameValid   frameStatus = iota
	frameZero                // length word 0: end of segment if all that follows is zero
	frameShort               // fewer than 8 bytes left in the segment
	frameTooLong             // the length runs past the end of the segment
	frameBadCRC              // checksum mismatch
	frameBadPad              // non-zero padding after the payload
)

// decodeFrame looks at the frame at off in seg, the whole segment file. It
// returns the payload (aliasing seg) and the offset of the next frame when
// the status is frameValid.
func decodeFrame(seg []byte, off int64) (payload []byte, next int64, st frameStatus) {
	rem := int64(len(seg)) - off
	if rem < frameHeaderSize {
		return nil, 0, frameShort
	}
	n := binary.LittleEndian.Uint32(seg[off:])
	if n == 0 {
		return nil, 0, frameZero
	}
	size := frameSize(int(n))
	if size > rem {
		return nil, 0, frameTooLong
	}
	payload = seg[off+frameHeaderSize : off+frameHeaderSize+int64(n)]
	if binary.LittleEndian.Uint32(seg[off+4:]) != frameCRC(n, payload) {
		return nil, 0, frameBadCRC
	}
	if !allZero(seg[off+frameHeaderSize+int64(n) : off+size]) {
		return nil, 0, frameBadPad
	}
	return payload, off + size, frameValid
}

func (st frameStatus) reason(seg []byte, off int64) string {
	switch st {
	case frameZero:
		return "zero length word followed by non-zero bytes"
	case frameShort:
		return "non-zero bytes in the last bytes of the segment"
	case frameTooLong:
		n := binary.LittleEndian.Uint32(seg[off:])
		return fmt.Sprintf("length %d runs past the end of the %d-byte segment", n, len(seg))
	case frameBadCRC:
		return "checksum mismatch"
	case frameBadPad:
		return "non-zero padding after the record"
	}
	return "valid frame"
}

// allZero reports whether b holds only zero bytes, comparing in blocks so
// that checking the unused tail of a 64 MiB segment stays cheap.
func allZero(b []byte) bool {
	var zero [512]byte
	for len(b) >= len(zero) {
		if !bytes.Equal(b[:len(zero)], zero[:]) {
			return false
		}
		b = b[len(zero):]
	}
	return bytes.Equal(b, zero[:len(b)])
}

// scanFrames calls fn for every valid frame of seg from offset from, in
// order. It stops at the first slot that is not a valid frame and returns
// its offset. reason is empty when the segment ends cleanly there (a zero
// length word, or less than a frame header left, with only zeros after) and
// otherwise says what is wrong with the frame at end.
func scanFrames(seg []byte, from int64, fn func(off int64, payload []byte) error) (end int64, reason string, err error) {
	off := from
	for {
		payload, next, st := decodeFrame(seg, off)
		switch st {
		case frameValid:
			if err := fn(off, payload); err != nil {
				return off, "", err
			}
			off = next
			continue
		case frameZero, frameShort:
			if allZero(seg[off:]) {
				return off, "", nil
			}
		}
		return off, st.reason(seg, off), nil
	}
}

// validFrameAfter reports the first 8-byte-aligned offset after bad where a
// valid frame starts. Finding one means the damage at bad is not the torn
// end of the last write, since nothing valid is ever written after the tail.
func validFrameAfter(seg []byte, bad int64) (int64, bool) {
	for off := bad + frameAlign; off+frameHeaderSize <= int64(len(seg)); off += frameAlign {
		if _, _, st := decodeFrame(seg, off); st == frameValid {
			return off, true
		}
	}
	return 0, false
}

// lastNonZero returns the offset just past the last non-zero byte of seg at
// or after from, or from if there is none.
func lastNonZero(seg []byte, from int64) int64 {
	for i := int64(len(seg)) - 1; i >= from; i-- {
		if seg[i] != 0 {
			return i + 1
		}
	}
	return from
}

func segmentPath(dir string, idx uint32) string { return filepath.Join(dir, segmentName(idx)) }
