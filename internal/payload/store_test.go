package payload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

const segSize = 4 << 10 // small segments, so that a few bodies fill one

// env is a store over a real log on an in-memory file system, fed send records the way
// the broker feeds it: append, At, then Added.
type env struct {
	t   *testing.T
	fs  *vfs.MemFS
	log *wal.Log
	s   *Store
	ids map[queue.Ref]uint64
}

func newEnv(t *testing.T, cache int64) *env {
	t.Helper()
	e := &env{t: t, fs: vfs.NewMemFS(), ids: map[queue.Ref]uint64{}}
	e.s = New(Config{CacheBytes: cache})
	e.open(nil)
	return e
}

// open opens the log, replaying every record through replay (nil: none expected).
func (e *env) open(replay func(wal.Pos, []byte) error) {
	e.t.Helper()
	l, err := wal.Open(wal.Options{FS: e.fs, Dir: "wal", SegmentSize: segSize, NoPrecreate: true}, 0, func(p wal.Pos, raw []byte) error {
		if replay == nil {
			return nil
		}
		return replay(p, raw)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close() })
	e.log = l
	e.s.SetLog(l)
}

func ref(i int) queue.Ref { return queue.Ref(1<<queue.RefShift | i) }

// send writes a send record for ref with body and tells the store, as the broker does.
func (e *env) send(r queue.Ref, id uint64, body string) wal.Pos {
	e.t.Helper()
	rec := &queue.SendRecord{Now: 1, QueueID: 1, MsgID: id, Payload: queue.Payload{Body: []byte(body)}}
	pos, t, err := e.log.Append(rec.AppendTo(nil))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := t.Wait(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.s.At(pos, false)
	e.s.Added(r, &rec.Payload)
	e.ids[r] = id
	return pos
}

func (e *env) body(r queue.Ref) string {
	e.t.Helper()
	pin := e.s.Pin([]queue.Ref{r})
	defer pin.Release()
	p, err := pin.Body(0, e.ids[r])
	if err != nil {
		e.t.Fatal(err)
	}
	return string(p.Body)
}

func TestUsageAndCacheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 10) // room for two 5-byte bodies
	p1 := e.send(ref(1), 1, "aaaaa")
	e.send(ref(2), 2, "bbbbb")
	e.send(ref(3), 3, "ccccc")
	if e.s.cached != 10 || len(e.s.cache) != 2 {
		t.Fatalf("cached %d bytes in %d bodies, want 10 in 2", e.s.cached, len(e.s.cache))
	}
	if u := e.s.Usage()[p1.Segment()]; u.Messages != 3 || u.Bytes != 15 {
		t.Fatalf("usage %+v", u)
	}
	for i, want := range []string{"aaaaa", "bbbbb", "ccccc"} { // the third from the log
		if got := e.body(ref(i + 1)); got != want {
			t.Fatalf("body %d: %q", i+1, got)
		}
	}
	e.s.Removed(ref(1), 5)
	if e.s.cached != 5 || e.s.Usage()[p1.Segment()].Messages != 2 {
		t.Fatalf("after a removal: cached %d, usage %+v", e.s.cached, e.s.Usage())
	}
	if e.s.get(ref(1)) != 0 {
		t.Fatal("a removed message keeps its position")
	}
}

// A body applied from a buffer the caller reuses (replay) is copied before it is cached.
func TestSharedPayloadIsCopied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1<<20)
	buf := []byte("the body")
	p := queue.Payload{Body: buf, Attrs: []queue.Attr{{Name: "a", Type: "String", Value: []byte("attr value")}}}
	e.s.At(wal.MakePos(1, 32), true)
	e.s.Added(ref(1), &p)
	copy(buf, "XXXXXXXX")
	p.Attrs[0].Value[0] = 'X'
	c := e.s.cache[ref(1)]
	if string(c.Body) != "the body" || string(c.Attrs[0].Value) != "attr value" {
		t.Fatalf("cached body follows the caller's buffer: %q %q", c.Body, c.Attrs[0].Value)
	}
	// Live (not shared) payloads are kept as they are: the broker owns them.
	live := queue.Payload{Body: []byte("live")}
	e.s.At(wal.MakePos(1, 64), false)
	e.s.Added(ref(2), &live)
	if e.s.cache[ref(2)] != &live {
		t.Fatal("a live payload was copied")
	}
}

// A pinned segment is not removed; once released, it is.
func TestPinHoldsASegment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, -1)
	first := e.send(ref(1), 1, string(bytes.Repeat([]byte("x"), 3000)))
	e.send(ref(2), 2, string(bytes.Repeat([]byte("y"), 3000))) // the next segment
	last := e.send(ref(3), 3, "z")
	if first.Segment() == last.Segment() {
		t.Fatal("the bodies did not spread over segments")
	}
	pin := e.s.Pin([]queue.Ref{ref(1)})
	e.s.Removed(ref(1), 3000) // settled while a receive still reads it
	_, usage := e.s.Section(func(func(queue.Ref, int64)) {})
	if n, err := e.s.Collect(last, usage); err != nil || n != 0 {
		t.Fatalf("collected %d segments (%v) while one was pinned", n, err)
	}
	if p, err := pin.Body(0, 1); err != nil || len(p.Body) != 3000 {
		t.Fatalf("pinned body: %v", err)
	}
	pin.Release()
	if n, err := e.s.Collect(last, usage); err != nil || n != 1 {
		t.Fatalf("after release: collected %d (%v), want 1", n, err)
	}
}

// Compaction moves the bodies of a sparse segment to the head of the log; readers find
// them there, and a replay of the log finds them there too.
func TestCompactionMovesBodiesAndReplayFollows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, -1)
	big := string(bytes.Repeat([]byte("b"), 1200))
	for i := 1; i <= 6; i++ {
		e.send(ref(i), uint64(i), fmt.Sprintf("%d:%s", i, big))
	}
	// Two messages share one body, as a topic's fan-out will.
	shared := e.s.get(ref(6))
	e.s.At(shared, false)
	e.s.Added(ref(7), &queue.Payload{Body: []byte("6:" + big)})
	e.ids[ref(7)] = 6
	for i := 1; i <= 4; i++ {
		if i != 2 {
			e.s.Removed(ref(i), int64(len(big)+2))
		}
	}
	head := e.send(ref(8), 8, "8:"+big) // a third segment: the first two lie before it
	before := e.s.Usage()
	_, usage := e.s.Section(func(func(queue.Ref, int64)) {})
	moved, err := e.s.Compact(context.Background(), head, usage, 1.0, segSize)
	if err != nil {
		t.Fatal(err)
	}
	if moved == 0 {
		t.Fatalf("nothing compacted; usage %v", before)
	}
	if e.s.get(ref(6)) != e.s.get(ref(7)) || e.s.get(ref(6)) == shared {
		t.Fatalf("the shared body did not move as one: %v %v (was %v)", e.s.get(ref(6)), e.s.get(ref(7)), shared)
	}
	for _, i := range []int{2, 5, 6, 7, 8} {
		if got := e.body(ref(i)); got[:2] != fmt.Sprint(e.ids[ref(i)])+":" {
			t.Fatalf("body %d after compaction: %.10q", i, got)
		}
	}
	want := map[queue.Ref]wal.Pos{}
	for _, i := range []int{2, 5, 6, 7, 8} {
		want[ref(i)] = e.s.get(ref(i))
	}

	// Replay the whole log into a fresh store, as a restart without a checkpoint does.
	e.log.Close()
	fresh := New(Config{CacheBytes: -1})
	live := map[queue.Ref]bool{ref(2): true, ref(5): true, ref(6): true, ref(8): true}
	var n int
	e.open(func(p wal.Pos, raw []byte) error {
		if IsFrame(raw) {
			return fresh.ApplyFrame(p, raw)
		}
		r := ref([]int{1, 2, 3, 4, 5, 6, 8}[n]) // the send records, in order
		n++
		rec, err := queue.DecodeRecord(raw)
		if err != nil {
			return err
		}
		fresh.At(p, true)
		fresh.Added(r, &rec.(*queue.SendRecord).Payload)
		if !live[r] {
			fresh.Removed(r, rec.(*queue.SendRecord).Payload.Size())
		}
		return nil
	})
	fresh.FinishReplay()
	for _, i := range []int{2, 5, 6, 8} {
		if got := fresh.get(ref(i)); got != want[ref(i)] {
			t.Fatalf("replayed body %d at %v, want %v", i, got, want[ref(i)])
		}
	}
	if fmt.Sprint(fresh.Usage()) != fmt.Sprint(usageWithout(e.s.Usage(), ref(7), e.s)) {
		t.Fatalf("replayed usage %v, live %v", fresh.Usage(), e.s.Usage())
	}
}

// usageWithout is the live usage less one message (the replay above has no second user of
// the shared body).
func usageWithout(u map[uint32]Usage, r queue.Ref, s *Store) map[uint32]Usage {
	seg := s.get(r).Segment()
	x := u[seg]
	x.Messages--
	x.Bytes -= 1202
	u[seg] = x
	return u
}

func TestSectionRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, -1)
	for i := 1; i <= 5; i++ {
		e.send(ref(i), uint64(i), fmt.Sprint("body", i))
	}
	order := []queue.Ref{ref(3), ref(1), ref(5), ref(2), ref(4)}
	walk := func(add func(queue.Ref, int64)) {
		for _, r := range order {
			add(r, 5)
		}
	}
	pieces, usage := e.s.Section(walk)
	var sec []byte
	for _, p := range pieces {
		sec = append(sec, p...)
	}
	restored := New(Config{CacheBytes: -1})
	// A restored machine names its messages anew, in the same order.
	err := restored.Restore(sec, func(visit func(queue.Ref, int64) bool) {
		for i := range order {
			if !visit(ref(100+i), 5) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range order {
		if restored.get(ref(100+i)) != e.s.get(r) {
			t.Fatalf("message %d restored at %v, was %v", i, restored.get(ref(100+i)), e.s.get(r))
		}
	}
	if fmt.Sprint(restored.Usage()) != fmt.Sprint(usage) {
		t.Fatalf("restored usage %v, want %v", restored.Usage(), usage)
	}
	// A section for another number of messages is refused.
	if err := New(Config{}).Restore(sec, func(visit func(queue.Ref, int64) bool) { visit(ref(1), 5) }); err == nil {
		t.Fatal("a section restored onto fewer messages")
	}
}

// The table follows the live messages: a chunk of it whose messages are all gone is
// given back, as the machine's arena gives back its chunks.
func TestTableGivesBackEmptyChunks(t *testing.T) {
	t.Parallel()
	s := New(Config{CacheBytes: -1})
	p := &queue.Payload{Body: []byte("x")}
	const n = 3 * queue.RefSlots
	for i := range n {
		s.At(wal.MakePos(1, uint32(32+8*i)), false)
		s.Added(queue.Ref(queue.RefSlots+i), p) // chunks 1, 2 and 3
	}
	if got := len(s.table); got != 4 || s.table[2] == nil {
		t.Fatalf("table of %d chunks", got)
	}
	for i := range n - 1 {
		s.Removed(queue.Ref(queue.RefSlots+i), 1)
	}
	if s.table[1] != nil || s.table[2] != nil || s.table[3] == nil || s.live[3] != 1 {
		t.Fatalf("after removing all but one: chunks %v %v %v, live %v", s.table[1] != nil, s.table[2] != nil, s.table[3] != nil, s.live)
	}
	s.Removed(queue.Ref(queue.RefSlots+n-1), 1)
	if s.table[3] != nil || len(s.Usage()) != 0 {
		t.Fatalf("a drained store keeps a chunk or usage: %v", s.Usage())
	}
}

// TestCompactionPassesOverACorruptBody: a live body that fails its checksum stays where it
// lies, and the other bodies of the sparse segments are moved all the same; Compact says
// what it left.
func TestCompactionPassesOverACorruptBody(t *testing.T) {
	e := newEnv(t, -1)
	big := string(bytes.Repeat([]byte("c"), 1200))
	for i := 1; i <= 6; i++ {
		e.send(ref(i), uint64(i), fmt.Sprintf("%d:%s", i, big))
	}
	for _, i := range []int{1, 3, 5} {
		e.s.Removed(ref(i), int64(len(big)+2))
	}
	head := e.send(ref(7), 7, "7:"+big)
	bad := e.s.get(ref(2))
	seg := fmt.Sprintf("wal/%08x.wal", bad.Segment())
	f, err := e.fs.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("#"), int64(bad.Offset())+40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, usage := e.s.Section(func(func(queue.Ref, int64)) {})
	moved, err := e.s.Compact(context.Background(), head, usage, 1.0, segSize)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("Compact = %d, %v; want the corrupt body reported", moved, err)
	}
	if moved != 2 {
		t.Fatalf("moved %d bodies, want the two readable ones", moved)
	}
	if e.s.get(ref(2)) != bad {
		t.Fatalf("the corrupt body moved to %v", e.s.get(ref(2)))
	}
	for _, i := range []int{4, 6} {
		if got := e.body(ref(i)); got[:2] != fmt.Sprint(i)+":" {
			t.Fatalf("body %d after compaction: %.10q", i, got)
		}
	}
}
