// Package export is the byte format of a broker's export: one consistent image of its
// state — the machines' semantic snapshots, every live message body and every retained
// topic record, the data directory's secret — as a stream of checksummed frames.
//
// It is what `okiba backup` writes and `okiba restore` reads, and what a replicated
// cluster will send a follower that is too far behind for the log (a raft snapshot): so
// the bodies travel in chunks, in the machines' canonical order, and neither end holds the
// whole image in memory. The package knows the framing only; what each frame holds is the
// broker's business (broker/backup.go).
//
// The stream:
//
//	"OKEX" | u8 version (1) | frame*
//	frame: u8 kind | uvarint length | data | u32 CRC-32C of kind and data (little endian)
//
// The last frame is of kind End; a stream that stops before it is truncated, and a reader
// says so rather than hand back a partial image.
package export

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

const (
	magic = "OKEX"
	// Version is the format this package writes and reads.
	Version = 1
	// MaxFrame bounds one frame's data: a writer splits anything larger, and a reader
	// refuses a length past it before allocating.
	MaxFrame = 4 << 20
)

// Kind says what a frame holds.
type Kind byte

// Frame kinds. The broker defines their contents; the numbers are part of the format.
const (
	Header      Kind = 1 // what the export is of: versions, time, counts
	Secret      Kind = 2 // the data directory's secret (receipts and sessions stay valid)
	Queues      Kind = 3 // a piece of the queue machine's snapshot (pieces concatenate)
	Topics      Kind = 4 // a piece of the topic machine's snapshot
	Access      Kind = 5 // a piece of the access machine's snapshot
	Bodies      Kind = 6 // message bodies, in the queue machine's canonical order
	TopicRecord Kind = 7 // retained records of one partition, in offset order
	End         Kind = 8 // the end: counts that the reader checks
)

func (k Kind) String() string {
	switch k {
	case Header:
		return "header"
	case Secret:
		return "secret"
	case Queues:
		return "queues"
	case Topics:
		return "topics"
	case Access:
		return "access"
	case Bodies:
		return "bodies"
	case TopicRecord:
		return "topic records"
	case End:
		return "end"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error about the stream's bytes: a bad magic or checksum,
// an impossible length, a stream that ends early.
var ErrCorrupt = errors.New("export: not a complete okiba export")

// ErrNewer: the stream was written by a newer okiba.
var ErrNewer = errors.New("export: written by a newer okiba")

// Writer writes frames to an underlying writer, buffered; Flush (or Close of the frames
// with End) writes them out.
type Writer struct {
	w     *bufio.Writer
	n     int64 // bytes written
	err   error
	start bool
}

// NewWriter returns a Writer to w. Nothing is written until the first frame.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 256<<10)} }

// Frame writes one frame of kind k holding data, split into frames of MaxFrame bytes at
// most if it is larger (readers of the kinds that may be split concatenate them).
func (w *Writer) Frame(k Kind, data []byte) error {
	for {
		n := min(len(data), MaxFrame)
		if err := w.frame(k, data[:n]); err != nil {
			return err
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
	}
}

func (w *Writer) frame(k Kind, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if !w.start {
		w.start = true
		w.write(append([]byte(magic), Version))
	}
	var h [1 + binary.MaxVarintLen64]byte
	h[0] = byte(k)
	hn := 1 + binary.PutUvarint(h[1:], uint64(len(data)))
	w.write(h[:hn])
	w.write(data)
	c := crc32.Update(crc32.Checksum(h[:1], castagnoli), castagnoli, data)
	w.write(binary.LittleEndian.AppendUint32(nil, c))
	return w.err
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(b)
	w.n += int64(n)
	if err != nil {
		w.err = fmt.Errorf("export: write: %w", err)
	}
}

// Flush writes out what is buffered.
func (w *Writer) Flush() error {
	if w.err == nil {
		if err := w.w.Flush(); err != nil {
			w.err = fmt.Errorf("export: write: %w", err)
		}
	}
	return w.err
}

// Written is how many bytes the frames so far take (flushed or not).
func (w *Writer) Written() int64 { return w.n }

// Reader reads frames.
type Reader struct {
	r     *bufio.Reader
	buf   []byte
	start bool
	done  bool
	n     int64
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 256<<10)} }

// Next returns the next frame. Its data is valid until the next call. After the End
// frame it returns io.EOF; a stream that ends before End is ErrCorrupt.
func (r *Reader) Next() (Kind, []byte, error) {
	if r.done {
		return 0, nil, io.EOF
	}
	if !r.start {
		var h [len(magic) + 1]byte
		if _, err := io.ReadFull(r.r, h[:]); err != nil {
			return 0, nil, fmt.Errorf("%w: no header: %v", ErrCorrupt, err)
		}
		if string(h[:len(magic)]) != magic {
			return 0, nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, h[:len(magic)])
		}
		if v := h[len(magic)]; v != Version {
			if v > Version {
				return 0, nil, fmt.Errorf("%w: format version %d; this okiba reads %d", ErrNewer, v, Version)
			}
			return 0, nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v)
		}
		r.start = true
		r.n += int64(len(h))
	}
	kb, err := r.r.ReadByte()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: it stops after %d bytes, before its end frame", ErrCorrupt, r.n)
	}
	n, err := binary.ReadUvarint(r.r)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: frame at byte %d: bad length: %v", ErrCorrupt, r.n, err)
	}
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: frame at byte %d says %d bytes, more than %d", ErrCorrupt, r.n, n, MaxFrame)
	}
	if uint64(cap(r.buf)) < n+4 {
		r.buf = make([]byte, n+4)
	}
	b := r.buf[:n+4]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return 0, nil, fmt.Errorf("%w: frame at byte %d is cut short: %v", ErrCorrupt, r.n, err)
	}
	data := b[:n]
	c := crc32.Update(crc32.Checksum([]byte{kb}, castagnoli), castagnoli, data)
	if got := binary.LittleEndian.Uint32(b[n:]); got != c {
		return 0, nil, fmt.Errorf("%w: frame at byte %d fails its checksum", ErrCorrupt, r.n)
	}
	r.n += 1 + int64(uvarintLen(n)) + int64(n) + 4
	if Kind(kb) == End {
		r.done = true
	}
	return Kind(kb), data, nil
}

// Read is how many bytes the frames returned so far took.
func (r *Reader) Read() int64 { return r.n }

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
