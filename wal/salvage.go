package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// SalvageOptions says which log Salvage repairs. The zero value of every
// field but Dir means its default.
type SalvageOptions struct {
	// FS is the file system. Defaults to vfs.OS.
	FS vfs.FS
	// Dir is the log directory. Required; it must exist.
	Dir string
	// Start is the position the log will be opened from, as given to Open
	// (a checkpoint's). Salvage refuses to cut off records before it: the
	// checkpoint relies on them, and Open would refuse the start.
	Start Pos
	// Now tells the time written in quarantine notes. Defaults to time.Now.
	Now func() time.Time
}

// SalvageReport says what Salvage changed.
type SalvageReport struct {
	// Cuts lists the damaged ranges Salvage zeroed, in log order; empty
	// when the log opened as it was (a torn tail included: Open discards
	// that by itself).
	Cuts []Cut
}

// Cut is a range of a segment that Salvage zeroed, and what it held.
type Cut struct {
	File     string // path of the segment
	From, To int64  // the byte range zeroed: from the bad frame to the segment's last non-zero byte
	Reason   string // what is wrong with the frame at From, as Open reported it
	// Frames counts the frames the range held: the bad one, and each valid
	// one found after it. Records counts the records among them, which the
	// log no longer has: the bad frame unless its length word said it was a
	// batch trailer, and the intact records the cut took with it.
	Frames, Records int
	// Quarantine is the path of the copy of the range's bytes, next to a
	// note (.txt) saying what they were.
	Quarantine string
}

// Salvage does the repair that Open refuses to do by itself: it cuts off
// damage in the log's last batch (a *CorruptionError with Salvageable set),
// the records in it being lost. It copies the damaged bytes into the log's
// quarantine directory with a note, zeroes them in the segment, which keeps
// its size, and syncs, and then checks that the log opens. A log that opens
// as it is is left alone; any other refusal of Open is returned, wrapped,
// with nothing changed.
//
// Salvage takes the log's lock, so it fails (with an error wrapping
// vfs.ErrLocked) while a Log is open on the directory. It replays nothing and
// changes nothing but the cut and the quarantine: leftover temporary files,
// unused segments and a torn tail stay for Open.
func Salvage(opts SalvageOptions) (SalvageReport, error) {
	o, err := Options{FS: opts.FS, Dir: opts.Dir}.withDefaults()
	if err != nil {
		return SalvageReport{}, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if _, err := o.FS.Stat(o.Dir); err != nil {
		return SalvageReport{}, fmt.Errorf("wal: salvage: %w", err)
	}
	lock, err := o.FS.Lock(filepath.Join(o.Dir, lockName))
	if err != nil {
		return SalvageReport{}, fmt.Errorf("wal: salvage: lock %s (is a Log open on it?): %w", o.Dir, err)
	}
	defer lock.Close()

	// inspect runs Open's recovery without writing anything and reports what
	// it refused to discard.
	inspect := func() (*tailDamage, error) {
		l := &Log{fs: o.FS, dir: o.Dir, segSize: o.SegmentSize, logger: slog.New(slog.DiscardHandler),
			segments: map[uint32]*segment{}, dry: true}
		defer l.closeFiles()
		err := l.recover(opts.Start, func(Pos, []byte) error { return nil })
		return l.damage, err
	}
	d, err := inspect()
	if err == nil {
		return SalvageReport{}, nil
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || !ce.Salvageable || d == nil {
		return SalvageReport{}, fmt.Errorf("wal: salvage: nothing changed, this is not damage Salvage cuts off "+
			"(only the log's last batch, after the start position): %w", err)
	}
	cut := Cut{File: d.seg.path, From: d.from, To: d.to, Reason: d.reason}
	cut.Frames, cut.Records = d.frames()
	// The copy first: the bytes are never destroyed before they are kept.
	if cut.Quarantine, err = quarantine(o.FS, o.Dir, d, now(), quarantineCut); err != nil {
		return SalvageReport{}, fmt.Errorf("wal: salvage: nothing changed: %w", err)
	}
	if err := zeroRange(o.FS, d.seg.path, d.from, d.to); err != nil {
		return SalvageReport{}, fmt.Errorf("wal: salvage: cut %s [%d, %d) (a copy is in %s): %w", d.seg.path, d.from, d.to, cut.Quarantine, err)
	}
	rep := SalvageReport{Cuts: []Cut{cut}}
	if _, err := inspect(); err != nil {
		return rep, fmt.Errorf("wal: salvage: cut %s [%d, %d), but the log still does not open: %w", d.seg.path, d.from, d.to, err)
	}
	return rep, nil
}

// zeroRange overwrites [from, to) of the file at path with zeros and syncs it.
func zeroRange(fsys vfs.FS, path string, from, to int64) error {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := writeZeros(f, from, to); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
