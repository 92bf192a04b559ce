package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// ErrUnbounded is returned by QueueHorizon when a message can come back arbitrarily late
// (a queue or its dead-letter queue keeps messages forever), so no horizon is safe by
// construction: pick one, and check redrives against it with CheckRedrive.
var ErrUnbounded = errors.New("no safe inbox horizon: a queue on the way keeps messages forever")

// Horizon returns the shortest time an inbox must keep a record so that no
// redelivery of the message can arrive after the record is gone, for a source queue
// with retention sourceRetention whose dead-letter queue keeps messages for
// dlqRetention, and consumers that hold a message at most longestLease (its
// visibility timeout, or longer when the consumer extends the lease while a slow
// handler runs). A retention of 0 (unlimited) makes it unbounded: ok is false.
//
// The reasoning: a message enqueued at time E is processed first at some P ≥ E. Its copy
// in the broker stays in the source queue until E + sourceRetention, or until the lease
// that is live then ends (retention never cuts a lease short), is then dead-lettered, and
// may sit in the dead-letter queue for dlqRetention before an operator redrives it back,
// and its next delivery comes after that. So every redelivery arrives before
// E + sourceRetention + longestLease + dlqRetention ≤ P + that sum, and a record kept
// that long after processing catches it. A redriven message starts its retention clock
// anew, so a message that is dead-lettered and redriven more than once can outlive any
// horizon: CheckRedrive finds those before they are moved.
func Horizon(sourceRetention, dlqRetention, longestLease time.Duration) (h time.Duration, ok bool) {
	if sourceRetention <= 0 || dlqRetention <= 0 {
		return 0, false
	}
	return sourceRetention + dlqRetention + max(longestLease, 0), true
}

// QueueHorizon reads queue's configuration and its dead-letter queue's from the broker
// and returns Horizon of them. longestLease 0 means the queue's visibility timeout. A
// queue without a dead-letter queue adds nothing for it. It returns ErrUnbounded (with
// the reason) when a retention is unlimited — okiba's dead-letter queues are, by
// default.
func QueueHorizon(ctx context.Context, c *client.Client, queue string, longestLease time.Duration) (time.Duration, error) {
	q, err := c.Queue(ctx, queue)
	if err != nil {
		return 0, fmt.Errorf("inbox: read queue %s: %w", queue, err)
	}
	ret := dur(q.Config.Retention)
	if longestLease <= 0 {
		longestLease = dur(q.Config.VisibilityTimeout)
	}
	if ret <= 0 {
		return 0, fmt.Errorf("inbox: queue %s keeps messages forever (retention 0): %w", queue, ErrUnbounded)
	}
	dlq := ""
	if q.Config.DeadLetterQueue != nil {
		dlq = *q.Config.DeadLetterQueue
	}
	if dlq == "" || dlq == "none" {
		return ret + longestLease, nil
	}
	dq, err := c.Queue(ctx, dlq)
	if client.IsCode(err, api.CodeQueueNotFound) {
		return 0, fmt.Errorf("inbox: dead-letter queue %s of %s does not exist yet; it will be created with unlimited retention: %w", dlq, queue, ErrUnbounded)
	}
	if err != nil {
		return 0, fmt.Errorf("inbox: read dead-letter queue %s: %w", dlq, err)
	}
	h, ok := Horizon(ret, dur(dq.Config.Retention), longestLease)
	if !ok {
		return 0, fmt.Errorf("inbox: dead-letter queue %s keeps messages forever (retention 0), and a redrive can bring any of them back: %w", dlq, ErrUnbounded)
	}
	return h, nil
}

func dur(d *api.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.D()
}

// RedriveCheck is what CheckRedrive found in a dead-letter queue.
type RedriveCheck struct {
	DLQ     string
	Horizon time.Duration
	// Messages is how many dead letters were looked at (from the given source queue,
	// if one was given).
	Messages int
	// TooOld counts those enqueued (first sent) longer ago than the horizon: if any of
	// them was processed before its lease was lost, the inbox's record of it may be
	// gone, and redriving it would process it a second time.
	TooOld int
	// Oldest is the enqueue time of the oldest one looked at.
	Oldest time.Time
}

// Warning describes the risk in one sentence, or returns "" when there is none.
func (r RedriveCheck) Warning() string {
	if r.TooOld == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d dead letters in %s are older than the inbox horizon %v (oldest enqueued %s): "+
		"an inbox may have forgotten them, so a redrive could process them twice; "+
		"redrive them only if their consumers can tell (or never saw them)",
		r.TooOld, r.Messages, r.DLQ, r.Horizon, r.Oldest.UTC().Format(time.RFC3339))
}

// CheckRedrive looks at the dead letters in dlq (only those dead-lettered from source,
// if source is not empty) before a redrive and counts those older than horizon, the
// inbox horizon of the consumers they would go back to. Call it before
// client.Redrive and show the Warning to whoever asked for the redrive. now is the
// current time (time.Now() unless testing).
func CheckRedrive(ctx context.Context, c *client.Client, dlq, source string, horizon time.Duration, now time.Time) (RedriveCheck, error) {
	r := RedriveCheck{DLQ: dlq, Horizon: horizon}
	opts := client.PeekOptions{Limit: 1000}
	for {
		page, err := c.Peek(ctx, dlq, opts)
		if err != nil {
			return r, fmt.Errorf("inbox: peek %s: %w", dlq, err)
		}
		for _, m := range page.Messages {
			if source != "" && (m.DeadLetter == nil || m.DeadLetter.Source != source) {
				continue
			}
			r.Messages++
			if r.Oldest.IsZero() || m.EnqueuedAt.Before(r.Oldest) {
				r.Oldest = m.EnqueuedAt
			}
			if horizon > 0 && now.Sub(m.EnqueuedAt) > horizon {
				r.TooOld++
			}
		}
		if page.Next == "" {
			return r, nil
		}
		opts.After = page.Next
	}
}
