package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/queue"
)

// Defer sets leased messages aside (queue.Machine.Defer): out of the ready set, fetched
// later only by id (ReceiveDeferred). Each receipt gets nil, ErrInvalidReceipt or
// queue.ErrReceiptStale, as Ack does.
func (b *Broker) Defer(ctx context.Context, name string, receipts []string) ([]error, error) {
	return b.settle(ctx, name, receipts, func(now int64, ls []queue.Lease, _ []int) ([]error, error) {
		return b.m.Defer(now, &b.sink, name, ls)
	})
}

// DeferredResult is one id's outcome of ReceiveDeferred: the message, leased, or Err
// (queue.ErrNotDeferred, ErrReadFailed, queue.ErrMessageCorrupt, a *queue.LimitError).
type DeferredResult struct {
	Message Message
	Err     error
}

// CheckReceiveDeferred refuses a fetch of deferred messages by id with no id, more than
// api.MaxBatch, or a visibility out of range (negative: the queue's).
func CheckReceiveDeferred(n int, visibility time.Duration) error {
	if n < 1 || n > api.MaxBatch {
		return &queue.ParamError{Field: "ids", Reason: fmt.Sprintf("must hold between 1 and %d message ids, got %d", api.MaxBatch, n)}
	}
	if visibility > queue.MaxVisibilityTimeout || (visibility > 0 && visibility%time.Millisecond != 0) {
		return &queue.ParamError{Field: "visibility", Reason: fmt.Sprintf("must be a whole number of milliseconds between 0 and 12h, got %v", visibility)}
	}
	return nil
}

// ReceiveDeferred fetches deferred messages by id and leases each for visibility
// (negative: the queue's visibility_timeout); each lease counts a delivery, and a nack or
// an ended lease returns the message to deferred. The results follow ids.
//
// As Receive, it leases only what it can hand over: the bodies of the deferred messages
// are read first (outside the lock), then those read are leased in one command, and its
// answer waits for that command's record. A message fetched, settled or removed in
// between answers queue.ErrNotDeferred; a body that fails its checksum or cannot be
// read is not leased and answers so.
func (b *Broker) ReceiveDeferred(ctx context.Context, name string, ids []uint64, visibility time.Duration) ([]DeferredResult, error) {
	if err := CheckReceiveDeferred(len(ids), visibility); err != nil {
		return nil, err
	}
	out := make([]DeferredResult, len(ids))
	var at []int // which ids name a deferred message, in the order of the pinned refs
	pin, err := b.readPinned(ctx, func(now int64) ([]queue.Ref, error) {
		all, err := b.m.DeferredRefs(name, ids)
		if err != nil {
			return nil, err
		}
		refs := make([]queue.Ref, 0, len(all))
		at = at[:0]
		for i, r := range all {
			if r != 0 {
				refs = append(refs, r)
				at = append(at, i)
			}
		}
		return refs, nil
	})
	if err != nil {
		return nil, err
	}
	bodies := make(map[int]queue.Payload, len(at))
	for j, i := range at {
		p, err := pin.Body(j, ids[i])
		if err == nil && !pin.Cached(j) {
			b.readOK()
		}
		if err != nil {
			switch fault, ce := classify(err); fault {
			case faultStorage:
				pin.Release()
				return nil, b.storageError(err)
			case faultCorrupt:
				out[i].Err = fmt.Errorf("%w: message %s at %s; delete it or let it expire", queue.ErrMessageCorrupt, queue.FormatID(ids[i]), location(ce))
				b.logger.Warn("deferred message's body failed its checksum: not fetched", "queue", name, "id", queue.FormatID(ids[i]), "location", location(ce))
			default:
				out[i].Err = fmt.Errorf("%w: message %s", ErrReadFailed, queue.FormatID(ids[i]))
				b.readFailed(err)
			}
			continue
		}
		bodies[i] = p
	}
	pin.Release()
	want := make([]uint64, 0, len(bodies))
	wantAt := make([]int, 0, len(bodies))
	for i, id := range ids {
		if _, ok := bodies[i]; ok {
			want = append(want, id)
			wantAt = append(wantAt, i)
		} else if out[i].Err == nil {
			out[i].Err = fmt.Errorf("%w: %s in %q", queue.ErrNotDeferred, queue.FormatID(id), name)
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	vis := int64(-1)
	if visibility >= 0 {
		vis = visibility.Milliseconds()
	}
	err = b.do(ctx, func(now int64) error {
		ds, errs, err := b.m.ReceiveDeferred(now, &b.sink, name, want, vis)
		if err != nil {
			return err
		}
		for j, i := range wantAt {
			if errs[j] != nil {
				out[i].Err = errs[j]
				continue
			}
			out[i].Message = b.leasedMessage(&ds[j], bodies[i])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// leasedMessage turns a delivery of a fetch by id into a message with its receipt.
func (b *Broker) leasedMessage(d *queue.Delivery, p queue.Payload) Message {
	m := Message{
		ID: d.MsgID, Seq: d.Seq, Payload: p, Receipt: b.receipts.Encode(d.Lease),
		Deliveries: d.Epoch, EnqueuedAt: time.UnixMilli(d.EnqueuedAt), Dead: d.Dead,
		LeaseDeadline: time.UnixMilli(d.Deadline),
	}
	if m.Payload.Group == "" {
		m.Payload.Group = d.Group
	}
	if d.FirstDelivered > 0 {
		m.FirstDelivered = time.UnixMilli(d.FirstDelivered)
	}
	return m
}
