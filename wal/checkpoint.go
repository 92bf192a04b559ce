package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/okiba/okiba/internal/vfs"
)

const (
	checkpointMagic      = "OKIBACKP"
	checkpointPrefix     = "checkpoint-"
	checkpointExt        = ".ckpt"
	checkpointHeaderSize = 40
)

// checkpointName is "checkpoint-<pos as 16 hex digits>.ckpt": names sort by
// position, and the name alone says which is newest.
func checkpointName(pos Pos) string {
	return fmt.Sprintf("%s%016x%s", checkpointPrefix, uint64(pos), checkpointExt)
}

func parseCheckpointName(name string) (Pos, bool) {
	hex, ok := strings.CutPrefix(name, checkpointPrefix)
	if !ok {
		return 0, false
	}
	if hex, ok = strings.CutSuffix(hex, checkpointExt); !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return 0, false
	}
	return Pos(v), true
}

// SaveCheckpoint writes payload — its pieces one after the other, so that a
// large state need not be one buffer — as the checkpoint covering the log up to
// pos: pos is the position of the first record the checkpoint does not
// cover (typically Log.End read under the same lock as the state the
// payload captures), and Open(start = pos) replays exactly the records
// from pos on. The write is durable and atomic: a temporary file is written and fsynced,
// renamed to its final name, and the directory fsynced. Only then are
// older checkpoints (and leftover temporary files) removed, so a crash at
// any point leaves the previous checkpoint or the new one, both valid.
//
// If removing the older files fails, the error is returned but the new
// checkpoint is already durable. Calls must not run concurrently on one
// directory. The caller must make sure every record before pos is durable
// first (wait on the ticket of the last one, or see Log.Durable() >= pos),
// or the checkpoint may cover records a crash takes back.
func SaveCheckpoint(fsys vfs.FS, dir string, pos Pos, payload ...[]byte) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	path := filepath.Join(dir, checkpointName(pos))
	var size int64
	var sum uint32
	for _, p := range payload {
		size += int64(len(p))
		sum = crc32.Update(sum, castagnoli, p)
	}
	header := make([]byte, checkpointHeaderSize)
	copy(header, checkpointMagic)
	binary.LittleEndian.PutUint32(header[8:], CheckpointVersion)
	binary.LittleEndian.PutUint32(header[12:], 0) // flags
	binary.LittleEndian.PutUint64(header[16:], uint64(pos))
	binary.LittleEndian.PutUint64(header[24:], uint64(size))
	binary.LittleEndian.PutUint32(header[32:], sum)
	binary.LittleEndian.PutUint32(header[36:], crc32.Checksum(header[:36], castagnoli))

	if err := fsys.MkdirAll(dir, vfs.DirMode); err != nil {
		return fmt.Errorf("wal: save checkpoint: %w", err)
	}
	if err := vfs.WriteFile(fsys, path, vfs.FileMode, append([][]byte{header}, payload...)...); err != nil {
		return fmt.Errorf("wal: save checkpoint %s: %w", path, err)
	}

	names, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("wal: checkpoint %s saved, but listing older ones failed: %w", path, err)
	}
	var errs []error
	for _, name := range names {
		stale := false
		if p, ok := parseCheckpointName(name); ok && p < pos {
			stale = true
		} else if base, ok := strings.CutSuffix(name, tmpExt); ok {
			_, stale = parseCheckpointName(base)
		}
		if stale {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wal: checkpoint %s saved, but removing older ones failed: %w", path, err)
	}
	return nil
}

// LoadCheckpoint returns the newest checkpoint in dir, by position, and ok
// false if there is none (or no dir). A newest checkpoint that does not
// verify is an error naming the file (a *CorruptionError, or ErrNewerFormat):
// LoadCheckpoint never falls back to an older checkpoint or to replaying
// from the beginning on its own, because the segments those would need may
// have been removed already.
func LoadCheckpoint(fsys vfs.FS, dir string) (pos Pos, payload []byte, ok bool, err error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("wal: load checkpoint: %w", err)
	}
	found := false
	for _, name := range names {
		if p, ok := parseCheckpointName(name); ok && (!found || p > pos) {
			pos, found = p, true
		}
	}
	if !found {
		return 0, nil, false, nil
	}
	path := filepath.Join(dir, checkpointName(pos))
	data, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return 0, nil, false, fmt.Errorf("wal: load checkpoint: %w", err)
	}
	payload, err = decodeCheckpoint(data, path, pos)
	if err != nil {
		return 0, nil, false, err
	}
	return pos, payload, true, nil
}

// decodeCheckpoint verifies a checkpoint file and returns its payload.
func decodeCheckpoint(data []byte, path string, pos Pos) ([]byte, error) {
	corrupt := func(off int64, format string, args ...any) error {
		return &CorruptionError{File: path, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	if len(data) < checkpointHeaderSize {
		return nil, corrupt(0, "file is %d bytes, shorter than the %d-byte header", len(data), checkpointHeaderSize)
	}
	if string(data[:8]) != checkpointMagic {
		return nil, corrupt(0, "bad magic %q, want %q", data[:8], checkpointMagic)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v > CheckpointVersion {
		return nil, fmt.Errorf("%w: %s has format version %d, this binary supports up to version %d", ErrNewerFormat, path, v, CheckpointVersion)
	} else if crc, want := binary.LittleEndian.Uint32(data[36:]), crc32.Checksum(data[:36], castagnoli); crc != want {
		return nil, corrupt(0, "header checksum %#08x, want %#08x", crc, want)
	} else if v == 0 {
		return nil, corrupt(8, "format version 0")
	}
	if flags := binary.LittleEndian.Uint32(data[12:]); flags != 0 {
		return nil, fmt.Errorf("%w: %s has flags %#x, which format version %d does not define", ErrNewerFormat, path, flags, CheckpointVersion)
	}
	if p := Pos(binary.LittleEndian.Uint64(data[16:])); p != pos {
		return nil, corrupt(16, "header says position %v, the file name %v", p, pos)
	}
	if n := binary.LittleEndian.Uint64(data[24:]); n != uint64(len(data)-checkpointHeaderSize) {
		return nil, corrupt(24, "header says %d payload bytes, the file holds %d", n, len(data)-checkpointHeaderSize)
	}
	payload := data[checkpointHeaderSize:]
	if crc, want := binary.LittleEndian.Uint32(data[32:]), crc32.Checksum(payload, castagnoli); crc != want {
		return nil, corrupt(checkpointHeaderSize, "payload checksum %#08x, want %#08x", crc, want)
	}
	return payload, nil
}
