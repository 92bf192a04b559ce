package web

import (
	"cmp"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
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
	out := deadLetterAnswer{Queue: name, Complete: true, Reasons: []reasonCount{}, Messages: []api.Message{}}
	counts := map[[2]string]int{}
	var after uint64
	for {
		ms, err := c.b.Peek(r.Context(), name, after, api.MaxBatch)
		if err != nil {
			if out.Scanned == 0 {
				c.brokerError(w, err)
				return
			}
			break
		}
		for i := range ms {
			m := &ms[i]
			src, why := "", ""
			if m.Dead != nil {
				src, why = m.Dead.SourceName, m.Dead.Reason
			}
			counts[[2]string{src, why}]++
			if (reason == "" || reason == why) && (source == "" || source == src) && len(out.Messages) < limit {
				out.Messages = append(out.Messages, wireMessage(m))
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
	}
	slices.SortFunc(out.Reasons, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Reason, b.Reason))
	})
	writeJSON(w, http.StatusOK, out)
}

// wireMessage is a peeked message as the native API shows it.
func wireMessage(m *broker.PeekedMessage) api.Message {
	out := api.Message{ID: queue.FormatID(m.ID), Group: m.Payload.Group, DedupID: m.Payload.DedupID,
		State: m.State.String(), Seq: m.Seq, Deliveries: m.Deliveries, EnqueuedAt: time.UnixMilli(m.EnqueuedAt).UTC()}
	out.Body, out.BodyBase64 = api.EncodeBody(m.Payload.Body)
	if len(m.Payload.Attrs) > 0 {
		out.Headers = make(map[string]string, len(m.Payload.Attrs))
		for _, a := range m.Payload.Attrs {
			if len(a.Type) >= 6 && a.Type[:6] == "Binary" {
				out.Headers[a.Name] = base64.StdEncoding.EncodeToString(a.Value)
			} else {
				out.Headers[a.Name] = string(a.Value)
			}
		}
	}
	if m.FirstDelivered > 0 {
		t := time.UnixMilli(m.FirstDelivered).UTC()
		out.FirstDeliveredAt = &t
	}
	if m.VisibleAt > 0 {
		t := time.UnixMilli(m.VisibleAt).UTC()
		out.VisibleAt = &t
	}
	if d := m.Dead; d != nil {
		out.DeadLetter = &api.DeadLetter{Source: d.SourceName, Reason: d.Reason, Description: d.Description,
			At: time.UnixMilli(d.At).UTC(), Deliveries: d.Deliveries}
	}
	return out
}
