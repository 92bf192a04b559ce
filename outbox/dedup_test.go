package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/dbtest"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/outbox"
)

// logBuffer collects a relay's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dropOutbox resets the outbox as an application resetting its database does: its
// tables go, row ids start again.
func dropOutbox(t *testing.T, db *dbtest.DB) {
	t.Helper()
	for _, table := range []string{"okiba_outbox", "okiba_outbox_instance", "okiba_outbox_attempts"} {
		if _, err := db.ExecContext(context.Background(), "DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDedupIDsSurviveADatabaseReset is finding 5: after the application resets its
// database, new rows reuse the old row ids, yet reach the queue: their dedup ids carry
// the outbox's new instance, so the broker's dedup window does not take them for the old
// rows.
func TestDedupIDsSurviveADatabaseReset(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		ob := newOutbox(t, db, "orders")
		before := add(t, db, ob, "events", outbox.Message{Body: []byte("old 1")}, outbox.Message{Body: []byte("old 2")})
		oldIDs := []string{ob.DedupID(before[0]), ob.DedupID(before[1])}
		if _, err := ob.Relay(srv.Client, outbox.RelayOptions{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}

		dropOutbox(t, db)
		ob = newOutbox(t, db, "orders")
		after := add(t, db, ob, "events", outbox.Message{Body: []byte("new 1")}, outbox.Message{Body: []byte("new 2")})
		if after[0] != before[0] || after[1] != before[1] {
			t.Fatalf("row ids after the reset %v, before %v: the test needs them reused", after, before)
		}
		if ob.DedupID(after[0]) == oldIDs[0] || ob.DedupID(after[1]) == oldIDs[1] {
			t.Fatalf("dedup ids %s, %s repeat those before the reset", ob.DedupID(after[0]), ob.DedupID(after[1]))
		}
		r := ob.Relay(srv.Client, outbox.RelayOptions{})
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		if st := r.Stats(); st.Published != 2 || st.Duplicates != 0 {
			t.Fatalf("stats after the reset %+v, want 2 published and no duplicate", st)
		}
		var got []string
		for _, m := range peekAll(t, srv.Client, "events") {
			got = append(got, *m.Body)
		}
		if strings.Join(got, ",") != "old 1,old 2,new 1,new 2" {
			t.Fatalf("the queue holds %q", got)
		}
	})
}

// TestExistingTableIsMigrated: a table made before instances keeps its rows' dedup ids
// (so a row published by the old relay and again by the new one is still absorbed, and
// not taken for a collision), and new rows get the instance.
func TestExistingTableIsMigrated(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		// The table as the outbox made it before instances: its first three statements.
		for _, q := range outbox.Schema(db.Dialect, outbox.DefaultTable)[:3] {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		ob, err := outbox.New(db.DB, "orders", outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		old := add(t, db, ob, "events", outbox.Message{Body: []byte("written before the upgrade")})
		// The old relay published it, and crashed before marking it.
		legacy := fmt.Sprintf("orders/%d", old[0])
		if _, err := srv.Client.Send(ctx, "events", client.Message{Body: []byte("written before the upgrade"), DedupID: legacy}); err != nil {
			t.Fatal(err)
		}
		if err := ob.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if got := ob.DedupID(old[0]); got != legacy {
			t.Fatalf("the old row's dedup id after the upgrade: %s, want %s", got, legacy)
		}
		fresh := add(t, db, ob, "events", outbox.Message{Body: []byte("written after")})
		inst, err := ob.Instance(ctx)
		if err != nil || ob.DedupID(fresh[0]) != fmt.Sprintf("orders/%s/%d", inst, fresh[0]) {
			t.Fatalf("a new row's dedup id: %s (instance %q, %v)", ob.DedupID(fresh[0]), inst, err)
		}
		var log logBuffer
		r := ob.Relay(srv.Client, outbox.RelayOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.Published != 2 || st.Duplicates != 1 || st.FirstDuplicates != 0 || strings.Contains(log.String(), "first publish") {
			t.Fatalf("stats %+v, log %s: the old row absorbed as a repeat, not a collision", st, log.String())
		}
		if n := len(peekAll(t, srv.Client, "events")); n != 2 {
			t.Fatalf("%d messages, want 2", n)
		}
	})
}

// TestFirstPublishDuplicateIsLogged: a row whose first publish the broker answers as a
// duplicate (its dedup id names another message) is logged at WARN with both ids and
// counted; a repeat after a crash is not (TestRelayCrashBetweenPublishAndMark).
func TestFirstPublishDuplicateIsLogged(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		srv := okibatest.New(t, okibatest.Options{})
		srv.CreateQueue(t, "events")
		ob := newOutbox(t, db, "orders")
		ids := add(t, db, ob, "events", outbox.Message{Body: []byte("the row")})
		// Another producer got there first with the same dedup id.
		other, err := srv.Client.Send(ctx, "events", client.Message{Body: []byte("someone else's"), DedupID: ob.DedupID(ids[0])})
		if err != nil {
			t.Fatal(err)
		}
		var log logBuffer
		r := ob.Relay(srv.Client, outbox.RelayOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.Duplicates != 1 || st.FirstDuplicates != 1 {
			t.Fatalf("stats %+v, want the duplicate counted as on a first publish", st)
		}
		line := log.String()
		for _, want := range []string{"level=WARN", "first publish", "dedup_id=" + ob.DedupID(ids[0]), "message_id=" + other.ID, fmt.Sprintf("row=%d", ids[0])} {
			if !strings.Contains(line, want) {
				t.Fatalf("log %q lacks %q", line, want)
			}
		}
	})
}
