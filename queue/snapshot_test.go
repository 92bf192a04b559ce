package queue

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// richMachine builds, deterministically, a machine with something of everything a
// snapshot holds: ready, delayed and leased messages, ordered groups, dedup entries,
// redelivery counts, dead letters with their reasons and a running redrive task.
func richMachine(t *testing.T) *Machine {
	t.Helper()
	m, s := New(Options{}), &memSink{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig("orders")
	cfg.OrderedGroups = true
	cfg.MaxDeliveries = 2
	cfg.DeadLetterQueue = "orders-dlq"
	_, err := m.PutQueue(t0, s, "orders", cfg)
	must(err)
	_, err = m.PutQueue(t0, s, "plain", DefaultConfig("plain"))
	must(err)
	now := t0
	for i := range 12 {
		in := SendInput{Payload: Payload{Body: []byte{byte('a' + i)}, DedupID: string(rune('A' + i))}, Delay: -1}
		if i%3 != 0 {
			in.Payload.Group = string(rune('k' + i%3))
		}
		if i == 11 {
			in.Delay = 60_000
		}
		_, err := m.Send(now, s, "orders", []SendInput{in})
		must(err)
		now += 7
	}
	for i := range 5 {
		_, err := m.Send(now, s, "plain", []SendInput{{Payload: Payload{Body: []byte{byte(i)}}, Delay: -1}})
		must(err)
		now += 1000
	}
	ds, err := m.Receive(now, s, "orders", 6, 30_000, 0)
	must(err)
	// Two deliveries of the first two without an ack: dead-lettered with max_deliveries.
	_, err = m.Nack(now, s, "orders", []NackInput{{Lease: ds[0].Lease, Delay: 0}, {Lease: ds[1].Lease, Delay: 5_000}})
	must(err)
	now += 10
	ds2, err := m.Receive(now, s, "orders", 1, 30_000, 0)
	must(err)
	_, err = m.Nack(now, s, "orders", []NackInput{{Lease: ds2[0].Lease, Delay: 0}})
	must(err)
	_, err = m.DeadLetter(now, s, "orders", []Lease{ds[2].Lease}, "poison", "cannot parse")
	must(err)
	_, err = m.Receive(now, s, "plain", 2, 10_000, 0)
	must(err)
	now += 100
	m.Tick(now, s)
	_, err = m.StartRedrive(now, s, RedriveSpec{Source: "orders-dlq", Target: "plain", Rate: 1})
	must(err)
	return m
}

// A version-1 snapshot (what okiba wrote before the compact encoding) still restores, to
// the state it recorded: testdata/snapshot-v1.bin was written by okiba 575724e from
// richMachine, whose state today's encoder writes as version 2.
func TestSnapshotVersion1StillRestores(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", "snapshot-v1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	live := richMachine(t).AppendSnapshot(nil)
	if bytes.Equal(v1, live) {
		t.Fatal("the fixture is not a version-1 snapshot")
	}
	r, err := Restore(v1, Options{})
	if err != nil {
		t.Fatalf("restore v1: %v", err)
	}
	if got := r.AppendSnapshot(nil); !bytes.Equal(got, live) {
		t.Fatalf("v1 restored to a different state:\n got %x\nwant %x", got, live)
	}
}

// Snapshot pieces join to AppendSnapshot's bytes and stay near their size, and a deep
// backlog costs about a dozen bytes a message.
func TestSnapshotChunksAndSize(t *testing.T) {
	m, s := New(Options{CacheBytes: -1}), &memSink{}
	m.PutQueue(t0, s, "q", DefaultConfig("q"))
	const n = 200_000
	in := make([]SendInput, 1000)
	for i := range in {
		in[i] = SendInput{Payload: Payload{Body: make([]byte, 1024)}, Delay: -1}
	}
	for sent, now := 0, t0; sent < n; sent, now = sent+len(in), now+3 {
		if _, err := m.Send(now, s, "q", in); err != nil {
			t.Fatal(err)
		}
	}
	chunks := m.Snapshot()
	var joined []byte
	for i, c := range chunks {
		if len(c) > snapshotChunk || (i < len(chunks)-1 && len(c) < snapshotChunk-512) {
			t.Fatalf("chunk %d of %d holds %d bytes", i, len(chunks), len(c))
		}
		joined = append(joined, c...)
	}
	if !bytes.Equal(joined, m.AppendSnapshot(nil)) {
		t.Fatal("chunks do not join to the snapshot")
	}
	if per := float64(len(joined)) / n; per > 16 {
		t.Fatalf("snapshot takes %.1f bytes a message", per)
	}
	r, err := Restore(joined, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Depth("q") != n {
		t.Fatalf("restored depth %d", r.Depth("q"))
	}
}

// Replay through DecodeRecordShared and ApplyShared keeps no byte of the caller's buffer:
// a cached body is a copy, so the buffer can be reused for the next record.
func TestApplySharedCopiesWhatItKeeps(t *testing.T) {
	live, s := New(Options{}), &memSink{}
	live.PutQueue(t0, s, "q", DefaultConfig("q"))
	attrs := []Attr{{Name: "a", Type: "String", Value: []byte("attr value")}}
	if _, err := live.Send(t0, s, "q", []SendInput{{Payload: Payload{Body: []byte("the body"), Attrs: attrs}, Delay: -1}}); err != nil {
		t.Fatal(err)
	}
	replayed := New(Options{})
	for i, r := range s.recs {
		buf := r.AppendTo(nil)
		x, err := DecodeRecordShared(buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.ApplyShared(x, Loc(1<<32|uint64(64*(i+1)))); err != nil {
			t.Fatal(err)
		}
		for j := range buf {
			buf[j] = 'X'
		}
	}
	ds, err := replayed.Receive(t0+1, &memSink{}, "q", 1, 1000, 0)
	if err != nil || len(ds) != 1 || ds[0].Payload == nil {
		t.Fatalf("receive after replay: %v %+v", err, ds)
	}
	if p := ds[0].Payload; string(p.Body) != "the body" || len(p.Attrs) != 1 || string(p.Attrs[0].Value) != "attr value" {
		t.Fatalf("cached payload after the buffer was reused: %q %+v", p.Body, p.Attrs)
	}
}
