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
	m, s := newTestMachine()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig("orders")
	cfg.OrderedGroups = true
	cfg.MaxDeliveries = 2
	cfg.DeadLetterQueue = "orders-dlq"
	_, err := m.PutQueue(t0, s, "orders", cfg)
	must(err)
	_, err = m.PutQueue(t0, s, "plain", testConfig("plain"))
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

// Snapshots of older okibas still restore, to the state they recorded, and hand over the
// log positions they held (one per message, for the payload store):
// testdata/snapshot-v1.bin was written by okiba 575724e and testdata/snapshot-v2.bin by
// 279c863 (before the payload store) from richMachine, whose state today's encoder writes
// as version 3.
func TestOlderSnapshotsStillRestore(t *testing.T) {
	t.Parallel()
	live := richMachine(t)
	// Before version 7 a snapshot held no message histories nor settled messages (for
	// explain): an older one restores without them.
	forgetExplain(live)
	want := live.AppendSnapshot(nil)
	var messages int
	live.EachMessage(func(Ref, int64) bool { messages++; return true })
	for _, name := range []string{"snapshot-v1.bin", "snapshot-v2.bin"} {
		old, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(old, want) {
			t.Fatalf("%s is not an older snapshot", name)
		}
		var positions []uint64
		r, err := Restore(old, func(_ Ref, _ int64, pos uint64) { positions = append(positions, pos) })
		if err != nil {
			t.Fatalf("restore %s: %v", name, err)
		}
		if got := r.AppendSnapshot(nil); !bytes.Equal(got, want) {
			t.Fatalf("%s restored to a different state:\n got %x\nwant %x", name, got, want)
		}
		if len(positions) != messages {
			t.Fatalf("%s handed over %d log positions for %d messages", name, len(positions), messages)
		}
		for i, p := range positions {
			if p>>32 == 0 { // segment indexes start at 1
				t.Fatalf("%s: position %d is %#x, not a log position", name, i, p)
			}
		}
	}
}

// testdata/snapshot-v7.bin was written by okiba 73596b5 (explain's histories and settled
// ring, before deferred messages took version 8) from richMachine: it restores to the same
// state, histories and ring included, so main's version 7 never stops reading.
func TestSnapshotV7StillRestores(t *testing.T) {
	t.Parallel()
	want := richMachine(t).AppendSnapshot(nil)
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot-v7.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(old) < 5 || old[4] != 7 {
		t.Fatalf("snapshot-v7.bin is not version 7 (byte %x)", old[4])
	}
	if bytes.Equal(old, want) {
		t.Fatal("snapshot-v7.bin is what this version writes")
	}
	r, err := Restore(old, nil)
	if err != nil {
		t.Fatalf("restore v7: %v", err)
	}
	if got := r.AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Fatalf("v7 restored to a different state:\n got %x\nwant %x", got, want)
	}
	var hists int
	for _, q := range r.byID {
		q.msgs.each(0, func(x *message) bool {
			if r.ar.hist(x) != nil {
				hists++
			}
			return true
		})
	}
	if hists == 0 {
		t.Fatal("v7 restored without the histories it holds")
	}
}

// Snapshot pieces join to AppendSnapshot's bytes and stay near their size, and a deep
// backlog costs about a dozen bytes a message.
func TestSnapshotChunksAndSize(t *testing.T) {
	t.Parallel()
	m, s := New(), &memSink{}
	m.PutQueue(t0, s, "q", testConfig("q"))
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
	chunks := m.Snapshot(nil)
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
	r, err := Restore(joined, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Depth("q") != n {
		t.Fatalf("restored depth %d", r.Depth("q"))
	}
}

// forgetExplain drops what only explain reads and older snapshots did not hold.
func forgetExplain(m *Machine) {
	for _, q := range m.byID {
		q.settled = settledRing{}
		q.msgs.each(0, func(x *message) bool {
			m.ar.setHist(x, nil)
			return true
		})
	}
}
