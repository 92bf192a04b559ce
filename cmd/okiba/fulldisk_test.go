package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

// TestServeBinaryFullDisk is the full disk with the real binary on a real file system: a
// 24 MiB tmpfs, mounted by the test on a directory of its own (root only; under CI=true
// it fails rather than skips without root) and unmounted when it ends, whatever
// happened. Writers fill it through the HTTP API until every one of them is refused
// with 507 disk_full and Retry-After, never with another error, while statfs still
// shows the reserve free. The process is then killed (SIGKILL) on the nearly full disk
// and started again: it starts, every acknowledged message is there, receives, acks and
// deletes drain the queue, and the checkpoints they bring free the space, so that sends
// are accepted again.
func TestServeBinaryFullDisk(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	const suite = "the full-disk test of the real binary"
	if os.Geteuid() != 0 {
		testkit.Missing(t, suite, "mounting a tmpfs needs root", "sudo go test -run TestServeBinaryFullDisk ./cmd/okiba")
	}
	mnt := t.TempDir() // a directory of this test's own: the mount point
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "okiba-fulldisk-test", mnt).CombinedOutput(); err != nil {
		testkit.Missing(t, suite, fmt.Sprintf("mount -t tmpfs failed: %v: %s", err, out), "run as root where mount works")
	}
	// Cleanups run last registered first: this one after the servers' kills (registered
	// by startBinary, later) and before t.TempDir's removal of the mount point.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount -l %s: %v: %s", mnt, err, out)
			}
		}
	})
	data := filepath.Join(mnt, "data")
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--segment-size", "2MiB", "--scrub-every", "off"}
	start := time.Now()
	srv := startBinary(t, bin, cleanEnv(), args...)
	hc := &http.Client{Timeout: 20 * time.Second}
	call := func(url, method, path string, body any) (int, http.Header, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	if code, _, b := call(srv.url, "PUT", "/v1/queues/q", map[string]any{}); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("create queue: %d %s", code, b)
	}

	// --- fill: four writers of 16 × 4 KiB a request, until each is refused ------------
	// A send refused for space is refused as a whole (a plain error), or entry by entry.
	type sendError struct {
		Code string `json:"code"`
	}
	type sendResult struct {
		Error   *sendError `json:"error"`
		Results []struct {
			ID    string     `json:"id"`
			Error *sendError `json:"error"`
		} `json:"results"`
	}
	var mu sync.Mutex
	acked := map[string]string{} // id → body, of every send acknowledged
	fill := func(url string, round int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		pad := strings.Repeat("x", 4096)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					msgs := make([]map[string]string, 16)
					for i := range msgs {
						msgs[i] = map[string]string{"body": fmt.Sprintf("r%d-w%d-%05d-%02d-%s", round, w, n, i, pad)}
					}
					b, _ := json.Marshal(map[string]any{"messages": msgs})
					resp, err := hc.Post(url+"/v1/queues/q/messages", "application/json", bytes.NewReader(b))
					if err != nil {
						errs <- err.Error()
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var r sendResult
					if err := json.Unmarshal(body, &r); err != nil || (len(r.Results) != len(msgs) && r.Error == nil) {
						errs <- fmt.Sprintf("a send answered %d %s", resp.StatusCode, body)
						return
					}
					refused, other := 0, len(r.Results) == 0 && r.Error.Code != "disk_full"
					mu.Lock()
					for i, e := range r.Results {
						switch {
						case e.Error == nil && e.ID != "":
							acked[e.ID] = msgs[i]["body"]
						case e.Error != nil && e.Error.Code == "disk_full":
							refused++
						default:
							other = true
						}
					}
					mu.Unlock()
					if other {
						errs <- fmt.Sprintf("a send while the disk filled answered %d %.500s: want only disk_full", resp.StatusCode, body)
						return
					}
					if len(r.Results) == 0 || refused == len(msgs) {
						if resp.StatusCode != http.StatusInsufficientStorage || resp.Header.Get("Retry-After") != "10" {
							errs <- fmt.Sprintf("a send refused for space answered %d, Retry-After %q: want 507 with Retry-After: 10", resp.StatusCode, resp.Header.Get("Retry-After"))
						}
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
	fill(srv.url, 1)
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	reserve := metric(t, hc, srv.url, "okiba_disk_reserve_bytes")
	t.Logf("%d messages of 4 KiB acknowledged on a 24 MiB tmpfs; refused with %d bytes free, reserve %d, mark %d (%v)",
		len(acked), free, int64(reserve), int64(metric(t, hc, srv.url, "okiba_disk_send_mark_bytes")), time.Since(start).Round(time.Millisecond))
	if free < int64(reserve) || reserve <= 0 {
		t.Fatalf("sends were refused with %d bytes free, less than the reserve %d: the disk filled past the mark", free, int64(reserve))
	}
	if len(acked) < 1000 {
		t.Fatalf("only %d messages acknowledged before sends were refused", len(acked))
	}
	if code, _, b := call(srv.url, "GET", "/healthz", nil); code != http.StatusOK {
		t.Fatalf("/healthz on the nearly full disk: %d %s", code, b)
	}
	if !strings.Contains(srv.log.String(), "disk nearly full") {
		t.Errorf("the log does not say the disk is nearly full:\n%s", srv.log.String())
	}

	// --- kill -9 on the nearly full disk, and start again -------------------------------
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	_ = srv.cmd.Wait()
	restart := time.Now()
	srv = startBinary(t, bin, cleanEnv(), args...)
	t.Logf("restarted on the nearly full disk in %v", time.Since(restart).Round(time.Millisecond))
	if code, _, b := call(srv.url, "GET", "/v1/queues/q", nil); code != http.StatusOK || !strings.Contains(string(b), `"ready":`+strconv.Itoa(len(acked))) {
		t.Fatalf("the queue after the restart: %d %s; want %d ready", code, b, len(acked))
	}

	// Sends are refused again before the disk is full, by the restarted broker too (its
	// first look at the disk may let in a little more than the last one's estimate did).
	before := len(acked)
	fill(srv.url, 2)
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free = int64(st.Bavail) * st.Bsize
	t.Logf("%d more acknowledged after the restart; refused with %d bytes free", len(acked)-before, free)
	if free < int64(reserve) {
		t.Fatalf("sends after the restart were refused with %d bytes free, less than the reserve %d", free, int64(reserve))
	}

	// --- drain: receive everything, ack half, delete the other half ------------------
	type delivery struct {
		ID, Receipt, Body string
	}
	seen := map[string]bool{}
	for {
		code, _, b := call(srv.url, "POST", "/v1/queues/q/receive", map[string]any{"max": 500, "visibility": "5m"})
		var r struct{ Messages []delivery }
		if code != http.StatusOK || json.Unmarshal(b, &r) != nil {
			t.Fatalf("receive on the nearly full disk: %d %.300s", code, b)
		}
		if len(r.Messages) == 0 {
			break
		}
		var receipts []string
		for i, m := range r.Messages {
			if want, ok := acked[m.ID]; !ok || want != m.Body || seen[m.ID] {
				t.Fatalf("received %s (%.20s…): not an acknowledged send, another body, or twice", m.ID, m.Body)
			}
			seen[m.ID] = true
			if i%2 == 0 {
				receipts = append(receipts, m.Receipt)
			} else if code, _, b := call(srv.url, "DELETE", "/v1/queues/q/messages/"+m.ID, nil); code != http.StatusNoContent {
				t.Fatalf("delete on the nearly full disk: %d %s", code, b)
			}
		}
		if code, _, b := call(srv.url, "POST", "/v1/queues/q/ack", map[string]any{"receipts": receipts}); code != http.StatusOK {
			t.Fatalf("ack on the nearly full disk: %d %.300s", code, b)
		}
	}
	if len(seen) != len(acked) {
		t.Fatalf("drained %d of the %d acknowledged messages after the restart", len(seen), len(acked))
	}

	// --- the checkpoints the drain brings free the space: sends come back ------------
	drained := time.Now()
	testkit.Eventually(t, 8*time.Second, func() bool {
		code, _, _ := call(srv.url, "POST", "/v1/queues/q/messages", map[string]any{"body": "after the drain"})
		return code == http.StatusOK
	}, "a send to be accepted once the queue was drained (free %v)", testkit.Lazy(func() string {
		var st syscall.Statfs_t
		_ = syscall.Statfs(mnt, &st)
		return strconv.FormatInt(int64(st.Bavail)*st.Bsize, 10)
	}))
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("sends accepted %v after the drain, with %d bytes free; the test took %v", time.Since(drained).Round(time.Millisecond),
		int64(st.Bavail)*st.Bsize, time.Since(start).Round(time.Millisecond))
	if after := int64(st.Bavail) * st.Bsize; after <= free {
		t.Errorf("%d bytes free after the drain, %d before: the drain freed nothing", after, free)
	}
	if code, log := srv.stop(t); code != 0 {
		t.Fatalf("serve exited with %d after SIGTERM:\n%s", code, log)
	}
}

var metricRE = regexp.MustCompile(`(?m)^(\w+) (\S+)$`)

// metric reads one gauge without labels from the server's /metrics.
func metric(t *testing.T, hc *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, m := range metricRE.FindAllStringSubmatch(string(b), -1) {
		if m[1] == name {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s:\n%.2000s", name, b)
	return 0
}
