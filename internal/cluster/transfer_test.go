package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/queue"
)

var errCut = errors.New("test: the connection broke")

// stateTap is a node's transport as the test sees it: it records every request for a
// state (its Range, the answer's status and length, the bytes read) and, armed, breaks
// the next answer's body after half of it once, then runs after.
type stateTap struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	armed bool
	after func()
	reqs  []tapped
	bytes int64
}

type tapped struct {
	rng    string
	status int
	length int64
	etag   string
}

func (s *stateTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(req)
	if err != nil || req.URL.Path != SnapshotPath {
		return resp, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, tapped{rng: req.Header.Get("Range"), status: resp.StatusCode, length: resp.ContentLength, etag: resp.Header.Get("ETag")})
	b := &tapBody{rc: resp.Body, s: s, limit: -1}
	if s.armed && resp.ContentLength > 1 {
		s.armed = false
		b.limit = resp.ContentLength / 2
	}
	resp.Body = b
	return resp, nil
}

func (s *stateTap) seen() ([]tapped, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs), s.bytes
}

type tapBody struct {
	rc    io.ReadCloser
	s     *stateTap
	limit int64 // bytes left before the break; -1: none
}

func (b *tapBody) Read(p []byte) (int, error) {
	if b.limit == 0 {
		b.limit = -1
		if b.s.after != nil {
			b.s.after()
		}
		return 0, errCut
	}
	if b.limit > 0 && int64(len(p)) > b.limit {
		p = p[:b.limit]
	}
	n, err := b.rc.Read(p)
	if b.limit > 0 {
		b.limit -= int64(n)
	}
	b.s.mu.Lock()
	b.s.bytes += int64(n)
	b.s.mu.Unlock()
	return n, err
}

func (b *tapBody) Close() error { return b.rc.Close() }

// tapping has the named nodes' transports go through their taps.
func tapping(taps map[string]*stateTap) func(*member, *Config) {
	return func(m *member, cfg *Config) {
		if tap := taps[m.name]; tap != nil {
			tap.rt = cfg.Client.Transport
			cfg.Client = &http.Client{Timeout: cfg.Client.Timeout, Transport: tap}
		}
	}
}

// spools lists the spool files in a node's data directory.
func spools(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := os.ReadDir(filepath.Join(dir, transferDir))
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n.Name(), spoolPrefix) {
			out = append(out, n.Name())
		}
	}
	return out
}

// getState asks m for its state as another node would, with the cluster's proof and
// the given headers, and reads the whole answer.
func getState(c *testCluster, m *member, query string, hdr ...string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodGet, c.peers[slices.Index(c.nodes, m)].URL+SnapshotPath+query, nil)
	req.Header.Set(SecretHeader, proof(testSecret))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func mustGetState(t *testing.T, c *testCluster, m *member, query string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, body, err := getState(c, m, query, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A transfer of a state that breaks halfway resumes from the byte it broke at, on the
// same spool, and installs; one whose member replaced its spool in between starts over
// on the new one (If-Range) and installs it; a range past the spool, or not a range,
// is refused with 416 and changes nothing.
func TestStateTransfersResume(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, 3, 40, 5)
	l := c.leader()
	mustQueue(t, l.b, "jobs")
	f := c.follower(l)
	c.stop(f)
	// Three at a time, at least an entry each three: the log must outgrow SnapshotEntries
	// (150 concurrent sends may share a few entries).
	for i := 0; i < 150; i += 3 {
		sendN(t, l.b, "jobs", i, 3)
	}
	c.compactLeader(l)

	taps := map[string]*stateTap{f.name: {armed: true}, "n4": {armed: true}}
	c.config = tapping(taps)

	// Broken halfway, resumed at the byte it broke at.
	c.start(f)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 150 && f.raft.Status().Installs > 0 },
		"the follower to install the state")
	reqs, bytes := taps[f.name].seen()
	if len(reqs) != 2 || reqs[0].status != http.StatusOK || reqs[1].status != http.StatusPartialContent {
		t.Fatalf("the follower's requests for the state: %+v", reqs)
	}
	size := reqs[0].length
	if want := fmt.Sprintf("bytes=%d-", size/2); reqs[1].rng != want || reqs[1].length != size-size/2 || reqs[1].etag != reqs[0].etag {
		t.Fatalf("the resumed request: %+v, want Range %s of %s", reqs[1], want, reqs[0].etag)
	}
	if bytes != size || bytes >= 2*size {
		t.Fatalf("the follower received %d bytes of a %d-byte state", bytes, size)
	}
	if st := f.raft.Status(); st.SnapshotResumes != 1 || st.Installs != 1 {
		t.Fatalf("the follower resumed %d transfers and installed %d states, want 1 and 1", st.SnapshotResumes, st.Installs)
	}
	if _, err := os.Stat(filepath.Join(f.dir, transferDir, downloadFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the download is still there after the install: %v", err)
	}
	sendN(t, l.b, "jobs", 150, 10)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 160 }, "the follower to carry on from the log")
	first := spools(t, l.dir)
	if len(first) != 1 {
		t.Fatalf("the leader holds spools %v, want one", first)
	}

	// Broken halfway, and meanwhile another member asks for a newer state: the leader
	// replaces its spool, and the resume starts over on the new one.
	taps["n4"].after = func() {
		// On n4's goroutine: errors, not fatals.
		for i := range 10 {
			res, err := l.b.Send(context.Background(), "jobs", []queue.SendInput{{Payload: queue.Payload{Body: fmt.Appendf(nil, "m%04d", 160+i)}, Delay: -1}})
			if err == nil {
				err = res[0].Err
			}
			if err != nil {
				t.Errorf("send: %v", err)
			}
		}
		resp, body, err := getState(c, l, fmt.Sprintf("?%s=%d", minParam, l.b.Applied()))
		if err != nil || resp.StatusCode != http.StatusOK || int64(len(body)) != resp.ContentLength {
			t.Errorf("a fresh request for the state: %v, %d bytes", err, len(body))
		}
	}
	n4 := c.join("n4", l)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(n4.b, "jobs") == 170 && n4.raft.Status().Installs > 0 },
		"the new member to install the state")
	reqs, bytes = taps["n4"].seen()
	if len(reqs) != 2 || reqs[0].status != http.StatusOK || reqs[1].status != http.StatusOK || reqs[1].etag == reqs[0].etag {
		t.Fatalf("n4's requests for the state: %+v", reqs)
	}
	if want := fmt.Sprintf("bytes=%d-", reqs[0].length/2); reqs[1].rng != want {
		t.Fatalf("n4's second request asked for %q, want %q", reqs[1].rng, want)
	}
	if bytes != reqs[0].length/2+reqs[1].length {
		t.Fatalf("n4 received %d bytes: half of %d, then %d", bytes, reqs[0].length, reqs[1].length)
	}
	if st := n4.raft.Status(); st.SnapshotResumes != 0 || st.Installs != 1 {
		t.Fatalf("n4 resumed %d transfers and installed %d states, want 0 and 1", st.SnapshotResumes, st.Installs)
	}
	if now := spools(t, l.dir); len(now) != 1 || slices.Equal(now, first) {
		t.Fatalf("the leader holds spools %v, first %v: want one, a new one", now, first)
	}

	// Ranges the spool cannot answer.
	resp, whole := mustGetState(t, c, l, "")
	tag := resp.Header.Get("ETag")
	for _, rng := range []string{fmt.Sprintf("bytes=%d-", len(whole)), "bytes=x-"} {
		resp, body := mustGetState(t, c, l, "", "Range", rng, "If-Range", tag)
		if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("Range %s: %d %q", rng, resp.StatusCode, body)
		}
	}
	resp, body := mustGetState(t, c, l, "", "Range", "bytes=10-", "If-Range", tag)
	if resp.StatusCode != http.StatusPartialContent || string(body) != string(whole[10:]) {
		t.Fatalf("Range bytes=10-: %d, %d bytes of %d", resp.StatusCode, len(body), len(whole))
	}
	if resp, body := mustGetState(t, c, l, "?"+minParam+"=soon"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "a number") {
		t.Fatalf("min=soon: %d %q", resp.StatusCode, body)
	}
	if now := spools(t, l.dir); len(now) != 1 {
		t.Fatalf("the leader holds spools %v after the refused requests", now)
	}
}

// A node removes the spools and the download it left when it stopped, and nothing else
// of its data directory's; a spool no one reads is removed after Config.SnapshotSpoolIdle.
func TestTransferFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	td := filepath.Join(dir, transferDir)
	if err := os.MkdirAll(td, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"snapshot-42.okb", spoolTemp, downloadFile, "members", "snapshot-notes.txt"} {
		if err := os.WriteFile(filepath.Join(td, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeTransfers(vfs.OS, dir); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(td)
	var left []string
	for _, n := range names {
		left = append(left, n.Name())
	}
	if !slices.Equal(left, []string{"members", "snapshot-notes.txt"}) {
		t.Fatalf("left %v", left)
	}
	if err := removeTransfers(vfs.OS, t.TempDir()); err != nil {
		t.Fatalf("a data directory without transfers: %v", err)
	}

	r := &Raft{cfg: Config{FS: vfs.OS, Dir: dir, SnapshotSpoolIdle: 20 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	path := filepath.Join(td, "snapshot-7.okb")
	if err := os.WriteFile(path, []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.xfer.mu.Lock()
	r.xfer.cur = &spool{path: path, tag: spoolTag{applied: 7, size: 5}, made: time.Now()}
	r.xfer.lastUsed = time.Now()
	r.armIdle()
	r.xfer.mu.Unlock()
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, err := os.Stat(path)
		return errors.Is(err, os.ErrNotExist)
	}, "the idle spool to be removed")
	r.closeTransfers()
}
