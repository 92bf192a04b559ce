package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/vfs"
)

// TestDeadLettersOnABadDisk: the dead-letter summary answers a page whose body rotted on
// disk, the message marked, and answers a storage failure with its own code — not
// internal, not queue_not_found.
func TestDeadLettersOnABadDisk(t *testing.T) {
	mem := vfs.NewMemFS()
	var failSyncs atomic.Bool
	fs := vfs.NewFaulty(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpSync && failSyncs.Load() {
			return vfs.ErrInjected
		}
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := startOnBroker(t, ln, "", Options{}, broker.Config{Dir: "/data", FS: fs, NoPrecreate: true, CacheBytes: -1})
	ctx := context.Background()
	if _, err := e.api.PutQueue(ctx, "orders", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	body := "an order that a consumer could not process"
	if _, err := e.api.Send(ctx, "orders", client.Message{Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	ds, err := e.api.Receive(ctx, "orders", client.ReceiveOptions{Max: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if _, err := e.api.DeadLetter(ctx, "orders", "invalid", "", ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	// The body rots in the dead-letter queue.
	data, err := vfs.ReadFile(mem, "/data/wal/00000001.wal")
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem.OpenFile("/data/wal/00000001.wal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("AN"), int64(bytes.Index(data, []byte(body)))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := do(t, "GET", e.url+"/ui/api/dead-letters/orders-dlq", nil)
	var a deadLetterAnswer
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil || r.StatusCode != 200 {
		t.Fatalf("dead-letter summary with a corrupt body: %s %v", r.Status, err)
	}
	if len(a.Messages) != 1 || a.Messages[0].Headers[broker.HeaderCorrupt] != "true" || a.Messages[0].Body == nil || *a.Messages[0].Body != "" ||
		len(a.Reasons) != 1 || a.Reasons[0].Reason != "invalid" {
		t.Fatalf("summary = %+v", a)
	}

	failSyncs.Store(true)
	if _, err := e.api.Send(ctx, "orders", client.Message{Body: []byte("x")}); err == nil {
		t.Fatal("a send whose fsync failed succeeded")
	}
	// Reads go on after a storage failure (only writes stop): the summary still answers,
	// the rotten body still marked.
	r = do(t, "GET", e.url+"/ui/api/dead-letters/orders-dlq", nil)
	var after deadLetterAnswer
	if err := json.NewDecoder(r.Body).Decode(&after); err != nil || r.StatusCode != 200 {
		t.Fatalf("dead-letter summary after a storage failure: %s %v; want 200", r.Status, err)
	}
	if len(after.Messages) != 1 || after.Messages[0].Headers[broker.HeaderCorrupt] != "true" {
		t.Fatalf("summary after a storage failure = %+v", after)
	}
}
