package console

import (
	"cmp"
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
	reason, source := q.Get("reason"), q.Get("source")
	limit := 100
	if v, err := strconv.Atoi(q.Get("limit")); err == nil && v > 0 && v <= api.MaxBatch {
		limit = v
	}
	ctx := r.Context()
	out := deadLetterAnswer{Queue: name, Complete: true, Reasons: []reasonCount{}, Messages: []api.Message{},
		CanManage: auth.Allowed(ctx, access.Manage, access.QueueNamed(name)), RedriveTo: map[string]bool{}}
	counts := map[[2]string]int{}
	var after uint64
	for {
		page, e := c.svc.Peek(ctx, name, after, api.MaxBatch, nil)
		if e != nil {
			if out.Scanned == 0 {
				reply.Error(w, e)
				return
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
		if out.Scanned >= deadLetterScan {
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
	reply.JSON(w, http.StatusOK, out)
}
