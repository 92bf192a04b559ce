package broker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

// smallDisk is a file system of a fixed capacity over MemFS: a write, preallocation or
// truncation that needs more space than is left fails with ENOSPC, as on a real disk,
// and free says what is left, as statfs does.
type smallDisk struct {
	m        *vfs.MemFS
	fs       *vfs.Faulty
	capacity atomic.Int64
	enospc   atomic.Int64
}

func newSmallDisk(capacity int64) *smallDisk {
	d := &smallDisk{m: vfs.NewMemFS()}
	d.capacity.Store(capacity)
	d.fs = vfs.NewFaulty(d.m, d.hook)
	return d
}

// used is the bytes every file under / holds.
func (d *smallDisk) used() int64 {
	var walk func(dir string) int64
	walk = func(dir string) int64 {
		names, _ := d.m.ReadDir(dir)
		n := int64(0)
		for _, name := range names {
			p := filepath.Join(dir, name)
			fi, err := d.m.Stat(p)
			switch {
			case err != nil:
			case fi.IsDir():
				n += walk(p)
			default:
				n += fi.Size()
			}
		}
		return n
	}
	return walk("/")
}

func (d *smallDisk) free(string) (int64, error) { return d.capacity.Load() - d.used(), nil }

func (d *smallDisk) hook(e vfs.Event) error {
	var end int64
	switch e.Op {
	case vfs.OpWrite:
		end = e.Offset + e.Length
	case vfs.OpPreallocate, vfs.OpTruncate:
		end = e.Length
	default:
		return nil
	}
	size := int64(0)
	if fi, err := d.m.Stat(e.Name); err == nil {
		size = fi.Size()
	}
	if grow := end - size; grow > 0 && d.used()+grow > d.capacity.Load() {
		d.enospc.Add(1)
		return fmt.Errorf("%s %s: %w", e.Op, e.Name, syscall.ENOSPC)
	}
	return nil
}

func sendN(b *Broker, q string, n, size int) error {
	in := make([]queue.SendInput, n)
	for i := range in {
		in[i] = queue.SendInput{Payload: queue.Payload{Body: []byte(strings.Repeat("d", size))}, Delay: -1}
	}
	res, err := b.Send(ctx, q, in)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// fillDisk sends from writers goroutines at once until every one of them is refused
// for space, and fails the test on any other error.
func fillDisk(t *testing.T, b *Broker, q string, writers int) int64 {
	t.Helper()
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := sendN(b, q, 8, 4096)
				if errors.Is(err, ErrDiskFull) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				sent.Add(8)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a send while the disk filled: %v, want only ErrDiskFull", err)
	}
	return sent.Load()
}

// drainAck receives and acks everything in q, failing on any error.
func drainAck(t *testing.T, b *Broker, q string) int {
	t.Helper()
	n := 0
	for {
		ms, err := b.Receive(ctx, q, ReceiveOptions{Max: 100, Visibility: time.Minute})
		if err != nil {
			t.Fatalf("receive while sends are refused: %v", err)
		}
		if len(ms) == 0 {
			return n
		}
		rs := make([]string, len(ms))
		for i, m := range ms {
			rs[i] = m.Receipt
		}
		res, err := b.Ack(ctx, q, rs)
		if err != nil {
			t.Fatalf("ack while sends are refused: %v", err)
		}
		for _, e := range res {
			if e != nil {
				t.Fatalf("ack: %v", e)
			}
		}
		n += len(ms)
	}
}

// TestFullDiskNeverWedges is finding 3 on a disk of 6 MiB: fast writers are refused with
// ErrDiskFull before the disk is full (on the write path: the file system's free space
// is not looked at more often than the broker's rules say), the log never meets ENOSPC,
// receives, nacks, deletes, purges and acks go on in the reserve, and the space they
// free lets sends in again.
func TestFullDiskNeverWedges(t *testing.T) {
	t.Parallel()
	d := newSmallDisk(6 << 20)
	var looks atomic.Int64
	cfg := Config{Dir: "/data", FS: d.fs, SegmentSize: 256 << 10, smallSegments: true, CacheBytes: -1,
		FreeSpace: func(dir string) (int64, error) { looks.Add(1); return d.free(dir) }}
	b := start(t, cfg)
	defer b.Close()
	mustQueue(t, b, "q", nil)
	mustQueue(t, b, "other", nil)
	send(t, b, "other", "to be purged", "to be deleted")

	looks.Store(0)
	sent := fillDisk(t, b, "q", 4)
	ds := b.DiskSpace()
	free, _ := d.free("")
	if n := d.enospc.Load(); n != 0 {
		t.Fatalf("the disk ran full (%d writes refused ENOSPC) before sends were refused", n)
	}
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy after the disk filled: %v", err)
	}
	if !ds.Refusing || free < ds.Reserve || ds.Reserve < cfg.SegmentSize {
		t.Fatalf("sends refused with %d bytes free, %+v: want refusing, with at least the reserve free", free, ds)
	}
	if segs := sent * 4096 / cfg.SegmentSize; looks.Load() > 4*segs+20 {
		t.Fatalf("%d statfs calls for %d sends across about %d segments: the estimate should carry between rolls", looks.Load(), sent, segs)
	}
	t.Logf("%d messages of 4 KiB sent; refused with %d bytes free (mark %d, reserve %d)", sent, free, ds.Mark, ds.Reserve)

	// Draining works in the reserve: a nack, a delete, a purge, then receive and ack.
	ms := recv(t, b, "q", 1, time.Minute)
	if res, err := b.Nack(ctx, "q", []string{ms[0].Receipt}, 0); err != nil || res[0] != nil {
		t.Fatalf("nack while refusing sends: %v %v", err, res)
	}
	if err := b.DeleteMessage(ctx, "q", ms[0].ID); err != nil {
		t.Fatalf("delete while refusing sends: %v", err)
	}
	if _, err := b.Purge(ctx, "other"); err != nil {
		t.Fatalf("purge while refusing sends: %v", err)
	}
	if got := drainAck(t, b, "q"); int64(got) != sent-1 {
		t.Fatalf("drained %d of %d", got, sent-1)
	}
	// What was settled frees space by itself (the checkpoints come sooner while low).
	testkit.Eventually(t, 20*time.Second, func() bool {
		return sendN(b, "q", 1, 100) == nil
	}, "sends to be accepted again once the queue is drained")
	if n := d.enospc.Load(); n != 0 {
		t.Fatalf("%d writes met ENOSPC while draining", n)
	}
	if err := b.Healthy(); err != nil {
		t.Fatal(err)
	}
}

// TestStartOnANearlyFullDisk: a broker stopped on a full disk starts again with less
// than a segment free — no segment created ahead of need, no preallocation failure —
// serves receives and acks, refuses sends as disk_full (not storage_failed), and takes
// them again once there is room (the filler gone, the queue drained).
func TestStartOnANearlyFullDisk(t *testing.T) {
	t.Parallel()
	d := newSmallDisk(4 << 20)
	cfg := Config{Dir: "/data", FS: d.fs, SegmentSize: 256 << 10, smallSegments: true, CacheBytes: -1, FreeSpace: d.free}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	sent := fillDisk(t, b, "q", 1)
	if err := b.Close(); err != nil {
		t.Fatalf("Close on a full disk: %v", err)
	}
	// Someone else takes all but half a segment.
	free, _ := d.free("")
	filler := free - cfg.SegmentSize/2
	if err := vfs.WriteFile(d.m, "/filler", vfs.FileMode, make([]byte, filler)); err != nil {
		t.Fatal(err)
	}
	b = start(t, cfg)
	defer b.Close()
	if err := sendN(b, "q", 1, 100); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("send on a nearly full disk: %v, want ErrDiskFull", err)
	}
	ms := recv(t, b, "q", 10, time.Minute)
	rs := make([]string, len(ms))
	for i, m := range ms {
		rs[i] = m.Receipt
	}
	if _, err := b.Ack(ctx, "q", rs); err != nil || len(ms) != 10 {
		t.Fatalf("receive and ack on a nearly full disk: %d messages, %v", len(ms), err)
	}
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	if err := d.m.Remove("/filler"); err != nil {
		t.Fatal(err)
	}
	if got := drainAck(t, b, "q"); int64(got) != sent-10 {
		t.Fatalf("drained %d, want %d", got, sent-10)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return sendN(b, "q", 1, 100) == nil }, "sends once the filler is gone and the queue drained")
	if n := d.enospc.Load(); n != 0 {
		t.Fatalf("%d writes met ENOSPC", n)
	}
}

// TestPreallocationFailureAtStart: a start whose creation of a segment ahead of need
// fails for space (the estimate knows nothing yet: statfs cannot say) still serves.
func TestPreallocationFailureAtStart(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	b := start(t, Config{Dir: "/data", FS: m, MinFreeBytes: -1})
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "kept")
	b.Close()
	f := vfs.NewFaulty(m, func(e vfs.Event) error {
		if e.Op == vfs.OpPreallocate {
			return fmt.Errorf("preallocate %s: %w", e.Name, syscall.ENOSPC)
		}
		return nil
	})
	b = start(t, Config{Dir: "/data", FS: f, FreeSpace: func(string) (int64, error) { return 0, errors.New("statfs: not supported") }})
	defer b.Close()
	if got := bodies(recv(t, b, "q", 10, time.Minute)); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("receive after the start: %q", got)
	}
	send(t, b, "q", "and more")
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
}

// TestReadsAfterStorageFailure: once a write has failed, peek and lookups by id still
// answer (from memory, the durable bodies read from the log), while writes are refused.
func TestReadsAfterStorageFailure(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fs := vfs.NewFaulty(vfs.NewMemFS(), func(e vfs.Event) error {
		if fail.Load() && e.Op == vfs.OpSync {
			return vfs.ErrInjected
		}
		return nil
	})
	b := start(t, Config{Dir: "/data", FS: fs, NoPrecreate: true, CacheBytes: -1})
	defer b.Close()
	mustQueue(t, b, "q", nil)
	ids := send(t, b, "q", "one", "two")
	fail.Store(true)
	if _, err := b.Send(ctx, "q", []queue.SendInput{{Payload: queue.Payload{Body: []byte("lost")}, Delay: -1}}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("send: %v", err)
	}
	page, err := b.Peek(ctx, "q", 0, 10)
	if err != nil {
		t.Fatalf("peek after a storage failure: %v", err)
	}
	if len(page) != 3 || string(page[0].Payload.Body) != "one" || string(page[1].Payload.Body) != "two" ||
		len(page[2].Payload.Body) != 0 || len(page[2].Payload.Attrs) != 1 || page[2].Payload.Attrs[0].Name != HeaderUnreadable {
		t.Fatalf("peek: %+v: want the two durable bodies and the failed send's marked unreadable", page)
	}
	m, err := b.GetMessage(ctx, "q", ids[1])
	if err != nil || string(m.Payload.Body) != "two" {
		t.Fatalf("lookup after a storage failure: %+v %v", m, err)
	}
	if _, err := b.Receive(ctx, "q", ReceiveOptions{Max: 1, Visibility: -1}); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("receive after a storage failure: %v, want ErrStorageFailed", err)
	}
}

// TestFullTmpfs is finding 3 on a real file system: an 8 MiB tmpfs, mounted by the test
// (root only), filled by fast writers through the real statfs and fallocate.
func TestFullTmpfs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testkit.Missing(t, "the full-disk test on a real file system", "mounting a tmpfs needs root", "sudo go test -run TestFullTmpfs ./broker")
	}
	dir := t.TempDir()
	if out, err := runCmd("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir); err != nil {
		testkit.Missing(t, "the full-disk test on a real file system", fmt.Sprintf("mount -t tmpfs failed: %v: %s", err, out), "run as root where mount works")
	}
	t.Cleanup(func() {
		if out, err := runCmd("umount", dir); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	cfg := Config{Dir: filepath.Join(dir, "data"), SegmentSize: 512 << 10, smallSegments: true, CacheBytes: -1}
	b := start(t, cfg)
	mustQueue(t, b, "q", nil)
	sent := fillDisk(t, b, "q", 4)
	free, err := freeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy on a full tmpfs: %v", err)
	}
	if ds := b.DiskSpace(); free < ds.Reserve {
		t.Fatalf("refused with %d bytes free: below the reserve, %+v", free, ds)
	}
	t.Logf("%d messages of 4 KiB on an 8 MiB tmpfs; refused with %d bytes free", sent, free)
	if err := b.Close(); err != nil {
		t.Fatalf("Close on a full tmpfs: %v", err)
	}
	// Nearly full: all but a quarter segment taken by someone else.
	free, _ = freeSpace(dir)
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, free-cfg.SegmentSize/4), 0o600); err != nil {
		t.Fatal(err)
	}
	b = start(t, cfg)
	defer b.Close()
	if err := sendN(b, "q", 1, 100); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("send on a nearly full tmpfs: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if got := drainAck(t, b, "q"); int64(got) != sent {
		t.Fatalf("drained %d of %d after a restart on a nearly full tmpfs", got, sent)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return sendN(b, "q", 1, 100) == nil }, "sends once drained")
	if err := b.Healthy(); err != nil {
		t.Fatal(err)
	}
}

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
