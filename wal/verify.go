package wal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/okiba/okiba/internal/vfs"
)

// Verification reads frames and checks every checksum without changing anything, as a
// scrub of ZFS or Kafka's log verification do: Verify over a stopped log's directory
// (okiba verify), VerifySince over a live log's records after a position (the broker's
// scrub), VerifyCheckpoints over a checkpoint directory. Unlike Open, which stops at
// the first bad frame, verification goes on after one, to the next valid frame, and
// reports them all.

// BadFrame is a frame that failed verification.
type BadFrame struct {
	File    string // the segment or checkpoint file
	Segment uint32 // the segment's index (0 for a checkpoint)
	Offset  int64  // where the bad frame starts
	// Next is the offset of the next valid frame after it, or the end of the bytes
	// checked when none follows: the bad frame's records, if any, lie in [Offset, Next).
	Next   int64
	Reason string
	// Torn: nothing valid follows and the frame does not show it was written whole: the
	// torn end of an interrupted write, which the next start cuts off. It is damage only
	// in a segment that has a successor (Verify clears it there).
	Torn bool
}

func (f BadFrame) String() string {
	s := fmt.Sprintf("%s at offset %d: %s", f.File, f.Offset, f.Reason)
	if f.Torn {
		s += " (the torn end of an interrupted write: the next start cuts it off)"
	}
	return s
}

// SegmentReport is what verification found in one segment.
type SegmentReport struct {
	File    string
	Index   uint32
	Version uint32
	// Records and Trailers count the valid frames; Bytes the bytes checked.
	Records, Trailers int
	Bytes             int64
	Bad               []BadFrame
}

// VerifyReport is what Verify found in a log directory.
type VerifyReport struct {
	Segments []SegmentReport
	// Leftovers are temporary files of segment creations that did not finish (Open
	// removes them).
	Leftovers []string
}

// Damaged lists every bad frame that is damage (not a torn tail Open repairs).
func (r VerifyReport) Damaged() []BadFrame {
	var out []BadFrame
	for _, s := range r.Segments {
		for _, f := range s.Bad {
			if !f.Torn {
				out = append(out, f)
			}
		}
	}
	return out
}

// VerifySegment checks the frames of data, a segment file's bytes from its start (all
// of it, or a prefix: the durable part of a segment being written), at path with index
// idx. A bad header is one bad frame at offset 0.
func VerifySegment(data []byte, path string, idx uint32) SegmentReport {
	r := SegmentReport{File: path, Index: idx}
	if err := checkSegmentHeader(data, path, idx); err != nil {
		r.Bad = append(r.Bad, BadFrame{File: path, Segment: idx, Offset: 0, Next: int64(len(data)), Reason: err.Error()})
		return r
	}
	r.Version = segmentVersion(data)
	off, sealed, open := int64(headerSize), int64(headerSize), 0
	for off < int64(len(data)) {
		payload, next, st := decodeFrame(data, off, r.Version)
		switch st {
		case frameValid:
			r.Records++
			open++
			off = next
			continue
		case frameTrailer:
			if bytes, frames := trailerFields(payload); sealed < 0 || (bytes == off-sealed && frames == open) {
				r.Trailers++
				sealed, open = next, 0
				off = next
				continue
			}
		case frameZero, frameShort:
			if allZero(data[off:]) {
				r.Bytes = int64(len(data))
				return r
			}
		}
		bad := BadFrame{File: path, Segment: idx, Offset: off, Reason: st.reason(data, off)}
		if st == frameTrailer {
			bad.Reason = "batch trailer that does not describe the records before it"
		}
		n, ok := validFrameAfter(data, r.Version, off)
		if !ok {
			kind, _ := classifyDamage(data, r.Version, off)
			bad.Next, bad.Torn = int64(len(data)), kind == damageTorn
			r.Bad = append(r.Bad, bad)
			break
		}
		bad.Next = n
		r.Bad = append(r.Bad, bad)
		// The next trailer cannot be checked against what precedes it (the damage is
		// among that): counting starts again after it.
		off, sealed, open = n, -1, 0
	}
	r.Bytes = int64(len(data))
	return r
}

// Verify checks every segment in opts.Dir, whole, and reports every bad frame. It
// reads only and takes no lock: the caller makes sure no Log writes the directory (a
// live log's unsynced tail would read as damage).
func Verify(opts Options) (VerifyReport, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return VerifyReport{}, err
	}
	names, err := o.FS.ReadDir(o.Dir)
	if err != nil {
		return VerifyReport{}, fmt.Errorf("wal: verify: %w", err)
	}
	var rep VerifyReport
	for _, name := range names {
		path := filepath.Join(o.Dir, name)
		idx, ok := parseSegmentName(name)
		if !ok {
			if filepath.Ext(name) == tmpExt {
				rep.Leftovers = append(rep.Leftovers, path)
			}
			continue
		}
		data, err := vfs.ReadFile(o.FS, path)
		if err != nil {
			return rep, fmt.Errorf("wal: verify: %w", err)
		}
		rep.Segments = append(rep.Segments, VerifySegment(data, path, idx))
	}
	// A segment with records after it must be whole: a torn end is damage there.
	last := -1
	for i, s := range rep.Segments {
		if s.Records > 0 || len(s.Bad) > 0 {
			last = i
		}
	}
	for i := range rep.Segments {
		for j := range rep.Segments[i].Bad {
			if i < last {
				rep.Segments[i].Bad[j].Torn = false
			}
		}
	}
	return rep, nil
}

// CheckpointReport is what VerifyCheckpoints found in one checkpoint file.
type CheckpointReport struct {
	File  string
	Pos   Pos
	Bytes int64
	Err   error // nil: it verifies
}

// VerifyCheckpoints checks every checkpoint file in dir (its header and payload
// checksums). A file removed meanwhile (a newer checkpoint replaced it) is left out.
// pace, if not nil, is told each file's size before it is read, and may wait.
func VerifyCheckpoints(ctx context.Context, fsys vfs.FS, dir string, pace func(ctx context.Context, n int64) error) ([]CheckpointReport, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: verify checkpoints: %w", err)
	}
	var out []CheckpointReport
	for _, name := range names {
		pos, ok := parseCheckpointName(name)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if pace != nil {
			fi, err := fsys.Stat(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err == nil {
				if err := pace(ctx, fi.Size()); err != nil {
					return out, err
				}
			}
		}
		data, err := vfs.ReadFile(fsys, path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		r := CheckpointReport{File: path, Pos: pos, Bytes: int64(len(data)), Err: err}
		if err == nil {
			_, r.Err = decodeCheckpoint(data, path, pos)
		}
		out = append(out, r)
	}
	return out, nil
}

// VerifySince checks the durable frames of the live log from the segment of from on,
// each segment read from its start (so that its batch trailers can be checked), the
// segment being written up to its durable end. pace is told the size of each chunk
// before it is read, and may wait (a scrub's rate limit). A segment removed meanwhile
// is left out.
func (l *Log) VerifySince(ctx context.Context, from Pos, pace func(ctx context.Context, n int64) error) ([]SegmentReport, error) {
	const chunk = 1 << 20
	var out []SegmentReport
	var buf []byte
	for idx := from.Segment(); ; idx++ {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return out, ErrClosed
		}
		durable := l.durable
		seg := l.segments[idx]
		var used int64
		if seg != nil {
			used = seg.used
			if idx == durable.Segment() {
				used = int64(durable.Offset())
			}
		}
		l.mu.Unlock()
		if idx > durable.Segment() {
			return out, nil
		}
		if seg == nil {
			continue
		}
		if int64(cap(buf)) < used {
			buf = make([]byte, used)
		}
		buf = buf[:used]
		removed := false
		for off := int64(0); off < used && !removed; off += chunk {
			n := min(chunk, used-off)
			if pace != nil {
				if err := pace(ctx, n); err != nil {
					return out, err
				}
			}
			seg.rmu.RLock()
			if seg.f == nil {
				removed = true
			} else if _, err := seg.f.ReadAt(buf[off:off+n], off); err != nil {
				seg.rmu.RUnlock()
				return out, fmt.Errorf("wal: verify: read %s at %d: %w", seg.path, off, err)
			}
			seg.rmu.RUnlock()
		}
		if removed {
			continue
		}
		out = append(out, VerifySegment(buf, seg.path, idx))
	}
}
