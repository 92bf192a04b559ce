package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/inbox"
	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/okibatest"
)

func TestHorizon(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	if h, ok := inbox.Horizon(14*day, 7*day, time.Hour); !ok || h != 21*day+time.Hour {
		t.Fatalf("Horizon = %v, %v", h, ok)
	}
	if _, ok := inbox.Horizon(14*day, 0, time.Hour); ok {
		t.Fatal("an unlimited dead-letter queue must make the horizon unbounded")
	}
}

func TestQueueHorizonAndCheckRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := okibatest.New(t, okibatest.Options{FakeClock: true})
	c := srv.Client
	srv.PutQueue(t, "orders", api.QueueConfig{VisibilityTimeout: api.Ptr(30 * time.Second), Retention: api.Ptr(4 * 24 * time.Hour)})

	// okiba's dead-letter queues keep messages forever by default: no horizon is safe.
	if _, err := inbox.QueueHorizon(ctx, c, "orders", 0); !errors.Is(err, inbox.ErrUnbounded) {
		t.Fatalf("QueueHorizon with an unlimited DLQ: %v", err)
	}
	srv.PutQueue(t, "orders-dlq", api.QueueConfig{Retention: api.Ptr(3 * 24 * time.Hour)})
	h, err := inbox.QueueHorizon(ctx, c, "orders", 0)
	if err != nil || h != 7*24*time.Hour+30*time.Second {
		t.Fatalf("QueueHorizon = %v, %v; want retention + DLQ retention + lease", h, err)
	}
	if h, _ := inbox.QueueHorizon(ctx, c, "orders", 2*time.Hour); h != 7*24*time.Hour+2*time.Hour {
		t.Fatalf("QueueHorizon with a longer lease = %v", h)
	}

	// Two dead letters, one of them old.
	for _, body := range []string{"old", "new"} {
		if _, err := c.Send(ctx, "orders", client.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "orders", client.ReceiveOptions{})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v %v", ds, err)
		}
		if _, err := c.DeadLetter(ctx, "orders", "bad", "", ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		srv.Clock.Advance(2 * time.Hour)
	}
	now := srv.Clock.Now()
	r, err := inbox.CheckRedrive(ctx, c, "orders-dlq", "orders", 3*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 2 || r.TooOld != 1 {
		t.Fatalf("check %+v: want 2 messages, 1 too old", r)
	}
	if w := r.Warning(); !strings.Contains(w, "1 of 2 dead letters in orders-dlq are older than the inbox horizon 3h0m0s") {
		t.Fatalf("warning %q", w)
	}
	if r, _ := inbox.CheckRedrive(ctx, c, "orders-dlq", "other", 3*time.Hour, now); r.Messages != 0 || r.Warning() != "" {
		t.Fatalf("check filtered by another source: %+v", r)
	}
}

// A delivery of a message older than the horizon is processed, counted as late and
// logged.
func TestLateDeliveryWarns(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	var logs bytes.Buffer
	now := time.Now()
	ib := setup(t, db, "c", inbox.Options{Horizon: time.Hour, Now: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error { return nil })
	h(context.Background(), &client.Delivery{ID: "m1", Queue: "q", EnqueuedAt: now.Add(-2 * time.Hour)})
	h(context.Background(), &client.Delivery{ID: "m2", Queue: "q", EnqueuedAt: now.Add(-time.Minute)})
	if st := ib.Stats(); st.Late != 1 || st.Processed != 2 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(logs.String(), "older than the inbox horizon") {
		t.Fatalf("log: %s", logs.String())
	}
}
