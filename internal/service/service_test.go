package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/service"
)

// The oldest ready message's age is on the wire; the time it entered is the server's
// alone (the console's overview sends it, as it does not change while the queue does
// not), and it is the time the message was sent.
func TestOldestReadyAtIsTheSendTimeAndNotOnTheWire(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	svc := service.New(b, service.Options{})
	ctx := context.Background()
	if _, _, e := svc.PutQueue(ctx, "orders", api.QueueConfig{}); e != nil {
		t.Fatal(e)
	}
	if q, e := svc.Queue(ctx, "orders"); e != nil || !q.Stats.OldestReadyAt.IsZero() {
		t.Fatalf("empty queue: oldest ready at %v, %v", q.Stats.OldestReadyAt, e)
	}
	body := "first"
	if _, e := svc.Send(ctx, "orders", service.From{}, []api.SendMessage{{Body: &body}}); e != nil {
		t.Fatal(e)
	}
	clk.Advance(90 * time.Second)
	q, e := svc.Queue(ctx, "orders")
	if e != nil {
		t.Fatal(e)
	}
	if !q.Stats.OldestReadyAt.Equal(t0) || q.Stats.OldestReadyAgeMS != 90_000 {
		t.Fatalf("oldest ready at %v, age %d ms; want %v and 90000", q.Stats.OldestReadyAt, q.Stats.OldestReadyAgeMS, t0)
	}
	wire, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(wire); strings.Contains(strings.ToLower(s), "oldestreadyat") || !strings.Contains(s, `"oldest_ready_age_ms":90000`) {
		t.Fatalf("on the wire: %s", wire)
	}
}
