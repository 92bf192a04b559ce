package wal

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/okiba/okiba/internal/vfs"
)

// Dump prints the log in opts.Dir for humans: each segment's header, the
// offset and length of every frame, how the segment ends (cleanly, or at a
// bad frame and whether a valid one follows it), leftover temporary files
// and checkpoints. It only reads: it takes no lock, repairs nothing, and can
// run beside a live Log (whose unsynced tail it may then show as it is at
// that moment). It stops at the first write error to w.
func Dump(w io.Writer, opts Options) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	names, err := o.FS.ReadDir(o.Dir)
	if err != nil {
		return fmt.Errorf("wal: dump: %w", err)
	}
	p := &printer{w: w}
	p.printf("log %s\n", o.Dir)
	for _, name := range names {
		path := filepath.Join(o.Dir, name)
		if idx, ok := parseSegmentName(name); ok {
			dumpSegment(p, o, path, idx)
			continue
		}
		if pos, ok := parseCheckpointName(name); ok {
			data, err := vfs.ReadFile(o.FS, path)
			if err == nil {
				var payload []byte
				if payload, err = decodeCheckpoint(data, path, pos); err == nil {
					p.printf("%s  checkpoint at %v, %d payload bytes\n", name, pos, len(payload))
					continue
				}
			}
			p.printf("%s  checkpoint at %v: %v\n", name, pos, err)
			continue
		}
		if strings.HasSuffix(name, tmpExt) {
			p.printf("%s  leftover temporary file (a creation that did not finish)\n", name)
		}
		if name == quarantineDir {
			q, _ := o.FS.ReadDir(path)
			p.printf("%s/  %d files: copies of damaged bytes, each with a note (.txt) saying what they are\n", name, len(q))
		}
	}
	return p.err
}

func dumpSegment(p *printer, o Options, path string, idx uint32) {
	name := filepath.Base(path)
	data, err := vfs.ReadFile(o.FS, path)
	if err != nil {
		p.printf("%s  unreadable: %v\n", name, err)
		return
	}
	if err := checkSegmentHeader(data, path, idx); err != nil {
		p.printf("%s  %d bytes, bad header: %v\n", name, len(data), err)
		return
	}
	version := segmentVersion(data)
	p.printf("%s  segment %d, %d bytes, format version %d\n", name, idx, len(data), version)
	records, trailers := 0, 0
	sc, _ := scanFrames(data, version, func(off int64, payload []byte, trailer bool) error {
		if trailer {
			trailers++
			bytes, frames := trailerFields(payload)
			p.printf("  %10d  batch trailer: %d records in %d bytes\n", off, frames, bytes)
			return p.err
		}
		records++
		p.printf("  %10d  %8d bytes\n", off, len(payload))
		return p.err
	})
	if version >= 2 && sc.open > 0 && sc.reason == "" {
		p.printf("  %d records from offset %d on have no trailer: a batch whose trailer never reached the disk "+
			"(the next batch's trailer closes them)\n", sc.open, sc.sealed)
	}
	counts := fmt.Sprintf("%d records", records)
	if version >= 2 {
		counts += fmt.Sprintf(", %d batch trailers", trailers)
	}
	if sc.reason == "" {
		p.printf("  %s, clean end at offset %d, %d bytes free\n", counts, sc.end, int64(len(data))-sc.end)
		return
	}
	p.printf("  %s, then a bad frame at offset %d: %s", counts, sc.end, sc.reason)
	switch kind, detail := classifyDamage(data, version, sc.end); {
	case kind == damageMidLog:
		p.printf("; %s (corruption)\n", detail)
	case kind == damageLastBatch:
		p.printf("; %s (corruption in the last batch, if this is the last segment holding records: Open refuses, Salvage cuts it off)\n", detail)
	default:
		p.printf("; nothing valid follows (a torn tail if this is the last segment holding records)\n")
	}
}

// printer remembers the first write error so Dump can stop printing.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
