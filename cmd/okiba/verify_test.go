package main

import (
	"path/filepath"
	"testing"
)

// TestVerify runs okiba verify on a real data directory: refused while a broker holds
// it; clean once stopped; after a bit of a message's body flips on disk, exit 1 with
// the segment, the offset and the message's id named; nothing changed by it.
func TestVerify(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	url, log, stop := serveInProcess(t, map[string]string{"OKIBA_DATA": dir}, "--addr", "127.0.0.1:0", "--segment-size", "2MiB")
	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url}}
	h.ok("queue", "create", "q")
	ids := h.send("q", "sound-one", "the-body-that-rots-on-disk", "sound-two")
	contains(t, "stderr", h.fails(1, "verify", dir).err, "okiba verify: data directory is in use", "scrubs itself")
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, log.String())
	}
	contains(t, "stdout", h.ok("verify", dir), "checked "+dir+": 2 segments", "1 checkpoints", "no damage found")

	seg, off := findLast(t, filepath.Join(dir, "wal"), "the-body-that-rots")
	flipBit(t, seg, off+4)
	r := h.fails(1, "verify", dir)
	contains(t, "stdout", r.out, "DAMAGED    "+seg+" at offset", "checksum mismatch", "bodies of messages "+ids[1])
	contains(t, "stderr", r.err, "1 damaged frames in "+dir, "backup")
	contains(t, "stdout again", h.fails(1, "verify", dir).out, "bodies of messages "+ids[1])
	h.fails(2, "verify")
	contains(t, "no log", h.fails(1, "verify", filepath.Join(t.TempDir(), "nothing")).err, "holds no okiba log")
}
