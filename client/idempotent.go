package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/okiba/okiba/api"
)

// producerRoom is room for a producer id and sequence in a send's buffer.
const producerRoom = 80

// idempotentKey marks the context of a request that may be sent twice with no harm: a
// producer's numbered send.
type idempotentKey struct{}

func idempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, idempotentKey{}, true)
}

// nextSequence returns the producer id and the next sequence for a send request, or ""
// when sends are not numbered (Options.Idempotent off, or a server that knows no
// producers). The first call gets the producer id from the server; if that fails for
// another reason, the send goes out unnumbered and the next one tries again.
func (c *Client) nextSequence(ctx context.Context) (string, uint64) {
	if !c.idempotent {
		return "", 0
	}
	c.producerMu.Lock()
	defer c.producerMu.Unlock()
	if c.producer == "" && !c.producerOff {
		var p api.Producer
		err := c.do(ctx, http.MethodPost, api.ProducersPath, nil, &p)
		var e *api.Error
		switch {
		case err == nil && p.ProducerID != "":
			c.producer = p.ProducerID
		case errors.As(err, &e) && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed):
			c.producerOff = true // an okiba before idempotent sends
		}
	}
	if c.producer == "" {
		return "", 0
	}
	return c.producer, c.producerSeq.Add(1)
}

// ProducerID returns the producer id the client numbers its sends with ("" until its
// first send, or when sends are not numbered).
func (c *Client) ProducerID() string {
	c.producerMu.Lock()
	defer c.producerMu.Unlock()
	return c.producer
}
