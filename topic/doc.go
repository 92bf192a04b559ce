// Package topic is okiba's topic semantics: a deterministic state machine over every
// topic of a broker — partitioned, append-only logs of records with dense offsets,
// retention by whole segments, publish dedup — with time passed in, like package queue,
// whose conventions it shares: commands take the time and a Sink, validate, decide,
// emit Records that describe the outcome and apply them; Apply replays records;
// Snapshot and Restore bound replay. No I/O, no goroutines, no locks.
//
// The machine holds no record's body. It knows, per partition, the log start and end
// offsets and one entry per segment (its first offset, record count, bytes and publish
// times), so its memory grows with segments, not records. Segment boundaries are
// semantic: a partition starts a new segment when its newest holds SegmentBytes or began
// SegmentAge ago, decided as each publish is applied, so every replica cuts the same
// segments and retention, which deletes whole segments, deletes the same records
// everywhere. Where the bodies lie is the node's business (Bodies, the payload store).
//
// Record kinds are 64..127; package queue's are below 64 and frames of the node's own
// from 128, so one log carries all three and its reader dispatches on the first byte.
package topic
