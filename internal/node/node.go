// Package node is one okiba process: it owns the broker and every interface in front of
// it — the native API and its stream, the SQS-compatible API, the web console, metrics
// and health — behind one router with one authentication step, on one port (over TLS
// when configured, tls.go), and closes them in order.
// okiba serve, okibatest and the chaos harness are thin users of it.
//
// The router takes each request through the same steps: the browser guard (cross-site
// requests and DNS rebinding, internal/crossorigin), then authentication — a bearer token,
// a console session or an SQS signature becomes a principal (internal/auth) in the
// request's context — then the interface it is addressed to. What a principal may do is
// decided by the action that runs, not here: an SQS request names its queue inside its
// body.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/audit"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/buildinfo"
	"github.com/okiba/okiba/internal/cluster"
	"github.com/okiba/okiba/internal/console"
	"github.com/okiba/okiba/internal/consumers"
	"github.com/okiba/okiba/internal/crossorigin"
	"github.com/okiba/okiba/internal/gcpace"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
	"github.com/okiba/okiba/internal/sns"
	"github.com/okiba/okiba/internal/sqs"
	"github.com/okiba/okiba/internal/vfs"
)

// Runtime is what a node is given in code rather than in its configuration: the seams
// that tests and embedders replace. The zero value is the real thing.
type Runtime struct {
	// Logger receives the node's events. Defaults to discarding them.
	Logger *slog.Logger
	// Clock tells the broker, the SQS front and the console the time. Defaults to the
	// real clock.
	Clock clock.Clock
	// FS is the data directory's file system. Defaults to the real one.
	FS vfs.FS
	// Listener, when set, is served instead of listening on Config.Addr.
	Listener net.Listener
	// External: the node neither listens nor serves; the caller serves Node.ServeHTTP on
	// a listener of its own (the chaos harness keeps one address across restarts of
	// nodes behind it). URL is then empty.
	External bool
	// Broker adjusts the broker's configuration after the node has filled it in (for
	// tests: small segments, a receive cap).
	Broker func(*broker.Config)
	// Metrics is the node's instrumentation. Defaults to metrics.New with its defaults.
	Metrics *metrics.Metrics
	// NoGCPace leaves the garbage collector's pace alone (gcpace is process-wide: a test
	// binary running several nodes must not have each of them set it).
	NoGCPace bool
}

// Node is a running okiba process.
type Node struct {
	cfg  resolved
	rt   Runtime
	log  *slog.Logger
	url  string
	addr net.Addr
	// tls is the TLS files' current reading, which each accepted connection takes;
	// ReloadTLS replaces it, under reloading. Nil without TLS.
	tls       *atomic.Pointer[tlsState]
	reloading sync.Mutex

	broker *broker.Broker
	// raft is the node's member of its cluster's Raft group; nil for a single node.
	// leaders are the reverse proxies to each peer, which a follower forwards through.
	raft      *cluster.Raft
	leadersMu sync.Mutex
	leaders   map[string]*httputil.ReverseProxy // by URL
	fwd       *http.Transport                   // what they and raft call the others with
	native    *nativeapi.Server
	sqs       *sqs.Front // nil when off
	sns       *sns.Front // nil when the SQS front is off
	console   *console.Console
	self      *client.Client // the console's playground's client of this node, on inproc; nil without a console or URL
	metrics   *metrics.Metrics
	guard     *crossorigin.Guard
	keys      *auth.Keyring
	audit     *audit.Log
	auditTo   *os.File // the audit log's file, when configured
	// throttle delays answers to failed authentication, per source address.
	throttle *auth.Throttle
	sources  auth.Sources
	step     auth.Step
	// selfToken is the secret of the console's own client (consolePrincipal), made at
	// start and known to this process only; "" without authentication.
	selfToken string
	mux       *http.ServeMux // the console, /metrics, and the native API behind them

	// inproc is the in-memory listener the console's client reaches the node on
	// (inprocess.go); inprocDone is closed when the HTTP server stops serving it.
	inproc     *inProcessListener
	inprocDone chan struct{}

	http     *http.Server
	served   chan struct{} // closed when the HTTP server has stopped
	serveErr error
	shutdown context.Context // done once Close begins: waiting long polls end
	stop     context.CancelFunc
	bg       sync.WaitGroup
	stopBg   context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// Open starts a node: it opens the broker on the data directory, builds every
// interface, and serves them on the configured address (or Runtime.Listener) until Close.
func Open(ctx context.Context, cfg Config, rt Runtime) (*Node, error) {
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if rt.Logger == nil {
		rt.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: rc, rt: rt, log: rt.Logger, served: make(chan struct{})}
	n.shutdown, n.stop = context.WithCancel(context.Background())
	if err := n.open(ctx); err != nil {
		n.abort()
		return nil, err
	}
	return n, nil
}

func (n *Node) open(ctx context.Context) error {
	c, log := n.cfg, n.log
	if c.tls != nil && n.rt.External {
		return errors.New("TLS needs the node's own listener: with Runtime.External, the caller's server terminates TLS")
	}
	switch {
	case c.authOn():
		log.Info("authentication on: every path but /healthz requires a principal's secret (or a console session)")
	case !c.loopback:
		log.Warn("authentication off on a non-loopback address (--insecure): anyone who can reach it can read, send and delete messages", "addr", c.Addr)
		log.Info("without a token, clients must address the server by an IP address, localhost, this machine's name or a name in --allowed-hosts",
			"allowed_hosts", strings.Join(append(c.AllowedHosts, addrName(c.Addr)...), ","))
	}
	n.metrics = n.rt.Metrics
	if n.metrics == nil {
		n.metrics = metrics.New(metrics.Options{})
	}
	bcfg := broker.Config{
		Dir: c.Data, FS: n.rt.FS, Clock: n.rt.Clock, Logger: log, Observer: n.metrics,
		SegmentSize: int64(c.Storage.SegmentSize), CheckpointBytes: int64(c.Storage.CheckpointBytes),
		CacheBytes: int64(c.Storage.CacheBytes), MinFreeBytes: int64(c.Storage.MinFreeDisk),
		ScrubEvery: time.Duration(c.Storage.ScrubEvery), ScrubRate: int64(c.Storage.ScrubRate),
		MaxQueues: c.Limits.MaxQueues, MaxInFlight: c.Limits.MaxInFlight, DedupTotal: c.Limits.MaxDedupIDs,
	}
	if n.rt.Broker != nil {
		n.rt.Broker(&bcfg)
	}
	if c.peers != nil {
		if err := n.openCluster(&bcfg); err != nil {
			return err
		}
	}
	b, err := broker.Open(bcfg)
	if err != nil {
		return fmt.Errorf("cannot open the broker: %w", err)
	}
	n.broker = b
	if n.raft != nil {
		if err := n.raft.Start(b); err != nil {
			return err
		}
		n.metrics.WatchCluster(n.clusterStats)
	}
	n.metrics.Watch(b)
	static := c.static
	if c.authOn() && !c.Console.Disabled {
		// The playground's lessons drive the node through its API like any program: they
		// need a credential, which lives in this process only.
		n.selfToken = auth.NewSecret()
		static = append(static[:len(static):len(static)], auth.Static{Name: consolePrincipal, Secret: n.selfToken, Grants: auth.AdminGrants})
	}
	now := time.Now
	if n.rt.Clock != nil {
		now = n.rt.Clock.Now
	}
	if n.keys, err = auth.NewKeyring(b.DeriveKey("principal secrets"), b, static, now, log); err != nil {
		return err
	}
	n.sources = auth.Sources{Trusted: c.proxies}
	n.throttle = &auth.Throttle{Clock: n.rt.Clock}
	acfg := audit.Config{Logger: log, Clock: n.rt.Clock}
	if c.AuditLog != "" {
		if n.auditTo, err = os.OpenFile(c.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return fmt.Errorf("cannot open the audit log: %w", err)
		}
		acfg.File = n.auditTo
	}
	n.audit = audit.New(acfg)

	ln := n.rt.Listener
	if ln == nil && !n.rt.External {
		if ln, err = net.Listen("tcp", c.Addr); err != nil {
			return fmt.Errorf("cannot listen: %w", err)
		}
	}
	closeLn := func() {
		if ln != nil {
			ln.Close()
		}
	}
	if ln != nil {
		n.addr = ln.Addr()
		n.url = "http://" + ln.Addr().String()
		if c.tls != nil {
			n.tls = new(atomic.Pointer[tlsState])
			n.tls.Store(c.tls)
			ln = tlsListener{Listener: ln, current: n.tls}
			n.url = "https://" + n.addr.String()
			log.Info("TLS on: the port speaks TLS only (1.2 or later); SIGHUP reloads the certificates", c.tls.logAttrs(time.Now())...)
		}
	}

	// The receivers seen lately, per queue: fed by the native API's and the SQS front's
	// receives, listed by GET /v1/queues/{name}/consumers. Memory of this node only.
	table := consumers.New(consumers.Options{})
	nopts := nativeapi.Options{Logger: log, Observe: n.metrics.ObserveRequest, Audit: n.audited, Keys: n.keys, Consumers: table, Now: now}
	if n.raft != nil {
		nopts.Cluster = n.clusterHealth
		nopts.ReadBarrier = n.readBarrier
		nopts.StaleBarrier = b.Barrier
	}
	n.native = nativeapi.New(b, nopts)
	if !c.SQS.Disabled {
		// SNS shares the SQS front's port, protocol, region and account (internal/sns).
		n.sns = sns.New(b, sns.Options{Region: c.SQS.Region, AccountID: c.SQS.AccountID, BaseURL: c.SQS.BaseURL,
			SigningSeed: b.DeriveKey("sns signing key"), Logger: log})
		opts := sqs.Options{Region: c.SQS.Region, AccountID: c.SQS.AccountID, BaseURL: c.SQS.BaseURL, Clock: n.rt.Clock, Logger: log, SNS: n.sns, Consumers: table}
		if n.raft != nil {
			opts.ReadBarrier = n.readBarrier
		}
		if c.authOn() {
			opts.Keys = n.keys
		}
		n.sqs = sqs.New(b, opts)
	}
	n.mux = http.NewServeMux()
	if !c.Console.Disabled {
		if ln != nil {
			// The playground's lessons drive this node as a user's program would: through
			// the native API, with the node's token — on a listener of this process's
			// own, which needs neither the port's certificate nor a client certificate.
			n.inproc = newInProcessListener()
			if n.self, err = newSelfClient(n.inproc, n.selfToken); err != nil {
				closeLn()
				return err
			}
		}
		// The console reads through the operations the native API runs (a service holds
		// no state of its own, so the console's and the server's are alike).
		copts := console.Options{Logger: log, Client: n.self}
		if n.raft != nil {
			copts.Cluster = n.clusterHealth
		}
		if c.authOn() {
			copts.Keys, copts.SessionKey, copts.Now = n.keys, b.DeriveKey("console sessions"), now
			copts.Refused = func(r *http.Request) {
				n.throttle.Wait(r.Context(), n.sources.Of(r))
				n.audit.Refused(audit.Event{Source: n.sources.Of(r), Action: "console sign-in", Status: http.StatusUnauthorized, Outcome: "unauthenticated"})
			}
		}
		if n.console, err = console.New(service.New(b, service.Options{Logger: log}), copts); err != nil {
			closeLn()
			return err
		}
		n.console.Register(n.mux)
	}
	n.step = auth.Step{Refuse: func(w http.ResponseWriter, _ int, msg string) {
		reply.Error(w, &api.Error{Code: api.CodeUnauthorized, Message: msg})
	}}
	if c.authOn() {
		n.step.Keys, n.step.Throttle, n.step.Sources = n.keys, n.throttle, n.sources
	}
	if n.console != nil {
		n.step.Browsers = n.console
	}
	n.mux.Handle("/metrics", scrapers(n.metrics.Handler(), n.log))
	n.mux.Handle("/", n.native.Handler())

	hosts := append(c.AllowedHosts[:len(c.AllowedHosts):len(c.AllowedHosts)], addrName(c.Addr)...)
	if n.guard, err = crossorigin.New(crossorigin.Config{
		Origins: c.CORSOrigins, Hosts: hosts, Authenticated: c.authOn(),
		Exempt: n.openToBrowsers, Refuse: n.refuseBrowser,
	}); err != nil {
		closeLn()
		return err
	}

	bg, stopBg := context.WithCancel(context.Background())
	n.stopBg = stopBg
	if !n.rt.NoGCPace && c.Storage.GCHeadroom >= 0 {
		// The index of a deep backlog is most of the heap: Go's default pace would hold
		// twice it (internal/gcpace). Off when GOGC is set.
		n.bg.Go(func() { gcpace.Run(bg, gcpace.Config{MinHeadroom: int64(c.Storage.GCHeadroom)}) })
	}
	n.bg.Go(func() { n.audit.Run(bg) })

	if ln != nil {
		n.http = nativeapi.HTTPServer(n, log)
		go func() {
			n.serveErr = n.http.Serve(ln)
			close(n.served)
		}()
		if n.inproc != nil {
			n.inprocDone = make(chan struct{})
			go func() {
				n.http.Serve(n.inproc) // ends with the server (Shutdown or Close)
				close(n.inprocDone)
			}()
		}
	}
	rec := b.Recovery()
	build := buildinfo.Get()
	log.Info("okiba serving", "url", n.url, "data", c.Data,
		"version", build.Version, "commit", buildinfo.Short(build.Commit), "go", build.GoVersion,
		"queues", rec.Queues, "messages", rec.Messages, "records_replayed", rec.Records,
		"from_checkpoint", rec.Checkpoint, "recovery_time", rec.Duration.Round(time.Millisecond))
	if n.sqs != nil {
		log.Info("SQS API on the same address (JSON and query protocols)", "endpoint_url", n.url,
			"signatures_verified", n.sqs.Authenticates(), "region", n.sqs.Region(), "account_id", n.sqs.AccountID())
	}
	log.Info("metrics for Prometheus", "url", n.url+"/metrics", "bearer_token", c.authOn())
	if n.console != nil {
		signIn := "open"
		if c.authOn() {
			signIn = "sign in with a principal's secret"
		}
		log.Info("console", "url", n.url+"/", "access", signIn)
	}
	return nil
}

// abort undoes a failed open.
func (n *Node) abort() {
	if n.stopBg != nil {
		n.stopBg()
		n.bg.Wait()
	}
	if n.auditTo != nil {
		n.auditTo.Close()
	}
	if n.console != nil {
		n.console.Close()
	}
	if n.self != nil {
		n.self.Close()
	}
	if n.raft != nil {
		n.raft.Close()
	}
	if n.broker != nil {
		n.broker.Close()
	}
}

// addrName returns the host of a listen address when it is a name (not an IP address):
// requests may address the server by the name it was told to listen on.
func addrName(listen string) []string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	if n, err := crossorigin.ParseHost(host); err == nil && n != "" {
		return []string{n}
	}
	return nil
}

// URL is where the node serves, such as http://127.0.0.1:7070 (https://… with TLS).
func (n *Node) URL() string { return n.url }

// Addr is the address the node listens on.
func (n *Node) Addr() net.Addr { return n.addr }

// Broker is the node's broker, for in-process use and tests.
func (n *Node) Broker() *broker.Broker { return n.broker }

// SQS is the node's SQS front (nil when off).
func (n *Node) SQS() *sqs.Front { return n.sqs }

// Token is the secret of the principal "admin" ("" when none).
func (n *Node) Token() string { return n.cfg.token }

// Keys is the node's keyring: its principals' secrets, for lookups and sealing.
func (n *Node) Keys() *auth.Keyring { return n.keys }

// consolePrincipal is the name of the console's own client's principal.
const consolePrincipal = "okiba-console"

// Stopped is closed when the node's HTTP server has stopped: after Close, or by itself
// when its listener failed (ServeErr says why).
func (n *Node) Stopped() <-chan struct{} { return n.served }

// ServeErr is what stopped the HTTP server (http.ErrServerClosed after Close).
func (n *Node) ServeErr() error {
	<-n.served
	return n.serveErr
}

// Close stops the node in order: the console's playground runs ended (their queues
// deleted through the API, which still serves), then no new connections, waiting long
// polls answered at once (with no messages), requests in progress finished within ctx
// (then cut off), streams drained the same way, and the broker closed with a final
// checkpoint. It is safe to call twice; the second call returns the first's result.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	if n.raft != nil {
		// Before anything stops: requests arriving meanwhile are forwarded to the next
		// leader once it leads, and none is lost to an election after this node is gone.
		hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		n.raft.Handoff(hctx)
		cancel()
	}
	if n.console != nil {
		n.console.Close() // ends playground runs, which delete their queues through the API
	}
	if n.self != nil {
		n.self.Close()
	}
	n.stop() // waiting long polls end now
	var errs []error
	streamsDone := make(chan error, 1)
	go func() { streamsDone <- n.native.CloseStreams(ctx) }()
	if n.http != nil {
		if err := n.http.Shutdown(ctx); err != nil {
			// The grace is over: cut what still runs rather than let it race the broker's
			// shutdown. Its callers get a broken connection, never a false answer.
			n.http.Close()
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			} else {
				n.log.Warn("grace period over: requests still running are cut off")
			}
		}
		<-n.served
		if err := n.serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		if n.inprocDone != nil {
			<-n.inprocDone
		}
	}
	if n.http == nil {
		close(n.served)
	}
	if err := <-streamsDone; err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	n.stopBg()
	n.bg.Wait() // the audit log's last summaries are written
	if n.auditTo != nil {
		n.auditTo.Close()
	}
	if n.raft != nil {
		if err := n.raft.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.broker.Close(); err != nil {
		n.log.Error("closing the broker failed", "error", err)
		errs = append(errs, err)
	} else {
		n.log.Info("okiba stopped", "data", n.cfg.Data)
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------------------
// The router

// ServeHTTP is the node's one router: guard, authentication, interface.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endWaitsAtShutdown(n.shutdown, http.HandlerFunc(n.serve)).ServeHTTP(w, r)
}

// endWaitsAtShutdown cancels, as soon as shutdown begins, the requests that wait
// rather than work: long polls, answered with no messages, so that one does not hold the
// shutdown for up to a minute, and the other members' raft streams into this node,
// which last until their sender ends them. Every other request runs to its end within
// the grace period. A receive cancelled while its delivery record is being committed
// answers 503 unavailable; its lease then simply expires.
func endWaitsAtShutdown(shutdown context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if nativeapi.LongPoll(r.Method, r.URL.Path) || sqs.LongPoll(r) || r.URL.Path == cluster.RaftStreamPath {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(shutdown, cancel)()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

func (n *Node) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &reply.Recorder{ResponseWriter: w}
	route := n.dispatch(sw, r)
	if route == "" {
		return // the native API observed it itself
	}
	if sw.Status == 0 {
		sw.Status = http.StatusOK
	}
	n.metrics.ObserveRequest(route, r.Method, sw.Status, time.Since(start))
}

// dispatch serves r and returns its route for metrics ("" when the native API, which
// counts and audits its own routes and its stream's frames, served it).
func (n *Node) dispatch(w *reply.Recorder, r *http.Request) string {
	if n.raft != nil && slices.Contains([]string{cluster.RaftPath, cluster.RaftStreamPath, cluster.JoinPath, cluster.SnapshotPath, cluster.PeersPath}, r.URL.Path) {
		// The members' own paths: with the cluster's authority, only over a member's
		// certificate (and always with the cluster secret's proof, which each checks).
		if err := n.clusterPeer(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return "cluster"
		}
	}
	if n.raft != nil && r.URL.Path == cluster.RaftPath {
		n.raft.Handler().ServeHTTP(w, r) // the nodes prove the cluster secret instead
		return "cluster"
	}
	if n.raft != nil && r.URL.Path == cluster.RaftStreamPath {
		n.raft.StreamHandler().ServeHTTP(w, r) // the other nodes' streams of messages
		return "cluster"
	}
	if n.raft != nil && r.URL.Path == cluster.PeersPath {
		n.raft.PeersHandler().ServeHTTP(w, r) // a node about to bootstrap asks
		return "cluster"
	}
	if n.raft != nil && r.URL.Path == cluster.SnapshotPath {
		n.raft.SnapshotHandler().ServeHTTP(w, r) // a member installing a snapshot
		return "cluster"
	}
	if n.raft != nil && r.URL.Path == cluster.JoinPath {
		n.serveJoin(w, r) // so does a node that joins
		return "cluster"
	}
	if n.guard.Serve(w, r) { // before credentials: preflights carry none
		return "cross-origin"
	}
	if tooLarge(w, r) {
		return "too-large"
	}
	if n.raft != nil && n.forward(w, r) {
		return "forwarded"
	}
	if n.sns != nil && n.sns.IsCertRequest(r) { // public, as a validator fetches it
		n.sns.ServeCert(w, r)
		return "sns-cert"
	}
	if n.sqs != nil && n.sqs.Match(r) {
		action := "sqs:" + sqs.ActionOf(r)
		if n.cfg.authOn() && !n.sqs.Authenticates() { // never open by mistake
			reply.Error(w, &api.Error{Code: api.CodeUnauthorized, Message: "the SQS API is off on this server: it requires authentication and its front verifies no signatures"})
			return "unauthorized"
		}
		ctx, rec := auth.WithRecorder(r.Context())
		r = r.WithContext(ctx)
		// A failed signature is answered only once the source's turn comes.
		authed, ok := n.sqs.Authenticate(&throttled{ResponseWriter: w, wait: func() { n.throttle.Wait(r.Context(), n.sources.Of(r)) }}, r)
		if !ok {
			n.auditAs(r, w.Status, nil, action)
			return "unauthorized"
		}
		n.sqs.ServeHTTP(w, authed)
		n.auditAs(authed, w.Status, rec.Decisions(), "sqs:"+sqs.ActionOf(authed)) // a form names its action in its body
		return "sqs"
	}
	p, ok := n.step.Authenticate(w, r)
	if !ok {
		n.auditAs(r, w.Status, nil, r.Method+" "+r.URL.Path)
		return "unauthorized"
	}
	r = r.WithContext(auth.With(r.Context(), p))
	if n.raft != nil && (r.URL.Path == MembersPath || strings.HasPrefix(r.URL.Path, MembersPath+"/")) {
		ctx, rec := auth.WithRecorder(r.Context())
		r = r.WithContext(ctx)
		n.serveMembers(w, r)
		n.auditAs(r, w.Status, rec.Decisions(), r.Method+" "+r.URL.Path)
		return "cluster-members"
	}
	if _, pattern := n.mux.Handler(r); pattern == "/" {
		n.native.Handler().ServeHTTP(w, r)
		return ""
	}
	ctx, rec := auth.WithRecorder(r.Context())
	r = r.WithContext(ctx)
	if n.raft != nil && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/ui/api/") {
		// The console's reads, as the native API's: never from a deposed leader's state.
		if err := n.readBarrier(r.Context()); err != nil {
			reply.Error(w, &api.Error{Code: api.CodeUnavailable, RetryAfter: api.Ptr(time.Second),
				Message: fmt.Sprintf("this node cannot confirm that it leads the cluster, so it answers no read: %v; retry", err)})
			return "unavailable"
		}
	}
	n.mux.ServeHTTP(w, r) // sets r.Pattern and the path's values
	n.auditAs(r, w.Status, rec.Decisions(), r.Method+" "+r.URL.Path)
	return r.Pattern
}

// tooLarge answers 413 to a request whose declared body is over what any interface
// reads, before anything reads it: net/http would otherwise answer "100 Continue" to a
// client that sent "Expect: 100-continue" and take in the whole body first.
func tooLarge(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength <= api.MaxRequestBody {
		return false
	}
	w.Header().Set("Connection", "close")
	reply.Error(w, &api.Error{Code: api.CodeRequestTooLarge, Message: fmt.Sprintf("request body of %d bytes is larger than %d bytes", r.ContentLength, api.MaxRequestBody)})
	return true
}

// throttled is a ResponseWriter that waits before its answer goes out: the SQS front
// writes its own refusals.
type throttled struct {
	http.ResponseWriter
	wait func()
	once sync.Once
}

func (t *throttled) WriteHeader(status int) {
	t.once.Do(t.wait)
	t.ResponseWriter.WriteHeader(status)
}

func (t *throttled) Write(b []byte) (int, error) {
	t.once.Do(t.wait)
	return t.ResponseWriter.Write(b)
}

// scrapers lets through to /metrics only principals that may scrape it: the metrics
// permission, or browse on everything.
func scrapers(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth.Require(r.Context(), access.Metrics, access.Resource{}); err != nil {
			reply.Error(w, service.ErrorOf(log, err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// audited is the native API's audit hook (nativeapi.Options.Audit).
func (n *Node) audited(r *http.Request, status int, decisions []auth.Decision) {
	n.auditAs(r, status, decisions, r.Method+" "+r.URL.Path)
}

// auditAs writes a request to the audit log if it was refused or was a management
// action (a check of manage or admin that passed).
func (n *Node) auditAs(r *http.Request, status int, decisions []auth.Decision, action string) {
	if status == 0 {
		status = http.StatusOK
	}
	var refused, done *auth.Decision
	for i := range decisions {
		d := &decisions[i]
		switch {
		case !d.Allowed && refused == nil:
			refused = d
		case d.Allowed && done == nil && (d.Permission == access.Manage || d.Permission == access.Admin):
			done = d
		}
	}
	unauthenticated := status == http.StatusUnauthorized || status == http.StatusForbidden && len(decisions) == 0
	if refused == nil && done == nil && !unauthenticated {
		return // the common case: nothing to write, and nothing computed
	}
	p, _ := auth.From(r.Context())
	e := audit.Event{Principal: p.Name, Source: n.sources.Of(r), Action: action, Status: status}
	if p.Name != "" {
		e.Method = p.Method.String()
	}
	switch {
	case refused != nil:
		e.Permission, e.Resource, e.Outcome = refused.Permission.String(), refused.Resource.String(), "forbidden"
		n.audit.Refused(e)
	case unauthenticated:
		e.Outcome = "unauthenticated"
		if status == http.StatusForbidden {
			e.Outcome = "forbidden"
		}
		n.audit.Refused(e)
	default:
		e.Permission, e.Resource, e.Outcome = done.Permission.String(), done.Resource.String(), "ok"
		if status >= 400 {
			e.Outcome = "failed"
		}
		n.audit.Action(e)
	}
}

// openToBrowsers reports the requests that any page may make by any name, as they reveal
// and change nothing: /healthz, and the console's sign-in page and assets (the sign-in
// form checks its origin itself). A request for the SQS API is never one of them,
// whatever its path.
func (n *Node) openToBrowsers(r *http.Request) bool {
	if n.sqs != nil && n.sqs.Match(r) {
		return false
	}
	return r.URL.Path == "/healthz" || (n.console != nil && n.console.Public(r)) || (n.sns != nil && n.sns.IsCertRequest(r))
}

// refuseBrowser answers a request the guard refused, in the shape of the interface it
// was addressed to.
func (n *Node) refuseBrowser(w http.ResponseWriter, r *http.Request, err error) {
	n.log.Debug("browser request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "error", err)
	n.audit.Refused(audit.Event{Source: n.sources.Of(r), Action: r.Method + " " + r.URL.Path, Resource: "browser: " + err.Error(), Status: http.StatusForbidden, Outcome: "forbidden"})
	if n.sqs != nil && n.sqs.Match(r) {
		n.sqs.Forbid(w, r, err.Error())
		return
	}
	reply.Error(w, service.ErrorOf(n.log, err))
}
