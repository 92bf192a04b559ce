package auth

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/clock"
)

// Throttle slows down whoever fails to authenticate: each source address has a bucket
// of Burst failures that refills at Rate a second; a failure beyond the bucket is
// answered only once its turn comes (at most MaxDelay later). Nobody is locked out — a
// request with a valid credential is never delayed, and a delayed failure is answered
// all the same — but guessing a 128-bit secret at one try a second is hopeless, where
// it was hundreds a second before.
type Throttle struct {
	// Rate is how many failures a second a source may make once its burst is spent.
	// Defaults to 1.
	Rate float64
	// Burst is how many failures a source may make at once. Defaults to 10.
	Burst int
	// MaxDelay bounds how long one answer waits. Defaults to 5 seconds: a source that
	// fails faster than its rate gets every answer MaxDelay late.
	MaxDelay time.Duration
	// MaxSources bounds the sources remembered (the oldest are forgotten first: a
	// forgotten source starts with a full bucket). Defaults to 100,000 (about 6 MiB).
	MaxSources int
	// Clock is the time of buckets and delays. Defaults to the real clock.
	Clock clock.Clock

	mu      sync.Mutex
	sources map[string]*bucket
	order   []string // sources by first failure, for forgetting
}

// bucket is one source's state: when its bucket will be full again (the "virtual
// time" of a token bucket, which needs no refill loop).
type bucket struct{ full time.Time }

func (t *Throttle) defaults() {
	if t.Rate <= 0 {
		t.Rate = 1
	}
	if t.Burst <= 0 {
		t.Burst = 10
	}
	if t.MaxDelay <= 0 {
		t.MaxDelay = 5 * time.Second
	}
	if t.MaxSources <= 0 {
		t.MaxSources = 100_000
	}
	if t.Clock == nil {
		t.Clock = clock.Real
	}
	if t.sources == nil {
		t.sources = map[string]*bucket{}
	}
}

// Delay records one failure of source and returns how long its answer is to wait.
func (t *Throttle) Delay(source string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.defaults()
	now := t.Clock.Now()
	per := time.Duration(float64(time.Second) / t.Rate)
	b := t.sources[source]
	if b == nil {
		if len(t.order) >= t.MaxSources {
			delete(t.sources, t.order[0])
			t.order = t.order[1:]
		}
		b = &bucket{full: now}
		t.sources[source] = b
		t.order = append(t.order, source)
	}
	if b.full.Before(now) {
		b.full = now
	}
	// Each failure costs one token: the bucket is full again per later. Once more than
	// Burst tokens are owed, the answer waits until one is back.
	b.full = b.full.Add(per)
	owed := b.full.Sub(now)
	wait := owed - time.Duration(t.Burst)*per
	switch {
	case wait <= 0:
		return 0
	case wait > t.MaxDelay:
		// Do not let a flood owe hours: the debt stops growing at the cap.
		b.full = now.Add(time.Duration(t.Burst)*per + t.MaxDelay)
		return t.MaxDelay
	}
	return wait
}

// Wait records one failure of source and waits its delay (or until ctx ends).
func (t *Throttle) Wait(ctx context.Context, source string) {
	d := t.Delay(source)
	if d <= 0 {
		return
	}
	timer := t.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-ctx.Done():
	}
}

// Sources reads a request's source address: the peer, or — when the peer is one of
// the trusted proxies — the rightmost address of X-Forwarded-For that is not a trusted
// proxy (the leftmost entries are the client's to write, so they are never believed).
type Sources struct {
	Trusted []netip.Prefix
}

// ParseProxies reads --trusted-proxies: addresses or CIDR prefixes.
func ParseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (s Sources) trusted(a netip.Addr) bool {
	for _, p := range s.Trusted {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// Of returns r's source address.
func (s Sources) Of(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return peer.String() // a malformed hop: believe no further
		}
		if !s.trusted(a) {
			return a.Unmap().String()
		}
	}
	return peer.String()
}
