package client

import (
	"context"
	"time"

	"github.com/okiba/okiba/api"
)

// groupBook is a group consumer's book of the partitions it holds: what is buffered of
// each, what runs, what has been handled and what committed. It decides and records; it
// does no I/O, starts no goroutine and reads no clock. The consumer starts a worker for
// each partition apply takes in, sends the commits toCommit collects, and passes it the
// times it needs. It is guarded by groupConsumer.mu.
type groupBook struct {
	session  string         // the member's session; "" before joining and once lost
	parts    map[int]*gpart // held, by partition: the state under the current epoch
	waiting  int            // records buffered, not started
	running  int
	draining bool
	// handled counts records handled since the commits were last collected, from
	// pendingSince (zero when none).
	handled      int
	pendingSince time.Time
	// failures is, per partition, how often the record at an offset failed: it outlives
	// an epoch, so a record that keeps failing while its partition comes and goes still
	// reaches MaxFailures.
	failures map[int]failCount
	// exited is, per partition, the exit of the newest worker started for it. A worker
	// waits for its predecessor's (gpart.prev) even when the book forgot the partition in
	// between (a commit found it moved, the session was lost), so that a partition's
	// records never run two at a time here.
	exited map[int]<-chan struct{}
}

type failCount struct {
	offset uint64
	n      int
}

// gpart is one partition held under one epoch. A partition that comes back (a new
// epoch: a seek, a rejoin, or a grant after it moved) gets a new gpart, whose worker waits
// for the old one's to return, so that the partition's records never run two at a time.
type gpart struct {
	partition int
	epoch     uint64
	buf       []TopicRecord // received, not started, in offset order
	pos       uint64        // the offset after the last record received: the broker's position
	done      uint64        // the offset after the last record handled: what to commit
	committed uint64        // what the broker has committed, as far as this process knows
	running   bool
	revoking  bool // the broker takes it back: finish, commit, call again
	gone      bool // it moved away: never handle or commit more of it
	halted    bool // a record was given up (the consumer stops): nothing after it may run
	stopped   bool // stop is closed

	stop   chan struct{} // closed when no more of its records will start here
	wake   chan struct{} // records arrived
	exited chan struct{} // closed when its worker has returned
	prev   <-chan struct{}
	// ctx is the context of its handlers: cancelled when it moves away, or by a hard
	// stop. Set by the consumer when it starts the worker.
	ctx    context.Context
	cancel context.CancelFunc
}

func newGroupBook() groupBook {
	return groupBook{parts: make(map[int]*gpart), failures: make(map[int]failCount), exited: make(map[int]<-chan struct{})}
}

// room is how many more records may be pulled when at most max are held.
func (b *groupBook) room(max int) int { return max - b.waiting - b.running }

// applied is what a pull or heartbeat's answer made of the book.
type applied struct {
	started []*gpart // taken in: start a worker for each
	lost    []*gpart // moved away
	// handedLost says that the broker handed this member records of these partitions it
	// never received (an answer lost on the way): the member must rejoin, so that they
	// are handed again; committing past them would skip them.
	handedLost []int
	// unrevoked says that the broker kept partitions it had been revoking (the member
	// they were to go to left first) after this member dropped what it had buffered of
	// them: the member must rejoin to be handed those records again.
	unrevoked []int
}

// newPart makes and holds the gpart of a's partition under a's epoch, with what is
// handled (done), committed and handed out (pos) of it so far; its worker starts after
// the partition's previous worker here has returned.
func (b *groupBook) newPart(a api.Assignment, done, committed, pos uint64) *gpart {
	np := &gpart{partition: a.Partition, epoch: a.Epoch, pos: pos, done: done, committed: committed,
		stop: make(chan struct{}), wake: make(chan struct{}, 1), exited: make(chan struct{}), prev: b.exited[a.Partition]}
	b.exited[a.Partition] = np.exited
	b.parts[a.Partition] = np
	return np
}

// apply takes in a pull's or heartbeat's answer: partitions granted (new epoch),
// revoked, kept after a revoke, and lost, then the records, each appended to its
// partition's buffer. It checks that every record handed out under an epoch reached
// this process: a record missing (an earlier answer lost on the way) must not be
// skipped by a later commit.
func (b *groupBook) apply(session string, assigned []api.Assignment, recs []TopicRecord) applied {
	var out applied
	b.session = session
	byPart := make(map[int]api.Assignment, len(assigned))
	for _, a := range assigned {
		byPart[a.Partition] = a
		p := b.parts[a.Partition]
		if p != nil && p.epoch == a.Epoch && !p.gone {
			if a.Committed > p.committed { // retention passed the group
				p.committed, p.done = a.Committed, max(p.done, a.Committed)
			}
			switch {
			case a.Revoking && !p.revoking:
				b.revoke(p)
			case !a.Revoking && p.revoking && !b.draining:
				// It stays here after all. Resumed where it stands when nothing of it was
				// dropped; else only a rejoin hands the dropped records again.
				if p.running || p.pos != p.done {
					out.unrevoked = append(out.unrevoked, a.Partition)
					continue
				}
				b.lose(p)
				out.started = append(out.started, b.newPart(a, p.done, p.committed, p.pos))
			}
			continue
		}
		if p != nil {
			b.lose(p)
			out.lost = append(out.lost, p)
			delete(b.parts, a.Partition)
		}
		if b.draining {
			continue // nothing more is handled: leave it to the heartbeats and the leave
		}
		np := b.newPart(a, a.Committed, a.Committed, a.Committed)
		if a.Revoking {
			b.revoke(np)
		}
		out.started = append(out.started, np)
	}
	for n, p := range b.parts {
		if _, ok := byPart[n]; !ok {
			b.lose(p)
			out.lost = append(out.lost, p)
			delete(b.parts, n)
		}
	}
	gap := make(map[int]bool)
	for _, r := range recs {
		p := b.parts[r.Partition]
		if p == nil || p.gone || r.Offset < p.pos || gap[r.Partition] {
			continue
		}
		if r.Offset > p.pos && r.Offset > byPart[r.Partition].Committed {
			// Records between were handed out and never arrived. What retention deleted
			// (below the broker's committed offset) is no gap.
			gap[r.Partition] = true
			continue
		}
		p.pos = r.Offset + 1
		if p.revoking || p.halted || b.draining {
			continue
		}
		p.buf = append(p.buf, r)
		b.waiting++
		kick(p.wake)
	}
	for _, a := range assigned {
		p := b.parts[a.Partition]
		switch {
		case p == nil || p.epoch != a.Epoch || b.draining:
			// Draining, nothing more starts: what is committed is what ran, so a cut
			// pull's records, never received, cannot be skipped.
		case gap[a.Partition]:
			out.handedLost = append(out.handedLost, a.Partition)
		case a.Position == p.pos:
		case a.Position > p.pos && a.Position == a.Committed:
			p.pos = a.Position // retention moved the group past what it had been handed
		default:
			out.handedLost = append(out.handedLost, a.Partition)
		}
	}
	return out
}

// next says what p's worker does: run r (which is now running), wait for records, or
// return (exit) because nothing more of p will run here.
func (b *groupBook) next(p *gpart) (r TopicRecord, run, exit bool) {
	if p.gone || p.revoking || p.halted || b.draining {
		return TopicRecord{}, false, true
	}
	if len(p.buf) == 0 {
		return TopicRecord{}, false, false
	}
	r = p.buf[0]
	p.buf[0] = TopicRecord{}
	p.buf = p.buf[1:]
	b.waiting--
	b.running++
	p.running = true
	return r, true, false
}

type recordOutcome uint8

const (
	recordHandled      recordOutcome = iota // the handler succeeded
	recordDeadLettered                      // written to the dead-letter queue, and committed past
	recordAbandoned                         // given up unfinished: the partition moved or the consumer stops
)

// finish records how p's running record r ended, at now.
func (b *groupBook) finish(p *gpart, r TopicRecord, out recordOutcome, now time.Time) {
	b.running--
	p.running = false
	if p.gone {
		return
	}
	switch out {
	case recordHandled, recordDeadLettered:
		p.done = max(p.done, r.Offset+1)
		if out == recordDeadLettered {
			p.committed = max(p.committed, r.Offset+1)
		}
		if f, ok := b.failures[p.partition]; ok && f.offset <= r.Offset {
			delete(b.failures, p.partition)
		}
		if p.done > p.committed {
			if b.handled == 0 {
				b.pendingSince = now
			}
			b.handled++
		}
	case recordAbandoned:
		// What follows it must not run: committing past it would skip it.
		p.halted = true
		b.dropBuffer(p)
	}
}

// failed counts a failure of the record at offset of p and returns how many it has had.
func (b *groupBook) failed(p *gpart, offset uint64) int {
	f := b.failures[p.partition]
	if f.offset != offset {
		f = failCount{offset: offset}
	}
	f.n++
	b.failures[p.partition] = f
	return f.n
}

// toCommit collects the offsets to commit: each partition's handled offset where it is
// past the committed one, with the partitions they are for.
func (b *groupBook) toCommit() ([]api.CommitOffset, []*gpart) {
	b.handled, b.pendingSince = 0, time.Time{}
	var offs []api.CommitOffset
	var ps []*gpart
	for _, p := range b.parts {
		if !p.gone && p.done > p.committed {
			offs = append(offs, api.CommitOffset{Partition: p.partition, Offset: p.done, Epoch: p.epoch})
			ps = append(ps, p)
		}
	}
	return offs, ps
}

// commitDue is when the handled records are to be committed: interval after the first
// of them, at once past records of them, or never (the zero time) when there are none.
func (b *groupBook) commitDue(interval time.Duration, records int) time.Time {
	switch {
	case b.handled == 0:
		return time.Time{}
	case b.handled >= records:
		return b.pendingSince
	}
	return b.pendingSince.Add(interval)
}

// uncommitted says whether handled records wait for a commit.
func (b *groupBook) uncommitted() bool {
	for _, p := range b.parts {
		if !p.gone && p.done > p.committed {
			return true
		}
	}
	return false
}

// revokeReady says whether any partition is being revoked, and whether every one that
// is has finished its running record, so that, once that is committed, the next call
// may let go of them.
func (b *groupBook) revokeReady() (revoking, ready bool) {
	ready = true
	for _, p := range b.parts {
		if p.revoking && !p.gone {
			revoking = true
			ready = ready && !p.running
		}
	}
	return revoking, ready
}

// revoke stops feeding p: what is buffered is dropped (the next owner is handed it),
// the running record finishes.
func (b *groupBook) revoke(p *gpart) {
	p.revoking = true
	b.dropBuffer(p)
	b.stopFeeding(p)
}

// lose drops p, which moved away: nothing more of it is handled or committed here, and
// its running handler's context is cancelled.
func (b *groupBook) lose(p *gpart) {
	p.gone = true
	b.dropBuffer(p)
	b.stopFeeding(p)
	if p.cancel != nil {
		p.cancel()
	}
}

// drop loses p and forgets it, as a commit that found it moved does.
func (b *groupBook) drop(p *gpart) {
	b.lose(p)
	if b.parts[p.partition] == p {
		delete(b.parts, p.partition)
	}
}

// sessionLost drops every partition: the broker no longer knows the member, which
// must rejoin (or, when the group is gone, stop).
func (b *groupBook) sessionLost() []*gpart {
	var lost []*gpart
	for n, p := range b.parts {
		b.lose(p)
		lost = append(lost, p)
		delete(b.parts, n)
	}
	b.session = ""
	return lost
}

// beginDrain stops every partition's feed: what is buffered is dropped, running records
// finish.
func (b *groupBook) beginDrain() {
	b.draining = true
	for _, p := range b.parts {
		b.dropBuffer(p)
		b.stopFeeding(p)
	}
}

func (b *groupBook) dropBuffer(p *gpart) {
	b.waiting -= len(p.buf)
	clear(p.buf)
	p.buf = nil
}

func (b *groupBook) stopFeeding(p *gpart) {
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
}
