// Package okibatest gives tests an okiba broker of their own: in-process, on a temporary
// directory, served over HTTP on a loopback port, with a ready client. Everything is
// stopped and removed when the test ends.
//
//	func TestOrders(t *testing.T) {
//		srv := okibatest.New(t, okibatest.Options{})
//		srv.CreateQueue(t, "orders")
//		_, err := srv.Client.Send(ctx, "orders", client.Message{Body: []byte("hi")})
//		…
//	}
//
// Topics have helpers of the same kind: CreateTopic, Subscribe, Publish and ReadAll.
//
// With Options.FakeClock, time stands still until the test moves it with
// srv.Clock.Advance, so lease expiry, delays and backoff can be tested without sleeping.
//
// The client's runtimes run on a clock too (client.Options.Clock): on a fake one, a
// consumer's lease extension, backoff and drain timeout and a producer's linger wait for
// the test. Give the client a clock of its own (clock.NewFake) and advance both in step
// where the server's time matters: the broker's own timers wait on srv.Clock, so
// counting timers with WaitTimers says something only on a clock the client alone uses.
package okibatest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/node"
	"github.com/okiba/okiba/internal/sqs"
)

// Options configure a test server. The zero value is a real-clock broker.
type Options struct {
	// FakeClock runs the broker on a manual clock (Server.Clock).
	FakeClock bool
	// Dir is the data directory; default a fresh t.TempDir(). Reuse one to test restarts.
	Dir string
	// Broker overrides broker settings (Dir and Clock are filled in).
	Broker broker.Config
	// Token enables authentication: it is the secret of the principal "admin", allowed
	// everything, which Server.Client uses. At least 22 characters.
	Token string
	// Principals are more principals, declared as okiba serve's configuration file
	// declares them; with any, authentication is on.
	Principals []Principal
	// CORSOrigins and AllowedHosts are okiba serve's --cors-origins and --allowed-hosts:
	// browser applications let in, and host names a tokenless server answers to.
	CORSOrigins, AllowedHosts []string
	// SQS configures the SQS-compatible API, which the server always serves: its Region,
	// AccountID and BaseURL are used. With authentication on, SQS clients sign with a
	// principal's name as the access key id and its secret ("admin" and the Token).
	SQS sqs.Options
}

// Principal declares one principal: its name (also its SQS access key id), its secret
// (at least 22 characters) and its grants, such as "send queue:orders-*" or "admin".
type Principal struct {
	Name, Secret string
	Grants       []string
}

// Server is a running test broker.
type Server struct {
	Broker *broker.Broker
	Client *client.Client
	URL    string
	// Clock is the broker's clock when Options.FakeClock is set, else nil.
	Clock *clock.Fake
	Dir   string
	// SQS is the SQS-compatible API served on URL (see package sqs).
	SQS *sqs.Front

	node *node.Node
}

// New starts a broker for t and stops it at cleanup.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("okibatest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start starts a broker outside a test (for examples and benchmarks harnesses); the
// caller must Close it. Options.Dir is required.
func Start(opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("okibatest: Start needs Options.Dir")
	}
	s := &Server{Dir: opts.Dir}
	// A test scrapes right after what it changes: no scrape cache.
	rt := node.Runtime{NoGCPace: true, Metrics: metrics.New(metrics.Options{ScrapeCache: -1}), Broker: func(c *broker.Config) {
		o := opts.Broker
		o.Dir, o.Clock, o.Observer = c.Dir, c.Clock, c.Observer
		if o.Logger == nil {
			o.Logger = c.Logger
		}
		*c = o
	}}
	if opts.FakeClock {
		s.Clock = clock.NewFake(time.Now().Truncate(time.Millisecond))
		rt.Clock = s.Clock
	}
	cfg := node.Config{
		Addr: "127.0.0.1:0", Data: opts.Dir, AuthToken: opts.Token,
		CORSOrigins: opts.CORSOrigins, AllowedHosts: opts.AllowedHosts,
		SQS: node.SQSConfig{
			Region: opts.SQS.Region, AccountID: opts.SQS.AccountID, BaseURL: opts.SQS.BaseURL,
		},
		Console: node.ConsoleConfig{Disabled: true},
	}
	for _, p := range opts.Principals {
		cfg.Principals = append(cfg.Principals, node.PrincipalConfig{Name: p.Name, Secret: p.Secret, Grants: p.Grants})
	}
	n, err := node.Open(context.Background(), cfg, rt)
	if err != nil {
		return nil, err
	}
	s.node, s.Broker, s.SQS, s.URL = n, n.Broker(), n.SQS(), n.URL()
	if s.Client, err = client.New(s.URL, client.Options{Token: opts.Token}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the HTTP server and the broker at once (requests still running are cut
// off). It is safe to call twice.
func (s *Server) Close() {
	if s.Client != nil {
		s.Client.Close()
		s.Client = nil
	}
	if s.node != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.node.Close(ctx)
		s.node, s.Broker = nil, nil
	}
}

// CreateQueue creates a queue with okiba's defaults, failing the test on error.
func (s *Server) CreateQueue(t testing.TB, name string) *api.Queue {
	t.Helper()
	return s.PutQueue(t, name, api.QueueConfig{})
}

// PutQueue creates or updates a queue, failing the test on error.
func (s *Server) PutQueue(t testing.TB, name string, cfg api.QueueConfig) *api.Queue {
	t.Helper()
	q, err := s.Client.PutQueue(context.Background(), name, cfg)
	if err != nil {
		t.Fatalf("okibatest: put queue %s: %v", name, err)
	}
	return q
}

// CreateTopic creates a topic of the given partitions with okiba's other defaults,
// failing the test on error.
func (s *Server) CreateTopic(t testing.TB, name string, partitions int) *api.Topic {
	t.Helper()
	return s.PutTopic(t, name, api.TopicConfig{Partitions: &partitions})
}

// PutTopic creates or updates a topic, failing the test on error.
func (s *Server) PutTopic(t testing.TB, name string, cfg api.TopicConfig) *api.Topic {
	t.Helper()
	tp, err := s.Client.PutTopic(context.Background(), name, cfg)
	if err != nil {
		t.Fatalf("okibatest: put topic %s: %v", name, err)
	}
	return tp
}

// Subscribe creates (or updates) a subscription of topic into queue, from the first
// retained record when first is set, else from now, failing the test on error.
func (s *Server) Subscribe(t testing.TB, topic, name, queue string, first bool) *api.Subscription {
	t.Helper()
	req := api.SubscriptionRequest{Queue: queue}
	if first {
		req.Start = "first"
	}
	sub, err := s.Client.Subscribe(context.Background(), topic, name, req)
	if err != nil {
		t.Fatalf("okibatest: subscribe %s to %s into %s: %v", name, topic, queue, err)
	}
	return sub
}

// Publish publishes records to a topic in one request and returns where each went,
// failing the test on error, the request's or any record's.
func (s *Server) Publish(t testing.TB, topic string, recs ...client.Record) []client.Published {
	t.Helper()
	res, err := s.Client.PublishRecords(context.Background(), topic, recs)
	if err != nil {
		t.Fatalf("okibatest: publish to %s: %v", topic, err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("okibatest: publish to %s: record %d: %v", topic, i, r.Err)
		}
	}
	return res
}

// ReadAll returns every record a partition retains, in offset order, failing the test
// on error.
func (s *Server) ReadAll(t testing.TB, topic string, partition int) []client.TopicRecord {
	t.Helper()
	ctx := context.Background()
	tp, err := s.Client.Topic(ctx, topic)
	if err != nil {
		t.Fatalf("okibatest: topic %s: %v", topic, err)
	}
	if partition < 0 || partition >= len(tp.Partitions) {
		t.Fatalf("okibatest: topic %s has %d partitions, not %d", topic, len(tp.Partitions), partition)
	}
	var out []client.TopicRecord
	for off := tp.Partitions[partition].Start; ; {
		b, err := s.Client.ReadPartition(ctx, topic, partition, client.ReadOptions{Offset: off, Max: 10_000})
		if err != nil {
			t.Fatalf("okibatest: read %s/%d from %d: %v", topic, partition, off, err)
		}
		out = append(out, b.Records...)
		if b.Next >= b.End || len(b.Records) == 0 {
			return out
		}
		off = b.Next
	}
}
