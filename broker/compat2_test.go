package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/queue"
)

type wave2Expect struct {
	ClockMS    int64    `json:"clock_ms"`
	Bodies     []string `json:"bodies"`
	Receipt    string   `json:"receipt"`
	Producer   string   `json:"producer"`
	ProducedID string   `json:"produced_id"`
	Records    []string `json:"records"`
	Principal  string   `json:"principal"`
}

// TestOpenWave2Fixture opens a data directory written by okiba at the end of wave 2's
// first slices (checkpoint version 4 with its applied index, queue snapshot version 6
// with a producer's answers, topics, principals: testdata/wave2, make.sh) and a backup
// of it (export format 1), restored: both hold every message, lease, producer answer,
// topic record and principal the fixture was written with.
func TestOpenWave2Fixture(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "wave2", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp wave2Expect
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	fromDir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(fromDir, os.DirFS(filepath.Join("testdata", "wave2", "data"))); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(filepath.Join("testdata", "wave2", "okiba.backup"))
	if err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := broker.Restore(broker.Config{Dir: restored}, bytes.NewReader(backup)); err != nil {
		t.Fatalf("restore the fixture's backup: %v", err)
	}
	for _, dir := range []string{fromDir, restored} {
		checkWave2(t, dir, exp)
	}
}

func checkWave2(t *testing.T, dir string, exp wave2Expect) {
	t.Helper()
	ctx := context.Background()
	b, err := broker.Open(broker.Config{Dir: dir, Clock: clock.NewFake(time.UnixMilli(exp.ClockMS + 1000)), MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("%s: Open: %v", dir, err)
	}
	defer b.Close()
	page, err := b.Peek(ctx, "orders", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range page {
		bodies = append(bodies, string(m.Payload.Body))
	}
	if !slices.Equal(bodies, exp.Bodies) {
		t.Fatalf("%s: bodies %q, want %q", dir, bodies, exp.Bodies)
	}
	// The producer's retry is answered with the original id, and sends nothing.
	res, repeated, err := b.SendFrom(ctx, "orders", exp.Producer, 1, []queue.SendInput{{Payload: queue.Payload{Body: []byte("again")}, Delay: -1}})
	if err != nil || !repeated || queue.FormatID(res[0].ID) != exp.ProducedID {
		t.Fatalf("%s: a producer's retry: %v %v %v, want %s repeated", dir, res, repeated, err, exp.ProducedID)
	}
	// The lease from before stands, and its receipt settles it.
	errs, err := b.Ack(ctx, "orders", []string{exp.Receipt})
	if err != nil || errs[0] != nil {
		t.Fatalf("%s: ack of the fixture's receipt: %v %v", dir, err, errs)
	}
	r, err := b.ReadTopic(ctx, "events", broker.ReadOptions{Partition: 0, Offset: 0, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for _, rec := range r.Records {
		recs = append(recs, string(rec.Body))
	}
	if !slices.Equal(recs, exp.Records) {
		t.Fatalf("%s: topic records %q, want %q", dir, recs, exp.Records)
	}
	if _, err := b.Principal(exp.Principal); err != nil {
		t.Fatalf("%s: principal: %v", dir, err)
	}
}
