package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
)

// SegmentVersion is the segment format version this package writes. It reads
// every version from 1 up to it, each by its own rules (see the package
// documentation): version 2 added batch trailers.
const SegmentVersion = 2

// CheckpointVersion is the checkpoint format version this package writes and
// the newest it reads.
const CheckpointVersion = 1

const (
	segmentMagic    = "OKIBALOG"
	segmentExt      = ".wal"
	tmpExt          = ".tmp"
	headerSize      = 32 // segment header
	frameHeaderSize = 8  // len uint32 | crc uint32
	frameAlign      = 8

	// A batch trailer is a frame whose length word has trailerFlag set; the
	// rest of the word is its payload length, trailerPayload. The payload is
	// the byte length and the record count of the frames it closes, then
	// trailerMagic, whose bytes are all non-zero with at least two bits set: a
	// trailer that was written whole ends in a non-zero byte that no single
	// flipped bit can clear.
	trailerFlag    = 1 << 31
	trailerPayload = 16
	trailerSize    = frameHeaderSize + trailerPayload // a multiple of frameAlign
	trailerMagic   = "BATCHEND"

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
	binary.LittleEndian.PutUint32(h[8:], SegmentVersion)
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
	if v > SegmentVersion {
		return fmt.Errorf("%w: %s has format version %d, this binary supports up to version %d", ErrNewerFormat, file, v, SegmentVersion)
	}
	if crc, want := binary.LittleEndian.Uint32(b[28:]), crc32.Checksum(b[:28], castagnoli); crc != want {
		return &CorruptionError{File: file, Offset: 0, Reason: fmt.Sprintf("header checksum %#08x, want %#08x", crc, want)}
	}
	if v == 0 {
		return &CorruptionError{File: file, Offset: 8, Reason: "format version 0"}
	}
	if flags := binary.LittleEndian.Uint32(b[12:]); flags != 0 {
		return fmt.Errorf("%w: %s has flags %#x, which format version %d does not define", ErrNewerFormat, file, flags, v)
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

// putTrailer writes into b[:trailerSize] the trailer that closes frames
// records taking the bytes bytes before it.
func putTrailer(b []byte, bytes int64, frames int) {
	p := b[frameHeaderSize:trailerSize]
	binary.LittleEndian.PutUint32(p[0:], uint32(bytes))
	binary.LittleEndian.PutUint32(p[4:], uint32(frames))
	copy(p[8:], trailerMagic)
	binary.LittleEndian.PutUint32(b[0:], trailerFlag|trailerPayload)
	binary.LittleEndian.PutUint32(b[4:], frameCRC(trailerFlag|trailerPayload, p))
}

// trailerFields returns what the payload of a valid trailer says it closes.
func trailerFields(payload []byte) (bytes int64, frames int) {
	return int64(binary.LittleEndian.Uint32(payload[0:])), int(binary.LittleEndian.Uint32(payload[4:]))
}

// segmentVersion is the format version in a segment header that
// checkSegmentHeader accepted.
func segmentVersion(hdr []byte) uint32 { return binary.LittleEndian.Uint32(hdr[8:]) }

// frameStatus classifies the 8-byte-aligned slot at some offset of a segment.
type frameStatus int

const (
	frameValid      frameStatus = iota
	frameTrailer                // a valid batch trailer (format 2)
	frameZero                   // length word 0: end of segment if all that follows is zero
	frameShort                  // fewer than 8 bytes left in the segment
	frameTooLong                // the length runs past the end of the segment
	frameBadCRC                 // checksum mismatch
	frameBadPad                 // non-zero padding after the record
	frameBadTrailer             // a trailer's length word with another length, or a trailer without its magic
)

// decodeFrame looks at the frame at off in seg, the whole segment file of
// format version. It returns the payload (aliasing seg) and the offset of the
// next frame when the status is frameValid or frameTrailer. In format 1 a
// length word with trailerFlag set is only a length too long for any segment.
func decodeFrame(seg []byte, off int64, version uint32) (payload []byte, next int64, st frameStatus) {
	rem := int64(len(seg)) - off
	if rem < frameHeaderSize {
		return nil, 0, frameShort
	}
	n := binary.LittleEndian.Uint32(seg[off:])
	if n == 0 {
		return nil, 0, frameZero
	}
	if n&trailerFlag != 0 && version >= 2 {
		if n != trailerFlag|trailerPayload {
			return nil, 0, frameBadTrailer
		}
		if rem < trailerSize {
			return nil, 0, frameTooLong
		}
		payload = seg[off+frameHeaderSize : off+trailerSize]
		if binary.LittleEndian.Uint32(seg[off+4:]) != frameCRC(n, payload) {
			return nil, 0, frameBadCRC
		}
		if string(payload[8:]) != trailerMagic {
			return nil, 0, frameBadTrailer
		}
		return payload, off + trailerSize, frameTrailer
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
	case frameBadTrailer:
		return "malformed batch trailer"
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

// segmentScan is what scanFrames found in one segment.
type segmentScan struct {
	// end is the offset of the first slot that is not a valid frame, and
	// reason is empty when the segment ends cleanly there (a zero length
	// word, or less than a frame header left, with only zeros after) and
	// otherwise says what is wrong with the frame at end.
	end    int64
	reason string
	// Format 2: [sealed, end) holds the records that no trailer closes
	// yet, open of them: the frames of a batch whose trailer never reached
	// the disk. sealed is just after the last valid trailer, or the header.
	sealed int64
	open   int
}

// scanFrames calls fn for every valid frame of seg, a segment file of format
// version, in order from the first, with trailer set for batch trailers. It
// stops at the first slot that is not a valid frame. A trailer that does not
// describe the records since the previous one is such a slot: a checksum
// that matches over the wrong content is damage all the same.
func scanFrames(seg []byte, version uint32, fn func(off int64, payload []byte, trailer bool) error) (segmentScan, error) {
	sc := segmentScan{sealed: headerSize}
	off := int64(headerSize)
	for {
		payload, next, st := decodeFrame(seg, off, version)
		switch st {
		case frameValid:
			if err := fn(off, payload, false); err != nil {
				return segmentScan{end: off}, err
			}
			sc.open++
			off = next
			continue
		case frameTrailer:
			if bytes, frames := trailerFields(payload); bytes != off-sc.sealed || frames != sc.open {
				sc.end = off
				sc.reason = fmt.Sprintf("batch trailer says it closes %d records in %d bytes, but %d records in %d bytes precede it",
					frames, bytes, sc.open, off-sc.sealed)
				return sc, nil
			}
			if err := fn(off, payload, true); err != nil {
				return segmentScan{end: off}, err
			}
			sc.sealed, sc.open = next, 0
			off = next
			continue
		case frameZero, frameShort:
			if allZero(seg[off:]) {
				sc.end = off
				return sc, nil
			}
		}
		sc.end = off
		sc.reason = st.reason(seg, off)
		return sc, nil
	}
}

// validFrameAfter reports the first 8-byte-aligned offset after bad where a
// valid frame starts. Finding one means the damage at bad is not the torn
// end of the last write, since nothing valid is ever written after the tail.
func validFrameAfter(seg []byte, version uint32, bad int64) (int64, bool) {
	return frameAfter(seg, version, bad, false)
}

// frameAfter returns the first 8-byte-aligned offset after bad where a valid
// frame starts, or only a valid trailer with trailers. A valid frame begins
// with a non-zero length word, so the search ends at the last non-zero byte.
func frameAfter(seg []byte, version uint32, bad int64, trailers bool) (int64, bool) {
	end := lastNonZero(seg, bad)
	for off := bad + frameAlign; off < end && off+frameHeaderSize <= int64(len(seg)); off += frameAlign {
		if trailers && binary.LittleEndian.Uint32(seg[off:]) != trailerFlag|trailerPayload {
			continue // not even the length word of one: skip the checksum
		}
		if _, _, st := decodeFrame(seg, off, version); st == frameTrailer || (st == frameValid && !trailers) {
			return off, true
		}
	}
	return 0, false
}

// lastNonZero returns the offset just past the last non-zero byte of seg at
// or after from, or from if there is none.
func lastNonZero(seg []byte, from int64) int64 {
	const block = 512
	i := int64(len(seg))
	for i-block >= from && allZero(seg[i-block:i]) {
		i -= block
	}
	for ; i > from; i-- {
		if seg[i-1] != 0 {
			return i
		}
	}
	return from
}

// damage is what a bad frame in the last segment holding records means.
type damage int

const (
	// damageTorn: the end of a write that never completed, and so was never
	// acknowledged. Open discards it.
	damageTorn damage = iota
	// damageLastBatch: bytes that were written whole and damaged since, in
	// the segment's last batch. Open refuses; Salvage cuts them off.
	damageLastBatch
	// damageMidLog: damage with complete batches after it. Open refuses.
	damageMidLog
)

// classifyDamage says what the bad frame at x of seg, the last segment of
// format version holding records, means, and why (detail, to append to the
// frame's reason). See the package documentation, "Recovery rules", for the
// reasoning; in short, in format 2:
//
//   - a valid frame after x cannot follow a write cut at x: damage;
//   - it is in the last batch if no complete batch follows the one holding
//     it, that is if nothing but zeros follows the first valid trailer after x;
//   - with nothing valid after x, the frame at x was written whole if the
//     segment's bytes reach the end its length word gives it (a trailer ends
//     in a non-zero magic byte, so a whole trailer always does); a write cut
//     short leaves zeros from where it stopped;
//   - otherwise the bytes from x on are the unfinished write of a batch that
//     never got its trailer: torn.
//
// Format 1 has no trailers: a bad frame with nothing valid after it is always
// taken for a torn tail there.
func classifyDamage(seg []byte, version uint32, x int64) (damage, string) {
	if off, ok := validFrameAfter(seg, version, x); ok {
		detail := fmt.Sprintf("a valid frame follows at offset %d, so this is not the torn end of an interrupted write", off)
		if version < 2 {
			return damageMidLog, detail
		}
		y, ok := frameAfter(seg, version, x, true)
		if !ok {
			return damageLastBatch, detail + "; no batch trailer follows, so it is in the segment's last batch"
		}
		if end := y + trailerSize; lastNonZero(seg, end) > end {
			return damageMidLog, fmt.Sprintf("%s; its batch ends at offset %d and more of the log follows", detail, end)
		}
		return damageLastBatch, fmt.Sprintf("%s; it is in the segment's last batch, whose trailer is at offset %d", detail, y)
	}
	if version < 2 {
		return damageTorn, ""
	}
	if end, ok := claimedEnd(seg, x); ok && lastNonZero(seg, x) >= end {
		return damageLastBatch, fmt.Sprintf("the frame's bytes reach the end its length word gives it, offset %d, "+
			"so it was written whole and damaged since: a write cut short leaves zeros from where it stopped", end)
	}
	return damageTorn, ""
}

// claimedEnd returns where the frame at x would end by its length word (a
// trailer's fixed size for a trailer's word), if that is inside seg.
func claimedEnd(seg []byte, x int64) (int64, bool) {
	if int64(len(seg))-x < frameHeaderSize {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(seg[x:])
	end := x + frameSize(int(n))
	switch {
	case n == 0:
		return 0, false
	case n&trailerFlag != 0:
		end = x + trailerSize
	}
	return end, end <= int64(len(seg))
}

func segmentPath(dir string, idx uint32) string { return filepath.Join(dir, segmentName(idx)) }
