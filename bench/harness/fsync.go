package harness

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ProbeFsync measures the disk's own cost of a durable append: one record of
// payload bytes in okiba's log framing (an 8-byte header of length and CRC, padded to
// 8 bytes) written at the end of the previous one in a preallocated, already-synced
// file, then fdatasync, repeated for d. This is the floor under any broker's single
// synchronous publish on this disk.
func ProbeFsync(dir string, payload int, d time.Duration) (FsyncProbe, error) {
	const fileSize = 64 << 20
	path := filepath.Join(dir, fmt.Sprintf("fsync-probe-%d", payload))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return FsyncProbe{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, fileSize); err != nil {
		if err := f.Truncate(fileSize); err != nil {
			return FsyncProbe{}, err
		}
	}
	// Write the file once so that the probe overwrites allocated, written blocks, as a
	// preallocated log segment that is being reused would (and sync the metadata).
	zero := make([]byte, 1<<20)
	for off := int64(0); off < fileSize; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero, off); err != nil {
			return FsyncProbe{}, err
		}
	}
	if err := f.Sync(); err != nil {
		return FsyncProbe{}, err
	}
	frame := make([]byte, (8+payload+7)&^7)
	body := NewBody(payload, time.Now(), 0)
	binary.LittleEndian.PutUint32(frame, uint32(payload))
	binary.LittleEndian.PutUint32(frame[4:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	copy(frame[8:], body)
	var h Hist
	var off int64
	end := time.Now().Add(d)
	n := 0
	start := time.Now()
	for time.Now().Before(end) {
		if off+int64(len(frame)) > fileSize {
			off = 0
		}
		t := time.Now()
		if _, err := f.WriteAt(frame, off); err != nil {
			return FsyncProbe{}, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return FsyncProbe{}, err
		}
		h.Record(time.Since(t))
		off += int64(len(frame))
		n++
	}
	return FsyncProbe{RecordBytes: payload, Syncs: n, PerSec: float64(n) / time.Since(start).Seconds(), Latency: h.Summary()}, nil
}
