package nativeapi_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/okibatest"
)

// Bodies the node cannot read, seen over HTTP: the native API answers 200 with the
// healthy messages, marks what it cannot read, and answers a storage error with a
// storage code, never 500 internal.

// diskEnv serves a broker that caches no body, on an in-memory disk the test can damage
// and whose reads of chosen bytes it can fail.
type diskEnv struct {
	*env
	mem  *vfs.MemFS
	hook atomic.Pointer[func(vfs.Event) bool] // which operations fail; nil: none
}

func newDiskEnv(t *testing.T) *diskEnv {
	t.Helper()
	d := &diskEnv{mem: vfs.NewMemFS()}
	fs := vfs.NewFaulty(d.mem, func(e vfs.Event) error {
		if f := d.hook.Load(); f != nil && (*f)(e) {
			return vfs.ErrInjected
		}
		return nil
	})
	d.env = newEnv(t, okibatest.Options{Dir: "/data", FakeClock: true, Broker: broker.Config{FS: fs, NoPrecreate: true, CacheBytes: -1}})
	return d
}

// at returns the segment path holding body and its offset there.
func (d *diskEnv) at(body string) (string, int64) {
	d.t.Helper()
	names, _ := d.mem.ReadDir("/data/wal")
	for _, n := range names {
		data, err := vfs.ReadFile(d.mem, "/data/wal/"+n)
		if err == nil && bytes.Contains(data, []byte(body)) {
			return "/data/wal/" + n, int64(bytes.Index(data, []byte(body)))
		}
	}
	d.t.Fatalf("%q is on no segment", body)
	return "", 0
}

// rot flips a bit of body on disk.
func (d *diskEnv) rot(body string) {
	d.t.Helper()
	path, off := d.at(body)
	f, err := d.mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	f.ReadAt(b, off+1)
	b[0] ^= 0x04
	if _, err := f.WriteAt(b, off+1); err != nil {
		d.t.Fatal(err)
	}
}

// failReads fails reads of body's bytes while on() says so.
func (d *diskEnv) failReads(body string, on func() bool) {
	d.t.Helper()
	path, off := d.at(body)
	f := func(e vfs.Event) bool {
		return e.Op == vfs.OpRead && e.Name == path && e.Offset <= off && off < e.Offset+e.Length && on()
	}
	d.hook.Store(&f)
}

func messageBodies(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s %02d: a body read from the log", prefix, i)
	}
	return out
}

func corruptHeaders(t *testing.T, what string, m api.Message) {
	t.Helper()
	if bodyOf(m) != "" || m.Headers[broker.HeaderCorrupt] != "true" || !strings.HasPrefix(m.Headers[broker.HeaderCorruptLocation], "00000001.wal@") {
		t.Fatalf("%s: %s; want an empty body with %s: true and its location", what, js(m), broker.HeaderCorrupt)
	}
}

func TestCorruptBodyOverHTTP(t *testing.T) {
	d := newDiskEnv(t)
	d.putQueue("q", `{}`)
	all := messageBodies(10, "healthy")
	ids := d.send("q", all...)
	d.rot(all[4])

	ms := d.receive("q", 10, "")
	if want := slices.Delete(slices.Clone(all), 4, 5); !slices.Equal(bodies(ms), want) {
		t.Fatalf("receive: %q, want the nine healthy messages", bodies(ms))
	}
	dlq := d.peek("q-dlq", "")
	if len(dlq.Messages) != 1 || dlq.Messages[0].ID != ids[4] || dlq.Messages[0].DeadLetter == nil ||
		dlq.Messages[0].DeadLetter.Reason != "corrupt" || dlq.Messages[0].DeadLetter.Deliveries != 0 {
		t.Fatalf("dead-letter queue: %s", js(dlq))
	}
	corruptHeaders(t, "peek of the dead-letter queue", dlq.Messages[0])
	got := d.receive("q-dlq", 10, "")
	if len(got) != 1 {
		t.Fatalf("receive from the dead-letter queue: %s", js(got))
	}
	corruptHeaders(t, "receive from the dead-letter queue", got[0])
	expectError(t, d.do("POST", "/v1/queues/q-dlq/redrive", fmt.Sprintf(`{"ids":[%q]}`, ids[4])), api.CodeMessageCorrupt, ids[4])
	expectError(t, d.do("POST", "/v1/queues/q/deadletter", `{"receipts":["x"],"reason":"corrupt"}`), api.CodeInvalidMessage, "corrupt")
	if h := d.do("GET", "/healthz", nil); h.Status != 200 || !strings.Contains(string(h.Body), `"ok"`) {
		t.Fatalf("healthz after a corrupt body: %v", h)
	}
}

func TestUnreadableBodyOverHTTP(t *testing.T) {
	d := newDiskEnv(t)
	d.putQueue("q", `{}`)
	all := messageBodies(3, "message")
	ids := d.send("q", all...)
	var failing atomic.Bool
	failing.Store(true)
	d.failReads(all[1], failing.Load)

	if ms := d.receive("q", 10, ""); !slices.Equal(bodies(ms), []string{all[0], all[2]}) {
		t.Fatalf("receive: %q, want the two readable messages", bodies(ms))
	}
	var h api.Health
	d.call("GET", "/healthz", nil, 200, &h)
	if h.Status != "degraded" || !strings.Contains(h.Reason, "could not be read") {
		t.Fatalf("healthz with a failed read: %s, want 200 degraded with its reason", js(h))
	}
	// The page is answered, the body marked.
	page := d.peek("q", "")
	if len(page.Messages) != 3 || page.Messages[1].ID != ids[1] || page.Messages[1].Headers[broker.HeaderUnreadable] != "true" || bodyOf(page.Messages[1]) != "" {
		t.Fatalf("peek: %s", js(page))
	}
	var one api.Message
	d.call("GET", "/v1/queues/q/messages/"+ids[1], nil, 200, &one)
	if one.Headers[broker.HeaderUnreadable] != "true" || one.Deliveries != 0 || one.State != "ready" {
		t.Fatalf("lookup: %s", js(one))
	}
	// Nothing else to deliver: a storage code to retry after, not internal.
	r := d.do("POST", "/v1/queues/q/receive", `{"max":10,"wait":0}`)
	expectError(t, r, api.CodeUnavailable, "could not be read")
	if r.Header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	// Reads that keep failing fail the storage, as a failed write does.
	var last *response
	for range 5 {
		if last = d.do("POST", "/v1/queues/q/receive", `{"max":10,"wait":0}`); last.Status != 503 {
			t.Fatalf("receive while reads fail: %v", last)
		}
	}
	expectError(t, last, api.CodeStorageFailed)
	if h := d.do("GET", "/healthz", nil); h.Status != 503 || !strings.Contains(string(h.Body), `"failed"`) {
		t.Fatalf("healthz after reads failed for good: %v", h)
	}
	// Reads go on from what the broker holds, the unreadable body still marked; writes stop.
	if page := d.peek("q", ""); len(page.Messages) != 3 || page.Messages[1].Headers[broker.HeaderUnreadable] != "true" || bodyOf(page.Messages[0]) != all[0] {
		t.Fatalf("peek after the storage failed: %s", js(page))
	}
	expectError(t, d.do("POST", "/v1/queues/q/messages", `{"body":"x"}`), api.CodeStorageFailed)
}

// TestUnreadableBodyComesBack: once reads work again, the message whose read failed is
// delivered, its first delivery; the broker is well again a minute later.
func TestUnreadableBodyComesBack(t *testing.T) {
	d := newDiskEnv(t)
	d.putQueue("q", `{}`)
	all := messageBodies(2, "flaky")
	ids := d.send("q", all...)
	var failing atomic.Bool
	failing.Store(true)
	d.failReads(all[0], failing.Load)
	if ms := d.receive("q", 10, ""); !slices.Equal(bodies(ms), all[1:]) {
		t.Fatalf("receive: %q", bodies(ms))
	}
	failing.Store(false)
	ms := d.receive("q", 10, "")
	if len(ms) != 1 || ms[0].ID != ids[0] || ms[0].Deliveries != 1 || bodyOf(ms[0]) != all[0] {
		t.Fatalf("receive once reads work: %s", js(ms))
	}
	d.srv.Clock.Advance(time.Minute)
	var h api.Health
	d.call("GET", "/healthz", nil, 200, &h)
	if h.Status != "ok" {
		t.Fatalf("healthz a minute later: %s", js(h))
	}
}
