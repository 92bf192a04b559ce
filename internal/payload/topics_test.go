package payload

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/topic"
	"github.com/okiba/okiba/wal"
)

// tenv is a topic machine, a log and a store joined the way the broker joins them:
// each record is appended to the log, the store is told where, then the machine applies
// it (and tells the store about the record).
type tenv struct {
	t     *testing.T
	fs    *vfs.MemFS
	log   *wal.Log
	s     *Store
	m     *topic.Machine
	now   int64
	snap  []byte // the machine's checkpoint
	sect  []byte // the store's topic section, taken with it
	since wal.Pos
	seg   int64 // the log's segment size; 0: segSize
}

func (e *tenv) Emit(r topic.Record) {
	pos, t, err := e.log.Append(r.AppendTo(nil))
	if err != nil {
		e.t.Fatal(err)
	}
	e.s.At(pos, false)
	if err := t.Wait(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func newTenv(t *testing.T) *tenv {
	e := &tenv{t: t, fs: vfs.NewMemFS(), now: 1_700_000_000_000}
	e.s = New(Config{FS: e.fs, TopicsDir: "/topics"})
	e.m = topic.New()
	e.m.SetBodies(e.s)
	e.openLog(0, nil)
	return e
}

func (e *tenv) openLog(from wal.Pos, replay func(wal.Pos, []byte) error) {
	e.t.Helper()
	size := int64(segSize)
	if e.seg != 0 {
		size = e.seg
	}
	l, err := wal.Open(wal.Options{FS: e.fs, Dir: "/wal", SegmentSize: size, NoPrecreate: true}, from, func(p wal.Pos, raw []byte) error {
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

func (e *tenv) publish(name string, n int) {
	e.t.Helper()
	in := make([]topic.PublishInput, n)
	for i := range in {
		in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: []byte(fmt.Sprintf("body %d of %d", i, e.now))}
	}
	res, err := e.m.Publish(e.now, e, name, in)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			e.t.Fatal(r.Err)
		}
	}
}

func (e *tenv) move() int {
	e.t.Helper()
	total := 0
	for {
		n, more, err := e.s.MoveTopics(context.Background())
		if err != nil {
			e.t.Fatalf("MoveTopics: %v", err)
		}
		total += n
		if !more {
			return total
		}
	}
}

// readAll reads a partition from its start to its end through the store, checking
// offsets and that each record is the one the machine published there.
func (e *tenv) readAll(name string, part int) int {
	e.t.Helper()
	ti, err := e.m.Topic(name)
	if err != nil {
		e.t.Fatal(err)
	}
	pi := ti.Partitions[part]
	n := 0
	for off := pi.Start; off < pi.End; {
		rs, err := e.s.ReadTopic(ti.ID, part, off, pi.End, 100, 1<<20)
		if err != nil {
			e.t.Fatalf("ReadTopic %d: %v", off, err)
		}
		if len(rs) == 0 {
			e.t.Fatalf("ReadTopic %d: nothing before the end %d", off, pi.End)
		}
		for _, r := range rs {
			if r.Offset != off || r.Partition != part {
				e.t.Fatalf("read %d/%d where %d/%d belongs", r.Partition, r.Offset, part, off)
			}
			off++
			n++
		}
	}
	return n
}

func TestTopicRecordsMoveIntoPartitionFilesAndFreeTheLog(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.Partitions = 2
	cfg.SegmentBytes = topic.MinSegmentBytes
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		e.publish("t", 50)
		e.now += 10
	}
	if got := e.readAll("t", 0) + e.readAll("t", 1); got != 1000 {
		t.Fatalf("read %d records from the tail, want 1000", got)
	}
	if recs, _ := e.s.TopicBacklog(); recs != 1000 {
		t.Fatalf("backlog %d before moving", recs)
	}
	if n := e.move(); n != 1000 {
		t.Fatalf("moved %d", n)
	}
	if recs, _ := e.s.TopicBacklog(); recs != 0 {
		t.Fatalf("backlog %d after moving", recs)
	}
	if got := e.readAll("t", 0) + e.readAll("t", 1); got != 1000 {
		t.Fatalf("read %d records from the files, want 1000", got)
	}
	// Nothing of the log is live any more: every segment but the head can go.
	if u := e.s.Usage(); len(u) != 0 {
		t.Fatalf("log usage after moving: %v", u)
	}
	// Several partition segments, as the machine cut them.
	segs, _ := e.m.Segments("t", 0)
	files, _ := e.fs.ReadDir("/topics/1/0")
	if len(segs) < 3 || len(files) != 2*len(segs) {
		t.Fatalf("machine segments %d, files %v", len(segs), files)
	}
}

func TestTopicRetentionDeletesFilesAndTail(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.SegmentBytes = topic.MinSegmentBytes
	cfg.RetentionAge = 10 * time.Second
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		e.publish("t", 50)
		e.now += 1000
	}
	e.move()
	e.publish("t", 10) // in the tail
	e.now += 9500      // the first seconds' segments are past retention
	e.m.Tick(e.now, e)
	ti, _ := e.m.Topic("t")
	if ti.Partitions[0].Start == 0 {
		t.Fatal("retention deleted nothing")
	}
	if got := e.readAll("t", 0); int64(got) != ti.Records {
		t.Fatalf("read %d, retained %d", got, ti.Records)
	}
	if _, err := e.s.ReadTopic(ti.ID, 0, 0, 1, 1, 100); !errors.Is(err, ErrRecordGone) {
		t.Fatalf("read below retention: %v", err)
	}
	e.move()
	segs, _ := e.m.Segments("t", 0)
	if files, _ := e.fs.ReadDir("/topics/1/0"); len(files) != 2*len(segs) {
		t.Fatalf("%d segments retained, files %v", len(segs), files)
	}
	// Everything expires: the partition empties, files and all, and goes on from its end.
	e.now += 20_000
	e.m.Tick(e.now, e)
	e.move()
	if files, _ := e.fs.ReadDir("/topics/1/0"); len(files) != 0 {
		t.Fatalf("files after everything expired: %v", files)
	}
	e.publish("t", 5)
	e.move()
	if got := e.readAll("t", 0); got != 5 {
		t.Fatalf("read %d after refilling", got)
	}
	// A deleted topic's directory goes.
	if err := e.m.DeleteTopic(e.now, e, "t", false); err != nil {
		t.Fatal(err)
	}
	e.move()
	if names, _ := e.fs.ReadDir("/topics"); len(names) != 0 {
		t.Fatalf("topics directory after deleting the topic: %v", names)
	}
}

// TestTopicStoreSurvivesACrash checkpoints the machine and the store's section halfway,
// moves some records, crashes, and recovers the way the broker does: restore both, replay
// the log after the checkpoint. Every record must read back, from wherever it lies.
func TestTopicStoreSurvivesACrash(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.Partitions = 3
	cfg.SegmentBytes = topic.MinSegmentBytes
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	e.publish("t", 300)
	e.move()
	e.publish("t", 300) // in the tail at the checkpoint
	snap, sect, ckpt := e.m.AppendSnapshot(nil), e.s.TopicSection(), e.log.End()
	e.move()            // moved after the checkpoint
	e.publish("t", 300) // after the checkpoint, some moved, some not
	e.s.MoveTopics(context.Background())
	e.publish("t", 100)

	r := recoverTenv(t, e.fs.Crash(), e.now, snap, sect, ckpt)
	total := 0
	for p := 0; p < 3; p++ {
		total += r.readAll("t", p)
	}
	if total != 1000 {
		t.Fatalf("read %d records after the crash, want 1000", total)
	}
	r.move()
	total = 0
	for p := 0; p < 3; p++ {
		total += r.readAll("t", p)
	}
	if total != 1000 {
		t.Fatalf("read %d records after moving, want 1000", total)
	}
}

// recoverTenv recovers from a crashed disk the way the broker does: the machine's
// checkpoint and the store's section, then the log replayed from ckpt.
func recoverTenv(t *testing.T, crashed *vfs.MemFS, now int64, snap, sect []byte, ckpt wal.Pos) *tenv {
	t.Helper()
	r := &tenv{t: t, fs: crashed, now: now}
	r.s = New(Config{FS: crashed, TopicsDir: "/topics"})
	m, err := topic.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	m.SetBodies(r.s)
	if err := r.s.RestoreTopics(sect); err != nil {
		t.Fatal(err)
	}
	r.openLog(ckpt, func(p wal.Pos, raw []byte) error {
		rec, err := topic.DecodeRecordShared(raw)
		if err != nil {
			return err
		}
		r.s.At(p, true)
		return m.Apply(rec)
	})
	return r
}

// TestTopicWrittenNotSyncedStaysInTheLog: records WriteTopics wrote into the partition
// files without syncing them stay in the tails, holding their log segments, until a sync;
// a crash then, with the files' unsynced bytes lost or kept, loses none of them.
func TestTopicWrittenNotSyncedStaysInTheLog(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.Partitions = 2
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	e.publish("t", 300)
	e.move()
	snap, sect, ckpt := e.m.AppendSnapshot(nil), e.s.TopicSection(), e.log.End()
	e.publish("t", 300)
	for {
		_, more, err := e.s.WriteTopics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	p0 := e.s.topics.parts[partKey{1, 0}]
	if recs, _ := e.s.TopicBacklog(); recs != 300 {
		t.Fatalf("backlog %d after writing without a sync, want the 300 written", recs)
	}
	if p0.written != p0.files.Written() || p0.written <= p0.moved || p0.moved != p0.files.End() {
		t.Fatalf("partition 0: written %d (the files' %d), synced %d (the files' %d): the write did not reach the files, or was synced",
			p0.written, p0.files.Written(), p0.moved, p0.files.End())
	}
	if len(e.s.Usage()) == 0 {
		t.Fatal("the log's segments were let go before the files were synced")
	}
	if got := e.readAll("t", 0) + e.readAll("t", 1); got != 600 {
		t.Fatalf("read %d records before the crash, want 600", got)
	}
	for _, c := range []struct {
		name string
		disk *vfs.MemFS
	}{
		{"the files' unsynced bytes lost", e.fs.Crash()},
		{"the files' unsynced bytes kept", e.fs.CrashWith(func(_ string, _, cur []byte) []byte { return cur })},
	} {
		r := recoverTenv(t, c.disk, e.now, snap, sect, ckpt)
		if got := r.readAll("t", 0) + r.readAll("t", 1); got != 600 {
			t.Fatalf("%s: read %d records after the crash, want 600", c.name, got)
		}
		r.move()
		if recs, _ := r.s.TopicBacklog(); recs != 0 {
			t.Fatalf("%s: backlog %d after moving", c.name, recs)
		}
		if got := r.readAll("t", 0) + r.readAll("t", 1); got != 600 {
			t.Fatalf("%s: read %d records after moving, want 600", c.name, got)
		}
	}
	// The sync: the tails go, and the log with them.
	e.move()
	if recs, _ := e.s.TopicBacklog(); recs != 0 {
		t.Fatalf("backlog %d after the sync", recs)
	}
	if u := e.s.Usage(); len(u) != 0 {
		t.Fatalf("log usage after the sync: %v", u)
	}
}

// TestTopicWriteSyncsOnceEnoughIsUnsynced: WriteTopics alone syncs once the bytes it
// wrote and did not sync reach moveSyncBytes (1 MiB here), so that a mover that is never
// idle does not keep the log without bound.
func TestTopicWriteSyncsOnceEnoughIsUnsynced(t *testing.T) {
	t.Parallel()
	e := &tenv{t: t, fs: vfs.NewMemFS(), now: 1_700_000_000_000, seg: 8 << 20}
	e.s = New(Config{FS: e.fs, TopicsDir: "/topics"})
	const bound = 1 << 20
	e.s.topics.syncBytes = bound
	e.m = topic.New()
	e.m.SetBodies(e.s)
	e.openLog(0, nil)
	cfg := topic.DefaultConfig()
	cfg.Partitions = 2
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 16<<10)
	in := make([]topic.PublishInput, 16) // 256 KiB a publish
	for i := range in {
		in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: body}
	}
	var maxBacklog int64
	const publishes = 3 * bound / (256 << 10)
	for i := 0; i < publishes; i++ {
		if _, err := e.m.Publish(e.now, e, "t", in); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.s.WriteTopics(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, b := e.s.TopicBacklog()
		maxBacklog = max(maxBacklog, b)
	}
	st := e.s.MoveStats()
	if st.Syncs < 2 || st.Records != uint64(len(in)*publishes) {
		t.Fatalf("mover stats %+v after writing %d records of %d bytes", st, len(in)*publishes, len(body))
	}
	if maxBacklog > bound+256<<10 {
		t.Fatalf("the tails held %d bytes: more than %d unsynced and one publish", maxBacklog, bound)
	}
}

// TestTopicRetentionOfRecordsWrittenNotSyncedThenACrash: retention deletes every record
// of a partition while the files hold them written and not synced, the mover deletes the
// files, a checkpoint is taken, and the machine crashes before the directory's change is
// durable: the files come back with less than the checkpoint counts as moved. That is
// retention's (all of it below the partition's start), and the partition goes on.
func TestTopicRetentionOfRecordsWrittenNotSyncedThenACrash(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.RetentionAge = 10 * time.Second
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	e.publish("t", 50)
	e.move() // the files and their directory durable, with 50 records
	e.publish("t", 50)
	write := func() {
		for {
			_, more, err := e.s.WriteTopics(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				return
			}
		}
	}
	write() // 50 more, not synced
	e.now += 20_000
	e.m.Tick(e.now, e) // everything expires
	write()            // the mover deletes the files, and syncs nothing
	if ti, _ := e.m.Topic("t"); ti.Partitions[0].Start != 100 || ti.Records != 0 {
		t.Fatalf("after retention: %+v", ti.Partitions[0])
	}
	snap, sect, ckpt := e.m.AppendSnapshot(nil), e.s.TopicSection(), e.log.End()
	r := recoverTenv(t, e.fs.Crash(), e.now, snap, sect, ckpt)
	r.publish("t", 5)
	r.move()
	if got := r.readAll("t", 0); got != 5 {
		t.Fatalf("read %d records after the crash and 5 publishes", got)
	}
}

// TestTailChunksAreReusedOnlyOnceNobodyReadsThem: the tail cache's chunks go back to the
// store once the tail dropped their records and are taken for the next records, which
// read back as published; while a read of the partition's fresh records is out (it reads
// their bytes without the lock), the chunks its partition releases are not reused.
func TestTailChunksAreReusedOnlyOnceNobodyReadsThem(t *testing.T) {
	t.Parallel()
	e := newTenv(t)
	cfg := topic.DefaultConfig()
	cfg.Partitions = 2
	if _, err := e.m.PutTopic(e.now, e, "t", cfg); err != nil {
		t.Fatal(err)
	}
	ti, _ := e.m.Topic("t")
	// Records keep coming: the mover writes and syncs a step at a time (WriteTopics,
	// every step over the sync bound) and never comes to rest, which lets the free
	// chunks go.
	e.s.topics.syncBytes = 1
	write := func() {
		t.Helper()
		for {
			_, more, err := e.s.WriteTopics(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				return
			}
		}
	}
	partEnd := func(part int) uint64 {
		x, err := e.m.Topic("t")
		if err != nil {
			t.Fatal(err)
		}
		return x.Partitions[part].End
	}
	body := func(off uint64, part int) []byte {
		return fmt.Appendf(nil, "%d/%d %0900d", part, off, off) // ~a thousand bytes: 60-odd a chunk
	}
	publish := func(n int) {
		for part := range 2 {
			end := partEnd(part)
			in := make([]topic.PublishInput, n)
			for i := range in {
				in[i] = topic.PublishInput{Partition: part, Body: body(end+uint64(i), part)}
			}
			if _, err := e.m.Publish(e.now, e, "t", in); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(last int) { // the last records of each partition
		t.Helper()
		for part := range 2 {
			end := partEnd(part)
			for off := end - min(end, uint64(last)); off < end; {
				rs, err := e.s.ReadTopic(ti.ID, part, off, end, 100, 1<<20)
				if err != nil || len(rs) == 0 {
					t.Fatalf("ReadTopic %d/%d: %d records, %v", part, off, len(rs), err)
				}
				for _, r := range rs {
					if want := body(off, part); string(r.Body) != string(want) {
						t.Fatalf("record %d/%d: %.20q…, want %.20q…", part, off, r.Body, want)
					}
					off++
				}
			}
		}
	}
	// No free chunk holds a record the tail still has.
	unshared := func() {
		t.Helper()
		e.s.mu.Lock()
		defer e.s.mu.Unlock()
		for _, buf := range e.s.topics.free {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf[:1])))
			for k, p := range e.s.topics.parts {
				for i, x := range p.tail {
					if at := uintptr(unsafe.Pointer(unsafe.SliceData(x.raw))); x.raw != nil && at >= lo && at < lo+uintptr(cap(buf)) {
						t.Fatalf("a free chunk holds record %d of partition %d's tail", p.tailBase+uint64(i), k.part)
					}
				}
			}
		}
	}
	publish(300) // 5 chunks a partition
	write()
	unshared()
	if n := len(e.s.topics.free); n == 0 || n > maxFreeChunks {
		t.Fatalf("%d chunks free after the tails were moved, want some, at most %d", n, maxFreeChunks)
	}
	free := len(e.s.topics.free)
	publish(100)
	if len(e.s.topics.free) >= free {
		t.Fatalf("the next records took no free chunk: %d free, %d before", len(e.s.topics.free), free)
	}
	check(1000)

	// A reader of partition 0's tail is out: its chunks stay out of reuse; 1's do not.
	write()
	e.s.topics.free = nil
	publish(300)
	e.s.mu.Lock()
	p0 := e.s.topics.parts[partKey{ti.ID, 0}]
	p0.readers++
	e.s.mu.Unlock()
	write()
	e.s.mu.Lock()
	p0.readers--
	got := len(e.s.topics.free)
	e.s.mu.Unlock()
	if got == 0 || got > 6 {
		t.Fatalf("%d chunks free, want only partition 1's (5 or 6)", got)
	}
	publish(300)
	check(1000)

	// A step moves at most moveBatch records: the tail drops part of a chunk, which
	// stays out of reuse until the rest of its records go.
	write()
	publish(moveBatch + 100)
	e.s.topics.free = nil // room for what the partial move frees
	if _, more, err := e.s.WriteTopics(context.Background()); err != nil || !more {
		t.Fatalf("WriteTopics: more %v, %v; want a partial move", more, err)
	}
	unshared()
	publish(300)
	check(1000)
	write()
	check(1000)

	// At rest the store keeps no free chunk, nor the mover's buffer.
	e.s.Rest()
	if n, b := len(e.s.topics.free), cap(e.s.topics.stepBuf); n != 0 || b != 0 {
		t.Fatalf("%d chunks free and a write buffer of %d bytes at rest, want none", n, b)
	}

	// The cut in the middle of a chunk, as retention makes it: the chunks wholly below
	// it are free, the one it cuts is not. (The records below are gone: nothing reads
	// them after this.)
	publish(300)
	e.s.mu.Lock()
	e.s.topics.free = nil
	e.s.dropTailBelow(p0, p0.tailBase+100)
	free = len(e.s.topics.free)
	e.s.mu.Unlock()
	if free != 1 {
		t.Fatalf("%d chunks free after 100 records of a partition's tail went, want the first one", free)
	}
	unshared()
}
