package wal_test

import (
	"context"
	"fmt"
	"os"

	"github.com/okiba/okiba/wal"
)

// Example shows the life of a log: recover from the latest checkpoint,
// append with group commit, checkpoint, and drop the segments the
// checkpoint made unnecessary.
func Example() {
	dir, _ := os.MkdirTemp("", "wal-example")
	defer os.RemoveAll(dir)
	opts := wal.Options{Dir: dir, SegmentSize: wal.MinSegmentSize}

	start, state, _, err := wal.LoadCheckpoint(nil, dir) // nil FS: the real one
	if err != nil {
		panic(err)
	}
	l, err := wal.Open(opts, start, func(pos wal.Pos, payload []byte) error {
		state = append(state, payload...) // rebuild state from the records
		return nil
	})
	if err != nil {
		panic(err)
	}

	var last wal.Ticket
	for _, msg := range []string{"a", "b", "c"} {
		_, t, err := l.Append([]byte(msg))
		if err != nil {
			panic(err)
		}
		state = append(state, msg...)
		last = t
	}
	// Waiting on the last ticket covers the earlier records.
	if err := last.Wait(context.Background()); err != nil {
		panic(err)
	}

	// Checkpoint the state as of End, then drop older segments.
	if err := wal.SaveCheckpoint(nil, dir, l.End(), state); err != nil {
		panic(err)
	}
	for _, s := range l.Segments() {
		if s.Index < l.End().Segment() {
			l.Remove(s.Index)
		}
	}
	// Where the end lies depends on how many commit cycles the appends took (each ends
	// with a trailer frame); that everything appended is durable does not.
	fmt.Printf("state %q, durable through the end: %v\n", state, l.Durable() == l.End())
	l.Close()
	// Output: state "abc", durable through the end: true
}
