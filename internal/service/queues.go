package service

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

// Queues lists the queues whose name starts with prefix that the caller in ctx may
// browse (every one for a call from inside the process), sorted by name, with their
// statistics: what GET /v1/queues and /v1/stats list.
func (s *Service) Queues(ctx context.Context, prefix string) []api.Queue {
	qs := s.b.Queues(prefix)
	out := make([]api.Queue, 0, len(qs))
	for _, qi := range qs {
		if auth.Allowed(ctx, access.Browse, access.QueueNamed(qi.Name)) {
			q := wireQueue(qi)
			q.DeadLetterSources = browsable(ctx, q.DeadLetterSources)
			out = append(out, q)
		}
	}
	return out
}

// Queue returns one queue with its statistics.
func (s *Service) Queue(ctx context.Context, name string) (api.Queue, *api.Error) {
	qi, err := s.b.Queue(name)
	if err != nil {
		return api.Queue{}, s.errorOf(err)
	}
	q := wireQueue(qi)
	q.DeadLetterSources = browsable(ctx, q.DeadLetterSources)
	return q, nil
}

// browsable keeps the queues the caller may browse: a queue's description names other
// queues (its dead-letter sources), which a caller that may not see them must not learn.
func browsable(ctx context.Context, queues []string) []string {
	out := queues[:0:0]
	for _, n := range queues {
		if auth.Allowed(ctx, access.Browse, access.QueueNamed(n)) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// PutQueue creates the queue or changes the fields in of its configuration, and
// returns it as it now is, and whether it was created.
//
// A dead_letter_queue other than the queue's own default (names.DeadLetterName) needs
// send on it, as dead letters are sent there on the caller's behalf; the default is
// covered by manage on the queue, and "none" needs nothing.
func (s *Service) PutQueue(ctx context.Context, name string, in api.QueueConfig) (api.Queue, bool, *api.Error) {
	if dlq := in.DeadLetterQueue; dlq != nil && *dlq != "" && *dlq != queue.NoDeadLetterQueue && *dlq != names.DeadLetterName(name) {
		if err := auth.Require(ctx, access.Send, access.QueueNamed(*dlq)); err != nil {
			return api.Queue{}, false, s.errorOf(err)
		}
	}
	info, created, err := s.b.PutQueue(ctx, name, func(c *queue.Config, _ bool) error {
		return applyConfig(c, &in)
	})
	if err != nil {
		return api.Queue{}, false, s.errorOf(err)
	}
	q, e := s.Queue(ctx, info.Name)
	return q, created, e
}

// CreateQueue creates a queue, create-only (PUT with If-None-Match: *): a queue that
// exists with the configuration the request would create is answered as it is (not
// created); one with another is refused (queue.ExistsError, queue_exists) and unchanged.
func (s *Service) CreateQueue(ctx context.Context, name string, in api.QueueConfig) (api.Queue, bool, *api.Error) {
	if dlq := in.DeadLetterQueue; dlq != nil && *dlq != "" && *dlq != queue.NoDeadLetterQueue && *dlq != names.DeadLetterName(name) {
		if err := auth.Require(ctx, access.Send, access.QueueNamed(*dlq)); err != nil {
			return api.Queue{}, false, s.errorOf(err)
		}
	}
	info, created, err := s.b.PutQueue(ctx, name, func(c *queue.Config, exists bool) error {
		if !exists {
			return applyConfig(c, &in)
		}
		want := queue.DefaultConfig()
		want.DeadLetterQueue = names.DeadLetterName(name)
		if err := applyConfig(&want, &in); err != nil {
			return err
		}
		if err := want.Validate(name); err != nil {
			return err // a bad value is the answer, whether or not the queue exists
		}
		if diff := configDiff(wireConfig(*c), wireConfig(want)); len(diff) > 0 {
			return &queue.ExistsError{Name: name, Fields: diff}
		}
		return nil
	})
	if err != nil {
		return api.Queue{}, false, s.errorOf(err)
	}
	q, e := s.Queue(ctx, info.Name)
	return q, created, e
}

// configDiff names the fields (by their API names) whose values differ.
func configDiff(a, b api.QueueConfig) []string {
	var am, bm map[string]json.RawMessage
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &am)
	_ = json.Unmarshal(jb, &bm)
	var out []string
	for k, v := range am {
		if !bytes.Equal(v, bm[k]) {
			out = append(out, k)
		}
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// DeleteQueue deletes a queue; force deletes one that other queues use as their
// dead-letter queue.
func (s *Service) DeleteQueue(ctx context.Context, name string, force bool) *api.Error {
	if err := s.b.DeleteQueue(ctx, name, force); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// Parked lists queue name's parked groups with the dead letter each waits for.
func (s *Service) Parked(ctx context.Context, name string) (api.ParkedResponse, *api.Error) {
	ps, err := s.b.Parked(ctx, name)
	if err != nil {
		return api.ParkedResponse{}, s.errorOf(err)
	}
	out := api.ParkedResponse{Groups: make([]api.ParkedGroup, len(ps))}
	for i, p := range ps {
		out.Groups[i] = api.ParkedGroup{Group: p.Group, Blocker: queue.FormatID(p.Blocker), DeadLetterQueue: p.DLQ,
			Since: time.UnixMilli(p.Since).UTC(), Messages: p.Messages}
	}
	return out, nil
}

// ReleaseGroup releases a parked group by hand (not_parked if it is not parked).
func (s *Service) ReleaseGroup(ctx context.Context, name, group string) (api.ReleaseResponse, *api.Error) {
	if err := s.b.ReleaseGroup(ctx, name, group); err != nil {
		return api.ReleaseResponse{}, s.errorOf(err)
	}
	return api.ReleaseResponse{Released: group}, nil
}

// Purge removes every message of a queue.
func (s *Service) Purge(ctx context.Context, name string) (api.PurgeResponse, *api.Error) {
	n, err := s.b.Purge(ctx, name)
	if err != nil {
		return api.PurgeResponse{}, s.errorOf(err)
	}
	return api.PurgeResponse{Purged: n}, nil
}

// applyConfig overlays the fields given in a request on c.
func applyConfig(c *queue.Config, in *api.QueueConfig) error {
	dur := func(dst *time.Duration, src *api.Duration) {
		if src != nil {
			*dst = src.D()
		}
	}
	dur(&c.VisibilityTimeout, in.VisibilityTimeout)
	dur(&c.BackoffBase, in.BackoffBase)
	dur(&c.BackoffMax, in.BackoffMax)
	dur(&c.Delay, in.Delay)
	dur(&c.Retention, in.Retention)
	dur(&c.DedupWindow, in.DedupWindow)
	dur(&c.ReceiveWait, in.ReceiveWait)
	if in.MaxDeliveries != nil {
		c.MaxDeliveries = *in.MaxDeliveries
	}
	if in.DeadLetterQueue != nil {
		c.DeadLetterQueue = *in.DeadLetterQueue
		if *in.DeadLetterQueue == queue.NoDeadLetterQueue && in.MaxDeliveries == nil {
			c.MaxDeliveries = 0 // nothing to count deliveries for
		}
	}
	if in.DedupScope != nil {
		sc, err := queue.ParseDedupScope(*in.DedupScope)
		if err != nil {
			return err
		}
		c.DedupScope = sc
	}
	if in.ContentDedup != nil {
		c.ContentDedup = *in.ContentDedup
	}
	if in.MaxMessages != nil {
		c.MaxMessages = *in.MaxMessages
	}
	if in.MaxBytes != nil {
		c.MaxBytes = *in.MaxBytes
	}
	if in.MaxMessageSize != nil {
		c.MaxMessageSize = *in.MaxMessageSize
	}
	if in.OrderedGroups != nil {
		c.OrderedGroups = *in.OrderedGroups
	}
	if in.OnDeadLetter != nil {
		a, err := queue.ParseDeadLetterAction(*in.OnDeadLetter)
		if err != nil {
			return err
		}
		c.OnDeadLetter = a
	}
	if in.Tags != nil {
		c.Tags = in.Tags
	}
	return nil
}

// wireConfig is c as the API shows it, every field set. Its fields point into one
// allocation rather than one each: listing queues converts every queue's configuration,
// and the console's overview and sampler list them all every few seconds.
func wireConfig(c queue.Config) api.QueueConfig {
	v := &struct {
		c                                                     queue.Config
		vis, backoff, backoffMax, delay, retention, dedup, rw api.Duration
		scope, onDL                                           string
	}{
		c: c, vis: api.Duration(c.VisibilityTimeout), backoff: api.Duration(c.BackoffBase),
		backoffMax: api.Duration(c.BackoffMax), delay: api.Duration(c.Delay), retention: api.Duration(c.Retention),
		dedup: api.Duration(c.DedupWindow), rw: api.Duration(c.ReceiveWait), scope: c.DedupScope.String(),
		onDL: c.OnDeadLetter.String(),
	}
	return api.QueueConfig{
		VisibilityTimeout: &v.vis, MaxDeliveries: &v.c.MaxDeliveries,
		DeadLetterQueue: &v.c.DeadLetterQueue, BackoffBase: &v.backoff, BackoffMax: &v.backoffMax,
		Delay: &v.delay, Retention: &v.retention, DedupWindow: &v.dedup,
		DedupScope: &v.scope, ContentDedup: &v.c.ContentDedup, MaxMessages: &v.c.MaxMessages,
		MaxBytes: &v.c.MaxBytes, MaxMessageSize: &v.c.MaxMessageSize, ReceiveWait: &v.rw,
		OrderedGroups: &v.c.OrderedGroups, OnDeadLetter: &v.onDL, Tags: v.c.Tags,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func wireQueue(qi broker.QueueInfo) api.Queue {
	st := qi.Stats
	r := qi.Rates
	var oldest time.Time
	if st.OldestReady > 0 {
		oldest = time.UnixMilli(st.OldestReady).UTC()
	}
	return api.Queue{
		Name: qi.Name, CreatedAt: time.UnixMilli(qi.CreatedAt).UTC(), UpdatedAt: time.UnixMilli(qi.UpdatedAt).UTC(),
		Config: wireConfig(qi.Config), DeadLetterSources: qi.DeadLetterSources,
		Stats: api.Stats{
			Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Deferred: st.Deferred, ParkedGroups: st.ParkedGroups, Bytes: st.Bytes,
			DeadLetters: qi.DeadLetters, Groups: st.Groups,
			OldestReadyAgeMS: qi.OldestAge.Milliseconds(), OldestReadyAt: oldest,
			Sent: st.Sent, Acked: st.Acked, Nacked: st.Nacked, Delivered: st.Delivered,
			Redelivered: st.Redelivered, Extended: st.Extended, DeadLettered: st.DeadLettered,
			DeadLetteredBy: st.ByReason, DeadLetteredIn: st.DeadLetteredIn, Expired: st.Expired,
			RedrivenIn: st.RedrivenIn, RedrivenOut: st.RedrivenOut, Purged: st.Purged,
			Deleted: st.Deleted, Overflow: st.Overflow, DedupHits: qi.Volatile.DedupHits,
			Refused: qi.Volatile.Refused, DedupEvictedEarly: st.DedupEvictedEarly, DedupIDs: st.DedupIDs,
			ReceivedAndDeleted: st.ReceivedAndDeleted,
			Deferrals:          st.Deferrals,
			Rates: api.Rates{
				WindowMS: r.Window.Milliseconds(), Sent: r.Sent, Acked: r.Acked, Nacked: r.Nacked,
				Delivered: r.Delivered, DeadLettered: r.DeadLettered, Expired: r.Expired,
			},
			Waiting:  api.LittlesLaw{L: st.Ready, Lambda: r.Sent, MeasuredMS: ms(qi.WaitMeasured), EstimatedMS: ms(qi.WaitEstimate)},
			InSystem: api.LittlesLaw{L: st.Ready + st.InFlight, Lambda: r.Sent, MeasuredMS: ms(qi.SysMeasured), EstimatedMS: ms(qi.SysEstimate)},
		},
	}
}
