package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/gcpace"
	"github.com/okiba/okiba/metrics"
	"github.com/okiba/okiba/server"
	"github.com/okiba/okiba/sqs"
	"github.com/okiba/okiba/wal"
	"github.com/okiba/okiba/web"
)

const serveUsage = `
Usage: okiba serve [--addr HOST:PORT] [--data DIR] [flags]

Runs a broker on a data directory and serves the native HTTP API on --addr, and on the
same address the Amazon SQS-compatible API (JSON protocol; docs/sqs.md), unless --sqs=false,
Prometheus metrics at /metrics, and the web console at / (docs/console.md), unless
--console=false. With a token, /metrics needs it like the API, and browsers sign in to
the console with it (a session cookie).

The data directory is locked: a second okiba on the same directory fails with "in use".
At start-up okiba recovers from the latest checkpoint and the log after it, then logs one
line with the recovery summary and the listening URL. Logs go to stderr.

Without authentication okiba listens only on loopback. To bind any other address give a
bearer token (--auth-token-file FILE, env OKIBA_AUTH_TOKEN, or --auth-token TOKEN, which
other users of the machine can see in the process list) or say --insecure explicitly.
SQS clients sign their requests (SigV4) instead of sending the token: with a token, they
must sign with an access key from --sqs-credentials-file (lines "ACCESS_KEY_ID SECRET"),
or, without that file, with access key id "okiba" and the token as the secret key.
Without a token, the SQS API accepts any credentials.

On SIGINT or SIGTERM okiba stops accepting connections, answers waiting long polls at
once (with no messages), lets other requests finish within --shutdown-grace, and closes
the broker, which writes a final checkpoint so the next start is quick. A second signal
exits at once; nothing acknowledged is lost either way.`

const serveExamples = `
okiba serve
okiba serve --addr 127.0.0.1:8080 --data /var/lib/okiba --log-level debug
OKIBA_AUTH_TOKEN=s3cret okiba serve --addr 0.0.0.0:7070
okiba serve --addr 0.0.0.0:7070 --auth-token-file /etc/okiba/token
okiba serve --addr 10.0.0.5:7070 --insecure   # no authentication: a trusted network only
okiba serve --auth-token-file /etc/okiba/token --sqs-credentials-file /etc/okiba/sqs-keys
aws sqs list-queues --endpoint-url http://127.0.0.1:7070   # any credentials without a token`

type serveCmd struct{ app *app }

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.flags("serve", serveUsage, serveExamples)
	addr := f.String("addr", "", "listen on `HOST:PORT` (default 127.0.0.1:7070; env OKIBA_ADDR); port 0 picks a free port")
	data := f.String("data", "", "data directory `DIR`, created if missing (default ./okiba-data; env OKIBA_DATA)")
	token := f.String("auth-token", "", "require this bearer `TOKEN` on /v1 (env OKIBA_AUTH_TOKEN)")
	tokenFile := f.String("auth-token-file", "", "read the bearer token from `FILE` (surrounding whitespace is ignored)")
	insecure := f.Bool("insecure", false, "allow a non-loopback --addr without authentication")
	level := f.String("log-level", "", "log `LEVEL`: debug, info, warn or error (default info; env OKIBA_LOG_LEVEL)")
	grace := f.Duration("shutdown-grace", 30*time.Second, "how long requests in progress may take to finish at shutdown")
	sqsOn := f.Bool("sqs", true, "serve the SQS-compatible API on the same address")
	consoleOn := f.Bool("console", true, "serve the web console at / (docs/console.md)")
	sqsKeys := f.String("sqs-credentials-file", "", "SQS access keys, one \"ACCESS_KEY_ID SECRET\" per line, from `FILE`; requests must then be signed by one of them")
	sqsRegion := f.String("sqs-region", "", "`REGION` in SQS queue ARNs (default us-east-1; env OKIBA_SQS_REGION)")
	sqsAccount := f.String("sqs-account-id", "", "account `ID` in SQS queue URLs and ARNs (default 000000000000; env OKIBA_SQS_ACCOUNT_ID)")
	sqsBase := f.String("sqs-base-url", "", "scheme and host of SQS queue `URL`s, e.g. https://sqs.example.com (default: those each request came in with)")
	var segment, ckpt, cache byteSize
	f.Var(&segment, "segment-size", "log segment file `SIZE` (default 64MiB, at least 2MiB)")
	f.Var(&ckpt, "checkpoint-bytes", "take a checkpoint after this `SIZE` of log; bounds replay at start-up (default 128MiB; more with a deep backlog, docs/operations.md)")
	f.Var(&cache, "cache-bytes", "`SIZE` of message bodies kept in memory; the rest are read from the log (default 256MiB)")
	maxQueues := f.Int("max-queues", 0, "most queues the broker holds (default 10000)")
	maxInFlight := f.Int("max-in-flight", 0, "most leased messages per queue (default 120000, as SQS)")
	var minFree, gcHeadroom byteSize
	f.Var(&gcHeadroom, "gc-headroom", "let the heap grow by this `SIZE` between garbage collections, or by half of what is live once that is more (default 256MiB; \"off\" keeps Go's default, as does setting GOGC)")
	f.Var(&minFree, "min-free-disk", "refuse sends while the data directory's disk has less free `SIZE` (default twice --segment-size; \"off\" turns the check off)")
	if _, err := f.parseArgs(args, 0, 0, "[flags]"); err != nil {
		return err
	}

	var lv slog.Level
	if err := lv.UnmarshalText([]byte(a.pick(*level, "OKIBA_LOG_LEVEL", "info"))); err != nil {
		return f.fail("--log-level must be debug, info, warn or error, got %q", *level)
	}
	logger := slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: lv}))

	listen := a.pick(*addr, "OKIBA_ADDR", "127.0.0.1:7070")
	loopback, err := isLoopback(listen)
	if err != nil {
		return f.fail("--addr: %v", err)
	}
	auth := *token
	switch {
	case *token != "" && *tokenFile != "":
		return f.fail("give --auth-token or --auth-token-file, not both")
	case *tokenFile != "":
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("read --auth-token-file: %w", err)
		}
		if auth = strings.TrimSpace(string(b)); auth == "" {
			return fmt.Errorf("--auth-token-file %s is empty", *tokenFile)
		}
	case auth == "":
		auth = a.env("OKIBA_AUTH_TOKEN")
	}
	switch {
	case auth != "":
		logger.Info("authentication on: every path but /healthz requires the bearer token (or a console session)")
	case !loopback && !*insecure:
		return f.fail("refusing to listen on %s without authentication: give --auth-token-file FILE "+
			"(or OKIBA_AUTH_TOKEN, or --auth-token), or pass --insecure to serve it unauthenticated", listen)
	case !loopback:
		logger.Warn("authentication off on a non-loopback address (--insecure): anyone who can reach it can read, send and delete messages", "addr", listen)
	}

	var sqsOpts *sqs.Options
	if *sqsOn {
		creds := map[string]string{}
		if *sqsKeys != "" {
			if creds, err = readSQSCredentials(*sqsKeys); err != nil {
				return fmt.Errorf("--sqs-credentials-file: %w", err)
			}
		} else if auth != "" {
			creds["okiba"] = auth
		}
		sqsOpts = &sqs.Options{
			Region:      a.pick(*sqsRegion, "OKIBA_SQS_REGION", sqs.DefaultRegion),
			AccountID:   a.pick(*sqsAccount, "OKIBA_SQS_ACCOUNT_ID", sqs.DefaultAccountID),
			BaseURL:     *sqsBase,
			Credentials: creds,
			Logger:      logger,
		}
	}
	dir := a.pick(*data, "OKIBA_DATA", "okiba-data")
	m := metrics.New(metrics.Options{})
	b, err := broker.Open(broker.Config{
		Dir: dir, Logger: logger, Observer: m,
		SegmentSize: int64(segment), CheckpointBytes: int64(ckpt), CacheBytes: int64(cache),
		MaxQueues: *maxQueues, MaxInFlight: *maxInFlight, MinFreeBytes: int64(minFree),
	})
	var ce *wal.CorruptionError
	if errors.As(err, &ce) && ce.Salvageable {
		return fmt.Errorf("cannot open the broker: %w\n"+
			"The damage is in the last batch of the log, which okiba never discards by itself. "+
			"To start without those records (okiba salvage keeps a copy of what it cuts), run:\n  okiba salvage %s", err, dir)
	}
	if err != nil {
		return fmt.Errorf("cannot open the broker: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		b.Close()
		return fmt.Errorf("cannot listen: %w", err)
	}
	if gcHeadroom >= 0 && a.env("GOGC") == "" {
		// The index of a deep backlog is most of the heap: Go's default pace would hold
		// twice it (internal/gcpace).
		pace, stopPace := context.WithCancel(context.Background())
		paced := make(chan struct{})
		go func() {
			defer close(paced)
			gcpace.Run(pace, gcpace.Config{MinHeadroom: int64(gcHeadroom)})
		}()
		defer func() { stopPace(); <-paced }()
	}
	rec := b.Recovery()
	logger.Info("okiba serving", "url", "http://"+ln.Addr().String(), "data", dir,
		"queues", rec.Queues, "messages", rec.Messages, "records_replayed", rec.Records,
		"from_checkpoint", rec.Checkpoint, "recovery_time", rec.Duration.Round(time.Millisecond))

	stopLog := context.AfterFunc(ctx, func() {
		logger.Info("shutting down: no new connections; finishing requests in progress", "grace", *grace)
	})
	defer stopLog()
	m.Watch(b)
	srvOpts := server.Options{AuthToken: auth, Logger: logger, Observe: m.ObserveRequest}
	if sqsOpts != nil {
		front := sqs.New(b, *sqsOpts)
		srvOpts.SQS = front
		logger.Info("SQS API on the same address (JSON protocol)", "endpoint_url", "http://"+ln.Addr().String(),
			"signatures_verified", front.Authenticates(), "region", sqsOpts.Region, "account_id", sqsOpts.AccountID)
	}
	var console *web.Console
	if *consoleOn {
		if console, err = web.New(b, web.Options{AuthToken: auth, Logger: logger}); err != nil {
			ln.Close()
			b.Close()
			return err
		}
		srvOpts.Browsers = console
	}
	srv := server.New(b, srvOpts)
	srv.Handle("/metrics", m.Handler())
	logger.Info("metrics for Prometheus", "url", "http://"+ln.Addr().String()+"/metrics", "bearer_token", auth != "")
	if console != nil {
		console.Register(srv)
		signIn := "open"
		if auth != "" {
			signIn = "sign in with the token"
		}
		logger.Info("console", "url", "http://"+ln.Addr().String()+"/", "access", signIn)
	}
	// Streams (docs/api.md) are connections http.Server gave up when they upgraded:
	// they end alongside it, with the same grace, and end their long polls the same way.
	streamsClosed := make(chan error, 1)
	closeStreams := func() {
		gctx, cancel := context.WithTimeout(context.Background(), *grace)
		defer cancel()
		streamsClosed <- srv.CloseStreams(gctx)
	}
	stopStreams := context.AfterFunc(ctx, closeStreams)
	serveErr := server.Serve(ctx, ln, endLongPolls(ctx, srv.Handler()), logger, *grace)
	if stopStreams() { // Serve failed before shutdown began
		closeStreams()
	}
	if err := <-streamsClosed; errors.Is(err, context.DeadlineExceeded) {
		serveErr = cmp.Or(serveErr, err)
	}
	if errors.Is(serveErr, context.DeadlineExceeded) {
		logger.Warn("grace period over: requests still running are cut off", "grace", *grace)
		serveErr = nil
	}
	if console != nil {
		console.Close() // ends playground runs and deletes their queues
	}
	closeErr := b.Close()
	if closeErr != nil {
		logger.Error("closing the broker failed", "error", closeErr)
	} else {
		logger.Info("okiba stopped", "data", dir)
	}
	return errors.Join(serveErr, closeErr)
}

// isLoopback reports whether a listen address is reachable only from this machine.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%q is not HOST:PORT", addr)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// endLongPolls answers waiting receives (with no messages) as soon as shutdown begins,
// so that a long poll does not hold the shutdown for up to a minute; every other request
// runs to its end within the grace period. A receive cancelled while its delivery record
// is being committed answers 503 unavailable; its lease then simply expires.
func endLongPolls(shutdown context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/receive") || r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage") {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(shutdown, cancel)()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// readSQSCredentials reads SQS access keys: one "ACCESS_KEY_ID SECRET" (or
// "ACCESS_KEY_ID:SECRET") per line; blank lines and lines starting with # are skipped.
func readSQSCredentials(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	creds := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(strings.Replace(line, ":", " ", 1))
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"ACCESS_KEY_ID SECRET\"", path, i+1)
		}
		creds[fields[0]] = fields[1]
	}
	if len(creds) == 0 {
		return nil, fmt.Errorf("%s has no access keys", path)
	}
	return creds, nil
}
