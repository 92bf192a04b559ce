package console

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the playground's inbox database

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/inbox"
)

// Lesson 3: a naive consumer and an idempotent one, fed the same stream of +100
// deposits in which some events come twice (a producer that retried after a timeout).
// The naive consumer adds 100 per message and its balance inflates; the idempotent one
// runs okiba's real inbox (package inbox) on an in-memory SQLite database: it records
// each event id in the same transaction as the balance update, so a repeat finds its id
// and changes nothing. (The broker's dedup window would drop these repeats at send time
// if they carried a dedup id; here they do not, to show what the consumer must do about
// the duplicates that reach it anyway, such as redeliveries after a lost ack.)
type idempotentLesson struct {
	mu       sync.Mutex
	deposits int
	dupRate  float64
	rate     float64
	naiveQ   string
	inboxQ   string
	db       *sql.DB
	ib       *inbox.Inbox
	handler  client.Handler
	events   int // sent, duplicates included
	dups     int
	stream   []streamEntry
	produced bool
	naive    int64
	naiveN   int
	balance  int64
	drained  bool
	rng      *rand.Rand
}

type streamEntry struct {
	Event string `json:"event"`
	Dup   bool   `json:"dup,omitempty"`
}

const depositAmount = 100

func newIdempotentLesson(p map[string]float64) (lesson, error) {
	deposits, err := param(p, "deposits", 20, 1, 200)
	if err != nil {
		return nil, err
	}
	dup, err := param(p, "duplicates", 0.3, 0, 1)
	if err != nil {
		return nil, err
	}
	rate, err := param(p, "rate", 12, 1, 100)
	if err != nil {
		return nil, err
	}
	return &idempotentLesson{deposits: int(deposits), dupRate: dup, rate: rate, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
}

func (l *idempotentLesson) start(r *run) error {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1) // one connection: one in-memory database
	l.db = db
	r.spawn(func(ctx context.Context) { <-ctx.Done(); db.Close() })
	if _, err := db.ExecContext(r.ctx, `CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO account VALUES (1, 0)`); err != nil {
		return err
	}
	if l.ib, err = inbox.New(db, "playground-deposits", inbox.Options{}); err != nil {
		return err
	}
	if err := l.ib.Setup(r.ctx); err != nil {
		return err
	}
	l.handler = l.ib.Handler(func(ctx context.Context, tx *sql.Tx, d *client.Delivery) error {
		_, err := tx.ExecContext(ctx, `UPDATE account SET balance = balance + ? WHERE id = 1`, depositAmount)
		return err
	})
	if l.naiveQ, err = r.queue("naive"); err != nil {
		return err
	}
	if l.inboxQ, err = r.queue("idempotent"); err != nil {
		return err
	}
	r.spawn(l.produce(r))
	r.spawn(l.consumeNaive(r))
	r.spawn(l.consumeIdempotent(r))
	r.spawn(l.watch(r))
	return nil
}

func (l *idempotentLesson) control(r *run, req controlRequest) error {
	return fmt.Errorf("this lesson has no live controls: start a new run with other settings")
}

// produce sends every deposit to both consumers' queues, and some of them twice.
func (l *idempotentLesson) produce(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for i := 1; i <= l.deposits; i++ {
			event := fmt.Sprintf("deposit-%03d", i)
			l.mu.Lock()
			// At least one repeat when repeats are asked for, so the lesson shows them.
			dup := l.rng.Float64() < l.dupRate || (i == l.deposits && l.dups == 0 && l.dupRate > 0)
			l.mu.Unlock()
			copies := 1
			if dup {
				copies = 2
			}
			for c := 0; c < copies; c++ {
				if !wait(ctx, rateGap(l.rate)) {
					return
				}
				m := client.Message{Body: []byte(`{"amount":` + strconv.Itoa(depositAmount) + `}`),
					Headers: map[string]string{inbox.EventIDHeader: event, "content-type": "application/json"}}
				if _, err := r.c.Send(ctx, l.naiveQ, m); err != nil {
					return
				}
				if _, err := r.c.Send(ctx, l.inboxQ, m); err != nil {
					return
				}
				l.mu.Lock()
				l.events++
				if c > 0 {
					l.dups++
				}
				l.stream = append(l.stream, streamEntry{Event: event, Dup: c > 0})
				l.mu.Unlock()
			}
		}
		l.mu.Lock()
		l.produced = true
		l.mu.Unlock()
	}
}

// consumeNaive adds every deposit it receives.
func (l *idempotentLesson) consumeNaive(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			m, err := r.receiveOne(ctx, l.naiveQ, 30*time.Second)
			if err != nil || m == nil {
				continue
			}
			l.mu.Lock()
			l.naive += depositAmount
			l.naiveN++
			l.mu.Unlock()
			r.c.AckOne(ctx, l.naiveQ, m.Receipt)
		}
	}
}

// consumeIdempotent runs the inbox's handler on each delivery, then acks it.
func (l *idempotentLesson) consumeIdempotent(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for ctx.Err() == nil {
			d, err := r.receiveOne(ctx, l.inboxQ, 30*time.Second)
			if err != nil || d == nil {
				continue
			}
			if err := l.handler(ctx, d); err != nil {
				r.c.Nack(ctx, l.inboxQ, ptr(time.Duration(0)), d.Receipt)
				continue
			}
			var bal int64
			if err := l.db.QueryRowContext(ctx, `SELECT balance FROM account WHERE id = 1`).Scan(&bal); err == nil {
				l.mu.Lock()
				l.balance = bal
				l.mu.Unlock()
			}
			r.c.AckOne(ctx, l.inboxQ, d.Receipt)
		}
	}
}

func (l *idempotentLesson) watch(r *run) func(ctx context.Context) {
	return func(ctx context.Context) {
		for wait(ctx, 100*time.Millisecond) {
			l.mu.Lock()
			produced := l.produced
			l.mu.Unlock()
			drained := produced && r.depth(ctx, l.naiveQ) == 0 && r.depth(ctx, l.inboxQ) == 0
			l.mu.Lock()
			l.drained = drained
			l.mu.Unlock()
		}
	}
}

func (l *idempotentLesson) state(r *run) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := inbox.Stats{}
	if l.ib != nil {
		st = l.ib.Stats()
	}
	return map[string]any{
		"deposits": l.deposits, "duplicates_rate": l.dupRate, "events": l.events, "duplicates": l.dups,
		"expected": int64(l.deposits) * depositAmount, "done": l.drained,
		"naive":      map[string]any{"balance": l.naive, "applied": l.naiveN},
		"idempotent": map[string]any{"balance": l.balance, "applied": st.Processed, "skipped": st.Duplicates},
		"stream":     append([]streamEntry{}, tail(l.stream, 60)...),
	}
}
