package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/client"
)

// history is everything the load did and saw. Producers log each attempt before they
// send; consumers log each delivery with the time its receive was sent, and each settle
// before they send it and when it is acknowledged.
type history struct {
	mu        sync.Mutex
	attempted map[string]bool      // bodies
	sent      map[string]string    // body → id, for acknowledged sends
	bodyOf    map[string]string    // id → body
	dels      []delivery           // in the order they were recorded
	ackTry    map[string]bool      // receipts with an attempted ack
	ackTryAt  map[string]time.Time // when the first ack of a receipt was sent
	ackOK     map[string]time.Time // id → when an ack of it was first acknowledged
	dlTry     map[string]bool      // receipts with an attempted dead-letter
	moved     map[string]bool      // ids dead-lettered (attempted) or seen with a reset count
	reordered []string             // found while recording (order within one receive)
	draining  bool
	inflight  int // settle requests under way
	sqsSent   int // sends acknowledged through the SQS API
	sqsAcked  int // deletes that settled, through the SQS API
	fetched   int // deferred messages fetched by id
}

type delivery struct {
	id, body, receipt, queue string
	count                    uint32
	sentAt                   time.Time // when the receive request was sent
}

func newHistory() *history {
	return &history{
		attempted: map[string]bool{}, sent: map[string]string{}, bodyOf: map[string]string{},
		ackTry: map[string]bool{}, ackTryAt: map[string]time.Time{}, ackOK: map[string]time.Time{}, dlTry: map[string]bool{}, moved: map[string]bool{},
	}
}

func (h *history) sentOK() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sent)
}

func (h *history) setDraining() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
}

func (h *history) isDraining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining
}

func (h *history) settling() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflight > 0
}

// produce sends batches of 1 to 8 messages until ctx ends. Producers 0 and 1 send to
// ordered groups they own (so each group's order is their send order); the others send
// ungrouped messages. Failed sends are not retried: their messages may or may not exist.
func produce(ctx context.Context, cl *client.Client, h *history, p int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(p)+10))
	seq := map[string]int{}
	n := 0
	for ctx.Err() == nil {
		k := 1 + rng.IntN(8)
		msgs := make([]client.Message, k)
		bodies := make([]string, k)
		for i := range msgs {
			n++
			group := ""
			if p < 2 {
				group = fmt.Sprintf("g%d.%d", p, rng.IntN(3))
				seq[group]++
			}
			bodies[i] = body(p, n, group, seq[group])
			msgs[i] = client.Message{Body: []byte(bodies[i]), Group: group}
		}
		h.mu.Lock()
		for _, b := range bodies {
			h.attempted[b] = true
		}
		h.mu.Unlock()
		res, err := cl.SendBatch(ctx, queueName, msgs)
		if err != nil {
			pause(ctx, 20*time.Millisecond)
			continue
		}
		full := false
		h.mu.Lock()
		for i, r := range res {
			if r.Err == nil {
				h.sent[bodies[i]] = r.ID
				h.bodyOf[r.ID] = bodies[i]
			} else {
				full = true // queue_full: back off
			}
		}
		h.mu.Unlock()
		if full {
			pause(ctx, 50*time.Millisecond)
		}
	}
}

// consume receives until ctx ends and settles each message: mostly ack, sometimes nack,
// dead-letter, defer (fetched again by id, see fetchDeferred), abandon (the lease
// expires), or hold past the lease as a frozen consumer would. Messages of a group are settled in order: after the first message of a group
// that is not acked, the rest of that group in the batch is nacked. With drain (or once
// the history is draining), everything is acked.
func consume(ctx context.Context, cl *client.Client, h *history, c int, seed uint64, queue string, drain bool) {
	rng := rand.New(rand.NewPCG(seed, uint64(c)+1000))
	wait := 300 * time.Millisecond
	vis := visibility
	for ctx.Err() == nil {
		if queue == queueName {
			h.fetchDeferred(ctx, cl, rng)
		}
		sentAt := time.Now()
		ds, err := cl.Receive(ctx, queue, client.ReceiveOptions{Max: 16, Wait: &wait, Visibility: &vis})
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		if len(ds) == 0 {
			continue
		}
		h.record(ds, queue, sentAt)
		all := drain || h.isDraining()
		var acks, nacks, dls, defers []client.Delivery
		blocked := map[string]bool{}
		frozen := false
		for _, d := range ds {
			if d.Group != "" && blocked[d.Group] {
				nacks = append(nacks, d)
				continue
			}
			r := rng.IntN(100)
			if all || (d.Group != "" && r >= 82 && rng.IntN(8) != 0) {
				// A group's failures hold the whole group (a lease of 2 s for an abandoned
				// one): keep them rarer there, or a full queue of grouped messages drains
				// at a trickle and the run measures patience rather than correctness.
				r = 0
			}
			switch {
			case r < 82:
				acks = append(acks, d)
				continue
			case r < 89:
				nacks = append(nacks, d)
			case r < 93 && queue == queueName:
				dls = append(dls, d)
			case r < 95 && queue == queueName:
				defers = append(defers, d) // out of its group, which moves on
				continue
			case r < 99:
				// abandon: the lease expires and the message comes back
			default:
				frozen = true // hold the batch past its leases, then try to ack it
			}
			if d.Group != "" {
				blocked[d.Group] = true
			}
		}
		if frozen {
			pause(ctx, vis+300*time.Millisecond)
		}
		h.settle(ctx, cl, queue, "ack", acks)
		h.settle(ctx, cl, queue, "nack", nacks)
		h.settle(ctx, cl, queue, "deadletter", dls)
		h.settle(ctx, cl, queue, "defer", defers)
	}
}

// fetchDeferred takes up to 16 of the queue's deferred messages by id (as peek lists
// them: a defer whose answer was lost to a kill may or may not have happened) and
// settles them: mostly ack, sometimes a nack, which returns them to deferred. A deferred
// message has left its group, so it is out of the order checks; one the broker lost
// would never be delivered again, which the check counts as vanished (a defer is not a
// settlement).
func (h *history) fetchDeferred(ctx context.Context, cl *client.Client, rng *rand.Rand) {
	page, err := cl.Peek(ctx, queueName, client.PeekOptions{Limit: 16, States: []string{"deferred"}})
	if err != nil || len(page.Messages) == 0 {
		return
	}
	ids := make([]string, len(page.Messages))
	for i, m := range page.Messages {
		ids[i] = m.ID
	}
	sentAt := time.Now()
	vis := visibility
	res, err := cl.ReceiveDeferred(ctx, queueName, &vis, ids...)
	if err != nil {
		return
	}
	var ds []client.Delivery
	for _, r := range res {
		if r.Err == nil {
			ds = append(ds, r.Delivery)
		}
	}
	if len(ds) == 0 {
		return
	}
	h.mu.Lock()
	for _, d := range ds {
		h.moved[d.ID] = true
	}
	h.fetched += len(ds)
	h.mu.Unlock()
	h.record(ds, queueName, sentAt)
	var acks, nacks []client.Delivery
	for _, d := range ds {
		if !h.isDraining() && rng.IntN(4) == 0 {
			nacks = append(nacks, d)
		} else {
			acks = append(acks, d)
		}
	}
	h.settle(ctx, cl, queueName, "ack", acks)
	h.settle(ctx, cl, queueName, "nack", nacks)
}

// record logs deliveries, and checks that a receive returns each group's messages in
// order (a message that was dead-lettered or redriven has rejoined its group at the tail,
// so it is left out of that check).
func (h *history) record(ds []client.Delivery, queue string, sentAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := map[string]int{}
	for _, d := range ds {
		b := string(d.Body)
		if prev := h.latestCount(d.ID); prev > 0 && d.Deliveries <= prev {
			h.moved[d.ID] = true // its count restarted: it was dead-lettered and redriven
		}
		if queue != queueName {
			h.moved[d.ID] = true
		}
		h.dels = append(h.dels, delivery{id: d.ID, body: b, receipt: d.Receipt, queue: queue, count: d.Deliveries, sentAt: sentAt})
		if g, s, ok := parseBody(b); ok && queue == queueName && !h.moved[d.ID] {
			if p, seen := last[g]; seen && s < p {
				h.reordered = append(h.reordered, fmt.Sprintf("%s after seq %d in one receive", b, p))
			}
			last[g] = s
		}
	}
}

func (h *history) latestCount(id string) uint32 {
	for i := len(h.dels) - 1; i >= 0; i-- {
		if h.dels[i].id == id {
			return h.dels[i].count
		}
	}
	return 0
}

// settle sends one settle request for ds, logging the attempt first and the outcome after.
func (h *history) settle(ctx context.Context, cl *client.Client, queue, op string, ds []client.Delivery) {
	if len(ds) == 0 {
		return
	}
	rs := make([]string, len(ds))
	h.mu.Lock()
	for i, d := range ds {
		rs[i] = d.Receipt
		switch op {
		case "ack":
			h.ackTry[d.Receipt] = true
			if _, ok := h.ackTryAt[d.Receipt]; !ok {
				h.ackTryAt[d.Receipt] = time.Now()
			}
		case "deadletter":
			h.dlTry[d.Receipt] = true
			h.moved[d.ID] = true
		case "defer":
			h.moved[d.ID] = true
		}
	}
	h.inflight++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
	}()
	var errs []error
	var err error
	switch op {
	case "ack":
		errs, err = cl.Ack(ctx, queue, rs...)
	case "nack":
		zero := time.Duration(0)
		errs, err = cl.Nack(ctx, queue, &zero, rs...)
	case "deadletter":
		errs, err = cl.DeadLetter(ctx, queue, "torture", "chosen by the torture consumer", rs...)
	case "defer":
		errs, err = cl.Defer(ctx, queue, rs...)
	}
	if err != nil || op != "ack" {
		return
	}
	now := time.Now()
	h.mu.Lock()
	for i, e := range errs {
		if e == nil {
			if _, seen := h.ackOK[ds[i].ID]; !seen {
				h.ackOK[ds[i].ID] = now
			}
		}
	}
	h.mu.Unlock()
}

// markDeadLetters marks every message now in the dead-letter queue as moved, and
// returns their ids: the redrive then moves exactly those (by id), each to the tail of
// its group, where group order no longer applies to it.
func (h *history) markDeadLetters(ctx context.Context, cl *client.Client) []string {
	var ids []string
	after := ""
	for {
		page, err := cl.Peek(ctx, dlqName, client.PeekOptions{After: after, Limit: 1000})
		if err != nil {
			return nil
		}
		h.mu.Lock()
		for _, m := range page.Messages {
			h.moved[m.ID] = true
			ids = append(ids, m.ID)
		}
		h.mu.Unlock()
		if after = page.Next; after == "" {
			return ids
		}
	}
}

// check counts the violations.
func (h *history) check(rep *Report) {
	h.mu.Lock()
	defer h.mu.Unlock()
	example := func(kind, what string) {
		n := 0
		for _, e := range rep.Examples {
			if len(e) > len(kind) && e[:len(kind)] == kind {
				n++
			}
		}
		if n < 5 {
			rep.Examples = append(rep.Examples, kind+": "+what)
		}
	}
	rep.Attempted = len(h.attempted)
	rep.SentOK = len(h.sent)
	rep.Delivered = len(h.dels)
	rep.AckedOK = len(h.ackOK)
	rep.SQSSentOK, rep.SQSAckedOK = h.sqsSent, h.sqsAcked
	rep.DeferredFetched = h.fetched

	delivered := map[string][]delivery{} // by id
	for _, d := range h.dels {
		delivered[d.id] = append(delivered[d.id], d)
		if !h.attempted[d.body] {
			rep.Unexpected++
			example("unexpected", d.body)
		}
		if d.queue == dlqName {
			rep.DeadLettered++
		}
	}
	for b, id := range h.sent {
		if len(delivered[id]) == 0 {
			rep.Lost++
			example("lost", fmt.Sprintf("%s (id %s)", b, id))
		}
	}
	for id, ds := range delivered {
		if t, ok := h.ackOK[id]; ok {
			for _, d := range ds {
				if d.sentAt.After(t) {
					rep.Resurrected++
					example("resurrected", fmt.Sprintf("%s delivered by a receive sent %v after its ack", d.body, d.sentAt.Sub(t)))
					break
				}
			}
		}
		last := ds[len(ds)-1]
		if !h.ackTry[last.receipt] && !h.dlTry[last.receipt] {
			rep.Vanished++
			example("vanished", fmt.Sprintf("%s: last delivered (count %d, from %s) and never settled nor delivered again", last.body, last.count, last.queue))
		}
		dups := 0
		for _, d := range ds {
			if d.queue == queueName {
				dups++
			}
		}
		if dups > 1 {
			rep.Duplicated++
		}
	}
	if n := len(delivered); n > 0 {
		rep.DuplicateRate = float64(rep.Duplicated) / float64(n)
	}

	// Order: no delivery of a group's message by a receive sent after a later message of
	// the group was acknowledged as acked, unless the message moved (dead-lettered,
	// redriven).
	type acked struct {
		at  time.Time
		seq int
	}
	start := time.Time{}
	if len(h.dels) > 0 {
		start = h.dels[0].sentAt
	}
	byGroup := map[string][]acked{}
	for id, t := range h.ackOK {
		if g, s, ok := parseBody(h.bodyOfAny(id, delivered)); ok {
			byGroup[g] = append(byGroup[g], acked{t, s})
		}
	}
	for _, as := range byGroup {
		sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
	}
	// A message an ack was sent for before a later message of its group was acked, whose
	// answer never came (the server was killed, so its outcome is unknown), may come back
	// after that later message: the consumer moved on believing it processed it. That is
	// a duplicate (counted as such), not a reorder.
	firstAckTry := map[string]time.Time{}
	for _, d := range h.dels {
		if t, ok := h.ackTryAt[d.receipt]; ok {
			if f, seen := firstAckTry[d.id]; !seen || t.Before(f) {
				firstAckTry[d.id] = t
			}
		}
	}
	for _, d := range h.dels {
		g, s, ok := parseBody(d.body)
		if !ok || d.queue != queueName || h.moved[d.id] {
			continue
		}
		for _, a := range byGroup[g] {
			if !a.at.Before(d.sentAt) {
				break
			}
			if t, tried := firstAckTry[d.id]; tried && t.Before(a.at) {
				continue
			}
			if a.seq > s {
				rep.Reordered++
				example("reordered", fmt.Sprintf("%s delivered after seq %d of its group was acked at %s; its deliveries: %s",
					d.body, a.seq, a.at.Format("15:04:05.000"), h.describe(delivered[d.id], start)))
				break
			}
		}
	}
	rep.Reordered += len(h.reordered)
	for _, r := range h.reordered {
		example("reordered", r)
	}
}

// describe lists a message's deliveries for a failure report.
func (h *history) describe(ds []delivery, start time.Time) string {
	var b []string
	for _, d := range ds {
		s := fmt.Sprintf("[%s count %d from %s", d.sentAt.Format("15:04:05.000"), d.count, d.queue)
		if t, ok := h.ackTryAt[d.receipt]; ok {
			s += " ack sent " + t.Format("15:04:05.000")
		}
		if h.dlTry[d.receipt] {
			s += " dead-lettered"
		}
		b = append(b, s+"]")
	}
	return strings.Join(b, " ")
}

func (h *history) bodyOfAny(id string, delivered map[string][]delivery) string {
	if b, ok := h.bodyOf[id]; ok {
		return b
	}
	if ds := delivered[id]; len(ds) > 0 {
		return ds[0].body
	}
	return ""
}
