package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/reply"
)

// deadLetterScan bounds how many messages one dead-letter summary reads.
const deadLetterScan = 20_000

// reasonCount is how many dead letters of a queue came from one source for one reason.
type reasonCount struct {
	Source string `json:"source"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

type deadLetterAnswer struct {
	Queue    string        `json:"queue"`
	Scanned  int           `json:"scanned"`
	Complete bool          `json:"complete"` // false: more than deadLetterScan messages
	Reasons  []reasonCount `json:"reasons"`
	Messages []api.Message `json:"messages"` // those matching the filter, oldest first
	// What the page offers the principal: deleting and redriving need manage on the
	// dead-letter queue, and a redrive send on each queue it moves messages back to
	// (RedriveTo, by source queue of the messages scanned).
	CanManage bool            `json:"can_manage"`
	RedriveTo map[string]bool `json:"can_redrive_to"`
}

// deadLetters summarises a dead-letter queue by source and reason and lists the
// messages matching ?reason= and ?source= (up to ?limit=, default 100).
func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q := r.URL.Query()
	limit := 100
	if v, err := strconv.Atoi(q.Get("limit")); err == nil && v > 0 && v <= api.MaxBatch {
		limit = v
	}
	out, e := c.scanDead(r.Context(), name, deadLetterScan, q.Get("reason"), q.Get("source"), limit)
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

// scanDead reads up to scan messages of dead-letter queue name and counts them by
// source and reason, keeping up to limit of those matching reason and source.
func (c *Console) scanDead(ctx context.Context, name string, scan int, reason, source string, limit int) (deadLetterAnswer, *api.Error) {
	out := deadLetterAnswer{Queue: name, Complete: true, Reasons: []reasonCount{}, Messages: []api.Message{},
		CanManage: auth.Allowed(ctx, access.Manage, access.QueueNamed(name)), RedriveTo: map[string]bool{}}
	counts := map[[2]string]int{}
	var after uint64
	for {
		page, e := c.svc.Peek(ctx, name, after, api.MaxBatch, nil)
		if e != nil {
			if out.Scanned == 0 {
				return out, e
			}
			break
		}
		ms := page.Messages
		for i := range ms {
			m := &ms[i]
			src, why := "", ""
			if m.DeadLetter != nil {
				src, why = m.DeadLetter.Source, m.DeadLetter.Reason
			}
			counts[[2]string{src, why}]++
			if (reason == "" || reason == why) && (source == "" || source == src) && len(out.Messages) < limit {
				out.Messages = append(out.Messages, *m)
			}
		}
		out.Scanned += len(ms)
		if len(ms) < api.MaxBatch {
			break
		}
		if out.Scanned >= scan {
			out.Complete = false
			break
		}
		after = ms[len(ms)-1].Seq
	}
	for k, n := range counts {
		out.Reasons = append(out.Reasons, reasonCount{Source: k[0], Reason: k[1], Count: n})
		if k[0] != "" {
			out.RedriveTo[k[0]] = out.CanManage && auth.Allowed(ctx, access.Send, access.QueueNamed(k[0]))
		}
	}
	slices.SortFunc(out.Reasons, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Reason, b.Reason))
	})
	return out, nil
}

// overviewScan bounds how many messages the overview reads of each dead-letter queue.
const overviewScan = 5_000

// deadQueue is one dead-letter queue on the overview.
type deadQueue struct {
	Queue    string        `json:"queue"`
	Sources  []string      `json:"sources"`  // the queues whose dead-letter queue it is
	Messages int64         `json:"messages"` // ready, delayed and in flight
	Scanned  int           `json:"scanned"`
	Complete bool          `json:"complete"` // false: the counts are of the first overviewScan
	Reasons  []reasonCount `json:"reasons"`
}

// deadOverview lists every dead-letter queue the principal may browse (a queue that
// some queue names as its dead-letter queue) with its dead letters counted by source
// and reason, those holding some first: the page the dead letters open on, so that no
// dead letter hides in a queue the page did not open.
func (c *Console) deadOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := struct {
		Queues []deadQueue `json:"queues"`
	}{Queues: []deadQueue{}}
	for _, q := range browsable(ctx, c.svc.Queues(ctx, "")) {
		if len(q.DeadLetterSources) == 0 {
			continue
		}
		d := deadQueue{Queue: q.Name, Sources: q.DeadLetterSources, Messages: q.Stats.Ready + q.Stats.Delayed + q.Stats.InFlight,
			Complete: true, Reasons: []reasonCount{}}
		if d.Messages > 0 {
			a, e := c.scanDead(ctx, q.Name, overviewScan, "", "", 0)
			if e == nil {
				d.Scanned, d.Complete, d.Reasons = a.Scanned, a.Complete, a.Reasons
			}
		}
		out.Queues = append(out.Queues, d)
	}
	slices.SortStableFunc(out.Queues, func(a, b deadQueue) int { return cmp.Compare(b.Messages, a.Messages) })
	reply.JSON(w, http.StatusOK, out)
}
