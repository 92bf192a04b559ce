package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

// PutQueue creates queue name or updates its configuration. edit receives the current
// configuration (okiba's defaults if the queue does not exist, with exists false, and
// the dead-letter queue names.DeadLetterName gives) and changes it; returning an error
// aborts without change. It reports whether the queue was created.
//
// Every front and in-process user comes through here, so here the fronts' naming rules
// (internal/names) are applied before the machine's own checks: the name's grammar, the
// kind a .fifo name means (when the queue is created; ordered_groups cannot change
// later), and that a FIFO queue's dead-letter queue is FIFO and a standard queue's
// standard.
func (b *Broker) PutQueue(ctx context.Context, name string, edit func(cfg *queue.Config, exists bool) error) (queue.QueueInfo, bool, error) {
	var info queue.QueueInfo
	var created bool
	err := b.do(ctx, func(now int64) error {
		if err := names.Validate(name); err != nil {
			return err
		}
		cur, err := b.m.Queue(name)
		exists := err == nil
		cfg := queue.DefaultConfig()
		cfg.DeadLetterQueue = names.DeadLetterName(name)
		if exists {
			cfg = cur.Config
		}
		if edit != nil {
			if err := edit(&cfg, exists); err != nil {
				return err
			}
		}
		if !exists {
			if err := names.CheckKind(name, cfg.OrderedGroups); err != nil {
				return err
			}
		}
		if err := names.CheckDeadLetter(name, cfg.DeadLetterQueue); err != nil {
			return err
		}
		created, err = b.m.PutQueue(now, &b.sink, name, cfg)
		if err != nil {
			return err
		}
		info, err = b.m.Queue(name)
		if err == nil && created {
			b.logger.Info("queue created", "queue", name, "dead_letter_queue", cfg.DeadLetterQueue)
		}
		return err
	})
	return info, created, err
}

// DeleteQueue deletes a queue and its messages. See queue.Machine.DeleteQueue for force.
func (b *Broker) DeleteQueue(ctx context.Context, name string, force bool) error {
	return b.do(ctx, func(now int64) error {
		if subs := b.t.SubscriptionsOf(name); len(subs) > 0 {
			if !force {
				return &queue.InUseError{Queue: name, By: subs, Subscribed: true}
			}
			if _, err := b.m.QueueMeta(name); err != nil {
				return err
			}
			b.t.UnsubscribeQueue(now, b.tsink, name)
		}
		if err := b.m.DeleteQueue(now, &b.sink, name, force); err != nil {
			return err
		}
		delete(b.volatile, name)
		b.logger.Info("queue deleted", "queue", name, "force", force)
		return nil
	})
}

// QueueInfo is a queue with its live statistics.
type QueueInfo struct {
	queue.QueueInfo
	Volatile     Volatile
	Rates        Rates
	DeadLetters  int64 // messages in this queue's dead-letter queue
	WaitMeasured time.Duration
	WaitEstimate time.Duration
	SysMeasured  time.Duration
	SysEstimate  time.Duration
	OldestAge    time.Duration
}

// Queue returns one queue with its statistics.
func (b *Broker) Queue(name string) (QueueInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	qi, err := b.m.Queue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	return b.decorateLocked(qi), nil
}

// QueueConfig returns a queue's id, configuration and times, without statistics (cheap).
func (b *Broker) QueueConfig(name string) (QueueInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	qi, err := b.m.QueueMeta(name)
	if err != nil {
		return QueueInfo{}, err
	}
	return QueueInfo{QueueInfo: qi}, nil
}

// Queues lists queues whose name starts with prefix, with statistics, sorted by name.
func (b *Broker) Queues(prefix string) []QueueInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	qs := b.m.Queues(prefix)
	out := make([]QueueInfo, len(qs))
	for i, qi := range qs {
		out[i] = b.decorateLocked(qi)
	}
	return out
}

func (b *Broker) decorateLocked(qi queue.QueueInfo) QueueInfo {
	now := b.nowLocked()
	out := QueueInfo{QueueInfo: qi}
	if v := b.volatile[qi.Name]; v != nil {
		out.Volatile = *v
	}
	if dlq := qi.Config.DeadLetterQueue; dlq != queue.NoDeadLetterQueue {
		out.DeadLetters = b.m.Depth(dlq)
	}
	if qi.Stats.OldestReady > 0 {
		out.OldestAge = time.Duration(now-qi.Stats.OldestReady) * time.Millisecond
	}
	r := b.rates.get(qi.Name, qi.Stats.Counters, now)
	out.Rates = r
	out.WaitMeasured, out.SysMeasured = r.WaitMean, r.SojournMean
	if r.Sent > 0 {
		out.WaitEstimate = time.Duration(float64(qi.Stats.Ready) / r.Sent * float64(time.Second))
		out.SysEstimate = time.Duration(float64(qi.Stats.Ready+qi.Stats.InFlight) / r.Sent * float64(time.Second))
	}
	return out
}

// Send enqueues messages; each gets its own result. The broker keeps the payload slices:
// the caller must not modify them afterwards. A duplicate returns once the original is
// durable.
func (b *Broker) Send(ctx context.Context, name string, msgs []queue.SendInput) ([]queue.SendResult, error) {
	res, _, err := b.SendFrom(ctx, name, "", 0, msgs)
	return res, err
}

// SendFrom is Send as request seq of a producer (queue.Machine.SendFrom): a request
// already answered is answered again — the same message ids, repeated true — and sends
// nothing, on this node or, after a failover, on another. An empty producer is Send.
func (b *Broker) SendFrom(ctx context.Context, name, producer string, seq uint64, msgs []queue.SendInput) ([]queue.SendResult, bool, error) {
	need := sendNeed(msgs)
	var res []queue.SendResult
	var repeated bool
	err := b.do(ctx, func(now int64) error {
		if err := b.roomLocked(need); err != nil {
			return err
		}
		var err error
		if producer == "" {
			res, err = b.m.Send(now, &b.sink, name, msgs)
		} else {
			res, repeated, err = b.m.SendFrom(now, &b.sink, name, producer, seq, msgs)
		}
		if err != nil || repeated {
			return err
		}
		v := b.volatileLocked(name)
		for _, r := range res {
			switch {
			case r.Duplicate:
				v.DedupHits++
			case errors.Is(r.Err, queue.ErrQueueFull):
				v.Refused++
			}
		}
		return nil
	})
	return res, repeated, err
}

// NewProducerID returns a fresh producer id for SendFrom: 128 random bits, so that no
// two producers share one. Nothing is stored until the producer's first send.
func NewProducerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "p" + hex.EncodeToString(b[:])
}

// ReceiveOptions shape one receive. Receive refuses options out of range with a
// *queue.ParamError (CheckReceive).
type ReceiveOptions struct {
	// Max messages to return, 1..1000 (api.MaxBatch).
	Max int
	// Wait is the long-poll wait, up to 60s; negative means the queue's receive_wait.
	Wait time.Duration
	// Visibility is the lease length, up to 12h in whole milliseconds; negative means
	// the queue's visibility_timeout.
	Visibility time.Duration
	// Delete settles the messages as it returns them (receive-and-delete, at-most-once):
	// one durable record delivers and deletes them, and a Message has no Receipt and
	// no LeaseDeadline. Visibility is ignored.
	Delete bool
}

// Message is a leased message.
type Message struct {
	ID             uint64
	Seq            uint64
	Receipt        string
	Payload        queue.Payload
	Deliveries     uint32
	EnqueuedAt     time.Time
	FirstDelivered time.Time
	LeaseDeadline  time.Time
	Dead           *queue.DeadInfo
}

// Receive leases up to opts.Max messages, waiting up to opts.Wait for some to be
// deliverable. It returns no messages (and no error) when the wait ends empty or ctx is
// done while waiting.
//
// It leases only messages whose bodies it holds (queue.Machine.ReceiveWith), so that a
// body it cannot read costs no lease and no delivery: bodies in the payload store's
// cache at once, in one critical section (the common case); the others are read from
// the log outside the lock and leased by a further critical section, at most
// receiveRounds in all, and the answer waits once, for the last. A body that fails its
// checksum is quarantined and one whose read fails otherwise stays ready (bodies.go);
// the healthy messages are delivered. When reads failed and nothing else could be
// leased, Receive returns ErrReadFailed.
func (b *Broker) Receive(ctx context.Context, name string, opts ReceiveOptions) ([]Message, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	var deadline time.Time
	again := 0
	for first := true; ; first = false {
		if !first && ctx.Err() != nil {
			return nil, nil // the caller left while we waited: lease nothing for nobody
		}
		r := receive{b: b, name: name, opts: opts}
		ms, wake, err := r.run(ctx, first, &deadline)
		if err != nil || len(ms) > 0 {
			return ms, err
		}
		if r.unleased && again < receiveRounds {
			again++ // bodies were read but the messages taken meanwhile: try again at once
			continue
		}
		if wake == nil {
			return nil, nil
		}
		if err := b.sleep(ctx, wake, deadline); err != nil {
			return nil, nil
		}
	}
}

// receive is one attempt of Receive: its rounds, and what they learned about bodies.
type receive struct {
	b     *Broker
	name  string
	opts  ReceiveOptions
	out   []Message
	bytes int64
	// read holds the bodies earlier rounds read from the log, for the next round to
	// lease (by Ref and id: between two rounds the message may go and its Ref name
	// another); pending, those of them that failed their checksum, in the order read,
	// for the next round to quarantine.
	read    map[bodyKey]*bodyRead
	pending []bodyKey
	// failed holds the bodies whose read failed otherwise: they are not read again in
	// this attempt.
	failed map[bodyKey]bool
	// claimed lists the bodies this attempt claimed in Broker.reading; done is closed
	// once it let them go. behind is another attempt whose claims this one passed over.
	claimed []bodyKey
	done    chan struct{}
	behind  *receive
	// unleased: the attempt ended with deferred candidates it did not lease.
	unleased bool
}

type bodyKey struct {
	ref queue.Ref
	id  uint64
}

// bodyRead is a body read outside the lock: its payload, or the corruption found instead.
type bodyRead struct {
	seq     uint64
	dead    *queue.DeadInfo
	p       *queue.Payload
	corrupt *wal.CorruptionError
	tried   bool // the quarantine was attempted
	marked  bool // corrupt and not moved: delivered with corruptPayload
}

// admission is what a round admitted for a candidate: its body, or, for a corrupt body
// delivered marked, where it lies.
type admission struct {
	key bodyKey
	p   *queue.Payload
	loc string
}

// matchAdmitted returns the admissions of the deliveries, in their order: the machine
// leases a subsequence of what it admitted (a run may be deferred after parts of it were
// admitted), in the same order.
func matchAdmitted(ds []queue.Delivery, admitted []admission) ([]admission, error) {
	if len(ds) == len(admitted) {
		return admitted, nil
	}
	out := admitted[:0]
	j := 0
	for i := range ds {
		k := bodyKey{ds[i].Ref, ds[i].MsgID}
		for j < len(admitted) && admitted[j].key != k {
			j++
		}
		if j == len(admitted) {
			return nil, fmt.Errorf("broker: receive leased message %s, which it did not admit", queue.FormatID(k.id))
		}
		out = append(out, admitted[j])
		j++
	}
	return out, nil
}

// run runs the rounds of one attempt and waits for their records. It returns a waiter
// when the queue had nothing to deliver.
func (r *receive) run(ctx context.Context, first bool, deadline *time.Time) ([]Message, chan struct{}, error) {
	b := r.b
	defer r.unclaim()
	var last ticket
	var wake chan struct{}
	for round := 0; round < receiveRounds; round++ {
		remaining, room := r.opts.Max-len(r.out), b.cfg.MaxReceiveBytes-r.bytes
		if remaining <= 0 || (len(r.out) > 0 && room <= 0) {
			break
		}
		var ds []queue.Delivery
		var admitted []admission
		var deferred []queue.Candidate
		var pin *payload.Pin
		t, err, stop := b.begin(func(now int64) error {
			if first && round == 0 {
				wait := r.opts.Wait
				if wait < 0 {
					qi, err := b.m.Queue(r.name)
					if err != nil {
						return err
					}
					wait = qi.Config.ReceiveWait
				}
				*deadline = b.clock.Now().Add(wait)
			}
			if err := r.quarantineLocked(now); err != nil {
				return err
			}
			vis := int64(-1)
			if r.opts.Visibility >= 0 {
				vis = r.opts.Visibility.Milliseconds()
			}
			var err error
			ds, deferred, err = b.m.ReceiveWith(now, &b.sink, r.name, queue.ReceiveSpec{
				Max: remaining, Visibility: vis, MaxBytes: room, Continued: len(r.out) > 0, Delete: r.opts.Delete,
				Admit: func(c queue.Candidate) queue.Admission {
					adm, a := r.admitLocked(c)
					if a == queue.Admit {
						if admitted == nil {
							admitted = make([]admission, 0, min(remaining, 64))
						}
						admitted = append(admitted, adm)
					}
					return a
				},
			})
			if err != nil {
				return err
			}
			if admitted, err = matchAdmitted(ds, admitted); err != nil {
				return err
			}
			deferred = r.toRead(deferred)
			r.unleased = len(deferred) > 0
			if len(ds) == 0 && len(deferred) == 0 && len(r.out) == 0 && b.clock.Now().Before(*deadline) {
				if r.behind != nil {
					// Everything deliverable is being read by other receives, which will
					// lease it: wait for one of them to finish, then look again.
					wake = r.behind.done
				} else {
					wake = b.waiterLocked(r.name)
				}
			}
			if len(deferred) > 0 && round+1 < receiveRounds {
				r.claimLocked(deferred)
				pin = b.store.Pin(candidateRefs(deferred))
			}
			return nil
		})
		if stop != nil {
			return nil, nil, stop
		}
		last = t
		if err != nil {
			if pin != nil {
				pin.Release()
			}
			if werr := b.wait(ctx, last); werr != nil {
				return nil, nil, werr
			}
			return nil, nil, err
		}
		r.deliver(ds, admitted)
		if pin == nil {
			break
		}
		if ctx.Err() != nil {
			pin.Release()
			break
		}
		progress, err := r.readAll(deferred, pin)
		if err != nil {
			return nil, nil, err
		}
		if !progress {
			break
		}
	}
	if err := b.wait(ctx, last); err != nil {
		return nil, nil, err
	}
	if len(r.out) == 0 && len(r.failed) > 0 {
		return nil, nil, fmt.Errorf("%w (%d of them; the server log has the details)", ErrReadFailed, len(r.failed))
	}
	return r.out, wake, nil
}

// admitLocked decides about a candidate in this round: admitted when its body is in the
// cache, or an earlier round read it (or found it corrupt where it cannot be moved, to
// deliver marked); skipped when an earlier round failed to read it; else deferred, to be
// read.
func (r *receive) admitLocked(c queue.Candidate) (admission, queue.Admission) {
	k := bodyKey{c.Ref, c.MsgID}
	if o := r.b.reading[k]; o != nil && o != r {
		r.behind = o // another receive is reading it, to lease it
		return admission{}, queue.Skip
	}
	if br := r.read[k]; br != nil {
		switch {
		case br.corrupt == nil:
			return admission{key: k, p: br.p}, queue.Admit
		case br.marked:
			return admission{key: k, loc: location(br.corrupt)}, queue.Admit
		}
		return admission{}, queue.Skip // corrupt, and its quarantine did not take it: another receive will
	}
	if r.failed[k] {
		return admission{}, queue.Skip
	}
	if p := r.b.store.Cached(c.Ref); p != nil {
		return admission{key: k, p: p}, queue.Admit
	}
	return admission{}, queue.Defer
}

// claimLocked claims the bodies the attempt is about to read (Broker.reading), so that
// concurrent receives pass over them instead of reading them too and then losing the
// race to lease them.
func (r *receive) claimLocked(cs []queue.Candidate) {
	if r.done == nil {
		r.done = make(chan struct{})
	}
	for _, c := range cs {
		k := bodyKey{c.Ref, c.MsgID}
		if r.b.reading[k] == nil {
			r.b.reading[k] = r
			r.claimed = append(r.claimed, k)
		}
	}
}

// unclaim lets the attempt's claims go, and wakes the receives waiting behind it.
func (r *receive) unclaim() {
	if r.done == nil {
		return
	}
	r.b.mu.Lock()
	for _, k := range r.claimed {
		if r.b.reading[k] == r {
			delete(r.b.reading, k)
		}
	}
	r.b.mu.Unlock()
	close(r.done)
}

// toRead keeps, of the candidates a round deferred, those it has not read yet (a
// deferred run may hold bodies read or cached already).
func (r *receive) toRead(deferred []queue.Candidate) []queue.Candidate {
	out := deferred[:0]
	for _, c := range deferred {
		k := bodyKey{c.Ref, c.MsgID}
		if !r.failed[k] && r.read[k] == nil {
			out = append(out, c)
		}
	}
	return out
}

// quarantineLocked quarantines the messages whose bodies the last round found corrupt
// (queue.Machine.Quarantine), before the next round selects: one that cannot move — its
// queue has no dead-letter queue, or it is a corrupt dead letter already — is delivered
// marked instead.
func (r *receive) quarantineLocked(now int64) error {
	b := r.b
	for _, k := range r.pending {
		br := r.read[k]
		if br.tried {
			continue
		}
		br.tried = true
		loc := location(br.corrupt)
		if corruptDead(br.dead) {
			br.marked = true // met again, and known: neither moved nor counted again
			continue
		}
		desc := fmt.Sprintf("body failed its checksum on this node: %s at %s", br.corrupt.Reason, loc)
		ok, err := b.m.Quarantine(now, &b.sink, r.name, br.seq, k.id, desc)
		switch {
		case errors.Is(err, queue.ErrNoDeadLetter):
			br.marked = true
			b.reads.corrupt.Add(1)
			b.logger.Error("message body failed its checksum: delivered empty and marked corrupt, the queue has no dead-letter queue",
				"queue", r.name, "id", queue.FormatID(k.id), "location", loc, "error", br.corrupt)
		case err != nil:
			return err
		case ok:
			b.reads.corrupt.Add(1)
			b.logger.Error("message body failed its checksum: quarantined as a dead letter of reason corrupt",
				"queue", r.name, "id", queue.FormatID(k.id), "location", loc, "error", br.corrupt)
		}
	}
	r.pending = r.pending[:0]
	return nil
}

// readAll reads the deferred candidates' pinned bodies with no lock held, and releases
// them. It reports whether it learned anything the next round can act on (a body, or a
// corruption to quarantine); a failed or closed log is an error.
func (r *receive) readAll(deferred []queue.Candidate, pin *payload.Pin) (bool, error) {
	defer pin.Release()
	b := r.b
	progress := false
	for i, c := range deferred {
		k := bodyKey{c.Ref, c.MsgID}
		p, err := pin.Body(i, c.MsgID)
		if err == nil {
			if !pin.Cached(i) {
				b.readOK()
			}
			r.remember(k, &bodyRead{seq: c.Seq, dead: c.Dead, p: &p})
			progress = true
			continue
		}
		switch fault, ce := classify(err); fault {
		case faultStorage:
			return false, b.storageError(err)
		case faultCorrupt:
			r.remember(k, &bodyRead{seq: c.Seq, dead: c.Dead, corrupt: ce})
			r.pending = append(r.pending, k)
			progress = true
		default:
			if r.failed == nil {
				r.failed = make(map[bodyKey]bool)
			}
			r.failed[k] = true
			b.logger.Warn("message body could not be read: left ready, not leased", "queue", r.name, "id", queue.FormatID(c.MsgID), "error", err)
			if b.readFailed(err) {
				return false, fmt.Errorf("%w (%v)", ErrStorageFailed, b.log.Err())
			}
		}
	}
	return progress, nil
}

func (r *receive) remember(k bodyKey, br *bodyRead) {
	if r.read == nil {
		r.read = make(map[bodyKey]*bodyRead)
	}
	r.read[k] = br
}

// deliver turns a round's deliveries into messages with receipts.
func (r *receive) deliver(ds []queue.Delivery, admitted []admission) {
	if r.out == nil {
		r.out = make([]Message, 0, len(ds))
	}
	for i := range ds {
		d := &ds[i]
		p := admitted[i].p
		if loc := admitted[i].loc; loc != "" {
			p = corruptPayload(d.Group, loc)
		}
		m := Message{
			ID: d.MsgID, Seq: d.Seq, Payload: *p,
			Deliveries: d.Epoch, EnqueuedAt: time.UnixMilli(d.EnqueuedAt), Dead: d.Dead,
		}
		if !r.opts.Delete { // a receive-and-delete leased nothing: no receipt, no deadline
			m.Receipt = r.b.receipts.Encode(d.Lease)
			m.LeaseDeadline = time.UnixMilli(d.Deadline)
		}
		if m.Payload.Group == "" {
			m.Payload.Group = d.Group // a message a topic record put into a queue: its group is the machine's
		}
		if d.FirstDelivered > 0 {
			m.FirstDelivered = time.UnixMilli(d.FirstDelivered)
		}
		r.out = append(r.out, m)
		r.bytes += p.Size()
	}
}

func candidateRefs(cs []queue.Candidate) []queue.Ref {
	refs := make([]queue.Ref, len(cs))
	for i := range cs {
		refs[i] = cs[i].Ref
	}
	return refs
}

// sleep waits for wake, the deadline, or ctx. It returns an error when the wait is over.
func (b *Broker) sleep(ctx context.Context, wake chan struct{}, deadline time.Time) error {
	d := deadline.Sub(b.clock.Now())
	if d <= 0 {
		return context.DeadlineExceeded
	}
	t := b.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return nil
	case <-t.C():
		return context.DeadlineExceeded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leases decodes receipts for queue name. Receipts that do not decode, or that belong
// to another existing queue, get ErrInvalidReceipt in errs; the rest are returned with
// their index.
func (b *Broker) leasesLocked(name string, receipts []string, errs []error) ([]queue.Lease, []int, error) {
	qi, err := b.m.Queue(name)
	if err != nil {
		return nil, nil, err
	}
	ls := make([]queue.Lease, 0, len(receipts))
	idx := make([]int, 0, len(receipts))
	for i, r := range receipts {
		l, err := b.receipts.Decode(r)
		if err != nil {
			errs[i] = err // wraps ErrInvalidReceipt and says what is wrong
			continue
		}
		if l.QueueID != qi.ID {
			if other, ok := b.m.QueueByID(l.QueueID); ok {
				errs[i] = fmt.Errorf("%w: it belongs to queue %q", ErrInvalidReceipt, other)
				continue
			}
		}
		ls = append(ls, l)
		idx = append(idx, i)
	}
	return ls, idx, nil
}

// settle runs one receipt-based command and spreads its per-lease results back over
// the receipts.
func (b *Broker) settle(ctx context.Context, name string, receipts []string, fn func(now int64, ls []queue.Lease, idx []int) ([]error, error)) ([]error, error) {
	errs := make([]error, len(receipts))
	err := b.do(ctx, func(now int64) error {
		ls, idx, err := b.leasesLocked(name, receipts, errs)
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			return nil
		}
		res, err := fn(now, ls, idx)
		if err != nil {
			return err
		}
		for j, e := range res {
			errs[idx[j]] = e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// Ack settles leased messages. Each receipt gets nil, ErrInvalidReceipt or
// queue.ErrReceiptStale.
func (b *Broker) Ack(ctx context.Context, name string, receipts []string) ([]error, error) {
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, _ []int) ([]error, error) {
		return b.m.Ack(now, &b.sink, name, ls)
	})
}

// Nack makes leased messages visible again after delay, or after the queue's backoff if
// delay is negative.
func (b *Broker) Nack(ctx context.Context, name string, receipts []string, delay time.Duration) ([]error, error) {
	return b.NackError(ctx, name, receipts, delay, "")
}

// NackError is Nack with the handler's error (queue.NackInput.Error), stored with each
// message: "" for none.
func (b *Broker) NackError(ctx context.Context, name string, receipts []string, delay time.Duration, handlerErr string) ([]error, error) {
	if err := queue.CheckHandlerError(handlerErr); err != nil {
		return nil, err
	}
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, _ []int) ([]error, error) {
		in := make([]queue.NackInput, len(ls))
		for i, l := range ls {
			in[i] = queue.NackInput{Lease: l, Delay: -1, Jitter: b.rng.Uint64(), Error: handlerErr}
			if delay >= 0 {
				in[i].Delay = delay.Milliseconds()
			}
		}
		return b.m.Nack(now, &b.sink, name, in)
	})
}

// Extend sets leases to end visibility from now (0 ends them now).
func (b *Broker) Extend(ctx context.Context, name string, receipts []string, visibility time.Duration) ([]error, error) {
	vis := make([]time.Duration, len(receipts))
	for i := range vis {
		vis[i] = visibility
	}
	return b.ExtendEach(ctx, name, receipts, vis)
}

// ExtendEach sets each lease to end its own visibility from now, in one commit.
func (b *Broker) ExtendEach(ctx context.Context, name string, receipts []string, visibility []time.Duration) ([]error, error) {
	if len(visibility) != len(receipts) {
		return nil, fmt.Errorf("broker: %d visibilities for %d receipts", len(visibility), len(receipts))
	}
	for _, v := range visibility {
		if v < 0 || v > queue.MaxVisibilityTimeout {
			return nil, &queue.ConfigError{Field: "visibility", Reason: "must be between 0 and 12h"}
		}
	}
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, idx []int) ([]error, error) {
		in := make([]queue.ExtendInput, len(ls))
		for i, l := range ls {
			in[i] = queue.ExtendInput{Lease: l, Visibility: visibility[idx[i]].Milliseconds()}
		}
		return b.m.Extend(now, &b.sink, name, in)
	})
}

// DeadLetter moves leased messages to the queue's dead-letter queue with a reason.
func (b *Broker) DeadLetter(ctx context.Context, name string, receipts []string, reason, description string) ([]error, error) {
	b.mu.Lock()
	err := b.m.CheckDeadLetter(name, reason, description)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, _ []int) ([]error, error) {
		res, err := b.m.DeadLetter(now, &b.sink, name, ls, reason, description)
		if err == nil {
			n := 0
			for _, e := range res {
				if e == nil {
					n++
				}
			}
			if n > 0 {
				b.logger.Info("dead-lettered", "queue", name, "messages", n, "reason", reason)
			}
		}
		return res, err
	})
}

// PeekedMessage is a message seen without a lease.
type PeekedMessage struct {
	queue.MessageInfo
	Payload queue.Payload
}

// Peek lists messages in arrival order after seq after, without leasing them: at most
// limit, 1..1000 (CheckPeek).
func (b *Broker) Peek(ctx context.Context, name string, after uint64, limit int, states ...queue.State) ([]PeekedMessage, error) {
	if err := CheckPeek(limit); err != nil {
		return nil, err
	}
	var infos []queue.MessageInfo
	pin, err := b.readPinned(ctx, func(now int64) ([]queue.Ref, error) {
		var err error
		infos, err = b.m.Peek(now, name, after, limit, states...)
		return infoRefs(infos), err
	})
	if err != nil {
		return nil, err
	}
	return b.peeked(name, infos, pin)
}

func infoRefs(infos []queue.MessageInfo) []queue.Ref {
	refs := make([]queue.Ref, len(infos))
	for i := range infos {
		refs[i] = infos[i].Ref
	}
	return refs
}

// readPinned runs fn like do and pins the bodies of the messages it found, so that they
// can be read, outside the lock, before a collector removes their segment.
//
// After a storage failure it still answers, from memory (readFailedLog): a read changes
// nothing, so nothing it does can be lost.
func (b *Broker) readPinned(ctx context.Context, fn func(now int64) ([]queue.Ref, error)) (*payload.Pin, error) {
	var pin *payload.Pin
	err := b.do(ctx, func(now int64) error {
		refs, err := fn(now)
		if err != nil {
			return err
		}
		pin = b.store.Pin(refs)
		return nil
	})
	if err != nil && pin != nil {
		pin.Release()
		pin = nil
	}
	if errors.Is(err, ErrStorageFailed) {
		return b.readFailedLog(fn)
	}
	return pin, err
}

// readFailedLog is readPinned on a broker whose log has failed: fn runs under the lock,
// with no command around it and nothing to wait for. What it sees may hold effects of
// commands that were answered ErrStorageFailed, which a restart may not keep; a body
// that never became durable is marked unreadable when read (peeked). A closed broker,
// or a cluster node rebuilding, answers as before.
func (b *Broker) readFailedLog(fn func(now int64) ([]queue.Ref, error)) (*payload.Pin, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil && !errors.Is(err, ErrStorageFailed) {
		return nil, err // closed, or rebuilding
	}
	refs, err := fn(b.nowLocked())
	if err != nil {
		return nil, err
	}
	return b.store.Pin(refs), nil
}

// peeked reads the pinned bodies of infos and releases them. A body that cannot be read
// is marked instead of failing the page (corruptPayload for a checksum mismatch,
// unreadablePayload for an I/O error, which counts as a failed read, or for a body the
// log failed before it became durable); only a closed log fails it.
func (b *Broker) peeked(name string, infos []queue.MessageInfo, pin *payload.Pin) ([]PeekedMessage, error) {
	defer pin.Release()
	out := make([]PeekedMessage, len(infos))
	for i, mi := range infos {
		p, err := pin.Body(i, mi.ID)
		if err == nil && !pin.Cached(i) {
			b.readOK()
		}
		if err != nil {
			switch fault, ce := classify(err); {
			case fault == faultStorage && errors.Is(err, wal.ErrFailed):
				// The log failed before this body became durable: it is not on disk.
				p = unreadablePayload(mi.Group)
			case fault == faultStorage:
				return nil, b.storageError(err)
			case fault == faultCorrupt:
				p = *corruptPayload(mi.Group, location(ce))
				if !corruptDead(mi.Dead) {
					b.logger.Warn("message body failed its checksum: peeked marked corrupt; the next receive quarantines it",
						"queue", name, "id", queue.FormatID(mi.ID), "location", location(ce), "error", ce)
				}
			default:
				p = unreadablePayload(mi.Group)
				b.logger.Warn("message body could not be read: peeked marked unreadable", "queue", name, "id", queue.FormatID(mi.ID), "error", err)
				b.readFailed(err)
			}
		}
		if p.Group == "" {
			p.Group = mi.Group
		}
		out[i] = PeekedMessage{MessageInfo: mi, Payload: p}
	}
	return out, nil
}

// GetMessage returns one message by id without leasing it.
func (b *Broker) GetMessage(ctx context.Context, name string, id uint64) (PeekedMessage, error) {
	var mi queue.MessageInfo
	pin, err := b.readPinned(ctx, func(now int64) ([]queue.Ref, error) {
		var err error
		mi, err = b.m.Message(now, name, id)
		return []queue.Ref{mi.Ref}, err
	})
	if err != nil {
		return PeekedMessage{}, err
	}
	out, err := b.peeked(name, []queue.MessageInfo{mi}, pin)
	if err != nil {
		return PeekedMessage{}, err
	}
	return out[0], nil
}

// Explain says why message id of queue name is or is not being delivered now
// (queue.Machine.Explain); with id 0 and a dedup id, by dedup id (ExplainDedup). It reads
// like a peek: under the lock, bounded, and also after a storage failure.
func (b *Broker) Explain(ctx context.Context, name string, id uint64, dedupID, group string) (queue.Explanation, error) {
	var ex queue.Explanation
	pin, err := b.readPinned(ctx, func(now int64) ([]queue.Ref, error) {
		var err error
		if id == 0 {
			ex, err = b.m.ExplainDedup(now, name, dedupID, group)
		} else {
			ex, err = b.m.Explain(now, name, id)
		}
		return nil, err
	})
	if pin != nil {
		pin.Release()
	}
	return ex, err
}

// DeleteMessage removes one message by id, whatever its state.
func (b *Broker) DeleteMessage(ctx context.Context, name string, id uint64) error {
	return b.do(ctx, func(now int64) error {
		return b.m.DeleteMessage(now, &b.sink, name, id)
	})
}

// Purge removes every message of a queue and reports how many.
func (b *Broker) Purge(ctx context.Context, name string) (int64, error) {
	var n int64
	err := b.do(ctx, func(now int64) error {
		var err error
		n, err = b.m.Purge(now, &b.sink, name)
		if err == nil {
			b.logger.Info("queue purged", "queue", name, "messages", n)
		}
		return err
	})
	return n, err
}

// StartRedrive records a redrive task and returns it; the task runs in the background.
// Besides the machine's rule (only between queues of the same kind), it applies the
// fronts': a redrive between two queues stays among FIFO or among standard ones.
func (b *Broker) StartRedrive(ctx context.Context, spec queue.RedriveSpec) (queue.Task, error) {
	return b.StartRedriveChecked(ctx, spec, nil)
}

// StartRedriveChecked is StartRedrive that first hands allow every queue the task would
// move messages into (queue.Machine.RedriveTargets: the target, or the queues its dead
// letters came from). It runs under the lock the start takes, so no dead letter that
// arrives in between escapes it; an error from allow refuses the redrive before anything
// changes, and is returned as is. The fronts check there that their caller may send to
// each queue.
func (b *Broker) StartRedriveChecked(ctx context.Context, spec queue.RedriveSpec, allow func(targets []string) error) (queue.Task, error) {
	var t queue.Task
	err := b.do(ctx, func(now int64) error {
		if allow != nil {
			targets, err := b.m.RedriveTargets(now, spec)
			if err != nil {
				return err
			}
			if err := allow(targets); err != nil {
				return err
			}
		}
		if err := b.checkRedriveNamesLocked(spec); err != nil {
			return err
		}
		var err error
		t, err = b.m.StartRedrive(now, &b.sink, spec)
		return err
	})
	if err == nil {
		b.logger.Info("redrive started", "task", t.ID, "source", t.SourceName, "to", t.TargetName, "total", t.Total)
		kick(b.kickRedrive)
	}
	return t, err
}

// checkRedriveNamesLocked applies names.CheckRedrive to a redrive between two distinct
// queues that exist; for anything else (a queue missing, or redriven into itself) the
// machine answers, as it did before the rule moved out of it.
func (b *Broker) checkRedriveNamesLocked(spec queue.RedriveSpec) error {
	if spec.Target == "" || spec.Target == spec.Source {
		return nil
	}
	if _, err := b.m.QueueMeta(spec.Source); err != nil {
		return nil
	}
	if _, err := b.m.QueueMeta(spec.Target); err != nil {
		return nil
	}
	return names.CheckRedrive(spec.Source, spec.Target)
}

// Tasks lists redrive tasks, newest first.
func (b *Broker) Tasks() []queue.Task {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m.Tasks()
}

// Task returns one redrive task.
func (b *Broker) Task(id uint64) (queue.Task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m.Task(id)
}

// CancelRedrive stops a running redrive task.
func (b *Broker) CancelRedrive(ctx context.Context, id uint64) (queue.Task, error) {
	var t queue.Task
	err := b.do(ctx, func(now int64) error {
		var err error
		t, err = b.m.CancelRedrive(now, &b.sink, id)
		return err
	})
	return t, err
}
