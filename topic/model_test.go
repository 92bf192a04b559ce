package topic

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// This file checks the machine against a naive reference model written from
// docs/semantics.md ("Topics"): plain slices of records per partition, segments as runs
// of them, retention and dedup by linear scans. Random sequences of publishes, clock
// advances, reconfigurations and restarts (a snapshot, then a replay of the records
// since) must give the same answers and the same state.

type logSink struct {
	t    *rapid.T
	recs [][]byte
}

func (s *logSink) Emit(r Record) {
	b := r.AppendTo(nil)
	d, err := DecodeRecord(b)
	if err != nil {
		s.t.Fatalf("decode own %s record: %v", r.Kind(), err)
	}
	if !bytes.Equal(d.AppendTo(nil), b) {
		s.t.Fatalf("%s record does not round-trip", r.Kind())
	}
	s.recs = append(s.recs, b)
}

type mrec struct {
	offset uint64
	at     int64
	size   int64
	key    string
	body   string
}

type mseg struct {
	recs  []mrec
	first int64
}

func (s *mseg) bytes() (n int64) {
	for _, r := range s.recs {
		n += r.size
	}
	return n
}

type mpart struct {
	start, next uint64
	segs        []*mseg
}

type mdedup struct {
	id        string
	partition int
	offset    uint64
	at        int64
	expires   int64
	gone      bool
}

type mtopic struct {
	cfg    Config
	parts  []*mpart
	rr     uint64
	dedup  []*mdedup // oldest first, as made
	groups map[string]*mgroup
}

func (t *mtopic) totals() (bytes, records int64) {
	for _, p := range t.parts {
		for _, s := range p.segs {
			bytes += s.bytes()
			records += int64(len(s.recs))
		}
	}
	return
}

func (t *mtopic) liveDedup() int {
	n := 0
	for _, e := range t.dedup {
		if !e.gone {
			n++
		}
	}
	return n
}

func (t *mtopic) expireDedup(now int64) {
	for len(t.dedup) > 0 && (t.dedup[0].gone || t.dedup[0].expires <= now) {
		t.dedup = t.dedup[1:]
	}
}

type tmodel struct {
	now    int64
	topics map[string]*mtopic
	cap    int
}

func (md *tmodel) publish(name string, in []PublishInput) ([]PublishResult, error) {
	t := md.topics[name]
	if t == nil {
		return nil, ErrTopicNotFound
	}
	out := make([]PublishResult, len(in))
	for i, x := range in {
		out[i] = md.publishOne(t, x)
	}
	md.enforceSize(t)
	return out, nil
}

func (md *tmodel) publishOne(t *mtopic, x PublishInput) PublishResult {
	if x.Partition != AnyPartition && (x.Partition < 0 || x.Partition >= len(t.parts)) {
		return PublishResult{Err: ErrPartitionOutOfRange}
	}
	size := int64(len(x.Body) + len(x.Key))
	for _, h := range x.Headers {
		size += int64(len(h.Name) + len(h.Value))
	}
	if size > t.cfg.MaxRecordSize {
		return PublishResult{Err: ErrRecordTooLarge}
	}
	if x.DedupID != "" && t.cfg.DedupWindow > 0 {
		for j := len(t.dedup) - 1; j >= 0; j-- {
			if e := t.dedup[j]; !e.gone && e.id == x.DedupID {
				if e.expires > md.now {
					return PublishResult{Partition: e.partition, Offset: e.offset, Time: e.at, Duplicate: true}
				}
				break
			}
		}
	}
	bytes, records := t.totals()
	if t.cfg.Discard == DiscardNew {
		if l := t.cfg.RetentionBytes; l > 0 && bytes+size > l {
			return PublishResult{Err: ErrTopicFull}
		}
		if l := t.cfg.RetentionRecords; l > 0 && records+1 > l {
			return PublishResult{Err: ErrTopicFull}
		}
	}
	p := x.Partition
	if p == AnyPartition {
		if x.HasKey {
			p = KeyPartition(x.Key, len(t.parts))
		} else {
			p = int(t.rr % uint64(len(t.parts)))
			t.rr++
		}
	}
	mp := t.parts[p]
	var last *mseg
	if len(mp.segs) > 0 {
		last = mp.segs[len(mp.segs)-1]
	}
	if last == nil || last.bytes() >= t.cfg.SegmentBytes || md.now-last.first >= t.cfg.SegmentAge.Milliseconds() {
		if last == nil {
			mp.start = mp.next
		}
		last = &mseg{first: md.now}
		mp.segs = append(mp.segs, last)
	}
	off := mp.next
	mp.next++
	t.expireDedup(md.now)
	last.recs = append(last.recs, mrec{offset: off, at: md.now, size: size, key: string(x.Key), body: string(x.Body)})
	if x.DedupID != "" && t.cfg.DedupWindow > 0 {
		for _, e := range t.dedup {
			if e.id == x.DedupID {
				e.gone = true
			}
		}
		t.dedup = append(t.dedup, &mdedup{id: x.DedupID, partition: p, offset: off, at: md.now, expires: md.now + t.cfg.DedupWindow.Milliseconds()})
		for t.liveDedup() > md.cap {
			t.dedup = t.dedup[1:]
		}
	}
	return PublishResult{Partition: p, Offset: off, Time: md.now}
}

func (md *tmodel) enforceSize(t *mtopic) {
	c := t.cfg
	if c.Discard != DiscardOld || (c.RetentionBytes == 0 && c.RetentionRecords == 0) {
		return
	}
	for {
		best := -1
		for i, p := range t.parts {
			if len(p.segs) >= 2 && (best < 0 || p.segs[0].first < t.parts[best].segs[0].first) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		bytes, records := t.totals()
		s := t.parts[best].segs[0]
		if !(c.RetentionBytes > 0 && bytes-s.bytes() >= c.RetentionBytes || c.RetentionRecords > 0 && records-int64(len(s.recs)) >= c.RetentionRecords) {
			return
		}
		p := t.parts[best]
		p.segs = p.segs[1:]
		p.start = p.segs[0].recs[0].offset
		t.truncated(best)
	}
}

func (md *tmodel) expire(t *mtopic) {
	age := t.cfg.RetentionAge.Milliseconds()
	if age == 0 {
		return
	}
	for _, p := range t.parts {
		moved := false
		for len(p.segs) > 0 && p.segs[0].recs[len(p.segs[0].recs)-1].at+age <= md.now {
			p.segs = p.segs[1:]
			if len(p.segs) > 0 {
				p.start = p.segs[0].recs[0].offset
			} else {
				p.start = p.next
			}
			moved = true
		}
		if moved {
			t.truncated(slices.Index(t.parts, p))
		}
	}
}

// memBodies is a payload store in memory: it keeps what the machine says is retained.
type memBodies struct {
	recs map[[3]uint64][]byte
}

func (b *memBodies) Published(tid uint64, p int, off uint64, _ bool, r *PublishRecord) {
	b.recs[[3]uint64{tid, uint64(p), off}] = slices.Clone(r.Body)
}

func (b *memBodies) Truncated(tid uint64, p int, start uint64) {
	for k := range b.recs {
		if k[0] == tid && k[1] == uint64(p) && k[2] < start {
			delete(b.recs, k)
		}
	}
}

func (b *memBodies) Deleted(tid uint64) {
	for k := range b.recs {
		if k[0] == tid {
			delete(b.recs, k)
		}
	}
}

type tharness struct {
	m      *Machine
	md     *tmodel
	sink   *logSink
	bodies *memBodies
	snap   []byte // the last checkpoint
	since  int    // records in sink.recs after it
	names  []string
}

func sameErr(got, want error) bool {
	if want == nil || got == nil {
		return got == want
	}
	return errors.Is(got, want)
}

func TestMachineMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		h := &tharness{m: New(), sink: &logSink{t: t}, bodies: &memBodies{recs: map[[3]uint64][]byte{}},
			md: &tmodel{now: 1_700_000_000_000, topics: map[string]*mtopic{}}, names: []string{"a", "b"}}
		h.m.SetBodies(h.bodies)
		h.md.cap = rapid.SampledFrom([]int{3, DefaultDedupCap}).Draw(t, "dedupCap")
		if h.md.cap != DefaultDedupCap {
			if _, err := h.m.SetLimits(h.md.now, h.sink, Limits{DedupCap: h.md.cap}); err != nil {
				t.Fatal(err)
			}
		}
		h.snap = h.m.AppendSnapshot(nil)
		h.since = len(h.sink.recs)
		t.Repeat(map[string]func(*rapid.T){
			"put":     h.put,
			"publish": h.publish,
			"clock":   h.clock,
			"delete":  h.delete,
			"restart": h.restart,
			"group":   h.putGroup,
			"attend":  h.attend,
			"pull":    h.pull,
			"commit":  h.commit,
			"seek":    h.seek,
			"leave":   h.leave,
			"ungroup": h.deleteGroup,
			"":        h.check,
		})
	})
}

func (h *tharness) drawConfig(t *rapid.T, partitions int) Config {
	c := DefaultConfig()
	c.Partitions = partitions
	c.RetentionAge = time.Duration(rapid.SampledFrom([]int64{0, 5000, 20000}).Draw(t, "age")) * time.Millisecond
	c.RetentionBytes = rapid.SampledFrom([]int64{0, 60, 200}).Draw(t, "retBytes")
	c.RetentionRecords = rapid.SampledFrom([]int64{0, 4, 9}).Draw(t, "retRecords")
	if (c.RetentionBytes > 0 || c.RetentionRecords > 0) && rapid.Bool().Draw(t, "discardNew") {
		c.Discard = DiscardNew
	}
	c.MaxRecordSize = rapid.SampledFrom([]int64{30, 1000}).Draw(t, "maxRecord")
	c.DedupWindow = time.Duration(rapid.SampledFrom([]int64{0, 3000}).Draw(t, "dedup")) * time.Millisecond
	c.SegmentBytes = MinSegmentBytes
	c.SegmentAge = time.Duration(rapid.SampledFrom([]int64{1000, 4000}).Draw(t, "segAge")) * time.Millisecond
	return c
}

func (h *tharness) put(t *rapid.T) {
	name := rapid.SampledFrom(h.names).Draw(t, "topic")
	parts := rapid.IntRange(1, 3).Draw(t, "partitions")
	if mt := h.md.topics[name]; mt != nil && rapid.Bool().Draw(t, "keepPartitions") {
		parts = len(mt.parts)
	}
	cfg := h.drawConfig(t, parts)
	// SegmentBytes is at its minimum (4 KiB): records are small, so segments end by age.
	created, err := h.m.PutTopic(h.md.now, h.sink, name, cfg)
	mt := h.md.topics[name]
	switch {
	case mt == nil:
		if err != nil || !created {
			t.Fatalf("PutTopic %q: created %v, %v", name, created, err)
		}
		mt = &mtopic{cfg: cfg}
		for range parts {
			mt.parts = append(mt.parts, &mpart{})
		}
		h.md.topics[name] = mt
		h.md.enforceSize(mt)
	case len(mt.parts) != parts:
		var ce interface{ Error() string }
		if err == nil || !errors.As(err, &ce) || created {
			t.Fatalf("PutTopic %q changing partitions %d -> %d: %v", name, len(mt.parts), parts, err)
		}
	default:
		if err != nil || created {
			t.Fatalf("PutTopic %q: created %v, %v", name, created, err)
		}
		mt.cfg = cfg
		h.md.enforceSize(mt)
		h.md.expire(mt)
	}
}

func (h *tharness) publish(t *rapid.T) {
	name := rapid.SampledFrom(h.names).Draw(t, "topic")
	n := rapid.IntRange(1, 4).Draw(t, "n")
	in := make([]PublishInput, n)
	for i := range in {
		x := PublishInput{Partition: AnyPartition}
		switch rapid.IntRange(0, 3).Draw(t, "placement") {
		case 0, 1:
			x.HasKey = true
			x.Key = []byte(rapid.SampledFrom([]string{"", "k1", "k2", "order-7"}).Draw(t, "key"))
		case 2:
			x.Partition = rapid.IntRange(-1, 3).Draw(t, "partition")
		}
		// Sizes in steps of ten, so that totals land exactly on the retention limits.
		x.Body = bytes.Repeat([]byte{'x'}, 10*rapid.IntRange(0, 3).Draw(t, "body"))
		if rapid.Bool().Draw(t, "header") {
			x.Headers = []Header{{Name: "h", Value: rapid.SampledFrom([]string{"1", "x"}).Draw(t, "hv")}}
		}
		x.DedupID = rapid.SampledFrom([]string{"", "", "d1", "d2", "d3", "d4"}).Draw(t, "dedupID")
		in[i] = x
	}
	got, err := h.m.Publish(h.md.now, h.sink, name, in)
	want, werr := h.md.publish(name, in)
	if !sameErr(err, werr) {
		t.Fatalf("Publish to %q: %v, want %v", name, err, werr)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !sameErr(g.Err, w.Err) || g.Partition != w.Partition && w.Err == nil || g.Offset != w.Offset || g.Duplicate != w.Duplicate || g.Time != w.Time {
			t.Fatalf("publish %d to %q: got %+v, want %+v", i, name, g, w)
		}
	}
}

func (h *tharness) clock(t *rapid.T) {
	// Steps that land exactly on segment ages and retention ages, and ones that do not.
	h.md.now += rapid.SampledFrom([]int64{1, 500, 1000, 2500, 5000}).Draw(t, "dt")
	h.m.Tick(h.md.now, h.sink)
	for _, name := range h.md.sortedNames() {
		mt := h.md.topics[name]
		h.md.expire(mt)
		mt.expireMembers(h.md.now)
	}
}

func (md *tmodel) sortedNames() []string {
	var out []string
	for n := range md.topics {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (h *tharness) delete(t *rapid.T) {
	name := rapid.SampledFrom(h.names).Draw(t, "topic")
	force := rapid.Bool().Draw(t, "force")
	err := h.m.DeleteTopic(h.md.now, h.sink, name, force)
	if h.md.topics[name] == nil {
		if !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("DeleteTopic of missing %q: %v", name, err)
		}
		return
	}
	if len(h.md.topics[name].groups) > 0 && !force {
		if !errors.Is(err, ErrTopicInUse) {
			t.Fatalf("DeleteTopic of %q with groups, without force: %v", name, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("DeleteTopic %q: %v", name, err)
	}
	delete(h.md.topics, name)
}

// restart rebuilds the machine from the last checkpoint and the records after it,
// and sometimes takes a new checkpoint.
func (h *tharness) restart(t *rapid.T) {
	m, err := Restore(h.snap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	m.SetBodies(h.bodies)
	for _, b := range h.sink.recs[h.since:] {
		r, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if err := m.Apply(r); err != nil {
			t.Fatalf("replay %s: %v", r.Kind(), err)
		}
	}
	if got, want := m.AppendSnapshot(nil), h.m.AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Fatalf("state after replay differs from the live state")
	}
	h.m = m
	if rapid.Bool().Draw(t, "checkpoint") {
		h.snap = h.m.AppendSnapshot(nil)
		h.since = len(h.sink.recs)
	}
}

func (h *tharness) check(t *rapid.T) {
	infos := h.m.Topics("")
	if len(infos) != len(h.md.topics) {
		t.Fatalf("%d topics, model has %d", len(infos), len(h.md.topics))
	}
	live := 0
	for _, ti := range infos {
		mt := h.md.topics[ti.Name]
		if mt == nil {
			t.Fatalf("topic %q not in the model", ti.Name)
		}
		bytes, records := mt.totals()
		if ti.Bytes != bytes || ti.Records != records || !ti.Config.Equal(mt.cfg) || ti.DedupEntries != mt.liveDedup() {
			t.Fatalf("topic %q: bytes %d records %d dedup %d, model %d %d %d", ti.Name, ti.Bytes, ti.Records, ti.DedupEntries, bytes, records, mt.liveDedup())
		}
		for i, pi := range ti.Partitions {
			mp := mt.parts[i]
			if pi.Start != mp.start || pi.End != mp.next || pi.Segments != len(mp.segs) {
				t.Fatalf("%s/%d: start %d end %d segments %d, model %d %d %d", ti.Name, i, pi.Start, pi.End, pi.Segments, mp.start, mp.next, len(mp.segs))
			}
			segs, err := h.m.Segments(ti.Name, i)
			if err != nil {
				t.Fatal(err)
			}
			for j, s := range segs {
				ms := mp.segs[j]
				if s.Base != ms.recs[0].offset || s.Count != int64(len(ms.recs)) || s.Bytes != ms.bytes() || s.First != ms.first || s.Last != ms.recs[len(ms.recs)-1].at {
					t.Fatalf("%s/%d segment %d: %+v, model base %d count %d bytes %d", ti.Name, i, j, s, ms.recs[0].offset, len(ms.recs), ms.bytes())
				}
			}
			// Every retained record is in the store, with its body, and nothing else of
			// this partition is.
			for _, s := range mp.segs {
				for _, r := range s.recs {
					got, ok := h.bodies.recs[[3]uint64{ti.ID, uint64(i), r.offset}]
					if !ok || string(got) != r.body {
						t.Fatalf("%s/%d@%d: store has %q (%v), want %q", ti.Name, i, r.offset, got, ok, r.body)
					}
					live++
				}
			}
			if _, err := h.m.ReadRange(ti.Name, i, mp.next+1); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatalf("ReadRange past the end: %v", err)
			}
			if mp.start > 0 {
				if _, err := h.m.ReadRange(ti.Name, i, mp.start-1); !errors.Is(err, ErrOffsetOutOfRange) {
					t.Fatalf("ReadRange before the start: %v", err)
				}
			}
			if r, err := h.m.ReadRange(ti.Name, i, mp.start); err != nil || r.End != mp.next {
				t.Fatalf("ReadRange at the start: %+v %v", r, err)
			}
		}
	}
	for _, ti := range infos {
		h.checkGroups(t, ti.Name, h.md.topics[ti.Name])
	}
	if live != len(h.bodies.recs) {
		t.Fatalf("store holds %d records, %d are retained", len(h.bodies.recs), live)
	}
	_ = fmt.Sprint
}
