// Package wal is okiba's write-ahead log: one durable, segmented,
// group-committed log shared by all queues. Records are opaque byte slices
// here; what they mean is the caller's business.
//
// # Using it
//
// [Open] recovers the log (replaying records from a checkpoint's position
// on) and starts one flusher goroutine. [Log.Append] copies a record into
// the pending batch and returns its [Pos] and a [Ticket] at once; each batch
// is written with one fsync, one batch at a time, by the flusher or, when no
// commit is running, by the first goroutine that waits for it;
// [Ticket.Wait] returns when the record's batch is durable. [Log.ReadAt] reads a record back by position.
// [SaveCheckpoint] and [LoadCheckpoint] store the caller's checkpoint next to
// the log, and [Log.Remove] deletes segments the checkpoint made
// unnecessary.
//
// # Directory layout
//
//	wal.lock                         flock held by the open Log (and by Salvage)
//	00000001.wal, 00000002.wal, ...  segments, by index (8 lowercase hex digits)
//	00000003.wal.tmp                 a segment being created (removed by Open)
//	checkpoint-<16 hex>.ckpt         the latest checkpoint, named by position
//	quarantine/                      copies of damaged bytes (see Salvage), each
//	                                 <segment>-<offset>.bin with a note, .txt
//
// # Segment format (version 2)
//
// Every integer is little-endian; every checksum is CRC-32C (Castagnoli).
// A segment file is created at its full size (Options.SegmentSize,
// preallocated with zeros) and starts with a 32-byte header:
//
//	 0       8       12      16              24      28      32
//	+-------+-------+-------+---------------+-------+-------+
//	| magic |version| flags | segment index |  cap  |  crc  |
//	+-------+-------+-------+---------------+-------+-------+
//	 "OKIBALOG" u32=2  u32=0      u64         u32     u32: CRC of bytes [0, 28)
//
// cap is the size the file was preallocated to; a segment file shorter than its cap was
// cut by something outside okiba, and Open refuses it (0: unknown).
//
// Frames follow from offset 32, each starting at an 8-byte-aligned offset.
// A record:
//
//	+---------+---------+------------------------+-----------------+
//	| len u32 | crc u32 | payload (len bytes)    | zero padding    |
//	+---------+---------+------------------------+-----------------+
//	 crc = CRC-32C of the 4 len bytes followed by the payload
//	 padding brings the frame to a multiple of 8 bytes
//
// A batch trailer, 24 bytes, ends what each group commit wrote in the
// segment:
//
//	 0         4         8         12        16           24
//	+---------+---------+---------+---------+------------+
//	| len u32 | crc u32 |bytes u32|recs u32 | "BATCHEND" |
//	+---------+---------+---------+---------+------------+
//	 len = 1<<31 | 16 (the high bit marks a trailer; 16 is its payload length)
//	 crc = CRC-32C of the 4 len bytes followed by the 16 payload bytes
//	 bytes, recs = the size and the number of the records it closes: every
//	 frame since the previous trailer in the segment, or since the header
//
// len is never zero for a record (Append rejects empty payloads), so a zero
// length word followed by nothing but zeros marks the end of the used part
// of a segment. A segment ends when the next record and a trailer after it
// do not fit; the rest of the file stays zero and the next record starts the
// next segment at offset 32. A Pos is the segment index and the frame's offset
// in the file. Trailers are the log's own: Open does not pass them to replay,
// and ReadAt refuses their positions.
//
// Why trailers: a bad frame with nothing valid after it may be the end of a
// write cut short by a crash (never acknowledged, to be discarded) or an
// acknowledged record damaged since (bit rot, a bad sector: to be kept, and
// never silently dropped). Format 1 had no way to tell them apart and took
// both for the first. Every batch now ends with a frame that is written last,
// in the same write, and fsynced with the batch before any of its records is
// acknowledged; its last byte is never zero, and a single flipped bit cannot
// make it zero (each magic byte has at least two bits set). So a whole batch
// is recognisable on disk, damaged or not (see the recovery rules), at a cost
// of 24 bytes per group commit. A batch that crosses into a new segment puts a
// trailer at the end of its run in the old segment, which is fsynced before
// the new one gets anything, and one at the end of its run in the new.
// A sequence number was left out: nothing in recovery would check it that
// the segment index and the trailers' byte counts do not already pin down.
//
// Version 1 is the same without trailers: records only, and a segment ends
// when the next record does not fit. Open reads version 1 segments by the
// version 1 rules below, never appends to one (the next record after a
// version 1 segment starts a new segment, in version 2), and replaces an
// empty one that would be written to by an empty version 2 segment.
//
// A reader refuses a file whose version is newer than it knows
// ([SegmentVersion], [CheckpointVersion]), or whose flags it does not know,
// with [ErrNewerFormat]: flags are reserved for incompatible features.
//
// # Checkpoint format (version 1)
//
// A checkpoint file has a 40-byte header followed by the payload:
//
//	 0       8       12      16              24              32      36      40
//	+-------+-------+-------+---------------+---------------+-------+-------+
//	| magic |version| flags |      pos      |  payload len  |pay crc|hdr crc|
//	+-------+-------+-------+---------------+---------------+-------+-------+
//	 "OKIBACKP" u32=1  u32=0      u64             u64          u32     u32: CRC of [0, 36)
//
// # Durability protocol
//
//   - A segment is created as <name>.tmp, preallocated, given its header,
//     fsynced, renamed, and the directory fsynced, all before any record is
//     written into it. The log creates the next segment in the
//     background ahead of need (see Options.NoPrecreate), when there is
//     room for it (Options.Room); a creation ahead of need that is skipped
//     or fails is done again by the roll, and only a roll's failure fails
//     the log.
//   - A batch is written with positioned writes, its trailer last in each
//     segment, and made durable with one fdatasync. A batch that crosses
//     into a new segment fsyncs the old one before its first write to the
//     new one, so every segment that has a successor is complete on disk.
//   - Any failed write, fsync or segment creation at a roll fails the log for good:
//     waiters of every batch not yet durable, and every later call, get an
//     error wrapping [ErrFailed]. An fsync is never retried: after a failure
//     Linux may have dropped the dirty pages and a second fsync would
//     "succeed" without them (https://wiki.postgresql.org/wiki/Fsync_Errors).
//     Reopening the log replays what is really on disk.
//   - Checkpoints are written to a temporary file, fsynced, renamed and the
//     directory fsynced, and only then are older checkpoints removed.
//
// # Recovery rules (Open)
//
//   - Leftover <segment>.tmp files are removed. A missing segment between
//     two present ones fails with [ErrMissingSegment]. An empty directory
//     gets segment 1.
//   - Every segment's header is checked; a bad magic, checksum or index is a
//     [*CorruptionError], a newer version [ErrNewerFormat]. (One exception: a
//     segment after the last one holding records, that holds nothing but
//     zeros past its header, is unused and is dropped whatever its header.)
//   - Segments before the start position's are not scanned. From the start
//     segment on, frames are read in order and every valid record from the
//     start position on is passed to replay. The start position must be a
//     frame boundary (a record's, a trailer's, or the end) within the valid
//     log ([ErrBadStart]).
//   - A trailer must describe the records since the previous one; one that
//     does not is a bad frame. Records after the segment's last trailer
//     belong to a batch whose trailer never reached the disk: they are valid
//     records and are replayed, and the next batch's trailer closes them.
//   - A zero length word ends a segment only if every remaining byte of the
//     segment is zero. Otherwise, and for a length running past the end of
//     the segment, a checksum mismatch, non-zero padding or a malformed
//     trailer, the frame at that offset X is bad, and the rules below apply.
//   - Bad frame, and a later segment holds anything: the bad frame is in a
//     segment that was complete and synced before its successor was
//     written, so this is corruption, refused with a *CorruptionError
//     naming the file and X.
//   - Bad frame in the last segment holding anything, and a valid frame
//     starts at a later 8-byte-aligned offset of it: a write cut short
//     leaves nothing valid after the point it reached, so this is damage.
//     If a complete batch follows the one holding X (anything non-zero after
//     the first valid trailer after X) it is corruption in the middle of
//     the log; otherwise it is damage in the last batch (below).
//   - Bad frame in the last segment holding anything, nothing valid after
//     it, version 2: if the segment's last non-zero byte lies at or beyond
//     the end that X's length word gives its frame (a trailer's fixed size
//     for a trailer's length word), the frame was written whole, since a
//     write cut short leaves zeros from where it stopped: damage in the last
//     batch. That covers every flipped bit of the trailer that ends the log,
//     whose last byte is never zero.
//   - Damage in the last batch: Open refuses with a *CorruptionError whose
//     Salvageable is set, and first copies the bytes from X to the segment's
//     last non-zero byte to quarantine/ (Quarantine names the copy); it
//     changes nothing in the segment. [Salvage] cuts the damage off.
//   - Otherwise (nothing valid after X, and in version 2 the frame at X stops
//     short of its end, or X holds no length a frame could have) the bytes
//     from X on are the torn tail of a write that never completed (and so
//     was never acknowledged). Open logs a warning, overwrites the bytes
//     from X up to the last non-zero byte with zeros, fsyncs, and resumes
//     appending at X. In version 1 every bad frame with nothing valid after
//     it is taken for a torn tail.
//   - A start position beyond X means a checkpoint covers the frame at X,
//     so it was durable: in version 2 that is corruption (Salvageable unset,
//     since cutting the log there would leave the start beyond its end); in
//     version 1, ErrBadStart.
//   - An empty segment followed by one holding records means records are
//     missing, unless the first of those records (with a trailer after it,
//     in version 2) would not have fit in the empty one: refused. Empty
//     segments after the last one holding records (created ahead of need)
//     are fine; Open keeps the first as the next segment if it has the
//     current version, and removes any others.
//   - Before returning, Open fsyncs the last segment and the directory: a
//     previous process may have died with writes it never synced, and
//     nothing may be built on them until they are durable.
//
// What "torn" assumes: a write cut short leaves a prefix of what was
// written. If the device persisted a later part of an unsynced batch but not
// an earlier one, Open sees a valid frame, or bytes past a frame's end,
// after a bad one and refuses; the damage is then in the last batch, and
// Salvage loses only records that were never acknowledged, but telling that
// case apart from real damage is left to the operator. The converse blind
// spot: damage that leaves exactly what an interrupted write leaves (the
// last batch's trailer and the end of its last record zeroed together, or a
// write the device acknowledged and then lost) cannot be told from one, and
// is discarded as a torn tail.
//
// # Salvage
//
// When Open refuses with a *CorruptionError, the error names the file and the
// offset. Copy the whole directory first. Then, in order of preference:
//
//  1. Restore the named file from a backup or replica, if there is one.
//  2. Damage in the log's last batch (Salvageable set): [Salvage] cuts it off.
//     It takes the log's lock (so never while a Log has the directory open),
//     copies the bytes from the offset to the segment's last non-zero byte to
//     quarantine/<segment>-<offset>.bin with a note saying what they were,
//     zeroes them in the segment, which keeps its size, fsyncs, checks that the
//     log opens, and reports the file, the range and the frames and records
//     cut. Every record of that segment from the offset on is lost, intact
//     records of the same batch after the damaged one included; records of
//     the batch before it are kept, and the next batch's trailer closes them.
//     Damage in a trailer alone loses no record. For a broker's data
//     directory, okiba salvage DATA-DIR does this with the latest
//     checkpoint's position as the start: Salvage refuses to cut records that
//     a checkpoint covers, as Open would then refuse the start.
//  3. Other damage in a segment: zero the named file from the reported offset
//     to its end, keeping its size (for example: SIZE=$(stat -c %s FILE);
//     truncate -s OFFSET FILE; truncate -s $SIZE FILE). A zeroed tail is the
//     end of a segment, so Open then accepts it; every record from that offset
//     to the end of that file is lost. (A segment only truncated, shorter than
//     the size it was created with, is refused: the header records that size,
//     so a cut file is never mistaken for a complete one. A segment left with
//     no record at all while later segments hold some is refused too: then
//     only a backup helps.) Records in later segments are kept, so state
//     rebuilt from the log will miss only the truncated ones, which may leave
//     it inconsistent: prefer restoring a backup when the lost records matter.
//     If the latest checkpoint's position lies beyond the truncation, Open
//     reports ErrBadStart; remove the checkpoint too and replay from 0, which
//     needs every segment since the first.
//  4. For a corrupt checkpoint: restore it, or remove it and open the log
//     from position 0 if no segment has been removed since the log began.
//
// A missing segment (ErrMissingSegment) can only be restored; an ErrNewerFormat
// needs a newer binary.
package wal
