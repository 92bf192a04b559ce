// Command gen writes the wave-2 fixture (make.sh beside it runs it): a data directory
// of okiba as of this commit — checkpoint version 4, queue snapshot version 6 with a
// producer's answer, topics, a principal — closed cleanly, and a backup of it (export
// format 1), with expect.json saying what they hold. broker.TestOpenWave2Fixture opens
// copies of both.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

type expect struct {
	Commit     string   `json:"commit"`
	ClockMS    int64    `json:"clock_ms"`
	Bodies     []string `json:"bodies"`   // the queue "orders", in order
	Receipt    string   `json:"receipt"`  // of the first message's lease
	Producer   string   `json:"producer"` // whose request 1 sent the third message
	ProducedID string   `json:"produced_id"`
	Records    []string `json:"records"` // topic "events", partition 0, from offset 0
	Principal  string   `json:"principal"`
}

func main() {
	out := flag.String("out", "", "the directory to write data/, okiba.backup and expect.json in")
	commit := flag.String("commit", "", "the commit this is")
	flag.Parse()
	if err := run(*out, *commit); err != nil {
		log.Fatal(err)
	}
}

func run(out, commit string) error {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(1_800_000_000_000))
	dir := filepath.Join(out, "data")
	b, err := broker.Open(broker.Config{Dir: dir, Clock: clk, SegmentSize: broker.MinSegmentSize, MinFreeBytes: -1, NoPrecreate: true})
	if err != nil {
		return err
	}
	exp := expect{Commit: commit, ClockMS: clk.Now().UnixMilli(), Bodies: []string{"first", "second", "third"}, Producer: "pfixture", Principal: "worker"}
	if _, _, err := b.PutQueue(ctx, "orders", func(*queue.Config, bool) error { return nil }); err != nil {
		return err
	}
	for _, body := range exp.Bodies[:2] {
		if _, err := b.Send(ctx, "orders", []queue.SendInput{{Payload: queue.Payload{Body: []byte(body)}, Delay: -1}}); err != nil {
			return err
		}
	}
	res, _, err := b.SendFrom(ctx, "orders", exp.Producer, 1, []queue.SendInput{{Payload: queue.Payload{Body: []byte(exp.Bodies[2])}, Delay: -1}})
	if err != nil {
		return err
	}
	exp.ProducedID = queue.FormatID(res[0].ID)
	ms, err := b.Receive(ctx, "orders", broker.ReceiveOptions{Max: 1, Visibility: time.Hour})
	if err != nil || len(ms) != 1 {
		return fmt.Errorf("receive: %v %v", ms, err)
	}
	exp.Receipt = ms[0].Receipt
	if _, _, err := b.PutTopic(ctx, "events", func(c *topic.Config, _ bool) error { c.Partitions = 2; return nil }); err != nil {
		return err
	}
	for i := range 4 {
		body := fmt.Sprintf("event %d", i)
		if _, err := b.Publish(ctx, "events", []topic.PublishInput{{Partition: 0, Body: []byte(body)}}); err != nil {
			return err
		}
		exp.Records = append(exp.Records, body)
	}
	g, _ := access.ParseGrant("send queue:orders")
	if _, err := b.CreatePrincipal(ctx, exp.Principal, []access.Grant{g}, []byte("sealed")); err != nil {
		return err
	}
	var backup bytes.Buffer
	if _, err := b.Backup(ctx, &backup); err != nil {
		return err
	}
	if err := b.Close(); err != nil {
		return err
	}
	os.Remove(filepath.Join(dir, "LOCK"))
	if err := os.WriteFile(filepath.Join(out, "okiba.backup"), backup.Bytes(), 0o600); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(exp, "", "  ")
	return os.WriteFile(filepath.Join(out, "expect.json"), append(data, '\n'), 0o644)
}
