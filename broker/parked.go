package broker

import (
	"context"

	"github.com/okiba/okiba/queue"
)

// Parked lists the parked groups of queue name (on_dead_letter park_group), each with
// the dead letter it waits for.
func (b *Broker) Parked(ctx context.Context, name string) ([]queue.ParkedGroup, error) {
	var out []queue.ParkedGroup
	pin, err := b.readPinned(ctx, func(int64) ([]queue.Ref, error) {
		var err error
		out, err = b.m.Parked(name)
		return nil, err
	})
	if pin != nil {
		pin.Release()
	}
	return out, err
}

// ReleaseGroup releases a parked group of queue name by hand: its messages are
// delivered again, in order; the blocking dead letter stays in its dead-letter queue.
func (b *Broker) ReleaseGroup(ctx context.Context, name, group string) error {
	return b.do(ctx, func(now int64) error {
		err := b.m.ReleaseGroup(now, &b.sink, name, group)
		if err == nil {
			b.logger.Info("parked group released", "queue", name, "group", group, "by", "operator")
		}
		return err
	})
}

// logRelease is the queue machine's release log (queue.Machine.SetReleaseLog): a parked
// group freed because its blocking dead letter left the dead-letter queue otherwise
// than back to the group. It is set once recovery is over, so a replay does not repeat
// the lines of releases logged before.
func (b *Broker) logRelease(r queue.Release) {
	b.logger.Warn("parked group released: its blocking dead letter left the dead-letter queue",
		"queue", r.Queue, "group", r.Group, "blocker", queue.FormatID(r.Blocker), "why", r.Why)
}
