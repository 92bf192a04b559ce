package console

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
)

// history samples every queue's depth and counters at a fixed interval and keeps the
// last few minutes of them for the charts and sparklines, in fixed rings (about 28
// bytes per queue per sample); and every topic's published counter, for its publish
// rate (8 bytes per topic per sample).
type history struct {
	interval time.Duration
	size     int

	mu     sync.Mutex
	seq    uint64  // samples taken; sample n is in slot n % size
	times  []int64 // Unix ms of each slot's sample
	queues map[string]*series
	topics map[string]*topicSeries
}

// topicSeries is one topic's published counter in each sample. The counter rather than
// a rate per interval: the rate over any window is then one subtraction.
type topicSeries struct {
	born      uint64
	published []uint64
}

// series is one queue's samples; rates are per second over the interval before.
type series struct {
	born                         uint64 // first sample that has this queue
	ready, delayed, inFlight     []int32
	sent, acked, nacked, dead    []float32
	lastSent, lastAcked          uint64
	lastNacked, lastDeadLettered uint64
}

func newHistory(interval, span time.Duration) *history {
	size := max(2, int(span/interval))
	return &history{interval: interval, size: size, times: make([]int64, size), queues: make(map[string]*series),
		topics: make(map[string]*topicSeries)}
}

// run samples until ctx ends. Listing the queues and the topics holds the broker's lock,
// and its cost grows with their number, so when one sample takes more than 2% of the
// interval the next waits 50 times as long as it took instead: the charts get coarser
// rather than the broker slower.
func (h *history) run(ctx context.Context, svc Service) {
	for {
		start := time.Now()
		h.sample(svc.Queues(ctx, ""), svc.Topics(ctx, ""), start) // ctx has no principal: everything
		wait := max(h.interval, 50*time.Since(start))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func clamp32(v int64) int32 { return int32(min(v, 1<<31-1)) }

func (h *history) sample(qs []api.Queue, ts []api.Topic, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	slot := int(h.seq % uint64(h.size))
	secs := float32(h.interval.Seconds())
	var prev int64
	if h.seq > 1 {
		prev = h.times[int((h.seq-1)%uint64(h.size))]
		if d := float32(now.UnixMilli()-prev) / 1000; d > 0 {
			secs = d
		}
	}
	h.times[slot] = now.UnixMilli()
	seen := make(map[string]bool, len(qs))
	for i := range qs {
		qi := &qs[i]
		seen[qi.Name] = true
		s := h.queues[qi.Name]
		st := &qi.Stats
		fresh := s == nil
		if fresh {
			s = &series{born: h.seq,
				ready: make([]int32, h.size), delayed: make([]int32, h.size), inFlight: make([]int32, h.size),
				sent: make([]float32, h.size), acked: make([]float32, h.size), nacked: make([]float32, h.size), dead: make([]float32, h.size)}
			h.queues[qi.Name] = s
		}
		s.ready[slot], s.delayed[slot], s.inFlight[slot] = clamp32(st.Ready), clamp32(st.Delayed), clamp32(st.InFlight)
		rate := func(cur uint64, last *uint64) float32 {
			var r float32
			if !fresh && cur >= *last {
				r = float32(cur-*last) / secs
			}
			*last = cur
			return r
		}
		s.sent[slot] = rate(st.Sent, &s.lastSent)
		s.acked[slot] = rate(st.Acked, &s.lastAcked)
		s.nacked[slot] = rate(st.Nacked, &s.lastNacked)
		s.dead[slot] = rate(st.DeadLettered, &s.lastDeadLettered)
	}
	for name := range h.queues {
		if !seen[name] {
			delete(h.queues, name)
		}
	}
	clear(seen)
	for i := range ts {
		name := ts[i].Name
		seen[name] = true
		s := h.topics[name]
		if s == nil {
			s = &topicSeries{born: h.seq, published: make([]uint64, h.size)}
			h.topics[name] = s
		}
		s.published[slot] = ts[i].Stats.Published
	}
	for name := range h.topics {
		if !seen[name] {
			delete(h.topics, name)
		}
	}
}

// firstLocked is the oldest sample still kept of a series born at sample born.
func (h *history) firstLocked(born uint64) uint64 {
	first := born
	if h.seq >= uint64(h.size) && h.seq-uint64(h.size)+1 > first {
		first = h.seq - uint64(h.size) + 1
	}
	return first
}

// publishRate is a topic's records published per second over about the last window:
// between the latest sample and the oldest kept within window before it (at least the
// one before). It reports false until the topic is in two samples.
func (h *history) publishRate(name string, window time.Duration) (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.topics[name]
	if s == nil || h.seq == 0 {
		return 0, false
	}
	last, first := h.seq, h.firstLocked(s.born)
	if last <= first {
		return 0, false
	}
	at := func(n uint64) int64 { return h.times[int(n%uint64(h.size))] }
	from := last - 1
	for from > first && at(last)-at(from-1) <= window.Milliseconds() {
		from--
	}
	a, b := int(from%uint64(h.size)), int(last%uint64(h.size))
	secs := float64(at(last)-at(from)) / 1000
	if secs <= 0 || s.published[b] < s.published[a] {
		return 0, false
	}
	return float64(s.published[b]-s.published[a]) / secs, true
}

// depths returns, for the overview's sparklines, the depth (ready + delayed + in
// flight) of each queue in the samples after since, at most max of them, and the
// current sample number.
func (h *history) depths(since uint64, max int) (map[string][]int64, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]int64, len(h.queues))
	for name, s := range h.queues {
		from := h.firstLocked(s.born)
		if since+1 > from {
			from = since + 1
		}
		if h.seq >= uint64(max) && h.seq-uint64(max)+1 > from {
			from = h.seq - uint64(max) + 1
		}
		if from > h.seq {
			continue
		}
		pts := make([]int64, 0, h.seq-from+1)
		for n := from; n <= h.seq; n++ {
			i := int(n % uint64(h.size))
			pts = append(pts, int64(s.ready[i])+int64(s.delayed[i])+int64(s.inFlight[i]))
		}
		out[name] = pts
	}
	return out, h.seq
}

// queueHistory is the chart data of one queue: times in Unix seconds (what uPlot takes)
// and one array per series.
type queueHistory struct {
	IntervalMS   int64     `json:"interval_ms"`
	T            []float64 `json:"t"`
	Ready        []int32   `json:"ready"`
	Delayed      []int32   `json:"delayed"`
	InFlight     []int32   `json:"in_flight"`
	Sent         []float32 `json:"sent"`
	Acked        []float32 `json:"acked"`
	Nacked       []float32 `json:"nacked"`
	DeadLettered []float32 `json:"dead_lettered"`
}

func (h *history) of(name string) (queueHistory, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := queueHistory{IntervalMS: h.interval.Milliseconds()}
	s := h.queues[name]
	if s == nil {
		return out, false
	}
	for n := h.firstLocked(s.born); n <= h.seq; n++ {
		i := int(n % uint64(h.size))
		out.T = append(out.T, float64(h.times[i])/1000)
		out.Ready = append(out.Ready, s.ready[i])
		out.Delayed = append(out.Delayed, s.delayed[i])
		out.InFlight = append(out.InFlight, s.inFlight[i])
		out.Sent = append(out.Sent, s.sent[i])
		out.Acked = append(out.Acked, s.acked[i])
		out.Nacked = append(out.Nacked, s.nacked[i])
		out.DeadLettered = append(out.DeadLettered, s.dead[i])
	}
	return out, true
}

func (c *Console) queueHistory(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	hs, ok := c.hist.of(name)
	if !ok {
		if _, e := c.svc.Queue(r.Context(), name); e != nil {
			reply.Error(w, e)
			return
		}
		// Created since the last sample: no history yet.
	}
	reply.JSON(w, http.StatusOK, hs)
}
