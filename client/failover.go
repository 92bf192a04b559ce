package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/okiba/okiba/api"
)

// DefaultFailoverTimeout is Options.FailoverTimeout when it is zero: longer than an
// election (1–2 s with a cluster's default timeouts) several times over.
const DefaultFailoverTimeout = 30 * time.Second

// LeaderHeader is where a follower that refuses a stream names the leader's URL.
const LeaderHeader = "Okiba-Leader"

// maxFailoverWait bounds the pause between two tries of a call riding through a failover.
const maxFailoverWait = 200 * time.Millisecond

// attemptTimeout is how long one try of a call riding through a failover may take: a
// few seconds, or for a long poll (a receive, a pull, a topic read) the longest wait
// the API allows and as much again.
func attemptTimeout(req *http.Request) time.Duration {
	p := req.URL.Path
	if strings.HasSuffix(p, "/receive") || strings.HasSuffix(p, "/pull") || strings.HasSuffix(p, "/records") && req.Method == http.MethodGet {
		return api.MaxWait + 5*time.Second
	}
	return 5 * time.Second
}

func (c *Client) scheme() string {
	u, _ := url.Parse(c.base)
	return u.Scheme
}

// server is the URL calls go to now.
func (c *Client) server() string { return c.servers[c.cur.Load()] }

// moveOn makes the next calls go to the node hint names if it is one of the servers,
// else to the server after from (a call's, so that calls failing together move once).
func (c *Client) moveOn(from int32, hint string) {
	for i, s := range c.servers {
		if hint != "" && s == hint {
			c.cur.Store(int32(i))
			return
		}
	}
	c.cur.CompareAndSwap(from, (from+1)%int32(len(c.servers)))
}

// roundTripFailover is roundTrip with Options.Servers: see there.
func (c *Client) roundTripFailover(req *http.Request, body []byte) (*http.Response, []byte, error) {
	ctx := req.Context()
	deadline := time.Now().Add(c.failoverFor)
	for attempt := 0; ; attempt++ {
		at := c.cur.Load()
		// A node that is paused or cut off accepts the connection and never answers: an
		// attempt that outlives attemptTimeout moves on, as a refused one does.
		actx, cancel := context.WithTimeout(ctx, attemptTimeout(req))
		resp, data, err := c.roundTripOnce(req.WithContext(actx), body)
		hung := err != nil && actx.Err() != nil && ctx.Err() == nil
		cancel()
		if !(hung || retryable(resp, err)) || ctx.Err() != nil {
			return resp, data, err
		}
		var hint string
		wait := time.Duration(min(attempt+1, 4)) * 50 * time.Millisecond
		if resp != nil {
			hint = resp.Header.Get(LeaderHeader)
			if ra, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && ra >= 0 {
				// Elections take a second or two: the node's Retry-After (whole seconds)
				// would wait past the new leader's first moments.
				wait = min(time.Duration(ra)*time.Second, maxFailoverWait)
			}
		}
		if time.Now().Add(wait).After(deadline) {
			return resp, data, err
		}
		c.moveOn(at, hint)
		if c.cur.Load() != at {
			// Streams to the node left behind are not used again: a leader that lost its
			// lead keeps its streams, and would answer every call on them 503.
			c.closeStreams()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, data, err
		case <-t.C:
		}
		next, nerr := rebase(req, c.server(), body)
		if nerr != nil {
			return resp, data, err
		}
		req = next
	}
}

// retryable says whether a call's outcome is one a failover explains: a 503 from a
// node, or a node that could not be reached or whose connection broke.
func retryable(resp *http.Response, err error) bool {
	if err == nil {
		return resp.StatusCode == http.StatusServiceUnavailable
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.Is(err, errStreamBroken) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &oe) || errors.As(err, &ne)
}

// rebase is req sent to server instead, with its body again.
func rebase(req *http.Request, server string, body []byte) (*http.Request, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	next := req.Clone(req.Context())
	next.URL.Scheme, next.URL.Host, next.Host = u.Scheme, u.Host, ""
	if body != nil {
		next.Body = io.NopCloser(bytes.NewReader(body))
		next.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return next, nil
}
