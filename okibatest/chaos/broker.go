package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/node"
)

// Broker is an embedded okiba broker served over HTTP on a fixed loopback address, which
// can be restarted in place: closed and reopened on the same data directory, as a broker
// process that is restarted would be. Clients keep their address across restarts; while
// the broker is down they get 503 unavailable, which the okiba client and consumer
// runtime retry.
type Broker struct {
	// URL is the broker's address, such as http://127.0.0.1:41234.
	URL string

	cfg  broker.Config
	srv  *http.Server
	done chan struct{}

	mu       sync.Mutex // serialises Restart and Close
	cur      atomic.Pointer[running]
	restarts atomic.Int64
	closed   bool
}

// running is one incarnation of the broker: a node (internal/node) that the chaos
// broker's own listener serves, so that the address outlives restarts.
type running struct{ n *node.Node }

func (x *Broker) serving() (*running, error) {
	cfg := x.cfg
	n, err := node.Open(context.Background(), node.Config{
		Data:    cfg.Dir,
		SQS:     node.SQSConfig{Disabled: true},
		Console: node.ConsoleConfig{Disabled: true},
	}, node.Runtime{External: true, NoGCPace: true, Logger: cfg.Logger, Clock: cfg.Clock, FS: cfg.FS,
		Broker: func(c *broker.Config) {
			o := cfg
			o.Observer = c.Observer
			if o.Logger == nil {
				o.Logger = c.Logger
			}
			*c = o
		}})
	if err != nil {
		return nil, err
	}
	return &running{n: n}, nil
}

// stop closes the node at once: requests in progress fail with 503, long polls end, the
// streams close (their clients reconnect to the next broker, as HTTP clients' next
// requests reach it), and the broker closes.
func (r *running) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return r.n.Close(ctx)
}

// StartBroker opens a broker with cfg (cfg.Dir is required) and serves it on addr
// ("127.0.0.1:0" picks a free port) with the native API. Close stops it.
func StartBroker(cfg broker.Config, addr string) (*Broker, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	x := &Broker{URL: "http://" + ln.Addr().String(), cfg: cfg, done: make(chan struct{})}
	cur, err := x.serving()
	if err != nil {
		ln.Close()
		return nil, err
	}
	x.cur.Store(cur)
	x.srv = &http.Server{Handler: http.HandlerFunc(x.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(x.done)
		x.srv.Serve(ln)
	}()
	return x, nil
}

func (x *Broker) serve(w http.ResponseWriter, r *http.Request) {
	cur := x.cur.Load()
	if cur == nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"the broker is restarting"}}`, api.CodeUnavailable)
		return
	}
	cur.n.ServeHTTP(w, r)
}

// Broker returns the broker running now (nil while restarting or after Close).
func (x *Broker) Broker() *broker.Broker {
	if cur := x.cur.Load(); cur != nil {
		return cur.n.Broker()
	}
	return nil
}

// Restarts counts completed restarts.
func (x *Broker) Restarts() int64 { return x.restarts.Load() }

// Restart closes the broker (requests in progress fail with 503, long polls end) and
// opens it again on the same directory; it returns once the new broker serves.
func (x *Broker) Restart() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return errors.New("chaos: broker is closed")
	}
	old := x.cur.Swap(nil)
	if err := old.stop(); err != nil {
		return fmt.Errorf("chaos: close broker: %w", err)
	}
	cur, err := x.serving()
	if err != nil {
		return fmt.Errorf("chaos: reopen broker: %w", err)
	}
	x.cur.Store(cur)
	x.restarts.Add(1)
	return nil
}

// Close stops serving and closes the broker. It is safe to call twice.
func (x *Broker) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	old := x.cur.Swap(nil)
	var errs []error
	if old != nil {
		errs = append(errs, old.stop()) // ends long polls, so Shutdown need not wait for them
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.srv.Shutdown(ctx); err != nil {
		x.srv.Close()
	}
	<-x.done
	return errors.Join(errs...)
}
