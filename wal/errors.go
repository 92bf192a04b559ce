package wal

import (
	"errors"
	"fmt"
	"path/filepath"
)

var (
	// ErrFailed is wrapped by every error a Log returns after a write, an
	// fsync or a segment creation failed. The failure is permanent: after
	// a failed fsync the kernel may have dropped the dirty pages, so no
	// later success can prove the data durable. The only way on is to
	// close the Log and open it again, which replays what really is on
	// disk.
	ErrFailed = errors.New("wal: log failed")

	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("wal: log closed")

	// ErrEmptyRecord is returned by Append for an empty payload: a zero
	// length word marks the end of a segment, so it cannot be a record.
	ErrEmptyRecord = errors.New("wal: empty record")

	// ErrRecordTooLarge is returned by Append for a payload whose frame
	// does not fit in an empty segment; see Log.MaxRecordSize.
	ErrRecordTooLarge = errors.New("wal: record too large")

	// ErrNewerFormat is wrapped by Open, LoadCheckpoint and Dump when a
	// file was written by a newer format version than this binary
	// understands. Upgrade the binary; never edit the file.
	ErrNewerFormat = errors.New("wal: file has a newer format version")

	// ErrMissingSegment is wrapped by Open when a segment the log needs is
	// not in the directory: a gap between segments, or a start position
	// in a segment that does not exist.
	ErrMissingSegment = errors.New("wal: missing segment")

	// ErrBadStart is wrapped by Open when the start position does not
	// fall on a record boundary of the log, or lies beyond its valid end:
	// the checkpoint and the log disagree.
	ErrBadStart = errors.New("wal: start position does not match the log")

	// ErrNotFound is wrapped by ReadAt, WaitDurable and Remove for a
	// position or segment that the log does not hold: not appended yet,
	// or in a removed segment.
	ErrNotFound = errors.New("wal: not found")
)

// CorruptionError reports bytes on disk that cannot be a valid log or
// checkpoint and cannot be explained by an interrupted write. Open refuses
// to continue rather than silently drop acknowledged records; the package
// documentation ("Salvage") says what an operator can do.
type CorruptionError struct {
	File   string // path of the damaged file
	Offset int64  // byte offset of the first bad byte range found
	Reason string // what is wrong there
	// Salvageable reports damage in the log's last batch, which Salvage cuts
	// off (given the same start position as Open): the records of File from
	// Offset on are then lost, and the log opens.
	Salvageable bool
	// Quarantine is the path of the copy Open made of the damaged bytes of
	// the log's last batch, from Offset to the segment's last non-zero byte,
	// next to a note saying what they are; empty if it made none.
	Quarantine string
}

func (e *CorruptionError) Error() string {
	if filepath.Ext(e.File) == checkpointExt {
		return fmt.Sprintf("wal: corrupt checkpoint %s at offset %d: %s; to salvage, restore this file from a backup, "+
			"or delete it and open the log from the beginning if every segment is still present "+
			"(see the Salvage section of the wal package documentation)", e.File, e.Offset, e.Reason)
	}
	kept := ""
	if e.Quarantine != "" {
		kept = fmt.Sprintf("; a copy of the damaged bytes is in %s", e.Quarantine)
	}
	if e.Salvageable {
		return fmt.Sprintf("wal: corrupt log segment %s at offset %d: %s%s; this is the log's last batch: "+
			"restore this file from a backup, or accept losing its records from offset %d on and cut them off "+
			"with Salvage (okiba salvage DATA-DIR for a broker's data directory; "+
			"see the Salvage section of the wal package documentation)", e.File, e.Offset, e.Reason, kept, e.Offset)
	}
	return fmt.Sprintf("wal: corrupt log segment %s at offset %d: %s%s; to salvage, restore this file from a backup, "+
		"or (after copying the directory) zero it from offset %d to its end keeping its size, losing its records from that offset on "+
		"(see the Salvage section of the wal package documentation)", e.File, e.Offset, e.Reason, kept, e.Offset)
}
