package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// Bodies this node cannot read: a checksum mismatch is quarantined, an I/O error leaves
// the message where it was, and neither costs the healthy messages of a batch anything.

// rotBroker is a broker on an in-memory disk that caches no body, so that every body a
// receive returns is read from the log, with the hook of its file system to arm.
type rotBroker struct {
	*Broker
	mem  *vfs.MemFS
	fs   *vfs.Faulty
	clk  *clock.Fake
	logs *testkit.SyncBuffer
}

func newRotBroker(t *testing.T) *rotBroker {
	t.Helper()
	r := &rotBroker{mem: vfs.NewMemFS(), clk: fakeClock(), logs: &testkit.SyncBuffer{}}
	r.fs = vfs.NewFaulty(r.mem, nil)
	r.Broker = start(t, Config{Dir: "/data", FS: r.fs, Clock: r.clk, CacheBytes: -1, NoPrecreate: true,
		Logger: slog.New(slog.NewTextHandler(r.logs, nil))})
	t.Cleanup(func() { r.Close() })
	return r
}

// where returns the segment file holding body and the offset of body in it.
func (r *rotBroker) where(t *testing.T, body string) (string, int64) {
	t.Helper()
	names, err := r.mem.ReadDir("/data/wal")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".wal") {
			continue
		}
		data, err := vfs.ReadFile(r.mem, "/data/wal/"+n)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, []byte(body)); i >= 0 {
			return n, int64(i)
		}
	}
	t.Fatalf("body %q is in no segment", body)
	return "", 0
}

// rot flips a bit of body where it lies on disk, as bit rot would after the write.
func (r *rotBroker) rot(t *testing.T, body string) string {
	t.Helper()
	name, off := r.where(t, body)
	f, err := r.mem.OpenFile("/data/wal/"+name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off+2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off+2); err != nil {
		t.Fatal(err)
	}
	return name
}

// failReads makes reads of body's bytes fail with an I/O error while fail says so, and
// counts them.
func (r *rotBroker) failReads(t *testing.T, body string, fail func() bool) *atomic.Int64 {
	t.Helper()
	name, off := r.where(t, body)
	var n atomic.Int64
	r.fs.SetHook(func(e vfs.Event) error {
		if e.Op == vfs.OpRead && strings.HasSuffix(e.Name, name) && e.Offset <= off && off < e.Offset+e.Length && fail() {
			n.Add(1)
			return vfs.ErrInjected
		}
		return nil
	})
	return &n
}

func batch(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s %d, in the log and nowhere else", prefix, i)
	}
	return out
}

func peekOne(t *testing.T, b *Broker, q string, id uint64) PeekedMessage {
	t.Helper()
	pm, err := b.GetMessage(ctx, q, id)
	if err != nil {
		t.Fatalf("GetMessage %s: %v", queue.FormatID(id), err)
	}
	return pm
}

func header(p queue.Payload, name string) string {
	for _, a := range p.Attrs {
		if a.Name == name {
			return string(a.Value)
		}
	}
	return ""
}

// corruptMark checks that p stands in for a corrupt body, and returns its location.
func corruptMark(t *testing.T, what string, p queue.Payload) string {
	t.Helper()
	loc := header(p, HeaderCorruptLocation)
	if len(p.Body) != 0 || header(p, HeaderCorrupt) != "true" || !regexp.MustCompile(`^[0-9a-f]{8}\.wal@[0-9]+$`).MatchString(loc) {
		t.Fatalf("%s: body %q, headers %v; want an empty body marked %s: true with its location", what, p.Body, p.Attrs, HeaderCorrupt)
	}
	return loc
}

// TestCorruptBodyIsQuarantinedAndTheBatchDelivered: one body of a batch of ten fails its
// checksum. The receive leases and returns the nine others; the bad one is a dead letter
// of reason corrupt, its delivery count unchanged, logged at ERROR with its id, queue and
// location, and counted. From the dead-letter queue it is delivered with an empty body
// and the corrupt headers, and a redrive naming it is refused.
func TestCorruptBodyIsQuarantinedAndTheBatchDelivered(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "q", nil)
	all := batch("healthy", 10)
	ids := send(t, r.Broker, "q", all...)
	seg := r.rot(t, all[4])

	ms := recv(t, r.Broker, "q", 10, time.Minute)
	want := slices.Delete(slices.Clone(all), 4, 5)
	if !slices.Equal(bodies(ms), want) {
		t.Fatalf("receive returned %q, want the nine healthy messages in order", bodies(ms))
	}
	for _, m := range ms {
		if m.Deliveries != 1 || m.Receipt == "" {
			t.Fatalf("message %s: deliveries %d, receipt %q", queue.FormatID(m.ID), m.Deliveries, m.Receipt)
		}
	}
	if st := stats(t, r.Broker, "q"); st.InFlight != 9 || st.Ready != 0 || st.Delivered != 9 || st.ByReason[queue.ReasonCorrupt] != 1 {
		t.Fatalf("q after the receive: %+v", st)
	}
	dead := peekOne(t, r.Broker, "q-dlq", ids[4])
	if d := dead.Dead; d == nil || d.Reason != queue.ReasonCorrupt || d.Deliveries != 0 || d.SourceName != "q" ||
		!strings.Contains(d.Description, seg+"@") || !strings.Contains(d.Description, "checksum mismatch") {
		t.Fatalf("the corrupt message in the dead-letter queue: %+v", dead.Dead)
	}
	loc := corruptMark(t, "peek of the quarantined message", dead.Payload)
	if got := r.BodyStats(); got.Corrupt != 1 || got.ReadErrors != 0 {
		t.Fatalf("BodyStats = %+v, want one corrupt body", got)
	}
	logs := r.logs.String()
	if !regexp.MustCompile(`level=ERROR msg="message body failed its checksum[^\n]*queue=q id=` + queue.FormatID(ids[4]) + ` location=` + regexp.QuoteMeta(loc)).MatchString(logs) {
		t.Fatalf("no ERROR line with the queue, id and location %s:\n%s", loc, logs)
	}

	// From the dead-letter queue: delivered, empty and marked, without being counted again.
	dl := recv(t, r.Broker, "q-dlq", 10, time.Minute)
	if len(dl) != 1 || dl[0].ID != ids[4] || dl[0].Dead == nil || dl[0].Dead.Reason != queue.ReasonCorrupt {
		t.Fatalf("receive from the dead-letter queue: %+v", dl)
	}
	if got := corruptMark(t, "receive from the dead-letter queue", dl[0].Payload); got != loc {
		t.Fatalf("location %s, the quarantine said %s", got, loc)
	}
	if got := r.BodyStats(); got.Corrupt != 1 {
		t.Fatalf("BodyStats = %+v after the dead letter was met again", got)
	}
	if _, err := r.StartRedrive(ctx, queue.RedriveSpec{Source: "q-dlq", Filter: queue.RedriveFilter{IDs: []uint64{ids[4]}}}); !errors.Is(err, queue.ErrMessageCorrupt) {
		t.Fatalf("redrive of the corrupt message: %v, want ErrMessageCorrupt", err)
	}
	if err := r.Healthy(); err != nil {
		t.Fatalf("a corrupt body is not a storage failure: %v", err)
	}
}

// TestCorruptHeadLetsItsGroupMoveOn: in an ordered group, a head whose body is corrupt is
// quarantined and the rest of the group is delivered in order; in a queue without a
// dead-letter queue, a corrupt body is delivered empty and marked, its delivery counted.
func TestCorruptHeadLetsItsGroupMoveOn(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "o", func(c *queue.Config) { c.OrderedGroups = true })
	mustQueue(t, r.Broker, "plain", func(c *queue.Config) { c.DeadLetterQueue, c.MaxDeliveries = queue.NoDeadLetterQueue, 0 })
	g := batch("group g", 3)
	in := make([]queue.SendInput, len(g))
	for i, body := range g {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: []byte(body), Group: "g"}, Delay: -1}
	}
	if _, err := r.Send(ctx, "o", in); err != nil {
		t.Fatal(err)
	}
	r.rot(t, g[0])
	if ms := recv(t, r.Broker, "o", 10, time.Minute); !slices.Equal(bodies(ms), g[1:]) {
		t.Fatalf("receive of the group: %q, want %q", bodies(ms), g[1:])
	}
	if n := r.m.Depth("o-dlq"); n != 1 {
		t.Fatalf("o-dlq holds %d messages, want the corrupt head", n)
	}

	p := batch("plain", 2)
	ids := send(t, r.Broker, "plain", p...)
	r.rot(t, p[0])
	ms := recv(t, r.Broker, "plain", 10, time.Minute)
	if len(ms) != 2 || ms[0].ID != ids[0] || ms[0].Deliveries != 1 || string(ms[1].Payload.Body) != p[1] {
		t.Fatalf("receive from a queue without a dead-letter queue: %+v", ms)
	}
	corruptMark(t, "a corrupt body where it cannot move", ms[0].Payload)
	if got := r.BodyStats(); got.Corrupt != 2 {
		t.Fatalf("BodyStats = %+v, want two corrupt bodies", got)
	}
}

// TestUnreadableBodyIsNotLeased: a read that fails with an I/O error leases nothing and
// counts no delivery: the others are delivered, the failing message stays ready and comes
// with a later receive once reads work; meanwhile the broker is degraded, not failed.
func TestUnreadableBodyIsNotLeased(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "q", nil)
	all := batch("message", 10)
	ids := send(t, r.Broker, "q", all...)
	var once atomic.Bool
	failed := r.failReads(t, all[4], func() bool { return once.CompareAndSwap(false, true) })

	ms := recv(t, r.Broker, "q", 10, time.Minute)
	if want := slices.Delete(slices.Clone(all), 4, 5); !slices.Equal(bodies(ms), want) {
		t.Fatalf("receive returned %q, want the nine others", bodies(ms))
	}
	if failed.Load() != 1 {
		t.Fatalf("%d reads failed, want 1", failed.Load())
	}
	if pm := peekOne(t, r.Broker, "q", ids[4]); pm.State != queue.StateReady || pm.Deliveries != 0 || string(pm.Payload.Body) != all[4] {
		t.Fatalf("the message whose read failed: state %s, deliveries %d, body %q; want ready, never delivered", pm.State, pm.Deliveries, pm.Payload.Body)
	}
	if st := stats(t, r.Broker, "q"); st.Delivered != 9 {
		t.Fatalf("%d deliveries counted, want 9", st.Delivered)
	}
	h := r.Health()
	if h.Err != nil || !strings.Contains(h.Degraded, "could not be read") {
		t.Fatalf("Health after a failed read = %+v, want degraded", h)
	}
	if got := r.BodyStats(); got.ReadErrors != 1 || got.Corrupt != 0 {
		t.Fatalf("BodyStats = %+v, want one read error", got)
	}
	if ms := recv(t, r.Broker, "q", 10, time.Minute); len(ms) != 1 || ms[0].ID != ids[4] || ms[0].Deliveries != 1 {
		t.Fatalf("a later receive: %+v, want the message, delivered once", ms)
	}
	r.clk.Advance(degradedFor)
	if h := r.Health(); h.Err != nil || h.Degraded != "" {
		t.Fatalf("Health a minute later = %+v, want well", h)
	}
}

// TestReadsThatKeepFailingFailTheStorage: a receive whose only candidate cannot be read
// answers ErrReadFailed, leasing nothing; readFailureRun failures in a row fail the
// broker as a failed fsync does, and it then refuses writes.
func TestReadsThatKeepFailingFailTheStorage(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "q", nil)
	body := batch("unreadable", 1)[0]
	send(t, r.Broker, "q", body)
	r.failReads(t, body, func() bool { return true })
	for i := 1; i < readFailureRun; i++ {
		if _, err := r.Receive(ctx, "q", ReceiveOptions{Max: 10, Wait: 0, Visibility: -1}); !errors.Is(err, ErrReadFailed) {
			t.Fatalf("receive %d: %v, want ErrReadFailed", i, err)
		}
		if err := r.Healthy(); err != nil {
			t.Fatalf("after %d failed reads: %v", i, err)
		}
	}
	if st := stats(t, r.Broker, "q"); st.Delivered != 0 || st.Ready != 1 {
		t.Fatalf("failed receives leased: %+v", st)
	}
	if _, err := r.Receive(ctx, "q", ReceiveOptions{Max: 10, Wait: 0, Visibility: -1}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("receive %d: %v, want ErrStorageFailed", readFailureRun, err)
	}
	if h := r.Health(); !errors.Is(h.Err, ErrStorageFailed) {
		t.Fatalf("Health = %+v, want the storage failure", h)
	}
	if _, err := r.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte("x")}, Delay: -1}}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("send after reads failed for good: %v, want ErrStorageFailed", err)
	}
}

// TestReadFailuresFarApartDoNotAddUp: failures separated by a successful read, or by more
// than readFailureWindow, never fail the storage.
func TestReadFailuresFarApartDoNotAddUp(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "q", nil)
	body := batch("sometimes unreadable", 1)[0]
	send(t, r.Broker, "q", body)
	r.failReads(t, body, func() bool { return true })
	for i := 0; i < 3*readFailureRun; i++ {
		r.clk.Advance(readFailureWindow/time.Duration(readFailureRun-1) + time.Second)
		if _, err := r.Receive(ctx, "q", ReceiveOptions{Max: 1, Wait: 0, Visibility: -1}); !errors.Is(err, ErrReadFailed) {
			t.Fatalf("receive %d: %v, want ErrReadFailed", i, err)
		}
	}
	if err := r.Healthy(); err != nil {
		t.Fatalf("failures spread over minutes failed the storage: %v", err)
	}
}

// TestPeekMarksBodiesItCannotRead: a page with a corrupt body and an unreadable one is
// answered whole, each marked, and peeking quarantines nothing.
func TestPeekMarksBodiesItCannotRead(t *testing.T) {
	r := newRotBroker(t)
	mustQueue(t, r.Broker, "q", nil)
	all := batch("peeked", 5)
	ids := send(t, r.Broker, "q", all...)
	r.rot(t, all[1])
	var once atomic.Bool
	r.failReads(t, all[3], func() bool { return once.CompareAndSwap(false, true) })
	page, err := r.Peek(ctx, "q", 0, 10)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if len(page) != 5 {
		t.Fatalf("peek returned %d messages, want 5", len(page))
	}
	for i, pm := range page {
		switch i {
		case 1:
			corruptMark(t, "peek of a corrupt body", pm.Payload)
		case 3:
			if len(pm.Payload.Body) != 0 || header(pm.Payload, HeaderUnreadable) != "true" {
				t.Fatalf("peek of an unreadable body: %q %v", pm.Payload.Body, pm.Payload.Attrs)
			}
		default:
			if string(pm.Payload.Body) != all[i] {
				t.Fatalf("peek %d: %q", i, pm.Payload.Body)
			}
		}
	}
	corruptMark(t, "lookup of a corrupt body", peekOne(t, r.Broker, "q", ids[1]).Payload)
	if st := stats(t, r.Broker, "q"); st.Ready != 5 || st.Delivered != 0 {
		t.Fatalf("a peek changed the queue: %+v", st)
	}
	if got := r.BodyStats(); got.ReadErrors != 1 || got.Corrupt != 0 {
		t.Fatalf("BodyStats = %+v: a peek counts the failed read, and quarantines nothing", got)
	}
}

// TestConcurrentReceivesReadEachBodyOnce: receives racing over a backlog whose bodies are
// not cached claim what they defer, so that each body is read from the log once and each
// message leased once, not read by every receive and leased by the fastest.
func TestConcurrentReceivesReadEachBodyOnce(t *testing.T) {
	var reads atomic.Int64
	fs := vfs.NewFaulty(vfs.NewMemFS(), func(e vfs.Event) error {
		if e.Op == vfs.OpRead && strings.HasSuffix(e.Name, ".wal") && e.Length > 8 { // a record, not its header
			reads.Add(1)
		}
		return nil
	})
	b := start(t, Config{Dir: "/data", FS: fs, CacheBytes: -1, NoPrecreate: true, CheckpointBytes: 1 << 40})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	const n = 600
	for i := 0; i < n; i += 100 {
		send(t, b, "q", batch(fmt.Sprintf("backlog %d", i), 100)...)
	}
	reads.Store(0)
	seen := make(chan uint64, n)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				ms, err := b.Receive(ctx, "q", ReceiveOptions{Max: 16, Wait: 0, Visibility: time.Hour})
				if err != nil || len(ms) == 0 {
					errs <- err
					return
				}
				for _, m := range ms {
					seen <- m.ID
				}
			}
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(seen)
	got := map[uint64]bool{}
	for id := range seen {
		if got[id] {
			t.Fatalf("message %s leased twice", queue.FormatID(id))
		}
		got[id] = true
	}
	if len(got) != n {
		t.Fatalf("%d messages leased, want %d", len(got), n)
	}
	if r := reads.Load(); r != n {
		t.Fatalf("%d reads of the log for %d bodies", r, n)
	}
}
