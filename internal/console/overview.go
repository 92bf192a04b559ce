package console

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
)

// The overview page asks for /ui/api/overview every two seconds. The answer lists every
// queue with its current numbers and, for the sparklines, the depth samples the page
// does not have yet (since=<seq of the last answer>): usually none or one. It leaves
// out zero fields and sends the oldest ready message's enqueue time rather than its age,
// so an idle broker gives the same answer each time, which the ETag turns into a 304
// with no body; big answers are gzipped. BenchmarkOverview measures the cost.

// overviewRow is one queue on the overview.
type overviewRow struct {
	Name        string `json:"name"`
	Ready       int64  `json:"ready"`
	Delayed     int64  `json:"delayed,omitempty"`
	InFlight    int64  `json:"in_flight,omitempty"`
	DLQ         string `json:"dlq,omitempty"`          // its dead-letter queue
	DeadLetters int64  `json:"dead_letters,omitempty"` // messages in it
	Sources     int    `json:"dlq_for,omitempty"`      // queues using this one as DLQ
	// Rates per second over the last minute.
	SendRate float64 `json:"send_rate,omitempty"`
	AckRate  float64 `json:"ack_rate,omitempty"`
	// OldestAt is when the oldest ready message entered the queue (Unix ms).
	OldestAt int64 `json:"oldest_at,omitempty"`
	// Little's law, waiting: W = L/λ estimated, and measured.
	WaitMS         float64 `json:"wait_ms,omitempty"`
	WaitMeasuredMS float64 `json:"wait_measured_ms,omitempty"`
	// Spark holds the depth samples after the request's since.
	Spark []int64 `json:"spark,omitempty"`
}

type overviewAnswer struct {
	Seq        uint64        `json:"seq"`
	IntervalMS int64         `json:"interval_ms"`
	Queues     []overviewRow `json:"queues"`
}

// sparkPoints is the sparkline's length.
const sparkPoints = 30

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// buildOverview turns the queues into the overview's rows.
func buildOverview(qs []api.Queue, spark map[string][]int64, seq uint64, interval time.Duration) overviewAnswer {
	out := overviewAnswer{Seq: seq, IntervalMS: interval.Milliseconds(), Queues: make([]overviewRow, len(qs))}
	for i := range qs {
		q := &qs[i]
		st := &q.Stats
		row := overviewRow{
			Name: q.Name, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
			DeadLetters: st.DeadLetters, Sources: len(q.DeadLetterSources),
			SendRate: round2(st.Rates.Sent), AckRate: round2(st.Rates.Acked),
			WaitMS: round2(st.Waiting.EstimatedMS), WaitMeasuredMS: round2(st.Waiting.MeasuredMS),
			Spark: spark[q.Name],
		}
		if !st.OldestReadyAt.IsZero() {
			row.OldestAt = st.OldestReadyAt.UnixMilli()
		}
		if d := q.Config.DeadLetterQueue; d != nil && *d != noDeadLetterQueue {
			row.DLQ = *d
		}
		out.Queues[i] = row
	}
	return out
}

// encodeOverview is the answer's body, its ETag, and whether it is gzipped.
func encodeOverview(a *overviewAnswer, gz bool) (body []byte, etag string, zipped bool) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(a)
	h := fnv.New64a()
	h.Write(buf.Bytes())
	etag = `W/"` + strconv.FormatUint(h.Sum64(), 36) + `"` // weak: gzipped or not
	if !gz || buf.Len() < 1024 {
		return buf.Bytes(), etag, false
	}
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestSpeed)
	zw.Write(buf.Bytes())
	zw.Close()
	return zb.Bytes(), etag, true
}

// browsable keeps the queues the request's principal may browse. The service filters its
// lists by the same rule; the console does not rely on it.
func browsable(ctx context.Context, qs []api.Queue) []api.Queue {
	return slices.DeleteFunc(qs, func(q api.Queue) bool { return !auth.Allowed(ctx, access.Browse, access.QueueNamed(q.Name)) })
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	qs := browsable(r.Context(), c.svc.Queues(r.Context(), r.URL.Query().Get("prefix")))
	spark, seq := c.hist.depths(since, sparkPoints)
	a := buildOverview(qs, spark, seq, c.opts.SampleInterval)
	body, etag, zipped := encodeOverview(&a, strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	h.Set("ETag", etag)
	// The server's clock, for ages computed in the browser.
	h.Set("X-Okiba-Now", strconv.FormatInt(time.Now().UnixMilli(), 10))
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if zipped {
		h.Set("Content-Encoding", "gzip")
	}
	w.Write(body)
}
