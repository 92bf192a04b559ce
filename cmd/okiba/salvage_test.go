package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSalvage runs okiba salvage on a real data directory whose last acknowledged send
// lost a bit: refused while a broker holds the directory; okiba serve refuses the
// damaged copy and names the command; salvage cuts the damaged batch, keeping a copy,
// and says what it cut; then okiba serve starts with every other message.
func TestSalvage(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	// Small segments: the test copies and scans them whole.
	url, log, stop := serveInProcess(t, map[string]string{"OKIBA_DATA": dir}, "--addr", "127.0.0.1:0", "--segment-size", "2MiB")
	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url}}
	h.ok("queue", "create", "q")
	h.send("q", "kept-1", "kept-2", "the-last-message-which-rots")

	r := h.fails(1, "salvage", dir)
	contains(t, "stderr", r.err, "okiba salvage: data directory is in use", "stop the okiba serve")

	// The directory as a power cut would leave it now (every send was fsynced before
	// its answer): the running broker's files, copied.
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, log.String())
	}
	seg, off := findLast(t, filepath.Join(crashed, "wal"), "the-last-message-which-rots")
	flipBit(t, seg, off+5)

	// Bounded: a serve that wrongly started would run until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r = h.failsWith(runOpts{ctx: ctx}, 1, "serve", "--addr", "127.0.0.1:0", "--data", crashed, "--segment-size", "2MiB")
	contains(t, "stderr", r.err, "corrupt log segment "+seg, "last batch", "okiba salvage "+crashed, "quarantine")

	out := h.ok("salvage", crashed)
	contains(t, "stdout", out, "cut the damaged end of the log of "+crashed, "file     "+seg,
		"frames   2 cut, 1 of them records", "checksum mismatch", "now okiba serve --data "+crashed+" can start")
	m := regexp.MustCompile(`copy     (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("salvage did not name the copy:\n%s", out)
	}
	if b, err := os.ReadFile(m[1]); err != nil || !bytes.Contains(b, []byte("message-which-rots")) {
		t.Fatalf("the quarantine copy %s does not hold the damaged record: %v", m[1], err)
	}
	contains(t, "second salvage", h.ok("salvage", crashed), "nothing to cut")

	url, log, stop = serveInProcess(t, map[string]string{"OKIBA_DATA": crashed}, "--addr", "127.0.0.1:0", "--segment-size", "2MiB")
	h.env["OKIBA_SERVER"] = url
	got := h.recvJSON("q", "--max", "10")
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Body)
	}
	if strings.Join(bodies, " ") != "kept-1 kept-2" {
		t.Fatalf("after salvage the queue holds %q, want the two messages before the damaged one", bodies)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve after salvage exited with %d:\n%s", code, log.String())
	}
	h.fails(2, "salvage")
	contains(t, "no log", h.fails(1, "salvage", filepath.Join(t.TempDir(), "nothing")).err, "holds no okiba log")
}

// copyDir copies the regular files under src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// findLast returns the segment under dir holding the last occurrence of s, and its
// offset there.
func findLast(t *testing.T, dir, s string) (string, int64) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	for i := len(names) - 1; i >= 0; i-- {
		b, err := os.ReadFile(names[i])
		if err != nil {
			t.Fatal(err)
		}
		if off := bytes.LastIndex(b, []byte(s)); off >= 0 {
			return names[i], int64(off)
		}
	}
	t.Fatalf("%q is in no segment of %s", s, dir)
	return "", 0
}

func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
