package broker

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// Salvage repairs the log of the data directory dir after Open refused it for damage
// in the log's last batch (a *wal.CorruptionError with Salvageable set): it runs
// wal.Salvage on the directory's log, starting from the latest checkpoint's position,
// so that the records it cuts off are ones the checkpoint does not cover. It copies
// what it cuts to the log's quarantine directory, and reports what it cut; a log that
// opens as it is is left alone. No broker may hold dir meanwhile: Salvage takes the
// data directory's lock (ErrLocked) and the log's. fsys nil means vfs.OS.
func Salvage(fsys vfs.FS, dir string) (wal.SalvageReport, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	logDir := filepath.Join(dir, "wal")
	if _, err := fsys.Stat(logDir); err != nil {
		return wal.SalvageReport{}, fmt.Errorf("%s holds no okiba log: %w", dir, err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return wal.SalvageReport{}, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return wal.SalvageReport{}, fmt.Errorf("lock data directory: %w", err)
	}
	defer lock.Close()
	start, _, _, err := wal.LoadCheckpoint(fsys, filepath.Join(dir, "checkpoints"))
	if err != nil {
		return wal.SalvageReport{}, fmt.Errorf("load checkpoint: %w", err)
	}
	return wal.Salvage(wal.SalvageOptions{FS: fsys, Dir: logDir, Start: start})
}
