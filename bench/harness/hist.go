package harness

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Hist is a latency histogram safe for concurrent Record calls: exact below 256ns,
// then 128 buckets per power of two (under 0.8% error), up to the largest int64.
type Hist struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
}

const histBuckets = 256 + 56*128

func histIndex(v uint64) int {
	if v < 256 {
		return int(v)
	}
	e := bits.Len64(v) - 1 // ≥ 8
	m := v >> (e - 7)      // in [128, 255]
	return 256 + (e-8)*128 + int(m-128)
}

// histValue is the upper edge of bucket i, so that quantiles never understate.
func histValue(i int) uint64 {
	if i < 256 {
		return uint64(i)
	}
	e := (i-256)/128 + 8
	m := uint64((i-256)%128 + 128)
	return (m+1)<<(e-7) - 1
}

// Record adds one latency.
func (h *Hist) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))].Add(1)
	h.n.Add(1)
}

// Count is the number of recorded values.
func (h *Hist) Count() uint64 { return h.n.Load() }

// Quantile returns the q-quantile (0 < q ≤ 1), or 0 when empty.
func (h *Hist) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(histBuckets - 1))
}

// Latency is the summary of a histogram that goes into the results.
type Latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary returns the percentiles in milliseconds, or nil when empty.
func (h *Hist) Summary() *Latency {
	if h.Count() == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return &Latency{Count: h.Count(), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Quantile(1))}
}

// StampSize is the length of the stamp every body starts with: the send time (or, in
// open-loop runs, the intended send time) as nanoseconds since the harness started, in
// 10 characters, then a sequence number in 6. The stamp is printable ASCII, as is the
// rest of the body, so that every API carries bodies as plain text (okiba's JSON API
// would otherwise switch to base64).
const StampSize = 16

const stampAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"

// epoch is the origin of stamp times: the process start, so that 60 bits of
// nanoseconds last for decades.
var epoch = time.Now()

// filler is the printable pattern after the stamp: byte i of a body is 'a'+i%26.
var filler = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

var stampValue = func() (v [256]int8) {
	for i := range v {
		v[i] = -1
	}
	for i := 0; i < len(stampAlphabet); i++ {
		v[stampAlphabet[i]] = int8(i)
	}
	return v
}()

func putBase64(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = stampAlphabet[v&63]
		v >>= 6
	}
}

func getBase64(b []byte) (uint64, bool) {
	var v uint64
	for _, c := range b {
		d := stampValue[c]
		if d < 0 {
			return 0, false
		}
		v = v<<6 | uint64(d)
	}
	return v, true
}

// NewBody returns a body of size bytes (at least StampSize) stamped with t and seq
// (seq modulo 2^36).
func NewBody(size int, t time.Time, seq uint64) []byte {
	b := make([]byte, max(size, StampSize))
	putBase64(b[:10], uint64(t.Sub(epoch)))
	putBase64(b[10:StampSize], seq&(1<<36-1))
	for i := StampSize; i < len(b); i += copy(b[i:], filler[i%26:]) {
	}
	return b
}

// ReadStamp returns a body's stamp; ok is false for a body that carries none.
func ReadStamp(b []byte) (t time.Time, seq uint64, ok bool) {
	if len(b) < StampSize {
		return time.Time{}, 0, false
	}
	ns, ok1 := getBase64(b[:10])
	seq, ok2 := getBase64(b[10:StampSize])
	if !ok1 || !ok2 {
		return time.Time{}, 0, false
	}
	return epoch.Add(time.Duration(ns)), seq, true
}
