package node

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/okiba/okiba/client"
)

// The console's playground drives the node through its native API, as a user's program
// would (its lessons are traffic the node authenticates, counts and audits). It does not
// dial the node's port: that port may speak TLS with a certificate for a name this
// process cannot check it by, and may demand a client certificate this process does not
// have. Instead the node's one http.Server also serves an in-memory listener that only
// this process can dial, without TLS: the same router, the same authentication (the
// console's own principal), the same graceful shutdown, and no port of its own.

// selfURL is the address the console's client uses on the in-memory listener. Its host
// is an IP address, which the browser guard accepts without a token.
const selfURL = "http://127.0.0.1"

// inProcessListener is a net.Listener whose connections are made by its dial, in
// memory (net.Pipe).
type inProcessListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newInProcessListener() *inProcessListener {
	return &inProcessListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *inProcessListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *inProcessListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *inProcessListener) Addr() net.Addr { return inProcessAddr{} }

// dial connects to the listener; it waits until the server accepts, ctx ends or the
// listener is closed.
func (l *inProcessListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- inProcessConn{server}:
		return inProcessConn{client}, nil
	case <-ctx.Done():
	case <-l.done:
	}
	server.Close()
	client.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, &net.OpError{Op: "dial", Net: "in-process", Err: net.ErrClosed}
}

// httpClient is an HTTP client whose every connection is made by dial.
func (l *inProcessListener) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         l.dial,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// newSelfClient is the console's client of this node, on l.
func newSelfClient(l *inProcessListener, token string) (*client.Client, error) {
	return client.New(selfURL, client.Options{Token: token, HTTPClient: l.httpClient()})
}

// inProcessConn names its ends "in-process", which is what the audit log and the
// throttle see as the source of the console's requests.
type inProcessConn struct{ net.Conn }

func (inProcessConn) LocalAddr() net.Addr  { return inProcessAddr{} }
func (inProcessConn) RemoteAddr() net.Addr { return inProcessAddr{} }

type inProcessAddr struct{}

func (inProcessAddr) Network() string { return "in-process" }
func (inProcessAddr) String() string  { return "in-process" }
