package wal_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// Damage in the log's last batch: Open must tell a write that never completed (torn,
// never acknowledged: discarded) from bytes written whole and damaged since (refused,
// kept, and cut off only by Salvage).

// lastBatchLog writes five batches of one record and then a batch of three, all
// acknowledged, and returns the records and the offset just past the last trailer.
func lastBatchLog(t *testing.T) (*vfs.MemFS, []rec, int64) {
	t.Helper()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	var want []rec
	for i := range 4 {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	want = append(want, appendBatch(t, f, l, payload(4), payload(5), payload(6), payload(7))...)
	end := int64(l.End().Offset())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return m, want, end
}

// expectRefusal opens the log and requires a *CorruptionError at file:off, with the
// damaged bytes [off, to) of the unchanged segment copied to quarantine.
func expectRefusal(t *testing.T, m *vfs.MemFS, start wal.Pos, off, to int64, salvageable bool) *wal.CorruptionError {
	t.Helper()
	before := readAll(t, m, segPath(1))
	_, _, err := tryOpen(memOpts(m), start)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("Open = %v, want a *CorruptionError", err)
	}
	if ce.File != segPath(1) || ce.Offset != off || ce.Salvageable != salvageable {
		t.Fatalf("CorruptionError at %s:%d, salvageable %v; want %s:%d, %v (%v)", ce.File, ce.Offset, ce.Salvageable, segPath(1), off, salvageable, err)
	}
	disk := m.Crash()
	if !bytes.Equal(readAll(t, disk, segPath(1)), before) {
		t.Fatal("Open changed the segment it refused")
	}
	q := fmt.Sprintf("/wal/quarantine/00000001.wal-%d", off)
	if ce.Quarantine != q+".bin" {
		t.Fatalf("Quarantine = %q, want %q", ce.Quarantine, q+".bin")
	}
	if got := readAll(t, disk, q+".bin"); !bytes.Equal(got, before[off:to]) {
		t.Fatalf("quarantine holds %d bytes, want the %d from the bad frame on", len(got), to-off)
	}
	note := string(readAll(t, disk, q+".txt"))
	for _, s := range []string{segPath(1), fmt.Sprintf("[%d, %d)", off, to), "refused", "okiba salvage"} {
		if !strings.Contains(note, s) {
			t.Fatalf("quarantine note lacks %q:\n%s", s, note)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, ce.Quarantine) || salvageable != strings.Contains(msg, "okiba salvage DATA-DIR") {
		t.Fatalf("message does not name the quarantine copy and (only when it can) the salvage command: %s", msg)
	}
	return ce
}

// salvage runs Salvage, expects one cut of [from, to) with the given frame and record
// counts, and checks that the cut is zero on disk and the copy still there.
func salvage(t *testing.T, m *vfs.MemFS, from, to int64, frames, records int) {
	t.Helper()
	before := readAll(t, m, segPath(1))
	rep, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"})
	if err != nil {
		t.Fatalf("Salvage: %v", err)
	}
	want := wal.Cut{File: segPath(1), From: from, To: to, Frames: frames, Records: records,
		Quarantine: fmt.Sprintf("/wal/quarantine/00000001.wal-%d.bin", from)}
	if len(rep.Cuts) != 1 {
		t.Fatalf("Salvage cut %d ranges, want 1: %+v", len(rep.Cuts), rep)
	}
	got := rep.Cuts[0]
	got.Reason = ""
	if got != want {
		t.Fatalf("Salvage cut %+v, want %+v", got, want)
	}
	disk := m.Crash()
	after := readAll(t, disk, segPath(1))
	if len(after) != len(before) || !allZeroFrom(after[:to], from) || !bytes.Equal(after[:from], before[:from]) {
		t.Fatal("the cut is not exactly [from, to) zeroed durably, the segment keeping its size")
	}
	if !bytes.Equal(readAll(t, disk, want.Quarantine), before[from:to]) {
		t.Fatal("the quarantine copy does not hold the bytes cut")
	}
	if note := string(readAll(t, disk, strings.TrimSuffix(want.Quarantine, ".bin")+".txt")); !strings.Contains(note, "Salvage zeroed") {
		t.Fatalf("the note does not say the bytes were cut:\n%s", note)
	}
}

// reopenAfterSalvage opens the salvaged log, which must start cleanly with want,
// append to it, and open cleanly again.
func reopenAfterSalvage(t *testing.T, m *vfs.MemFS, want []rec) {
	t.Helper()
	var logs logBuffer
	opts := memOpts(m)
	opts.Logger = logs.logger()
	l, got := openLog(t, opts, 0)
	sameRecords(t, got, want)
	want = append(slices.Clone(want), rec{appendWait(t, l, []byte("after salvage")), "after salvage"})
	l.Close()
	l, got = openLog(t, opts, 0)
	sameRecords(t, got, want)
	l.Close()
	if logs.String() != "" {
		t.Fatalf("the salvaged log did not open cleanly:\n%s", logs.String())
	}
}

// TestRotInLastRecordIsRefused: the last record of an acknowledged batch, the
// last record of the log, loses a bit. Open must refuse rather than take it for a
// torn write, keep the segment as it is and a copy of the damaged bytes; Salvage
// then cuts the record off, reporting it, and the log opens with the others.
func TestRotInLastRecordIsRefused(t *testing.T) {
	t.Parallel()
	m, want, end := lastBatchLog(t)
	last := want[len(want)-1]
	flipByte(t, m, segPath(1), int64(last.pos.Offset())+12)
	expectRefusal(t, m, 0, int64(last.pos.Offset()), end, true)
	// Every start refuses the same way: Open never gives up on the record by itself.
	expectRefusal(t, m, 0, int64(last.pos.Offset()), end, true)

	salvage(t, m, int64(last.pos.Offset()), end, 2, 1) // the record and its batch's trailer
	reopenAfterSalvage(t, m, want[:len(want)-1])
}

// TestRotInLastBatchTrailerIsRefused flips every bit of the trailer that ends the log.
// None may pass for a torn write. Salvage cuts only the trailer: the batch's records
// are intact, and the log keeps them all.
func TestRotInLastBatchTrailerIsRefused(t *testing.T) {
	t.Parallel()
	m0, want, end := lastBatchLog(t)
	at := end - 24
	if fr := walkFrames(readAll(t, m0, segPath(1))); !fr[len(fr)-1].trailer || fr[len(fr)-1].off != at {
		t.Fatalf("the log does not end with a trailer at %d: %+v", at, fr[len(fr)-1])
	}
	for bit := range 24 * 8 {
		m := m0.Crash()
		b := readAll(t, m, segPath(1))
		writeAt(t, m, segPath(1), at+int64(bit/8), []byte{b[at+int64(bit/8)] ^ 1<<(bit%8)})
		expectRefusal(t, m, 0, at, end, true)
		rep, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"})
		if err != nil || len(rep.Cuts) != 1 || rep.Cuts[0].From != at || rep.Cuts[0].To != end || rep.Cuts[0].Frames != 1 {
			t.Fatalf("bit %d: Salvage = %+v, %v", bit, rep, err)
		}
		reopenAfterSalvage(t, m, want)
	}
}

// TestRotInEarlierRecordOfLastBatchIsRefused: the trailer is whole, so the batch
// was written whole; a bad record before it is damage. Salvage cuts from it on,
// taking the intact records after it in the batch, and says so.
func TestRotInEarlierRecordOfLastBatchIsRefused(t *testing.T) {
	t.Parallel()
	for _, j := range []int{5, 6} { // the first and the middle record of the last batch
		m, want, end := lastBatchLog(t)
		bad := want[j]
		flipByte(t, m, segPath(1), int64(bad.pos.Offset())+9)
		ce := expectRefusal(t, m, 0, int64(bad.pos.Offset()), end, true)
		if !strings.Contains(ce.Reason, "last batch") {
			t.Fatalf("reason does not place the damage in the last batch: %s", ce.Reason)
		}
		salvage(t, m, int64(bad.pos.Offset()), end, 8-j+1, 8-j)
		reopenAfterSalvage(t, m, want[:j])
	}
}

// TestRotBeforeLastBatchIsNotSalvaged: damage with complete batches after it is
// refused as before, and Salvage, which cuts off only the last batch, changes nothing.
func TestRotBeforeLastBatchIsNotSalvaged(t *testing.T) {
	t.Parallel()
	m, want, _ := lastBatchLog(t)
	flipByte(t, m, segPath(1), int64(want[2].pos.Offset())+9)
	before := readAll(t, m, segPath(1))
	_, _, err := tryOpen(memOpts(m), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.Salvageable || ce.Quarantine != "" || ce.Offset != int64(want[2].pos.Offset()) {
		t.Fatalf("Open = %v, want a CorruptionError that Salvage cannot repair", err)
	}
	if _, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"}); !errors.As(err, &ce) {
		t.Fatalf("Salvage = %v, want the refusal", err)
	}
	if !bytes.Equal(readAll(t, m, segPath(1)), before) {
		t.Fatal("Salvage changed the log it refused")
	}
}

// TestRotCoveredByStartPositionIsNotSalvaged: a start position (a checkpoint's) past a
// bad frame proves it was durable; cutting it would leave the start past the log's end.
func TestRotCoveredByStartPositionIsNotSalvaged(t *testing.T) {
	t.Parallel()
	m, want, end := lastBatchLog(t)
	last := want[len(want)-1]
	start := wal.MakePos(1, uint32(end))
	flipByte(t, m, segPath(1), int64(last.pos.Offset())+12)
	ce := expectRefusal(t, m, start, int64(last.pos.Offset()), end, false)
	if !strings.Contains(ce.Reason, "start position") {
		t.Fatalf("reason does not mention the start position: %s", ce.Reason)
	}
	before := readAll(t, m, segPath(1))
	if _, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal", Start: start}); !errors.As(err, &ce) {
		t.Fatalf("Salvage = %v, want the refusal", err)
	}
	if !bytes.Equal(readAll(t, m, segPath(1)), before) {
		t.Fatal("Salvage changed the log it refused")
	}
}

// TestTornBatchIsDiscarded tears the write of a three-record batch at every byte, its
// trailer included. Each is an interrupted write: Open starts, with a warning if a frame
// was cut, keeps the acknowledged records and those of the batch that reached the disk
// whole, quarantines nothing, and appends after them.
func TestTornBatchIsDiscarded(t *testing.T) {
	t.Parallel()
	const acked = 4
	batch := []int{acked, acked + 1, acked + 2}
	for k := 0; ; k++ {
		m := vfs.NewMemFS()
		f := vfs.NewFaulty(m, nil)
		l, _ := openLog(t, memOpts(f), 0)
		var want []rec
		for i := range acked - 1 {
			want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
		}
		// The last acknowledged record's commit is held in its fsync while the
		// batch is appended, so that the three records make one batch.
		held, release := make(chan struct{}), make(chan struct{})
		f.SetHook(vfs.Match(vfs.IsOp(vfs.OpSync), func(vfs.Event) error { close(held); <-release; return nil }))
		pos, gate, err := l.Append(payload(acked - 1))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rec{pos, string(payload(acked - 1))})
		l.Commit()
		<-held
		var torn []rec
		var tk wal.Ticket
		for _, i := range batch {
			pos, t2, err := l.Append(payload(i))
			if err != nil {
				t.Fatal(err)
			}
			torn = append(torn, rec{pos, string(payload(i))})
			tk = t2
		}
		at := int64(torn[0].pos.Offset())
		f.SetHook(vfs.TearWriteAt("00000001.wal", at+int64(k)))
		close(release)
		if err := gate.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		err = tk.Wait(testCtx(t))
		l.Close()
		trailerAt := int64(torn[2].pos.Offset()) + int64((8+len(torn[2].data)+7)&^7)
		if err == nil { // k is past the batch: every tear point was covered
			if at+int64(k) != trailerAt+24 {
				t.Fatalf("the batch write was not torn at byte %d of %d", k, trailerAt+24-at)
			}
			break
		}
		if !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("k=%d: Wait = %v", k, err)
		}

		var logs logBuffer
		opts := memOpts(m.CrashWith(keepCurrent))
		opts.Logger = logs.logger()
		l, got, err := tryOpen(opts, 0)
		if err != nil {
			t.Fatalf("k=%d: a torn write was refused: %v", k, err)
		}
		// A record survives if every byte of it but its zero padding was written.
		cut, partial := at+int64(k), false
		for _, r := range torn {
			off, content := int64(r.pos.Offset()), int64(r.pos.Offset())+8+int64(len(r.data))
			if cut >= content {
				want = append(want, r)
			}
			partial = partial || (cut > off && cut < content)
		}
		if cut > trailerAt && cut < trailerAt+24 {
			partial = true
		}
		sameRecords(t, got, want)
		if warned := strings.Contains(logs.String(), "torn tail"); warned != partial {
			t.Fatalf("k=%d: torn tail reported %v, want %v; log:\n%s", k, warned, partial, logs.String())
		}
		if names := dirNames(t, opts.FS); strings.Contains(names, "quarantine") {
			t.Fatalf("k=%d: a torn write was quarantined: %s", k, names)
		}
		want = append(want, rec{appendWait(t, l, []byte("after")), "after"})
		l.Close()
		logs = logBuffer{}
		l, got = openLog(t, opts, 0)
		sameRecords(t, got, want)
		l.Close()
		if logs.String() != "" {
			t.Fatalf("k=%d: second reopen was not clean:\n%s", k, logs.String())
		}
	}
}

// TestPrefixOfBatchIsDiscarded writes, by the documented layout, every prefix of a
// batch (two records and their trailer) into the zeroed end of a log, as a write cut
// short leaves it: never refused, never quarantined.
func TestPrefixOfBatchIsDiscarded(t *testing.T) {
	t.Parallel()
	m0, want, end := lastBatchLog(t)
	r1, r2 := frame([]byte("first of the torn batch")), frame([]byte("second"))
	full := slices.Concat(r1, r2, trailer(len(r1)+len(r2), 2))
	for n := 1; n < len(full); n++ {
		m := m0.Crash()
		writeAt(t, m, segPath(1), end, full[:n])
		l, got, err := tryOpen(memOpts(m), 0)
		if err != nil {
			t.Fatalf("prefix of %d bytes refused: %v", n, err)
		}
		w := want
		if n >= len(r1)-1 { // the last byte of r1 is padding
			w = append(slices.Clone(want), rec{wal.MakePos(1, uint32(end)), "first of the torn batch"})
		}
		if n >= len(r1)+8+len("second") {
			w = append(w, rec{wal.MakePos(1, uint32(end)+uint32(len(r1))), "second"})
		}
		sameRecords(t, got, w)
		l.Close()
		if strings.Contains(dirNames(t, m), "quarantine") {
			t.Fatalf("prefix of %d bytes quarantined", n)
		}
	}
}

// TestBatchAcrossRollHasATrailerPerSegment: a batch that crosses into a new segment
// closes its run in each with a trailer, so the first segment is complete before the
// second is written to, and damage in the second run is the last batch's alone.
func TestBatchAcrossRollHasATrailerPerSegment(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	l, _ := openLog(t, memOpts(f), 0)
	var want []rec
	for i := 0; l.End().Offset() < 3300; i++ {
		want = append(want, rec{appendWait(t, l, payload(i)), string(payload(i))})
	}
	var batch [][]byte
	for i := len(want) + 1; i < len(want)+1+12; i++ {
		batch = append(batch, payload(i))
	}
	want = append(want, appendBatch(t, f, l, payload(len(want)), batch...)...)
	first := len(want) - len(batch)
	end := int64(l.End().Offset())
	l.Close()
	var inOne, inTwo []rec
	for _, r := range want[first:] {
		if r.pos.Segment() == 1 {
			inOne = append(inOne, r)
		} else {
			inTwo = append(inTwo, r)
		}
	}
	if len(inOne) == 0 || len(inTwo) < 2 || l.Stats().Batches != uint64(first+1) {
		t.Fatalf("the batch did not cross the roll: %d records in segment 1, %d in 2, %d batches", len(inOne), len(inTwo), l.Stats().Batches)
	}
	// Each run ends with the trailer that closes it, counting only its own segment.
	s1, s2 := readAll(t, m, segPath(1)), readAll(t, m, segPath(2))
	f1 := walkFrames(s1)
	tr := f1[len(f1)-1]
	lastOne := inOne[len(inOne)-1]
	runStart := int64(inOne[0].pos.Offset())
	if !tr.trailer || tr.off != int64(lastOne.pos.Offset())+int64((8+len(lastOne.data)+7)&^7) ||
		!bytes.Equal(s1[tr.off:tr.off+24], trailer(int(tr.off-runStart), len(inOne))) {
		t.Fatalf("segment 1 does not end with the trailer of the batch's run: %+v", tr)
	}
	if f2 := walkFrames(s2); !f2[len(f2)-1].trailer || f2[len(f2)-1].off != end-24 ||
		!bytes.Equal(s2[end-24:end], trailer(int(end-24-32), len(inTwo))) {
		t.Fatalf("segment 2 does not end with the trailer of the batch's run")
	}

	// Damage in segment 1's run: that segment was complete before segment 2 got
	// anything, so this is corruption of a completed segment, not salvageable.
	m1 := m.Crash()
	flipByte(t, m1, segPath(1), int64(lastOne.pos.Offset())+9)
	_, _, err := tryOpen(memOpts(m1), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || ce.Salvageable || ce.File != segPath(1) {
		t.Fatalf("damage in the first segment's run: Open = %v", err)
	}
	// Damage in segment 2's run is in the last batch: Salvage cuts it off there and
	// keeps the batch's records in segment 1.
	bad := inTwo[len(inTwo)-1]
	flipByte(t, m, segPath(2), int64(bad.pos.Offset())+9)
	if _, _, err := tryOpen(memOpts(m), 0); !errors.As(err, &ce) || !ce.Salvageable || ce.File != segPath(2) {
		t.Fatalf("damage in the last segment's run: Open = %v", err)
	}
	rep, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"})
	if err != nil || len(rep.Cuts) != 1 || rep.Cuts[0].File != segPath(2) || rep.Cuts[0].Records != 1 {
		t.Fatalf("Salvage = %+v, %v", rep, err)
	}
	_, got := openLog(t, memOpts(m), 0)
	sameRecords(t, got, want[:len(want)-1])
}

// TestStartAtTrailer: End read while a batch is pending is where its trailer goes; a
// checkpoint taken there opens, and the trailer is not a record to read.
func TestStartAtTrailer(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	_, tk, err := l.Append([]byte("before the checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	start := l.End()
	if err := tk.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadAt(start); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("ReadAt of a trailer = %v, want ErrNotFound", err)
	}
	after := appendWait(t, l, []byte("after the checkpoint"))
	if after != start+24 {
		t.Fatalf("the next record went to %v, want after the trailer at %v", after, start)
	}
	l.Close()
	_, got := openLog(t, memOpts(m), start)
	sameRecords(t, got, []rec{{after, "after the checkpoint"}})
}

// TestSalvageRefusesALogInUse: Salvage takes the log's lock, so it cannot cut a log
// that an open Log is appending to.
func TestSalvageRefusesALogInUse(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	l, _ := openLog(t, memOpts(m), 0)
	appendWait(t, l, []byte("x"))
	if _, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"}); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("Salvage of an open log = %v, want ErrLocked", err)
	}
}

// TestSalvageLeavesAnOpenableLogAlone: nothing to cut in a healthy log, nor in one with
// a torn tail, which Open discards by itself; Salvage changes neither.
func TestSalvageLeavesAnOpenableLogAlone(t *testing.T) {
	t.Parallel()
	m, _, end := lastBatchLog(t)
	writeAt(t, m, segPath(1), end, frame([]byte("torn"))[:9])
	before := readAll(t, m, segPath(1))
	rep, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/wal"})
	if err != nil || len(rep.Cuts) != 0 {
		t.Fatalf("Salvage = %+v, %v; want nothing cut", rep, err)
	}
	if !bytes.Equal(readAll(t, m, segPath(1)), before) || strings.Contains(dirNames(t, m), "quarantine") {
		t.Fatal("Salvage changed a log that opens as it is")
	}
	if _, err := wal.Salvage(wal.SalvageOptions{FS: m, Dir: "/nowhere"}); err == nil {
		t.Fatal("Salvage of a missing directory succeeded")
	}
}

// TestQuarantineKeepsEarlierCopies: after a cut, the next batch is written where the
// cut one was; if it is damaged in turn, its copy must not replace the earlier one,
// which is all that is left of the records cut.
func TestQuarantineKeepsEarlierCopies(t *testing.T) {
	t.Parallel()
	m, want, end := lastBatchLog(t)
	last := want[len(want)-1]
	flipByte(t, m, segPath(1), int64(last.pos.Offset())+12)
	salvage(t, m, int64(last.pos.Offset()), end, 2, 1)
	first := fmt.Sprintf("/wal/quarantine/00000001.wal-%d.bin", last.pos.Offset())
	cut := readAll(t, m, first)

	l, _ := openLog(t, memOpts(m), 0)
	again := appendWait(t, l, []byte("written where the cut record was"))
	l.Close()
	if again != last.pos {
		t.Fatalf("the next record went to %v, want %v", again, last.pos)
	}
	flipByte(t, m, segPath(1), int64(again.Offset())+12)
	_, _, err := tryOpen(memOpts(m), 0)
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || !ce.Salvageable || ce.Quarantine == first || ce.Quarantine == "" {
		t.Fatalf("Open = %v (quarantine %q), want a refusal with a copy of its own", err, ce.Quarantine)
	}
	if !bytes.Equal(readAll(t, m, first), cut) {
		t.Fatal("the copy of the records cut earlier was overwritten")
	}
	if !strings.Contains(string(readAll(t, m, strings.TrimSuffix(first, ".bin")+".txt")), "Salvage zeroed") {
		t.Fatal("the note on the records cut earlier was overwritten")
	}
}
