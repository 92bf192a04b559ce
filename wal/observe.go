package wal

import "time"

// Observer receives a measurement of every group commit, for metrics (package metrics
// turns them into histograms). Set it in Options.Observer.
type Observer interface {
	// Committed is called by the committer (the flusher, or a waiter that ran the
	// commit itself) once a batch is durable and its waiters are woken, outside the
	// log's lock; calls for consecutive commits may overlap. It must be quick, safe
	// for concurrent use, and must not call the Log.
	Committed(c Commit)
}

// Commit describes one group commit.
type Commit struct {
	Records int // records in the batch
	Bytes   int // frame bytes written
	// Wait is the time from the batch's first append until the batch was durable: the
	// longest any appender of the batch waited for its record.
	Wait time.Duration
	// Write is the rest of the commit: writing the batch, and creating a segment if it
	// rolled to one that was not ready.
	Write time.Duration
	// Sync is the time spent in fsync (the batch's, and a rolled segment's if any).
	Sync time.Duration
}
