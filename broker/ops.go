package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
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
	if free := b.diskLow.Load(); free > 0 {
		return nil, fmt.Errorf("%w (%d bytes free in %s, the mark is %d)", ErrDiskFull, free, b.cfg.Dir, b.cfg.MinFreeBytes)
	}
	var res []queue.SendResult
	err := b.do(ctx, func(now int64) error {
		var err error
		res, err = b.m.Send(now, &b.sink, name, msgs)
		if err != nil {
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
	return res, err
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
func (b *Broker) Receive(ctx context.Context, name string, opts ReceiveOptions) ([]Message, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	var deadline time.Time
	for first := true; ; first = false {
		var ds []queue.Delivery
		var pin *payload.Pin
		var wake chan struct{}
		if !first && ctx.Err() != nil {
			return nil, nil // the caller left while we waited: lease nothing for nobody
		}
		err := b.do(ctx, func(now int64) error {
			if first {
				wait := opts.Wait
				if wait < 0 {
					qi, err := b.m.Queue(name)
					if err != nil {
						return err
					}
					wait = qi.Config.ReceiveWait
				}
				deadline = b.clock.Now().Add(wait)
			}
			vis := int64(-1)
			if opts.Visibility >= 0 {
				vis = opts.Visibility.Milliseconds()
			}
			var err error
			ds, err = b.m.Receive(now, &b.sink, name, opts.Max, vis, b.cfg.MaxReceiveBytes)
			if err != nil {
				return err
			}
			if len(ds) == 0 && b.clock.Now().Before(deadline) {
				wake = b.waiterLocked(name)
			}
			if len(ds) > 0 {
				pin = b.store.Pin(deliveryRefs(ds))
			}
			return nil
		})
		if err != nil {
			if pin != nil {
				pin.Release()
			}
			return nil, err
		}
		if len(ds) > 0 {
			return b.messages(ds, pin)
		}
		if wake == nil {
			return nil, nil
		}
		if err := b.sleep(ctx, wake, deadline); err != nil {
			return nil, nil
		}
	}
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

func deliveryRefs(ds []queue.Delivery) []queue.Ref {
	refs := make([]queue.Ref, len(ds))
	for i := range ds {
		refs[i] = ds[i].Ref
	}
	return refs
}

// messages reads the pinned bodies (and releases them) and makes receipts.
func (b *Broker) messages(ds []queue.Delivery, pin *payload.Pin) ([]Message, error) {
	defer pin.Release()
	out := make([]Message, len(ds))
	for i := range ds {
		d := &ds[i]
		p, err := pin.Body(i, d.MsgID)
		if err != nil {
			return nil, err
		}
		if p.Group == "" {
			p.Group = d.Group // a message a topic record put into a queue: its group is the machine's
		}
		out[i] = Message{
			ID: d.MsgID, Seq: d.Seq, Receipt: b.receipts.Encode(d.Lease), Payload: p,
			Deliveries: d.Epoch, EnqueuedAt: time.UnixMilli(d.EnqueuedAt),
			LeaseDeadline: time.UnixMilli(d.Deadline), Dead: d.Dead,
		}
		if d.FirstDelivered > 0 {
			out[i].FirstDelivered = time.UnixMilli(d.FirstDelivered)
		}
	}
	return out, nil
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
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, _ []int) ([]error, error) {
		in := make([]queue.NackInput, len(ls))
		for i, l := range ls {
			in[i] = queue.NackInput{Lease: l, Delay: -1, Jitter: b.rng.Uint64()}
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
	return b.peeked(infos, pin)
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
	return pin, err
}

// peeked reads the pinned bodies of infos and releases them.
func (b *Broker) peeked(infos []queue.MessageInfo, pin *payload.Pin) ([]PeekedMessage, error) {
	defer pin.Release()
	out := make([]PeekedMessage, len(infos))
	for i, mi := range infos {
		p, err := pin.Body(i, mi.ID)
		if err != nil {
			return nil, err
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
	out, err := b.peeked([]queue.MessageInfo{mi}, pin)
	if err != nil {
		return PeekedMessage{}, err
	}
	return out[0], nil
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
	var t queue.Task
	err := b.do(ctx, func(now int64) error {
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
