package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/okiba/okiba/internal/vfs"
)

// A log with several owners: a cluster node keeps the broker's records and its raft
// storage's in one log, so that one fsync per commit cycle makes both durable. Each owner
// replays its own records (Open's replay for one, Scan for the other), and each releases
// the segments it no longer needs through its Hold: a segment goes only once every owner
// has released it.

// Hold is one owner's claim on the segments of a log with several owners. A log's holds
// are taken right after Open, before any of them releases a segment; from then on every
// segment is removed through them (Log.Remove would ignore the others' claims).
type Hold struct {
	l        *Log
	released map[uint32]bool // guarded by l.mu
}

// Hold returns a new claim on every segment of the log.
func (l *Log) Hold() *Hold {
	h := &Hold{l: l, released: map[uint32]bool{}}
	l.mu.Lock()
	l.holds = append(l.holds, h)
	l.mu.Unlock()
	return h
}

// Remove releases segment idx for this hold's owner, with Log.Remove's precondition (it
// lies before the durable position and the owner needs nothing in it), and removes it
// once every hold has released it. Releasing a segment again is harmless.
func (h *Hold) Remove(idx uint32) error {
	l := h.l
	l.mu.Lock()
	h.released[idx] = true
	for _, o := range l.holds {
		if !o.released[idx] {
			l.mu.Unlock()
			return nil // another owner still needs it
		}
	}
	for _, o := range l.holds {
		delete(o.released, idx)
	}
	l.mu.Unlock()
	return l.Remove(idx)
}

// Scan calls fn with every record from the position from (a record boundary, as Open's
// start; 0 for the first segment Open replayed) up to the position durable when Scan
// started, in log order, as Open's replay does: a second owner's replay of a log with
// several owners. fn's payload is valid only during the call. The log may take appends
// meanwhile; Scan does not see them.
func (l *Log) Scan(from Pos, fn func(pos Pos, payload []byte) error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	end := l.durable
	type part struct {
		seg  *segment
		used int64
	}
	var parts []part
	for idx := range l.segments {
		if (from == 0 || idx >= from.Segment()) && idx <= end.Segment() {
			s := l.segments[idx]
			used := s.used
			if idx == end.Segment() {
				used = int64(end.Offset())
			}
			parts = append(parts, part{s, used})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(parts, func(a, b part) int { return int(a.seg.idx) - int(b.seg.idx) })
	if from == 0 {
		// From the first of the contiguous run that ends at the durable position: the
		// segments before a gap hold only what Open did not replay either.
		for i := len(parts) - 1; i > 0; i-- {
			if parts[i-1].seg.idx+1 != parts[i].seg.idx {
				parts = parts[i:]
				break
			}
		}
	} else if len(parts) == 0 || parts[0].seg.idx != from.Segment() {
		return fmt.Errorf("%w: scan from %v, whose segment is not in the log", ErrNotFound, from)
	}
	var buf []byte
	for _, p := range parts {
		if p.used <= headerSize {
			continue
		}
		if int64(cap(buf)) < p.used {
			buf = make([]byte, p.used)
		}
		data := buf[:p.used]
		p.seg.rmu.RLock()
		var err error
		if p.seg.f == nil {
			err = fmt.Errorf("%w: segment %s was removed or closed during a scan", ErrNotFound, segmentName(p.seg.idx))
		} else if _, err = p.seg.f.ReadAt(data, 0); err != nil {
			err = fmt.Errorf("wal: read %s: %w", p.seg.path, err)
		}
		p.seg.rmu.RUnlock()
		if err != nil {
			return err
		}
		sc, err := scanFrames(data, p.seg.version, func(off int64, payload []byte, trailer bool) error {
			pos := MakePos(p.seg.idx, uint32(off))
			if trailer || (from != 0 && pos < from) {
				return nil
			}
			if err := fn(pos, payload); err != nil {
				return fmt.Errorf("wal: scanning record %v: %w", pos, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if sc.reason != "" || sc.end != p.used {
			return &CorruptionError{File: p.seg.path, Offset: sc.end, Reason: "scan: " + sc.reason}
		}
	}
	return nil
}

// ContiguousStart returns the position of the first record of the run of segments in
// dir that ends with the last one and has no gap (0 if dir holds none): where a log with
// several owners opens, since each owner removes the segments before what it needs, in
// any order, and only segments every owner released are gone.
func ContiguousStart(fsys vfs.FS, dir string) (Pos, error) {
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var idxs []uint32
	for _, name := range names {
		if strings.HasSuffix(name, tmpExt) {
			continue
		}
		if idx, ok := parseSegmentName(name); ok {
			idxs = append(idxs, idx)
		}
	}
	if len(idxs) == 0 {
		return 0, nil
	}
	slices.Sort(idxs)
	i := len(idxs) - 1
	for i > 0 && idxs[i-1]+1 == idxs[i] {
		i--
	}
	return MakePos(idxs[i], headerSize), nil
}
