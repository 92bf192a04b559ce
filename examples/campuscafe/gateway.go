package campuscafe

import (
	"context"
	"sync"
)

// Gateway stands in for an external notification service (e-mail, push) that honours
// idempotency keys, as payment and messaging APIs do: a second request with a key it has
// seen is answered as a success without sending again.
type Gateway struct {
	mu      sync.Mutex
	sent    map[string]string // idempotency key → recipient
	calls   int64
	repeats int64
}

// NewGateway returns an empty gateway.
func NewGateway() *Gateway { return &Gateway{sent: map[string]string{}} }

// Send sends text to a recipient once per idempotency key.
func (g *Gateway) Send(ctx context.Context, key, to, text string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if _, ok := g.sent[key]; ok {
		g.repeats++
		return nil
	}
	g.sent[key] = to
	return nil
}

// GatewayStats count the gateway's requests.
type GatewayStats struct {
	Calls int64 `json:"calls"`
	// Repeats were requests with a key already seen: refused as already sent.
	Repeats int64 `json:"repeats_refused"`
	// Sent is how many notifications actually went out.
	Sent int64 `json:"sent"`
}

// Stats returns the counters.
func (g *Gateway) Stats() GatewayStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GatewayStats{Calls: g.calls, Repeats: g.repeats, Sent: int64(len(g.sent))}
}
