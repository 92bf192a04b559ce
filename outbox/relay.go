package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/dialect"
)

// Publisher sends messages to okiba. *client.Client is one; wrap it to add behaviour
// (the CampusCafe demo injects duplicates this way).
type Publisher interface {
	SendBatch(ctx context.Context, queue string, msgs []client.Message) ([]client.SendResult, error)
}

// TopicPublisher publishes records to okiba topics; *client.Client is one. A relay
// publishes rows added with AddToTopic through it, so its Publisher must also be a
// TopicPublisher. The interface is separate, and checked when a topic row comes up, so
// that a Publisher written for queues only keeps compiling and working: if it meets a
// topic row it cannot publish, the row is retried with backoff and logged, never
// dropped, until a relay with a publisher that can takes it.
type TopicPublisher interface {
	PublishRecords(ctx context.Context, topic string, recs []client.Record) ([]client.Published, error)
}

// errNoTopicPublisher is the retryable error of a topic row whose relay cannot publish
// to topics.
var errNoTopicPublisher = errors.New("outbox: the relay's Publisher is not a TopicPublisher: it cannot publish to a topic")

// RelayOptions configure a Relay. The zero value means the defaults.
type RelayOptions struct {
	// ID names this relay in the rows it leases (SQLite). Defaults to a random id.
	ID string
	// Groups is the most groups (and ungrouped rows) claimed in one round. Defaults
	// to 100.
	Groups int
	// PerGroup is the most rows of one group published in one round. Defaults to 100.
	PerGroup int
	// Lease bounds one round: the claim a relay holds on the groups it publishes (on
	// SQLite a lease in the head rows, which another relay may take over once it ends;
	// on PostgreSQL the round's transaction) and the publish requests in it. Defaults to
	// 30s.
	Lease time.Duration
	// PollInterval is how often an idle relay looks for new rows when nothing wakes it
	// (Kick, Wake). Defaults to 200ms.
	PollInterval time.Duration
	// BackoffBase and BackoffMax shape the wait before a row that failed to publish (the
	// queue is full or missing, the broker is down) is tried again: BackoffBase doubled
	// for each failed attempt, at most BackoffMax, with jitter. Default 100ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// KeepSent is how long sent rows are kept before cleanup deletes them. Defaults to
	// 1h; negative keeps them forever.
	KeepSent time.Duration
	// CleanupInterval is how often Run deletes sent rows. Defaults to 1m.
	CleanupInterval time.Duration
	// Wake, when it delivers, makes an idle relay look for rows at once (for example
	// outbox/pgwake on a PostgreSQL notification). Optional.
	Wake <-chan struct{}
	// Logger receives publish failures. Defaults to slog.Default().
	Logger *slog.Logger
}

func (o RelayOptions) withDefaults() RelayOptions {
	if o.ID == "" {
		b := make([]byte, 6)
		rand.Read(b)
		o.ID = "relay-" + hex.EncodeToString(b)
	}
	if o.Groups <= 0 {
		o.Groups = 100
	}
	if o.PerGroup <= 0 {
		o.PerGroup = 100
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 100 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.KeepSent == 0 {
		o.KeepSent = time.Hour
	}
	if o.CleanupInterval <= 0 {
		o.CleanupInterval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// RelayStats count what a Relay did since it was made.
type RelayStats struct {
	// Rounds that claimed something.
	Rounds int64 `json:"rounds"`
	// Published rows, marked sent (Duplicates included).
	Published int64 `json:"published"`
	// Duplicates: rows the broker answered as duplicates of an earlier send with the
	// same dedup id — a publish repeated after a crash or a failed mark, absorbed.
	Duplicates int64 `json:"duplicates"`
	// FirstDuplicates: of the Duplicates, those answered to a row's first publish — its
	// dedup id named another message, which the broker delivered instead (logged at WARN
	// with both ids). A repeat after a crash or a failed mark is never one of them.
	FirstDuplicates int64 `json:"first_duplicates"`
	// Retried rows: publish attempts that failed and will be tried again.
	Retried int64 `json:"retried"`
	// Failed rows: refused by the broker for good (too large, invalid), marked failed.
	Failed int64 `json:"failed"`
	// Reordered rows were accepted by the broker after an earlier row of their group in
	// the same request was refused (only possible with a max_bytes limit): their order
	// could not be kept.
	Reordered int64 `json:"reordered"`
	// Cleaned: sent rows deleted by cleanup.
	Cleaned int64 `json:"cleaned"`
}

// Relay publishes an outbox's rows. Run any number of relays, in one process or many.
type Relay struct {
	o    *Outbox
	pub  Publisher
	opts RelayOptions
	kick chan struct{}

	qHeads, qLease, qRelease, qSent, qRetry, qFail, qCleanup, qCleanAttempts string

	rounds, published, duplicates, retried, failed, reordered, cleaned atomic.Int64
	firstDuplicates                                                    atomic.Int64
}

// Relay returns a relay that publishes this outbox's rows through pub (usually the
// okiba *client.Client). Start it with Run.
func (o *Outbox) Relay(pub Publisher, opts RelayOptions) *Relay {
	r := &Relay{o: o, pub: pub, opts: opts.withDefaults(), kick: make(chan struct{}, 1)}
	t, d := o.table, o.d
	heads := `SELECT o.id, o.group_key FROM {t} o
		WHERE o.outbox = ? AND o.sent_at IS NULL AND o.failed_at IS NULL AND o.next_attempt_at <= ?%s
		AND (o.group_key = '' OR NOT EXISTS (SELECT 1 FROM {t} p
			WHERE p.outbox = o.outbox AND p.group_key = o.group_key
			AND p.sent_at IS NULL AND p.failed_at IS NULL AND p.id < o.id))
		ORDER BY o.id LIMIT ?%s`
	if d.SkipLocked() {
		r.qHeads = dialect.T(d, fmt.Sprintf(heads, "", " FOR UPDATE SKIP LOCKED"), t)
	} else {
		r.qHeads = dialect.T(d, fmt.Sprintf(heads, " AND (o.lease_until IS NULL OR o.lease_until < ?)", ""), t)
	}
	r.qLease = `UPDATE {t} SET lease_owner = ?, lease_until = ? WHERE id IN (%s)`
	r.qRelease = `UPDATE {t} SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? AND id IN (%s)`
	r.qSent = dialect.T(d, `UPDATE {t} SET sent_at = ?, message_id = ?, last_error = NULL WHERE id = ?`, t)
	r.qRetry = dialect.T(d, `UPDATE {t} SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? WHERE id = ?`, t)
	r.qFail = dialect.T(d, `UPDATE {t} SET failed_at = ?, last_error = ? WHERE id = ?`, t)
	r.qCleanup = dialect.T(d, `DELETE FROM {t} WHERE outbox = ? AND id IN
		(SELECT id FROM {t} WHERE outbox = ? AND sent_at IS NOT NULL AND sent_at < ? LIMIT 1000)`, t)
	r.qCleanAttempts = dialect.T(d, `DELETE FROM {t}_attempts WHERE id NOT IN
		(SELECT id FROM {t} WHERE sent_at IS NULL AND failed_at IS NULL)`, t)
	return r
}

// Stats returns the counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Rounds: r.rounds.Load(), Published: r.published.Load(), Duplicates: r.duplicates.Load(), FirstDuplicates: r.firstDuplicates.Load(),
		Retried: r.retried.Load(), Failed: r.failed.Load(), Reordered: r.reordered.Load(), Cleaned: r.cleaned.Load(),
	}
}

// Kick makes an idle Run look for rows at once (call it after committing a transaction
// that added rows, in the same process).
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run publishes rows until ctx is cancelled, then finishes the round in progress and
// returns nil. Rounds follow each other while there is work; an idle relay waits for
// Kick, Wake or PollInterval. Sent rows are cleaned up every CleanupInterval.
func (r *Relay) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	nextCleanup := time.Now().Add(r.opts.CleanupInterval)
	failures := 0
	for ctx.Err() == nil {
		// A round is not cut short by ctx: what was published gets marked.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Lease)
		n, err := r.RunOnce(rctx)
		cancel()
		wait := r.opts.PollInterval
		switch {
		case err != nil:
			failures++
			wait = r.backoff(failures)
			r.opts.Logger.Warn("outbox: relay round failed; retrying", "outbox", r.o.name, "relay", r.opts.ID, "error", err, "retry_in", wait)
		case n > 0:
			failures = 0
			wait = 0
		default:
			failures = 0
		}
		if r.opts.KeepSent > 0 && time.Now().After(nextCleanup) {
			nextCleanup = time.Now().Add(r.opts.CleanupInterval)
			if _, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
				r.opts.Logger.Warn("outbox: cleanup failed", "outbox", r.o.name, "error", err)
			}
		}
		if wait == 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-r.kick:
		case <-r.opts.Wake:
		}
		timer.Stop()
	}
	return nil
}

// backoff returns BackoffBase·2^(n−1), at most BackoffMax, jittered over its upper half.
func (r *Relay) backoff(n int) time.Duration {
	d := r.opts.BackoffBase
	for i := 1; i < n && d < r.opts.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, r.opts.BackoffMax)
	return d/2 + mrand.N(d/2+1)
}

// Cleanup deletes rows sent more than KeepSent ago and returns how many.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	if r.opts.KeepSent < 0 {
		return 0, nil
	}
	cut := r.o.now().Add(-r.opts.KeepSent).UnixMilli()
	var total int64
	for {
		res, err := r.o.db.ExecContext(ctx, r.qCleanup, r.o.name, r.o.name, cut)
		if err != nil {
			return total, fmt.Errorf("outbox: cleanup: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("outbox: cleanup: %w", err)
		}
		total += n
		r.cleaned.Add(n)
		if n < 1000 {
			// The counts of rows sent or failed are not needed any more.
			if _, err := r.o.db.ExecContext(ctx, r.qCleanAttempts); err != nil {
				return total, fmt.Errorf("outbox: cleanup: %w", err)
			}
			return total, nil
		}
	}
}

type head struct {
	id    int64
	group string
}

type row struct {
	id       int64
	queue    string
	group    string
	body     []byte
	headers  string
	delayMS  int64
	attempts int
	// publishes counts this row's publishes, this one included (claimAttempts).
	publishes int
}

// claimAttempts counts the publish the round is about to make of each row, in a
// transaction of its own that commits before anything is published: a relay that
// crashes after publishing leaves the count behind, so the repeat is known for one.
// (On PostgreSQL the round's transaction holds the rows' locks; the counts live in a
// table of their own, which it does not lock.)
func (r *Relay) claimAttempts(ctx context.Context, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	for lo := 0; lo < len(rows); lo += 500 {
		part := rows[lo:min(lo+500, len(rows))]
		values := strings.TrimSuffix(strings.Repeat("(?, 1), ", len(part)), ", ")
		q := dialect.T(r.o.d, `INSERT INTO {t}_attempts (id, n) VALUES `+values+`
			ON CONFLICT (id) DO UPDATE SET n = {t}_attempts.n + 1 RETURNING id, n`, r.o.table)
		args := make([]any, len(part))
		at := make(map[int64]int, len(part))
		for i, x := range part {
			args[i] = x.id
			at[x.id] = lo + i
		}
		rs, err := r.o.db.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("outbox: count publish attempts: %w", err)
		}
		for rs.Next() {
			var id int64
			var n int
			if err := rs.Scan(&id, &n); err != nil {
				rs.Close()
				return fmt.Errorf("outbox: count publish attempts: %w", err)
			}
			if i, ok := at[id]; ok {
				rows[i].publishes = n
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return fmt.Errorf("outbox: count publish attempts: %w", err)
		}
	}
	return nil
}

type outcomeKind uint8

const (
	untouched outcomeKind = iota // not sent this round (an earlier row of its group failed)
	sent
	retry
	failed
)

type outcome struct {
	kind     outcomeKind
	id       string
	dup      bool
	err      error
	attempts int
}

// querier is a *sql.Tx or *sql.DB.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// RunOnce runs one round: it claims up to Groups groups, publishes their rows in order
// and marks them, and returns how many groups (and ungrouped rows) it claimed. ctx bounds
// the whole round; cancelling it in the middle is what a crash does (published rows
// that were not marked are published again later, and the broker's dedup absorbs them).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	if _, err := r.o.Instance(ctx); err != nil {
		return 0, err
	}
	if r.o.d.SkipLocked() {
		return r.roundLocked(ctx)
	}
	return r.roundLeased(ctx)
}

// roundLocked claims heads with FOR UPDATE SKIP LOCKED and keeps the transaction (and so
// the locks) open while it publishes and marks.
func (r *Relay) roundLocked(ctx context.Context) (n int, err error) {
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("outbox: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	now := r.o.now()
	heads, err := r.heads(ctx, tx, now.UnixMilli())
	if err != nil || len(heads) == 0 {
		if err == nil {
			err = tx.Rollback()
		}
		return 0, err
	}
	r.rounds.Add(1)
	rows, err := r.load(ctx, tx, heads)
	if err != nil {
		return 0, err
	}
	if err := r.claimAttempts(ctx, rows); err != nil {
		return 0, err
	}
	outs := r.publish(ctx, rows)
	if err := r.record(ctx, tx, rows, outs); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("outbox: commit: %w", err)
	}
	r.count(outs)
	return len(heads), nil
}

// roundLeased claims heads by writing a lease into them, publishes without a
// transaction open (SQLite has one writer: holding it while waiting for the network would
// stall the application), and marks the rows and drops the lease in a second one.
func (r *Relay) roundLeased(ctx context.Context) (int, error) {
	now := r.o.now()
	var heads []head
	err := r.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		heads, err = r.heads(ctx, tx, now.UnixMilli(), now.UnixMilli())
		if err != nil || len(heads) == 0 {
			return err
		}
		args := []any{r.opts.ID, now.Add(r.opts.Lease).UnixMilli()}
		_, err = tx.ExecContext(ctx, r.inList(r.qLease, len(heads)), append(args, headIDs(heads)...)...)
		return err
	})
	if err != nil || len(heads) == 0 {
		return 0, err
	}
	r.rounds.Add(1)
	rows, err := r.load(ctx, r.o.db, heads)
	if err != nil {
		return 0, err
	}
	if err := r.claimAttempts(ctx, rows); err != nil {
		return 0, err
	}
	outs := r.publish(ctx, rows)
	err = r.inTx(ctx, func(tx *sql.Tx) error {
		if err := r.record(ctx, tx, rows, outs); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, r.inList(r.qRelease, len(heads)), append([]any{r.opts.ID}, headIDs(heads)...)...)
		return err
	})
	if err != nil {
		return 0, err
	}
	r.count(outs)
	return len(heads), nil
}

func (r *Relay) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("outbox: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	return nil
}

// inList fills the %s of a query with n placeholders and rebinds it.
func (r *Relay) inList(q string, n int) string {
	return dialect.T(r.o.d, fmt.Sprintf(q, strings.TrimSuffix(strings.Repeat("?, ", n), ", ")), r.o.table)
}

func headIDs(hs []head) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h.id
	}
	return out
}

// heads selects the claimable heads: the oldest unsent row of each group that is due
// (and, on SQLite, not leased), and due ungrouped rows.
func (r *Relay) heads(ctx context.Context, q querier, now int64, leaseNow ...int64) ([]head, error) {
	args := []any{r.o.name, now}
	for _, l := range leaseNow {
		args = append(args, l)
	}
	args = append(args, r.opts.Groups)
	rs, err := q.QueryContext(ctx, r.qHeads, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	defer rs.Close()
	var out []head
	for rs.Next() {
		var h head
		if err := rs.Scan(&h.id, &h.group); err != nil {
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		out = append(out, h)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	return out, nil
}

const rowCols = `id, queue, group_key, body, headers, delay_ms, attempts`

// load reads the rows to publish: up to PerGroup unsent rows of each claimed group, and
// the claimed ungrouped rows, in id order.
func (r *Relay) load(ctx context.Context, q querier, heads []head) ([]row, error) {
	var groups []any
	var singles []any
	for _, h := range heads {
		if h.group == "" {
			singles = append(singles, h.id)
		} else {
			groups = append(groups, h.group)
		}
	}
	var out []row
	if len(groups) > 0 {
		query := r.inList(`SELECT `+rowCols+` FROM (
			SELECT `+rowCols+`, ROW_NUMBER() OVER (PARTITION BY group_key ORDER BY id) AS rn
			FROM {t} WHERE outbox = ? AND sent_at IS NULL AND failed_at IS NULL AND group_key IN (%s)
		) x WHERE rn <= ? ORDER BY id`, len(groups))
		args := append([]any{r.o.name}, groups...)
		rows, err := r.scanRows(ctx, q, query, append(args, r.opts.PerGroup)...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	if len(singles) > 0 {
		query := r.inList(`SELECT `+rowCols+` FROM {t} WHERE sent_at IS NULL AND failed_at IS NULL AND id IN (%s) ORDER BY id`, len(singles))
		rows, err := r.scanRows(ctx, q, query, singles...)
		if err != nil {
			return nil, err
		}
		out = mergeByID(out, rows)
	}
	return out, nil
}

func (r *Relay) scanRows(ctx context.Context, q querier, query string, args ...any) ([]row, error) {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: load rows: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var x row
		if err := rs.Scan(&x.id, &x.queue, &x.group, &x.body, &x.headers, &x.delayMS, &x.attempts); err != nil {
			return nil, fmt.Errorf("outbox: load rows: %w", err)
		}
		out = append(out, x)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: load rows: %w", err)
	}
	return out, nil
}

func mergeByID(a, b []row) []row {
	out := make([]row, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i].id < b[j].id) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// Limits of one publish request.
const (
	maxRequestMessages = api.MaxBatch
	maxRequestRecords  = api.MaxPublishBatch
	maxRequestBytes    = 4 << 20
)

// sendResult is the broker's answer for one row: the id it recorded (a queue's message
// id, or a topic record's "partition/offset"), whether it was a duplicate, or the row's
// own error.
type sendResult struct {
	id  string
	dup bool
	err error
}

// publish sends rows (in id order) destination by destination, in requests that keep
// each group's rows in order. Once a row of a group fails for a reason that may pass,
// the group's later rows are not sent this round, so the group is retried from that row.
func (r *Relay) publish(ctx context.Context, rows []row) []outcome {
	outs := make([]outcome, len(rows))
	broken := map[string]bool{}
	var dests []string
	byDest := map[string][]int{}
	for i, x := range rows {
		if _, ok := byDest[x.queue]; !ok {
			dests = append(dests, x.queue)
		}
		byDest[x.queue] = append(byDest[x.queue], i)
	}
	for _, dest := range dests {
		topic, isTopic := topicOf(dest)
		limit := maxRequestMessages
		if isTopic {
			limit = maxRequestRecords
		}
		pending := byDest[dest]
		for len(pending) > 0 {
			var chunk []int
			bytes := 0
			for len(pending) > 0 && len(chunk) < limit {
				i := pending[0]
				x := &rows[i]
				if x.group != "" && broken[x.group] {
					pending = pending[1:]
					continue // untouched
				}
				size := len(x.body) + len(x.headers) + len(x.group) + 256
				if len(chunk) > 0 && bytes+size > maxRequestBytes {
					break
				}
				pending = pending[1:]
				bytes += size
				chunk = append(chunk, i)
			}
			if len(chunk) == 0 {
				continue
			}
			var results []sendResult
			var err error
			if isTopic {
				results, err = r.publishRecords(ctx, topic, rows, chunk, outs)
			} else {
				results, err = r.sendMessages(ctx, dest, rows, chunk, outs)
			}
			for k, i := range chunk {
				if outs[i].kind == failed {
					continue // could not be encoded: never sent
				}
				x := &rows[i]
				e := err
				if e == nil {
					e = results[k].err
				}
				switch {
				case x.group != "" && broken[x.group]:
					// An earlier row of the group failed in this very request.
					if e == nil {
						outs[i] = outcome{kind: sent, id: results[k].id, dup: results[k].dup}
						r.reordered.Add(1)
						r.opts.Logger.Error("outbox: a row was accepted after an earlier row of its group was refused; their order is lost",
							"outbox", r.o.name, "row", x.id, "group", x.group, "destination", dest)
					}
				case e == nil:
					outs[i] = outcome{kind: sent, id: results[k].id, dup: results[k].dup}
				case permanent(e):
					outs[i] = outcome{kind: failed, err: e}
				default:
					outs[i] = outcome{kind: retry, err: e, attempts: x.attempts + 1}
					if x.group != "" {
						broken[x.group] = true
					}
				}
			}
		}
	}
	return outs
}

// sendMessages sends the chunk's rows to a queue. A row that cannot be made into a
// message is marked failed in outs and left out of the request; results has one entry
// per chunk row (none for those) unless err is set.
func (r *Relay) sendMessages(ctx context.Context, queue string, rows []row, chunk []int, outs []outcome) ([]sendResult, error) {
	var msgs []client.Message
	var sentIdx []int
	for k, i := range chunk {
		m, err := r.message(&rows[i])
		if err != nil {
			outs[i] = outcome{kind: failed, err: err}
			continue
		}
		msgs = append(msgs, m)
		sentIdx = append(sentIdx, k)
	}
	results := make([]sendResult, len(chunk))
	if len(msgs) == 0 {
		return results, nil
	}
	res, err := r.pub.SendBatch(ctx, queue, msgs)
	if err == nil && len(res) != len(msgs) {
		err = fmt.Errorf("publisher answered %d results for %d messages", len(res), len(msgs))
	}
	if err != nil {
		return nil, err
	}
	for j, k := range sentIdx {
		results[k] = sendResult{id: res[j].ID, dup: res[j].Duplicate, err: res[j].Err}
	}
	return results, nil
}

// publishRecords publishes the chunk's rows to a topic, as sendMessages does for a
// queue.
func (r *Relay) publishRecords(ctx context.Context, topic string, rows []row, chunk []int, outs []outcome) ([]sendResult, error) {
	tp, ok := r.pub.(TopicPublisher)
	if !ok {
		return nil, errNoTopicPublisher
	}
	var recs []client.Record
	var sentIdx []int
	for k, i := range chunk {
		rec, err := r.topicRecord(&rows[i])
		if err != nil {
			outs[i] = outcome{kind: failed, err: err}
			continue
		}
		recs = append(recs, rec)
		sentIdx = append(sentIdx, k)
	}
	results := make([]sendResult, len(chunk))
	if len(recs) == 0 {
		return results, nil
	}
	res, err := tp.PublishRecords(ctx, topic, recs)
	if err == nil && len(res) != len(recs) {
		err = fmt.Errorf("publisher answered %d results for %d records", len(res), len(recs))
	}
	if err != nil {
		return nil, err
	}
	for j, k := range sentIdx {
		p := res[j]
		results[k] = sendResult{id: fmt.Sprintf("%d/%d", p.Partition, p.Offset), dup: p.Duplicate, err: p.Err}
	}
	return results, nil
}

// headersOf decodes a row's headers and adds the event id, unless the row has one.
func (r *Relay) headersOf(x *row) (map[string]string, error) {
	h := map[string]string{}
	if x.headers != "" {
		if err := json.Unmarshal([]byte(x.headers), &h); err != nil {
			return nil, fmt.Errorf("headers are not a JSON object of strings: %w", err)
		}
	}
	if h[EventIDHeader] == "" {
		h[EventIDHeader] = r.o.DedupID(x.id)
	}
	return h, nil
}

// message turns a row into the message to send.
func (r *Relay) message(x *row) (client.Message, error) {
	h, err := r.headersOf(x)
	if err != nil {
		return client.Message{}, err
	}
	m := client.Message{Body: x.body, Group: x.group, DedupID: r.o.DedupID(x.id), Headers: h}
	if x.delayMS >= 0 {
		d := time.Duration(x.delayMS) * time.Millisecond
		m.Delay = &d
	}
	return m, nil
}

// topicRecord turns a row into the record to publish: its group is the record's key, so
// that a group's rows land in one partition, in row order; its dedup id is the row's, so
// a relay that publishes a row again within the topic's dedup window gets the first
// record's place back instead of a second record.
func (r *Relay) topicRecord(x *row) (client.Record, error) {
	h, err := r.headersOf(x)
	if err != nil {
		return client.Record{}, err
	}
	rec := client.Record{Body: x.body, Headers: h, DedupID: r.o.DedupID(x.id)}
	if x.group != "" {
		rec.Key, rec.HasKey = []byte(x.group), true
	}
	return rec, nil
}

// permanent reports whether the broker refused a message in a way no retry changes.
func permanent(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case api.CodeMessageTooLarge, api.CodeInvalidMessage, api.CodeInvalidBody, api.CodeInvalidDelay, api.CodeInvalidName,
		api.CodeRecordTooLarge:
		return true
	}
	return false
}

// record writes the round's outcomes into the rows.
func (r *Relay) record(ctx context.Context, tx *sql.Tx, rows []row, outs []outcome) error {
	now := r.o.now()
	for i, x := range rows {
		o := outs[i]
		var err error
		switch o.kind {
		case sent:
			_, err = tx.ExecContext(ctx, r.qSent, now.UnixMilli(), o.id, x.id)
			if o.dup && x.publishes == 1 && !r.o.legacy(x.id) {
				r.firstDuplicates.Add(1)
				r.opts.Logger.Warn("outbox: the broker took a row's first publish for a duplicate: its dedup id names another message, "+
					"which the broker has instead (another outbox of this name, or a database reset without a new instance); the row is marked sent",
					"outbox", r.o.name, "row", x.id, "dedup_id", r.o.DedupID(x.id), "message_id", o.id, "destination", x.queue)
			}
		case retry:
			wait := r.backoff(o.attempts)
			_, err = tx.ExecContext(ctx, r.qRetry, now.Add(wait).UnixMilli(), truncate(o.err.Error()), x.id)
			r.opts.Logger.Warn("outbox: publish failed; will retry", "outbox", r.o.name, "row", x.id, "destination", x.queue,
				"attempts", o.attempts, "retry_in", wait, "error", o.err)
		case failed:
			_, err = tx.ExecContext(ctx, r.qFail, now.UnixMilli(), truncate(o.err.Error()), x.id)
			r.opts.Logger.Error("outbox: the broker refused a row for good; it is marked failed and its group moves on",
				"outbox", r.o.name, "row", x.id, "destination", x.queue, "error", o.err)
		}
		if err != nil {
			return fmt.Errorf("outbox: mark row %d: %w", x.id, err)
		}
	}
	return nil
}

// count adds a committed round's outcomes to the stats.
func (r *Relay) count(outs []outcome) {
	for _, o := range outs {
		switch o.kind {
		case sent:
			r.published.Add(1)
			if o.dup {
				r.duplicates.Add(1)
			}
		case retry:
			r.retried.Add(1)
		case failed:
			r.failed.Add(1)
		}
	}
}

func truncate(s string) string {
	if len(s) > 1000 {
		return s[:1000]
	}
	return s
}
