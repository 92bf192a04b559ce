package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// tailDamage is damage at the end of the log that Open refused to discard:
// the bytes [from, to) of seg, from the bad frame to the last non-zero byte.
type tailDamage struct {
	seg      *segment
	from, to int64
	reason   string
	data     []byte // the segment's bytes, valid until the next read into recover's buffer
}

// recover implements Open's scan; see the package documentation for the
// rules. With l.dry it only reads (Salvage's inspection): it removes nothing,
// repairs nothing and creates nothing. On error the caller closes whatever
// l.segments holds; l.damage then describes damage Salvage may cut off.
func (l *Log) recover(start Pos, replay func(Pos, []byte) error) error {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	var idxs []uint32
	for _, name := range names {
		if base, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(base); ok && !l.dry {
				// A segment whose creation never reached its rename.
				if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
					return fmt.Errorf("wal: remove leftover %s: %w", name, err)
				}
			}
			continue
		}
		if idx, ok := parseSegmentName(name); ok {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	// From the start segment on, the log must be contiguous: those segments are replayed.
	// Before it, segments hold only payloads of live messages, and the caller removes the
	// ones nothing needs any more, in any order, so gaps there are expected.
	for i := 1; i < len(idxs); i++ {
		if idxs[i] > start.Segment() && idxs[i] != idxs[i-1]+1 && (start == 0 || idxs[i-1] >= start.Segment()) {
			return fmt.Errorf("%w: %s is missing from %s (it lies between %s and %s); restore it from a backup",
				ErrMissingSegment, segmentName(idxs[i-1]+1), l.dir, segmentName(idxs[i-1]), segmentName(idxs[i]))
		}
	}

	if len(idxs) == 0 {
		if l.dry {
			return fmt.Errorf("wal: %s holds no log segments", l.dir)
		}
		if start != 0 {
			return fmt.Errorf("%w: start position %v, but %s holds no segments", ErrMissingSegment, start, l.dir)
		}
		seg, err := l.createSegment(1)
		if err != nil {
			return fmt.Errorf("wal: %w", err)
		}
		l.segments[1] = seg
		l.w = seg
		l.end, l.durable, l.curCap = MakePos(1, headerSize), MakePos(1, headerSize), seg.capacity
		l.sealed = headerSize
		return nil
	}

	first, last := idxs[0], idxs[len(idxs)-1]
	s0 := first
	if start != 0 {
		s0 = start.Segment()
		if s0 == 0 || start.Offset() < headerSize {
			return fmt.Errorf("%w: %v is not a record position", ErrBadStart, start)
		}
		if !slices.Contains(idxs, s0) {
			return fmt.Errorf("%w: start position %v is in %s, but %s holds %s to %s without it",
				ErrMissingSegment, start, segmentName(s0), l.dir, segmentName(first), segmentName(last))
		}
	}
	mode := os.O_RDWR
	if l.dry {
		mode = os.O_RDONLY
	}
	for _, idx := range idxs {
		path := segmentPath(l.dir, idx)
		f, err := l.fs.OpenFile(path, mode, 0)
		if err != nil {
			return fmt.Errorf("wal: open %s: %w", path, err)
		}
		size, err := f.Size()
		if err != nil {
			f.Close()
			return fmt.Errorf("wal: size of %s: %w", path, err)
		}
		if size > MaxSegmentSize {
			f.Close()
			return &CorruptionError{File: path, Offset: MaxSegmentSize, Reason: fmt.Sprintf("file is %d bytes, more than a segment can be", size)}
		}
		l.segments[idx] = &segment{idx: idx, path: path, capacity: size, used: size, f: f}
	}

	// Segments before the start: check the header only.
	for _, idx := range idxs {
		if idx >= s0 {
			break
		}
		seg := l.segments[idx]
		hdr := make([]byte, headerSize)
		if _, err := seg.f.ReadAt(hdr, 0); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("wal: read %s: %w", seg.path, err)
		}
		if err := checkSegmentHeader(hdr[:min(seg.capacity, headerSize)], seg.path, idx); err != nil {
			return err
		}
		if err := checkSegmentSize(hdr, seg.path, seg.capacity); err != nil {
			return err
		}
	}

	// Segments from the start on: scan and replay.
	var (
		buf      []byte
		tail     = s0                     // last segment holding records, or s0
		tailEnd  = int64(headerSize)      // where appending resumes in tail
		sealed   = int64(headerSize)      // where tail's records no trailer closes begin
		open     int                      // how many there are
		emptyRun []uint32                 // empty segments since the last one with records
		repairAt int64               = -1 // torn tail to zero in tail, from repairAt to repairTo
		repairTo int64
	)
	for idx := s0; idx <= last; idx++ {
		seg := l.segments[idx]
		data, err := l.readSegment(seg, &buf)
		if err != nil {
			return err
		}
		if err := checkSegmentHeader(data, seg.path, idx); err != nil {
			if !errors.Is(err, ErrNewerFormat) && idx > s0 {
				if empty, err2 := l.emptyFrom(idx, last, &buf); err2 != nil {
					return err2
				} else if empty {
					// Created ahead of need and never used; Open drops
					// it below. Its header cannot matter.
					l.logger.Warn("wal: ignoring unused segment with a damaged header", "file", seg.path, "err", err)
					break
				}
			}
			return err
		}
		if err := checkSegmentSize(data, seg.path, seg.capacity); err != nil {
			return err
		}
		seg.version = segmentVersion(data)
		atStart := start != 0 && idx == s0
		startSeen := !atStart || int64(start.Offset()) == headerSize
		firstSize := int64(0) // frame size of the segment's first record
		sc, err := scanFrames(data, seg.version, func(off int64, payload []byte, trailer bool) error {
			pos := MakePos(idx, uint32(off))
			if off == headerSize && !trailer {
				firstSize = frameSize(len(payload))
			}
			if atStart {
				if pos == start {
					startSeen = true
				}
				if pos < start {
					return nil
				}
			}
			if trailer {
				return nil // the log's own: it marks where a batch ended
			}
			if err := replay(pos, payload); err != nil {
				return fmt.Errorf("wal: replaying record %v: %w", pos, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		end, reason := sc.end, sc.reason
		// A start position past a bad frame means a checkpoint covers that
		// frame, so it was durable: damage, not a torn write (from format 2
		// on; format 1 kept reporting the disagreement as such).
		covered := false
		if atStart && !startSeen && int64(start.Offset()) != end {
			switch {
			case int64(start.Offset()) < end:
				return fmt.Errorf("%w: start position %v is not a record boundary in %s", ErrBadStart, start, seg.path)
			case reason == "" || seg.version < 2:
				return fmt.Errorf("%w: start position %v lies beyond the last valid record of %s, which ends at offset %d",
					ErrBadStart, start, seg.path, end)
			}
			covered = true
		}
		// The log rolls to a new segment only when a frame does not fit
		// in the current one (with room for a trailer after it, from
		// format 2 on: the format of the segment the writer rolled to), so
		// an empty segment followed by records is fine only if the first of
		// those records would not have fit in it either (a segment left too
		// small by a truncation, say). Otherwise it lost its records.
		if end > headerSize {
			need := firstSize
			if seg.version >= 2 {
				need += trailerSize
			}
			for _, e := range emptyRun {
				if es := l.segments[e]; es.capacity-headerSize >= need {
					return &CorruptionError{File: es.path, Offset: headerSize, Reason: fmt.Sprintf(
						"segment holds no records, but the first record of the later %s would have fit in it: records are missing",
						segmentName(idx))}
				}
			}
			emptyRun = nil
		} else if reason == "" {
			emptyRun = append(emptyRun, idx)
		}
		if reason == "" {
			seg.used = end
			if end > headerSize || idx == s0 {
				tail, tailEnd = idx, end
				sealed, open = sc.sealed, sc.open
			}
			continue
		}

		// A bad frame at end. It can be a torn tail only if nothing valid
		// follows it in a later segment.
		if empty, err := l.emptyFrom(idx+1, last, &buf); err != nil {
			return err
		} else if !empty {
			return &CorruptionError{File: seg.path, Offset: end,
				Reason: reason + "; later segments hold records, so this segment was complete and synced"}
		}
		if idx < last { // emptyFrom reused buf
			if data, err = l.readSegment(seg, &buf); err != nil {
				return err
			}
		}
		kind, detail := classifyDamage(data, seg.version, end)
		if kind == damageTorn && !covered {
			tail, tailEnd = idx, end
			sealed, open = sc.sealed, sc.open
			repairAt, repairTo = end, lastNonZero(data, end)
			seg.used = end
			l.logger.Warn("wal: discarding torn tail left by an interrupted write",
				"file", seg.path, "offset", end, "bytes", repairTo-end, "reason", reason)
			break
		}
		ce := &CorruptionError{File: seg.path, Offset: end, Reason: reason}
		if detail != "" {
			ce.Reason += "; " + detail
		}
		if covered {
			ce.Reason += fmt.Sprintf("; the start position %v (a checkpoint's) lies beyond it, so it was durable", start)
		}
		if kind != damageMidLog {
			l.damage = &tailDamage{seg: seg, from: end, to: lastNonZero(data, end), reason: ce.Reason, data: data}
			ce.Salvageable = !covered
			if !l.dry {
				if q, err := quarantine(l.fs, l.dir, l.damage, time.Now(), quarantineRefused); err != nil {
					l.logger.Warn("wal: could not copy damaged bytes to quarantine", "file", seg.path, "offset", end, "err", err)
				} else {
					ce.Quarantine = q
				}
			}
		}
		return ce
	}
	if l.dry {
		return nil
	}

	// Segments after the tail hold no records. Keep the next one as the
	// prepared segment if it is exactly what the flusher would create;
	// drop the others, highest first so a crash cannot leave a gap.
	for idx := last; idx > tail; idx-- {
		seg := l.segments[idx]
		keep := false
		if idx == tail+1 && seg.capacity == l.segSize {
			hdr := make([]byte, headerSize)
			_, err := seg.f.ReadAt(hdr, 0)
			keep = err == nil && checkSegmentHeader(hdr, seg.path, idx) == nil && segmentVersion(hdr) == SegmentVersion
		}
		delete(l.segments, idx)
		if keep {
			seg.used = headerSize
			p := &prepared{idx: idx, done: make(chan struct{}), seg: seg}
			close(p.done)
			l.prep = p
			continue
		}
		seg.f.Close()
		seg.f = nil
		if err := l.fs.Remove(seg.path); err != nil {
			return fmt.Errorf("wal: remove unused segment %s: %w", seg.path, err)
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("wal: sync %s: %w", l.dir, err)
		}
	}

	ts := l.segments[tail]
	if repairAt >= 0 {
		if err := writeZeros(ts.f, repairAt, repairTo); err != nil {
			return fmt.Errorf("wal: repair torn tail of %s: %w", ts.path, err)
		}
	}
	// The previous process may have died with writes it never managed to
	// sync: make what Open just read durable before anything depends on
	// it, and the directory entries with it.
	if err := ts.f.Sync(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", ts.path, err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: sync %s: %w", l.dir, err)
	}
	l.curCap = ts.capacity
	if ts.version < SegmentVersion {
		if tailEnd > headerSize {
			// Appending continues in a new segment, in the current format:
			// a segment is written in one format only.
			l.curCap = tailEnd
		} else {
			// An old-format segment that holds nothing, which must not stay
			// empty before a segment with records (Open would take it for
			// lost records): replace it by an empty one in the current format.
			ts.f.Close()
			ts.f = nil
			ns, err := l.createSegment(tail)
			if err != nil {
				return fmt.Errorf("wal: %w", err)
			}
			l.segments[tail] = ns
			ts = ns
			l.curCap = ts.capacity
		}
	}
	l.w = ts
	l.end = MakePos(tail, uint32(tailEnd))
	l.durable = l.end
	l.sealed, l.open = sealed, open
	return nil
}

// readSegment reads seg's whole file into *buf, growing it as needed.
func (l *Log) readSegment(seg *segment, buf *[]byte) ([]byte, error) {
	if int64(cap(*buf)) < seg.capacity {
		*buf = make([]byte, seg.capacity)
	}
	data := (*buf)[:seg.capacity]
	n, err := seg.f.ReadAt(data, 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == seg.capacity) {
		return nil, fmt.Errorf("wal: read %s: %w", seg.path, err)
	}
	return data, nil
}

// emptyFrom reports whether segments from..to hold nothing past their
// header: all zero bytes, so no record and no trace of one.
func (l *Log) emptyFrom(from, to uint32, buf *[]byte) (bool, error) {
	for idx := from; idx <= to && idx >= from; idx++ {
		seg := l.segments[idx]
		data, err := l.readSegment(seg, buf)
		if err != nil {
			return false, err
		}
		if int64(len(data)) > headerSize && !allZero(data[headerSize:]) {
			return false, nil
		}
	}
	return true, nil
}

// writeZeros overwrites [from, to) of f with zeros, a MiB at a time.
func writeZeros(f vfs.File, from, to int64) error {
	if to <= from {
		return nil
	}
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
