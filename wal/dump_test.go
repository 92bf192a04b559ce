package wal_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

func TestDump(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	opts := memOpts(m)
	l, _ := openLog(t, opts, 0)
	var positions []wal.Pos
	for i := 0; len(l.Segments()) < 2; i++ {
		positions = append(positions, appendWait(t, l, payload(i)))
	}
	end := l.End()
	l.Close()
	if err := wal.SaveCheckpoint(m, "/wal", positions[3], []byte("state")); err != nil {
		t.Fatal(err)
	}
	writeAt(t, m, segPath(2), int64(end.Offset())+16, []byte("junk"))
	writeAt(t, m, "/wal/00000003.wal.tmp", 0, []byte("partial"))

	var out strings.Builder
	if err := wal.Dump(&out, opts); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"00000001.wal  segment 1, 4096 bytes, format version 2",
		"        " + strconv.Itoa(int(positions[1].Offset())-24) + "  batch trailer: 1 records in ",
		"clean end at offset",
		"00000002.wal  segment 2",
		"bad frame at offset " + strconv.Itoa(int(end.Offset())) + ": zero length word followed by non-zero bytes; nothing valid follows",
		"00000003.wal.tmp  leftover temporary file",
		"checkpoint at " + positions[3].String() + ", 5 payload bytes",
		"        " + strconv.Itoa(int(positions[1].Offset())) + "  ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dump lacks %q:\n%s", want, text)
		}
	}
	// Dump only reads: the torn tail is still there.
	if b := readAll(t, m, segPath(2)); string(b[end.Offset()+16:end.Offset()+20]) != "junk" {
		t.Fatal("Dump modified the log")
	}
}

// TestDumpShowsDamageInLastBatch: the dump says what Open will make of a damaged last
// batch, and lists the quarantine Open filled when it refused.
func TestDumpShowsDamageInLastBatch(t *testing.T) {
	t.Parallel()
	m, want, _ := lastBatchLog(t)
	last := want[len(want)-1]
	flipByte(t, m, segPath(1), int64(last.pos.Offset())+12)
	if _, _, err := tryOpen(memOpts(m), 0); err == nil {
		t.Fatal("Open accepted a damaged last batch")
	}
	var out strings.Builder
	if err := wal.Dump(&out, memOpts(m)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"7 records, 5 batch trailers, then a bad frame at offset " + strconv.Itoa(int(last.pos.Offset())) + ": checksum mismatch",
		"corruption in the last batch",
		"quarantine/  2 files",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("dump lacks %q:\n%s", s, out.String())
		}
	}
}
