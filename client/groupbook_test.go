package client

import (
	"slices"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
)

// The group book is pure bookkeeping: these tests drive it as the group consumer's
// goroutines would, for the cases a real broker shows only in races (a partition flagged
// revoking, then kept) or after failures (an answer lost on the way).

func recs(partition int, offsets ...uint64) []TopicRecord {
	out := make([]TopicRecord, len(offsets))
	for i, o := range offsets {
		out[i] = TopicRecord{Partition: partition, Offset: o}
	}
	return out
}

// take runs p's buffered records as its worker would, each handled, and returns their
// offsets.
func take(b *groupBook, p *gpart) []uint64 {
	var got []uint64
	for {
		r, run, exit := b.next(p)
		if !run || exit {
			return got
		}
		got = append(got, r.Offset)
		b.finish(p, r, recordHandled, time.Unix(0, 0))
	}
}

func TestGroupBookHandsRecordsInOrderAndCommitsWhatWasHandled(t *testing.T) {
	b := newGroupBook()
	ap := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 3, Committed: 0}}, recs(0, 0, 1, 2))
	if len(ap.started) != 1 || len(ap.handedLost) != 0 || b.waiting != 3 {
		t.Fatalf("apply: %+v, waiting %d", ap, b.waiting)
	}
	p := ap.started[0]
	if got := take(&b, p); !slices.Equal(got, []uint64{0, 1, 2}) {
		t.Fatalf("ran %v", got)
	}
	offs, _ := b.toCommit()
	if len(offs) != 1 || offs[0] != (api.CommitOffset{Partition: 0, Offset: 3, Epoch: 1}) {
		t.Fatalf("to commit %+v", offs)
	}
}

// Records after a gap (an answer lost on the way: its records were handed out and never
// arrived) are not taken, and the partition is reported for a rejoin; records below the
// broker's committed offset (retention passed the group) are no gap.
func TestGroupBookSeesRecordsHandedOutAndNeverReceived(t *testing.T) {
	b := newGroupBook()
	ap := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 2}}, recs(0, 0, 1))
	p := ap.started[0]
	take(&b, p)
	// Offsets 2..4 were in the lost answer; this one hands 5 and 6.
	ap = b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 7}}, recs(0, 5, 6))
	if !slices.Equal(ap.handedLost, []int{0}) || b.waiting != 0 || p.pos != 2 {
		t.Fatalf("after a gap: handed lost %v, waiting %d, pos %d; want partition 0, none, 2", ap.handedLost, b.waiting, p.pos)
	}
	// No records, but the broker's position is past what arrived.
	b2 := newGroupBook()
	b2.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 0}}, nil)
	if ap := b2.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 4}}, nil); !slices.Equal(ap.handedLost, []int{0}) {
		t.Fatalf("position past what arrived: handed lost %v", ap.handedLost)
	}
	// Retention moved the committed offset (and the position) to 10.
	b3 := newGroupBook()
	b3.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 2}}, recs(0, 0, 1))
	if ap := b3.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 12, Committed: 10}}, recs(0, 10, 11)); len(ap.handedLost) != 0 || b3.waiting != 4 {
		t.Fatalf("after retention: handed lost %v, waiting %d", ap.handedLost, b3.waiting)
	}
	// While draining nothing more runs, so a cut pull's records cannot be skipped.
	b.beginDrain()
	if ap := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 9}}, nil); len(ap.handedLost) != 0 {
		t.Fatalf("draining: handed lost %v", ap.handedLost)
	}
}

// A revoked partition stops feeding (its buffer is dropped) and is ready to go once its
// running record is done. If the broker then keeps it, it resumes when nothing of it was
// dropped, and asks for a rejoin when something was.
func TestGroupBookRevokeAndKeep(t *testing.T) {
	b := newGroupBook()
	ap := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 3}}, recs(0, 0, 1, 2))
	p := ap.started[0]
	r, run, _ := b.next(p)
	if !run {
		t.Fatal("nothing to run")
	}
	b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 3, Revoking: true}}, nil)
	if revoking, ready := b.revokeReady(); !revoking || ready || b.waiting != 0 {
		t.Fatalf("revoking %v ready %v waiting %d; want revoking, not ready (a record runs), nothing buffered", revoking, ready, b.waiting)
	}
	select {
	case <-p.stop:
	default:
		t.Fatal("the worker was not told to stop")
	}
	b.finish(p, r, recordHandled, time.Unix(0, 0))
	if _, ready := b.revokeReady(); !ready {
		t.Fatal("not ready once the running record finished")
	}
	if _, _, exit := b.next(p); !exit {
		t.Fatal("the worker of a revoked partition goes on")
	}
	// Records 1 and 2 were dropped: keeping the partition needs a rejoin.
	if ap := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 3}}, nil); !slices.Equal(ap.unrevoked, []int{0}) {
		t.Fatalf("kept after dropping records: %+v", ap)
	}

	// Nothing dropped: it resumes under the same epoch, after the old worker.
	b = newGroupBook()
	ap = b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 1}}, recs(0, 0))
	p = ap.started[0]
	take(&b, p)
	b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 1, Revoking: true}}, nil)
	ap = b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 3}}, recs(0, 1, 2))
	if len(ap.unrevoked) != 0 || len(ap.started) != 1 || ap.started[0].prev != (<-chan struct{})(p.exited) {
		t.Fatalf("kept with nothing dropped: %+v", ap)
	}
	if got := take(&b, ap.started[0]); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("resumed with %v", got)
	}
}

// A partition that comes back to this member after the book forgot it (a commit found
// it moved, the session was lost) starts its worker after the old one's, never beside it.
func TestGroupBookNewWorkerWaitsForTheOldOneAcrossALostSession(t *testing.T) {
	b := newGroupBook()
	old := b.apply("1", []api.Assignment{{Partition: 0, Epoch: 1, Position: 1}}, recs(0, 0)).started[0]
	b.next(old) // running
	if lost := b.sessionLost(); len(lost) != 1 || !old.gone {
		t.Fatalf("session lost: %v", lost)
	}
	np := b.apply("2", []api.Assignment{{Partition: 0, Epoch: 2, Position: 1}}, recs(0, 0)).started[0]
	if np.prev != (<-chan struct{})(old.exited) {
		t.Fatal("the new worker does not wait for the old one")
	}
	b.drop(np) // a commit found it moved
	again := b.apply("2", []api.Assignment{{Partition: 0, Epoch: 3, Position: 0}}, nil).started[0]
	if again.prev != (<-chan struct{})(np.exited) {
		t.Fatal("the worker after a drop does not wait for the dropped one")
	}
}
