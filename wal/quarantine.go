package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// quarantineDir, inside the log directory, keeps copies of damaged bytes of
// the log's last batch: <segment file>-<offset>.bin holds the bytes from the
// bad frame at that offset to the segment's last non-zero byte, and
// <segment file>-<offset>.txt says what they are and what happened to them
// (<offset>.<n> for later, different bytes found at the same offset).
// Recovery ignores the directory; nothing in the log refers to it.
const quarantineDir = "quarantine"

// Why a quarantine copy was made.
const (
	quarantineRefused = iota // Open refused to start; the segment still holds the bytes
	quarantineCut            // Salvage zeroed the bytes in the segment; the copy is all that is left
)

// quarantine copies d's bytes into the quarantine directory of the log in
// dir, with their note, durably (each file is written, fsynced, renamed and
// its directory fsynced), and returns the copy's path. Quarantining the same
// damage again (Open refusing on every start, then Salvage) replaces the
// files; other bytes found at the same place later (damage in a batch written
// where Salvage cut an earlier one) get a name of their own, <offset>.<n>, so
// that no copy is ever overwritten with something else.
func quarantine(fsys vfs.FS, dir string, d *tailDamage, now time.Time, why int) (string, error) {
	qdir := filepath.Join(dir, quarantineDir)
	if err := fsys.MkdirAll(qdir, vfs.DirMode); err != nil {
		return "", fmt.Errorf("quarantine: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil { // the new directory's entry
		return "", fmt.Errorf("quarantine: sync %s: %w", dir, err)
	}
	data := d.data[d.from:d.to]
	base := fmt.Sprintf("%s-%d", filepath.Base(d.seg.path), d.from)
	for n := 1; ; n++ {
		kept, err := vfs.ReadFile(fsys, filepath.Join(qdir, base+".bin"))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && bytes.Equal(kept, data)) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("quarantine: %w", err)
		}
		base = fmt.Sprintf("%s-%d.%d", filepath.Base(d.seg.path), d.from, n)
	}
	bin := filepath.Join(qdir, base+".bin")
	if err := vfs.WriteFile(fsys, bin, vfs.FileMode, data); err != nil {
		return "", fmt.Errorf("quarantine: %w", err)
	}
	frames, records := d.frames()
	var note strings.Builder
	fmt.Fprintf(&note, "okiba log quarantine\n\n")
	fmt.Fprintf(&note, "file:    %s\n", d.seg.path)
	fmt.Fprintf(&note, "bytes:   [%d, %d), %d bytes, copied to %s\n", d.from, d.to, d.to-d.from, filepath.Base(bin))
	fmt.Fprintf(&note, "frames:  %d from the damaged one on, %d of them records\n", frames, records)
	fmt.Fprintf(&note, "damage:  %s\n", d.reason)
	switch why {
	case quarantineRefused:
		fmt.Fprintf(&note, "status:  %s: Open refused to start rather than discard these bytes; the segment still holds them.\n"+
			"         To accept losing these records, cut them off with Salvage (okiba salvage DATA-DIR on a broker's data directory).\n",
			now.UTC().Format(time.RFC3339))
	case quarantineCut:
		fmt.Fprintf(&note, "status:  %s: Salvage zeroed these bytes in the segment; this copy is all that is left of them.\n",
			now.UTC().Format(time.RFC3339))
	}
	if err := vfs.WriteFile(fsys, filepath.Join(qdir, base+".txt"), vfs.FileMode, []byte(note.String())); err != nil {
		return "", fmt.Errorf("quarantine: %w", err)
	}
	return bin, nil
}

// frames counts the frames in the damaged range: the bad one at from, and
// every valid frame found after it, resynchronising at each 8-byte boundary
// after a slot that is not one. records counts the records among them, the
// bad frame included unless its length word says it is a trailer.
func (d *tailDamage) frames() (frames, records int) {
	seg, version := d.data, d.seg.version
	frames = 1
	if version < 2 || binary.LittleEndian.Uint32(seg[d.from:])&trailerFlag == 0 {
		records = 1
	}
	for off := d.from; ; {
		next, ok := validFrameAfter(seg, version, off)
		if !ok || next >= d.to {
			return frames, records
		}
		for next < d.to {
			_, after, st := decodeFrame(seg, next, version)
			if st != frameValid && st != frameTrailer {
				break
			}
			frames++
			if st == frameValid {
				records++
			}
			next = after
		}
		off = next
	}
}
