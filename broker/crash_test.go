package broker

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// Crash-point enumeration (ALICE-style, in process). A workload runs once against a
// fault-observing file system. Before every file-system operation that can change what
// is on disk, the test takes the disk as a power loss would leave it at that instant —
// in three variants: only what was fsynced; everything written so far; and, for a
// write, that write torn at a random byte — then recovers a broker from it and checks
// that every operation acknowledged before that instant is there: no acknowledged send
// lost, no acknowledged ack undone, no message that was never sent, no corrupt body, and
// leases (with their receipts) and delivery counts intact. Recovery must never refuse:
// a crash alone is not corruption.

// ledger records what the workload attempted and what the broker acknowledged, with the
// file-system operation count at acknowledgement: an operation acknowledged when the
// count was n is durable in every crash state taken before operation n+1.
type ledger struct {
	mu        sync.Mutex
	attempted map[string]bool        // bodies sent or about to be
	sent      map[string]int64       // body → ack seq of its send
	ids       map[string]uint64      // body → id
	acked     map[uint64]int64       // id → ack seq of its ack
	settleTry map[string]bool        // receipts with an attempted settle (ack/nack/deadletter)
	ackTry    map[uint64]bool        // ids with an attempted ack
	moveTry   map[uint64]bool        // ids with an attempted dead-letter
	leases    []leaseRecord          // acknowledged deliveries
	epochs    map[uint64]leaseRecord // latest acknowledged delivery per id
	history   map[uint64][]string    // what happened to each id, for failure messages
	deferred  map[uint64]int64       // id → ack seq of a defer never followed by a fetch
	fetched   int                    // deferred messages fetched by id
	// The parked group p/pk: the ack seq of the dead-lettering of its head (0: none yet),
	// the op count when its release by hand was attempted and when it was acknowledged.
	parkedAt, releaseTry, releasedAt int64
}

type leaseRecord struct {
	id       uint64
	receipt  string
	epoch    uint32
	deadline time.Time
	seq      int64
}

func newLedger() *ledger {
	return &ledger{attempted: map[string]bool{}, sent: map[string]int64{}, ids: map[string]uint64{},
		acked: map[uint64]int64{}, settleTry: map[string]bool{}, ackTry: map[uint64]bool{}, moveTry: map[uint64]bool{}, epochs: map[uint64]leaseRecord{}, history: map[uint64][]string{}, deferred: map[uint64]int64{}}
}

// crashWorkload drives a broker through sends, receives, acks, nacks, dead letters,
// defers and fetches of deferred messages by id, lease expiry, a checkpoint (with segment collection and compaction) and a redrive, recording
// everything in l. fs.Ops() stamps acknowledgements.
func crashWorkload(t *testing.T, b *Broker, clk *clock.Fake, fs *vfs.Faulty, l *ledger, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	stamp := func() int64 { return fs.Ops() }
	mustQueue(t, b, "q", func(c *queue.Config) { c.MaxDeliveries = 3; c.Retention = 0 })
	mustQueue(t, b, "p", func(c *queue.Config) {
		c.OrderedGroups = true
		c.OnDeadLetter = queue.ParkGroup
		c.MaxDeliveries = 0
		c.Retention = 0
	})
	mustQueue(t, b, "g", func(c *queue.Config) {
		c.MaxDeliveries = 0
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.Retention = 0
	})
	n := 0
	body := func(q string) []byte {
		n++
		// 56 KiB bodies fill 2 MiB segments within the workload, so that segment rolls,
		// collection and compaction are among the crash points.
		s := fmt.Sprintf("%s-%04d-", q, n)
		return []byte(s + strings.Repeat(string(rune('a'+n%26)), 56<<10-len(s)))
	}
	send := func(q string, k int, group string) {
		in := make([]queue.SendInput, k)
		l.mu.Lock()
		for i := range in {
			bd := body(q)
			l.attempted[string(bd)] = true
			in[i] = queue.SendInput{Payload: queue.Payload{Body: bd, Group: group}, Delay: -1}
		}
		l.mu.Unlock()
		res, err := b.Send(ctx, q, in)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		s := stamp()
		l.mu.Lock()
		for i, r := range res {
			if r.Err == nil {
				l.sent[string(in[i].Payload.Body)] = s
				l.ids[string(in[i].Payload.Body)] = r.ID
			}
		}
		l.mu.Unlock()
	}
	receive := func(q string, max int, vis time.Duration) []Message {
		ms, err := b.Receive(ctx, q, ReceiveOptions{Max: max, Visibility: vis})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		s := stamp()
		l.mu.Lock()
		for _, m := range ms {
			lr := leaseRecord{id: m.ID, receipt: m.Receipt, epoch: m.Deliveries, deadline: m.LeaseDeadline, seq: s}
			l.history[m.ID] = append(l.history[m.ID], fmt.Sprintf("recv(%s,%d)@%d", q, m.Deliveries, s))
			l.leases = append(l.leases, lr)
			if q == "q" {
				l.epochs[m.ID] = lr
			}
		}
		l.mu.Unlock()
		return ms
	}
	settle := func(q string, ms []Message, op string) {
		if len(ms) == 0 {
			return
		}
		rs := make([]string, len(ms))
		l.mu.Lock()
		for i, m := range ms {
			rs[i] = m.Receipt
			l.settleTry[m.Receipt] = true
			if op == "deadletter" {
				l.moveTry[m.ID] = true
			}
			if op == "ack" {
				l.ackTry[m.ID] = true
			}
		}
		l.mu.Unlock()
		var errs []error
		var err error
		switch op {
		case "ack":
			errs, err = b.Ack(ctx, q, rs)
		case "nack":
			errs, err = b.Nack(ctx, q, rs, 0)
		case "deadletter":
			errs, err = b.DeadLetter(ctx, q, rs, "poison", "")
		case "defer":
			errs, err = b.Defer(ctx, q, rs)
		}
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		s := stamp()
		l.mu.Lock()
		for i, e := range errs {
			l.history[ms[i].ID] = append(l.history[ms[i].ID], fmt.Sprintf("%s@%d:%v", op, s, e))
		}
		l.mu.Unlock()
		if op == "ack" || op == "defer" {
			l.mu.Lock()
			for i, e := range errs {
				if e == nil && op == "ack" {
					l.acked[ms[i].ID] = s
				}
				if e == nil && op == "defer" {
					l.deferred[ms[i].ID] = s
				}
			}
			l.mu.Unlock()
		}
	}
	// fetch takes deferred messages of q again by id, leased as a receive leases.
	fetch := func(ms []Message, vis time.Duration) []Message {
		if len(ms) == 0 {
			return nil
		}
		ids := make([]uint64, len(ms))
		l.mu.Lock()
		for i, m := range ms {
			ids[i] = m.ID
			delete(l.deferred, m.ID) // from now on it may be leased or deferred again
		}
		l.mu.Unlock()
		res, err := b.ReceiveDeferred(ctx, "q", ids, vis)
		if err != nil {
			t.Fatalf("receive deferred: %v", err)
		}
		s := stamp()
		var out []Message
		l.mu.Lock()
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("fetch of deferred %s: %v", queue.FormatID(ids[i]), r.Err)
			}
			m := r.Message
			lr := leaseRecord{id: m.ID, receipt: m.Receipt, epoch: m.Deliveries, deadline: m.LeaseDeadline, seq: s}
			l.history[m.ID] = append(l.history[m.ID], fmt.Sprintf("fetch(%d)@%d", m.Deliveries, s))
			l.leases = append(l.leases, lr)
			l.epochs[m.ID] = lr
			l.fetched++
			out = append(out, m)
		}
		l.mu.Unlock()
		return out
	}

	for round := 0; round < 14; round++ {
		k, op := 1+rng.IntN(3), rng.IntN(5)
		if round == 0 {
			k, op = 3, 4 // every seed defers, and fetches one of three again
		}
		send("q", k, "")
		send("g", 2, fmt.Sprintf("k%d", rng.IntN(3)))
		ms := receive("q", 3, time.Duration(5+rng.IntN(20))*time.Second)
		switch op {
		case 0:
			settle("q", ms, "ack")
		case 1:
			settle("q", ms, "nack")
		case 2:
			settle("q", ms[:len(ms)/2], "deadletter")
			settle("q", ms[len(ms)/2:], "ack")
		case 3: // leave them leased; some expire below
		case 4: // defer them; fetch half again (left leased: some expire back to deferred)
			settle("q", ms, "defer")
			fetch(ms[:len(ms)/2], time.Duration(5+rng.IntN(20))*time.Second)
		}
		switch round {
		case 1, 5, 8, 12: // the group pk: its head dead-lettered parks it; sends join its tail
			send("p", 2, "pk")
		}
		if round == 2 {
			head := receive("p", 1, time.Minute)
			if len(head) != 1 {
				t.Fatalf("the head of p/pk: %d messages", len(head))
			}
			errs, err := b.DeadLetter(ctx, "p", []string{head[0].Receipt}, "poison", "")
			if err != nil || errs[0] != nil {
				t.Fatalf("dead-letter the head of p/pk: %v %v", err, errs)
			}
			l.mu.Lock()
			l.parkedAt = stamp()
			l.mu.Unlock()
		}
		if round == 3 || round == 10 {
			if ms := receive("p", 5, time.Minute); len(ms) != 0 {
				t.Fatalf("round %d: a receive took %d messages of the parked group", round, len(ms))
			}
		}
		if round == 11 {
			l.mu.Lock()
			l.releaseTry = stamp()
			l.mu.Unlock()
			if err := b.ReleaseGroup(ctx, "p", "pk"); err != nil {
				t.Fatalf("release p/pk: %v", err)
			}
			l.mu.Lock()
			l.releasedAt = stamp()
			l.mu.Unlock()
		}
		settle("g", receive("g", 2, time.Minute), "ack")
		if round%4 == 3 {
			clk.Advance(15 * time.Second) // expire some leases: redelivery, max_deliveries
		}
		if round == 6 {
			if err := b.Checkpoint(ctx); err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
		}
		if round == 9 {
			if _, err := b.StartRedrive(ctx, queue.RedriveSpec{Source: "q-dlq"}); err != nil {
				t.Fatalf("redrive: %v", err)
			}
		}
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if l.fetched == 0 || len(l.deferred) == 0 {
		t.Fatalf("seed %d: the workload left %d deferred and fetched %d: pick a seed that does both", seed, len(l.deferred), l.fetched)
	}
}

// verifyRecovered opens a broker on a crashed disk and checks it against what was
// acknowledged before the crash (ack stamps below limit).
func verifyRecovered(what string, disk *vfs.MemFS, now time.Time, l *ledger, limit int64) (err error) {
	b, err := Open(Config{Dir: "/data", FS: disk, Clock: clock.NewFake(now), SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true})
	if err != nil {
		return fmt.Errorf("%s: recovery refused a crashed (not corrupted) disk: %w", what, err)
	}
	defer b.Close()
	return verifyBroker(what, b, now, l, limit, false)
}

// verifyBroker checks a recovered broker against the ledger. With damaged, a body that
// fails its checksum is accepted as not served (never wrong data), but the message must
// still be there.
func verifyBroker(what string, b *Broker, now time.Time, l *ledger, limit int64, damaged bool) (err error) {
	fail := func(format string, args ...any) error { return fmt.Errorf(what+": "+format, args...) }
	l.mu.Lock()
	defer l.mu.Unlock()

	// Every message now in any queue, by body, taken in one critical section: the
	// recovered broker's redrive may be moving messages between queues meanwhile.
	present := map[string]PeekedMessage{}
	b.mu.Lock()
	var all []queue.MessageInfo
	for _, qi := range b.m.Queues("") {
		ms, err := b.m.Peek(b.nowLocked(), qi.Name, 0, 1<<30)
		if err != nil {
			b.mu.Unlock()
			return fail("peek %s: %v", qi.Name, err)
		}
		all = append(all, ms...)
	}
	pin := b.store.Pin(infoRefs(all))
	parkedGroups, perr := b.m.Parked("p")
	b.mu.Unlock()
	defer pin.Release()
	if perr != nil && !errors.Is(perr, queue.ErrQueueNotFound) { // not made yet: parked nothing
		return fail("parked groups of p: %v", perr)
	}
	// A parked group stays parked until its release is acknowledged, and is released
	// once it is.
	isParked := len(parkedGroups) == 1 && parkedGroups[0].Group == "pk"
	switch {
	case l.parkedAt != 0 && l.parkedAt < limit && (l.releaseTry == 0 || limit <= l.releaseTry) && !isParked:
		return fail("the group p/pk, parked at %d, is not parked after the crash (%+v)", l.parkedAt, parkedGroups)
	case l.releasedAt != 0 && l.releasedAt < limit && isParked:
		return fail("the group p/pk, released at %d, is parked after the crash", l.releasedAt)
	}
	unreadable := map[uint64]bool{}
	for i, mi := range all {
		p, err := pin.Body(i, mi.ID)
		var ce *wal.CorruptionError
		if err != nil && damaged && errors.As(err, &ce) {
			unreadable[mi.ID] = true // refused, not served: the message is still accounted for
			continue
		}
		if err != nil {
			return fail("message %s: %v", queue.FormatID(mi.ID), err)
		}
		m := PeekedMessage{MessageInfo: mi, Payload: p}
		bd := string(p.Body)
		if !l.attempted[bd] {
			return fail("message %s was never sent (body %.20q…)", queue.FormatID(m.ID), bd)
		}
		if other, dup := present[bd]; dup {
			return fail("body %.20q is in two messages (%s and %s)", bd, queue.FormatID(other.ID), queue.FormatID(m.ID))
		}
		present[bd] = m
	}
	for bd, s := range l.sent {
		if s >= limit {
			continue // not yet acknowledged at the crash
		}
		id := l.ids[bd]
		m, here := present[bd]
		if a, ok := l.acked[id]; ok && a < limit {
			if here {
				return fail("message %s came back after its ack was acknowledged", queue.FormatID(id))
			}
			continue
		}
		if !here && unreadable[id] {
			continue
		}
		if !here && !l.ackTry[id] { // an attempted ack may have taken effect
			var where []string
			for bd2, m2 := range present {
				where = append(where, fmt.Sprintf("%.7s=%s/%s", bd2, queue.FormatID(m2.ID), m2.State))
			}
			slices.Sort(where)
			return fail("acknowledged send %s (%.12q) at %d lost (history %v; present: %s)", queue.FormatID(id), bd, s, l.history[id], strings.Join(where, "; "))
		}
		if here && m.ID != id {
			return fail("message %.12q has id %s, acknowledged as %s", bd, queue.FormatID(m.ID), queue.FormatID(id))
		}
	}
	// A defer acknowledged (and never followed by a fetch) leaves the message deferred.
	for id, s := range l.deferred {
		if s >= limit {
			continue
		}
		m, here := present[string(bodyOf(l, id))]
		if !here && unreadable[id] {
			continue // its body failed its checksum (a flipped bit): refused, still accounted for
		}
		if !here || m.State != queue.StateDeferred {
			return fail("message %s deferred at %d is %v after the crash (history %v)", queue.FormatID(id), s, m.State, l.history[id])
		}
	}
	// Delivery counts never go back, and leases survive with their receipts.
	for _, lr := range l.epochs {
		if lr.seq >= limit || l.moveTry[lr.id] || lr.epoch >= 3 {
			continue // not acknowledged yet, or it may have moved queues (count restarts)
		}
		var m *PeekedMessage
		for _, x := range present {
			if x.ID == lr.id {
				m = &x
				break
			}
		}
		if m == nil || (m.Dead != nil) {
			continue
		}
		if m.Deliveries < lr.epoch {
			return fail("message %s delivered %d times before the crash, %d after", queue.FormatID(lr.id), lr.epoch, m.Deliveries)
		}
	}
	var live []leaseRecord
	for _, lr := range l.leases {
		latest, ok := l.epochs[lr.id]
		if lr.seq < limit && !l.settleTry[lr.receipt] && ok && latest.receipt == lr.receipt && lr.deadline.After(now) && !l.moveTry[lr.id] {
			live = append(live, lr)
		}
	}
	for _, lr := range live {
		if _, gone := present[string(bodyOf(l, lr.id))]; !gone {
			continue // dead-lettered by the broker itself, or redriven
		}
		errs, err := b.Ack(ctx, "q", []string{lr.receipt})
		if err != nil {
			return fail("ack after recovery: %v", err)
		}
		if errs[0] != nil && !errors.Is(errs[0], queue.ErrReceiptStale) {
			return fail("receipt of a live lease: %v", errs[0])
		}
		if errs[0] != nil {
			// Stale is right only if the broker itself ended the lease (max_deliveries,
			// a redrive moved it): both mean the message left q.
			if p := present[string(bodyOf(l, lr.id))]; p.Dead == nil && p.State == queue.StateInFlight {
				return fail("lease on %s (epoch %d, deadline %v) did not survive the crash: %v", queue.FormatID(lr.id), lr.epoch, lr.deadline, errs[0])
			}
		}
	}
	return nil
}

func bodyOf(l *ledger, id uint64) []byte {
	for bd, x := range l.ids {
		if x == id {
			return []byte(bd)
		}
	}
	return nil
}

func TestCrashAtEveryFileSystemOperation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: storage fault injection runs in its own tier (make storage)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OKIBA_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (set OKIBA_CRASH_SEED to replay)", seed)
	mem := vfs.NewMemFS()
	l := newLedger()
	clk := fakeClock()
	rng := rand.New(rand.NewPCG(seed, 11))
	var mu sync.Mutex
	var failure error
	var opsSeen []string
	points, torn := 0, 0
	mutating := map[vfs.Op]bool{vfs.OpWrite: true, vfs.OpSync: true, vfs.OpSyncDir: true, vfs.OpRename: true,
		vfs.OpRemove: true, vfs.OpCreate: true, vfs.OpTruncate: true, vfs.OpPreallocate: true}
	var fs *vfs.Faulty
	// The hook runs on the broker's goroutines (the flusher, the checkpointer): it must not
	// call t.Fatal. The first failure is kept, and from then on every operation fails, so
	// the workload stops at once.
	check := func(e vfs.Event) error {
		if !mutating[e.Op] {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if failure != nil {
			return failure
		}
		opsSeen = append(opsSeen, e.Op.String()+" "+filepath.Base(e.Name))
		now := clk.Now()
		limit := e.Seq // acknowledged before this operation began
		points++
		verify := func(what string, disk *vfs.MemFS) {
			if failure == nil {
				failure = verifyRecovered(fmt.Sprintf("crash before op %v (%s)", e, what), disk, now, l, limit)
			}
		}
		verify("synced only", mem.Crash())
		// Everything written survives (the disk kept unsynced pages too).
		verify("all written", mem.CrashWith(func(_ string, _, cur []byte) []byte { return cur }))
		if e.Op == vfs.OpWrite && len(e.Data) > 1 {
			cut := 1 + rng.IntN(len(e.Data)-1)
			data := slices.Clone(e.Data[:cut])
			off := e.Offset
			disk := mem.CrashWith(func(name string, synced, cur []byte) []byte {
				if name != e.Name {
					return synced
				}
				out := slices.Clone(cur)
				if need := off + int64(len(data)); int64(len(out)) < need {
					out = append(out, make([]byte, need-int64(len(out)))...)
				}
				copy(out[off:], data)
				return out
			})
			torn++
			verify(fmt.Sprintf("torn at byte %d", cut), disk)
		}
		return failure
	}
	fs = vfs.NewFaulty(mem, nil)
	b, err := Open(Config{Dir: "/data", FS: fs, Clock: clk, SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true, CacheBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	fs.SetHook(check)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if failure != nil {
			t.Fatalf("seed %d: %v", seed, failure)
		}
	}()
	crashWorkload(t, b, clk, fs, l, seed)
	// Let the redrive finish and the last tick land, then close (a final checkpoint).
	testkit.Eventually(t, 20*time.Second, func() bool {
		b.mu.Lock()
		running := len(b.m.RunningTasks())
		b.mu.Unlock()
		if running == 0 {
			return true
		}
		clk.Advance(100 * time.Millisecond) // the task's next step, looked at on the next poll
		return false
	}, "the redrive to finish")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	fs.SetHook(nil)
	if err := verifyRecovered("after a clean close", mem.Crash(), clk.Now(), l, fs.Ops()+1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	segs := map[string]bool{}
	for _, p := range opsSeen {
		segs[p] = true
	}
	t.Logf("crash points checked: %d (each synced-only and all-written), torn writes: %d, acknowledged sends: %d, acks: %d; files touched: %v",
		points, torn, len(l.sent), len(l.acked), slices.Sorted(maps.Keys(segs)))
	mu.Unlock()
	if points < 100 {
		t.Fatalf("only %d crash points: the workload no longer exercises the disk", points)
	}
}

// Bit flips anywhere in the log's segments and checkpoints: recovery either refuses,
// naming the file (and, for corruption, the offset), or starts with every acknowledged
// message accounted for and never serves a body that fails its checksum. Flips in the
// zeroed tail of the last segment look like a torn write and are repaired; flips in the
// log's last batch, which was written whole and acknowledged, are not: they stop
// start-up with an error that okiba salvage can act on.
func TestBitFlipsAreDetectedNeverServed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: storage fault injection runs in its own tier (make storage)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OKIBA_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (set OKIBA_CRASH_SEED to replay)", seed)
	mem := vfs.NewMemFS()
	fs := vfs.NewFaulty(mem, nil)
	clk := fakeClock()
	l := newLedger()
	b, err := Open(Config{Dir: "/data", FS: fs, Clock: clk, SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	crashWorkload(t, b, clk, fs, l, seed)
	// One more acknowledged send, after the workload's last checkpoint: the log's last
	// batch, which recovery replays.
	lastBody := []byte("the last acknowledged send")
	l.attempted[string(lastBody)] = true
	res, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: lastBody}, Delay: -1}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("last send: %v %v", err, res)
	}
	l.sent[string(lastBody)], l.ids[string(lastBody)] = fs.Ops(), res[0].ID
	// Flip bits in the disk as it is now, before a final checkpoint: older segments hold
	// bodies that recovery does not scan, so a flip there is caught only when the body is
	// read.
	base := mem.Crash()
	limit := fs.Ops() + 1
	defer b.Close()
	mem = base
	var files []string
	for _, dir := range []string{"/data/wal", "/data/checkpoints"} {
		names, _ := mem.ReadDir(dir)
		for _, n := range names {
			if strings.HasSuffix(n, ".wal") || strings.HasSuffix(n, ".ckpt") {
				files = append(files, dir+"/"+n)
			}
		}
	}
	// The last acknowledged send's record, and the last byte of the log (in the trailer of
	// its last batch): each flip there must be refused, never repaired as a torn write,
	// which would lose the acknowledged send.
	lastSeg := ""
	for _, file := range files {
		if strings.HasSuffix(file, ".wal") && usedLen(t, mem, file) > 32 {
			lastSeg = file
		}
	}
	data, err := vfs.ReadFile(mem, lastSeg)
	if err != nil {
		t.Fatal(err)
	}
	bodyAt := int64(bytes.LastIndex(data, lastBody))
	for _, off := range []int64{bodyAt + 5, usedLen(t, mem, lastSeg) - 1} {
		disk := mem.CrashWith(func(name string, synced, _ []byte) []byte {
			out := slices.Clone(synced)
			if name == lastSeg {
				out[off] ^= 0x08
			}
			return out
		})
		b, err := Open(Config{Dir: "/data", FS: disk, Clock: clock.NewFake(clk.Now()), SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true})
		if err == nil {
			verr := verifyBroker("flip in the last batch", b, clk.Now(), l, limit, true)
			b.Close()
			t.Fatalf("bit flipped at %s:%d, in the last batch, was repaired (%v)", lastSeg, off, verr)
		}
		var ce *wal.CorruptionError
		if !errors.As(err, &ce) || ce.File != lastSeg || (off > bodyAt+5 && !ce.Salvageable) {
			t.Fatalf("bit flipped at %s:%d, in the last batch: Open = %v, want a salvageable *wal.CorruptionError", lastSeg, off, err)
		}
	}

	rng := rand.New(rand.NewPCG(seed, 13))
	refused, started := 0, 0
	for _, file := range files {
		size := fileSize(t, mem, file)
		used := usedLen(t, mem, file)
		for i := 0; i < 60; i++ {
			// Mostly in the part that holds data, sometimes in the zeroed rest.
			off := rng.Int64N(max(used, 1))
			if i%6 == 5 {
				off = rng.Int64N(size)
			}
			bit := byte(1) << rng.IntN(8)
			disk := mem.CrashWith(func(name string, synced, _ []byte) []byte {
				out := slices.Clone(synced)
				if name == file && off < int64(len(out)) {
					out[off] ^= bit
				}
				return out
			})
			what := fmt.Sprintf("bit %#x flipped at %s:%d", bit, file, off)
			b, err := Open(Config{Dir: "/data", FS: disk, Clock: clock.NewFake(clk.Now()), SegmentSize: 2 << 20, CheckpointBytes: 1 << 40, NoPrecreate: true})
			if err != nil {
				refused++
				if !strings.Contains(err.Error(), file) {
					t.Fatalf("%s: refusal does not name the file: %v", what, err)
				}
				var ce *wal.CorruptionError
				if errors.As(err, &ce) && !strings.Contains(err.Error(), "offset") {
					t.Fatalf("%s: corruption error does not name the offset: %v", what, err)
				}
				continue
			}
			started++
			err = verifyBroker(what, b, clk.Now(), l, limit, true)
			b.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("files %d, flips %d: refused %d, started intact %d", len(files), refused+started, refused, started)
	if refused == 0 {
		t.Fatal("no flip was detected: the test no longer reaches the data")
	}
}

func fileSize(t *testing.T, fs vfs.FS, name string) int64 {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Size()
	return n
}

// usedLen is the length up to the last non-zero byte.
func usedLen(t *testing.T, fs vfs.FS, name string) int64 {
	data, err := vfs.ReadFile(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(data))
	for n > 0 && data[n-1] == 0 {
		n--
	}
	return n
}

// A failed fsync at any point of a workload: the operation waiting on it fails, every
// later write fails too (the broker never retries an fsync and assumes success), health
// reports the failure, and a restart recovers exactly what had been acknowledged.
func TestFsyncFailureAtEverySync(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: storage fault injection runs in its own tier (make storage)")
	}
	opened, failedAny := 0, 0
	for n := 1; n <= 40; n++ {
		mem := vfs.NewMemFS()
		var syncs int
		var mu sync.Mutex
		fs := vfs.NewFaulty(mem, func(e vfs.Event) error {
			if e.Op != vfs.OpSync || !strings.HasSuffix(e.Name, ".wal") {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			syncs++
			if syncs >= n {
				return vfs.ErrInjected
			}
			return nil
		})
		clk := fakeClock()
		l := newLedger()
		b, err := Open(Config{Dir: "/data", FS: fs, Clock: clk, SegmentSize: 2 << 20, NoPrecreate: true})
		if err != nil {
			// The failure hit start-up itself: nothing was acknowledged. Any other
			// refusal is a bug, not this case.
			if !errors.Is(err, vfs.ErrInjected) && !errors.Is(err, ErrStorageFailed) {
				t.Fatalf("sync %d: Open: %v, want the injected fsync failure", n, err)
			}
			continue
		}
		opened++
		failed := false
		check := func(what string, err error) bool {
			switch {
			case err == nil && failed:
				t.Fatalf("sync %d: %s succeeded after an earlier fsync failure", n, what)
			case err != nil && !errors.Is(err, ErrStorageFailed):
				t.Fatalf("sync %d: %s: %v, want ErrStorageFailed", n, what, err)
			case err != nil:
				failed = true
			}
			return err == nil
		}
		_, _, err = b.PutQueue(ctx, "q", nil)
		check("create queue", err)
		for i := 0; i < 12; i++ {
			bd := fmt.Sprintf("m-%d-%d", n, i)
			l.attempted[bd] = true
			res, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte(bd)}, Delay: -1}})
			if check("send", err) {
				l.sent[bd] = fs.Ops()
				l.ids[bd] = res[0].ID
			}
			ms, err := b.Receive(ctx, "q", ReceiveOptions{Max: 1, Visibility: time.Minute})
			if check("receive", err) && len(ms) == 1 && i%2 == 0 {
				l.ackTry[ms[0].ID] = true
				errs, err := b.Ack(ctx, "q", []string{ms[0].Receipt})
				if check("ack", err) && errs[0] == nil {
					l.acked[ms[0].ID] = fs.Ops()
				}
			}
		}
		if failed != (b.Healthy() != nil) {
			t.Fatalf("sync %d: failed %v but Healthy() = %v", n, failed, b.Healthy())
		}
		if failed {
			failedAny++
		}
		if err := verifyRecovered(fmt.Sprintf("after failing sync %d", n), mem.Crash(), clk.Now(), l, fs.Ops()+1); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	// Otherwise the loop proves nothing: every Open refused, or no fsync ever failed.
	if opened == 0 || failedAny == 0 {
		t.Fatalf("%d brokers opened, %d saw a failed fsync: the workload no longer reaches the injected failures", opened, failedAny)
	}
	t.Logf("%d brokers opened, %d saw a failed fsync", opened, failedAny)
}
