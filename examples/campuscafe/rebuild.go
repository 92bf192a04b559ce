package campuscafe

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/inbox"
	"github.com/okiba/okiba/reconcile"
)

// RebuildTable is where RebuildInventory writes the inventory it replays from the topic:
// a table of its own, not the live projection, so that a rebuild can run beside the
// inventory consumer (which keeps writing the live table) and its result can be checked
// before anyone trusts it. Adopting it means copying its rows into the live table with
// the consumer stopped.
const RebuildTable = "inventory_rebuild"

// PartitionReplay is what a rebuild read of one partition: offsets From to To-1.
type PartitionReplay struct {
	Partition int    `json:"partition"`
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
}

// RebuildReport is the outcome of RebuildInventory.
type RebuildReport struct {
	Topic      string            `json:"topic"`
	Table      string            `json:"table"`
	Partitions []PartitionReplay `json:"partitions"`
	// Records read from the topic, in all.
	Records int64 `json:"records"`
	// Applied: OrderPlaced events added to the rebuilt inventory, each event once.
	Applied int64 `json:"applied"`
	// Duplicates: records whose event id an earlier record had (the producer's
	// injected copies, or a relay's repeat after the topic's dedup window), skipped.
	Duplicates int64 `json:"duplicates_skipped"`
	// Other: events of other types (OrderPaid), which the inventory does not use.
	Other int64 `json:"other_events"`
	// Bad: records that are no CampusCafe event, skipped (the consumers dead-letter
	// them).
	Bad int64 `json:"bad_records"`
	// Rows written to Table.
	Rows int `json:"rows"`
	// Unpublished counts the outbox rows not yet published when the topic was read: their
	// events are not in the rebuild, which then cannot agree with the orders.
	Unpublished int64 `json:"unpublished"`
}

// RebuildInventory rebuilds the inventory projection from the topic alone: it reads
// every partition from offset 0 up to its end as it was when the rebuild began, with
// the anonymous reader (no consumer group, nothing committed, nothing changed in the
// broker), adds up the quantity of every OrderPlaced — once per event id, as the
// inventory consumer's inbox counts it, so that the duplicates the log holds do not
// count twice — and replaces RebuildTable's rows with the result in one transaction.
//
// The topic must still hold offset 0 of every partition (the café creates it with
// retention forever); a rebuild from a partial log would be silently short, so it is an
// error. Records are read before the transaction begins: on SQLite a write transaction
// held across network reads would stall every other writer. A read that meets the
// embedded broker restarting is tried again (reads change nothing).
func (s *Store) RebuildInventory(ctx context.Context, c *client.Client) (*RebuildReport, error) {
	rep := &RebuildReport{Topic: Topic, Table: RebuildTable}
	// Counted before the topic is read: a row still pending then may be missing from
	// the read.
	pending, err := s.Outbox.Pending(ctx)
	if err != nil {
		return nil, err
	}
	rep.Unpublished = pending
	var t *api.Topic
	err = whileRestarting(ctx, func() (err error) {
		t, err = c.Topic(ctx, Topic)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("campuscafe: rebuild: topic %s: %w", Topic, err)
	}
	reserved := map[string]int64{}
	seen := map[string]bool{}
	for _, p := range t.Partitions {
		if p.Start > 0 {
			return nil, fmt.Errorf("campuscafe: rebuild: partition %d of %s starts at offset %d: retention deleted the records before it, so the topic no longer holds the whole history", p.Partition, Topic, p.Start)
		}
		rep.Partitions = append(rep.Partitions, PartitionReplay{Partition: p.Partition, From: 0, To: p.End})
		for off := uint64(0); off < p.End; {
			var b *client.Batch
			err := whileRestarting(ctx, func() (err error) {
				b, err = c.ReadPartition(ctx, Topic, p.Partition, client.ReadOptions{Offset: off, Max: api.MaxReadRecords})
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("campuscafe: rebuild: read %s/%d at %d: %w", Topic, p.Partition, off, err)
			}
			if b.Next <= off {
				return nil, fmt.Errorf("campuscafe: rebuild: read %s/%d at %d made no progress (next %d)", Topic, p.Partition, off, b.Next)
			}
			for _, r := range b.Records {
				if r.Offset >= p.End {
					break // published after the rebuild began
				}
				rep.Records++
				key := recordKey(r)
				if seen[key] {
					rep.Duplicates++
					continue
				}
				seen[key] = true
				var ev Event
				if err := json.Unmarshal(r.Body, &ev); err != nil || ev.OrderID == "" {
					rep.Bad++
					continue
				}
				if ev.Type != OrderPlaced {
					rep.Other++
					continue
				}
				reserved[ev.Item] += int64(ev.Qty)
				rep.Applied++
			}
			off = b.Next
		}
	}
	items := make([]string, 0, len(reserved))
	for item := range reserved {
		items = append(items, item)
	}
	sort.Strings(items)
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("campuscafe: rebuild: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+RebuildTable); err != nil {
		return nil, fmt.Errorf("campuscafe: rebuild: empty %s: %w", RebuildTable, err)
	}
	ins := s.q(`INSERT INTO ` + RebuildTable + ` (item, reserved) VALUES (?, ?)`)
	for _, item := range items {
		if _, err := tx.ExecContext(ctx, ins, item, reserved[item]); err != nil {
			return nil, fmt.Errorf("campuscafe: rebuild: write %s: %w", RebuildTable, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("campuscafe: rebuild: commit: %w", err)
	}
	rep.Rows = len(items)
	return rep, nil
}

// recordKey is a record's identity for deduplication, by inbox.Key's rule: the event id
// the producer gave it, else where it lies in the topic (a record read from the log has
// no dedup id or message id to fall back on).
func recordKey(r client.TopicRecord) string {
	if id := r.Headers[inbox.EventIDHeader]; id != "" {
		return id
	}
	return strconv.Itoa(r.Partition) + "/" + strconv.FormatUint(r.Offset, 10)
}

// rebuilt is the rebuilt inventory as a projection: the live inventory projection's
// Expected (reconcile's, from the orders), and RebuildTable's rows as Actual.
type rebuilt struct {
	reconcile.Projection
	actual string
}

func (r rebuilt) Name() string { return RebuildTable }

func (r rebuilt) Actual(ctx context.Context, tx *sql.Tx) (reconcile.State, error) {
	return reconcile.Query{ActualSQL: r.actual}.Actual(ctx, tx)
}

// Replace refuses: the embedded projection's Replace would write the live table, and the
// rebuilt one comes from the topic, never from the orders.
func (r rebuilt) Replace(context.Context, *sql.Tx, reconcile.State) error {
	return errors.New("campuscafe: " + RebuildTable + " is written by RebuildInventory, from the topic")
}

// RebuiltProjection is the rebuilt inventory as a reconcile projection, for Check: what
// it should be is what reconciliation computes for the inventory from the orders table,
// the same Expected as the live projection's.
func (s *Store) RebuiltProjection() reconcile.Projection {
	for _, p := range s.Projections() {
		if p.Name() == "inventory" {
			return rebuilt{Projection: p, actual: `SELECT item, reserved FROM ` + RebuildTable}
		}
	}
	panic("campuscafe: no inventory projection") // Projections always has it
}

// CheckRebuild compares RebuildTable with what reconcile computes for the inventory
// from the orders: the log and the source of truth must agree.
func (s *Store) CheckRebuild(ctx context.Context) (reconcile.Drift, error) {
	return reconcile.Check(ctx, s.DB, s.RebuiltProjection())
}

// Write prints the report for people.
func (r *RebuildReport) Write(w io.Writer) {
	fmt.Fprintf(w, "replayed topic %s from offset 0 into table %s:\n", r.Topic, r.Table)
	for _, p := range r.Partitions {
		if p.To == p.From {
			fmt.Fprintf(w, "  partition %d: empty\n", p.Partition)
			continue
		}
		fmt.Fprintf(w, "  partition %d: %s, offsets %d to %d\n", p.Partition, plural(p.To-p.From, "record"), p.From, p.To-1)
	}
	fmt.Fprintf(w, "  %d records: %d OrderPlaced applied, %d duplicates skipped by event id, %d other events", r.Records, r.Applied, r.Duplicates, r.Other)
	if r.Bad > 0 {
		fmt.Fprintf(w, ", %d records that are no event", r.Bad)
	}
	fmt.Fprintf(w, "\n  %s: %d rows\n", r.Table, r.Rows)
	if r.Unpublished > 0 {
		fmt.Fprintf(w, "  note: %d outbox rows were not published yet; their events are not in the topic, nor in the rebuild\n", r.Unpublished)
	}
}

func plural(n uint64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
