package main

import (
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
	"github.com/okiba/okiba/server"
)

const serveUsage = `
Usage: okiba serve [--addr HOST:PORT] [--data DIR] [flags]

Runs a broker on a data directory and serves the native HTTP API on --addr.

The data directory is locked: a second okiba on the same directory fails with "in use".
At start-up okiba recovers from the latest checkpoint and the log after it, then logs one
line with the recovery summary and the listening URL. Logs go to stderr.

Without authentication okiba listens only on loopback. To bind any other address give a
bearer token (--auth-token-file FILE, env OKIBA_AUTH_TOKEN, or --auth-token TOKEN, which
other users of the machine can see in the process list) or say --insecure explicitly.

On SIGINT or SIGTERM okiba stops accepting connections, answers waiting long polls at
once (with no messages), lets other requests finish within --shutdown-grace, and closes
the broker, which writes a final checkpoint so the next start is quick. A second signal
exits at once; nothing acknowledged is lost either way.`

const serveExamples = `
okiba serve
okiba serve --addr 127.0.0.1:8080 --data /var/lib/okiba --log-level debug
OKIBA_AUTH_TOKEN=s3cret okiba serve --addr 0.0.0.0:7070
okiba serve --addr 0.0.0.0:7070 --auth-token-file /etc/okiba/token
okiba serve --addr 10.0.0.5:7070 --insecure   # no authentication: a trusted network only`

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
	var segment, ckpt, cache byteSize
	f.Var(&segment, "segment-size", "log segment file `SIZE` (default 64MiB, at least 2MiB)")
	f.Var(&ckpt, "checkpoint-bytes", "take a checkpoint after this `SIZE` of log; bounds replay at start-up (default 64MiB)")
	f.Var(&cache, "cache-bytes", "`SIZE` of message bodies kept in memory; the rest are read from the log (default 256MiB)")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := f.args(pos, 0, 0, "[flags]"); err != nil {
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
		logger.Info("authentication on: /v1 requires the bearer token")
	case !loopback && !*insecure:
		return f.fail("refusing to listen on %s without authentication: give --auth-token-file FILE "+
			"(or OKIBA_AUTH_TOKEN, or --auth-token), or pass --insecure to serve it unauthenticated", listen)
	case !loopback:
		logger.Warn("authentication off on a non-loopback address (--insecure): anyone who can reach it can read, send and delete messages", "addr", listen)
	}

	dir := a.pick(*data, "OKIBA_DATA", "okiba-data")
	b, err := broker.Open(broker.Config{
		Dir: dir, Logger: logger,
		SegmentSize: int64(segment), CheckpointBytes: int64(ckpt), CacheBytes: int64(cache),
	})
	if err != nil {
		return fmt.Errorf("cannot open the broker: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		b.Close()
		return fmt.Errorf("cannot listen: %w", err)
	}
	rec := b.Recovery()
	logger.Info("okiba serving", "url", "http://"+ln.Addr().String(), "data", dir,
		"queues", rec.Queues, "messages", rec.Messages, "records_replayed", rec.Records,
		"from_checkpoint", rec.Checkpoint, "recovery_time", rec.Duration.Round(time.Millisecond))

	stopLog := context.AfterFunc(ctx, func() {
		logger.Info("shutting down: no new connections; finishing requests in progress", "grace", *grace)
	})
	defer stopLog()
	srv := server.New(b, server.Options{AuthToken: auth, Logger: logger})
	serveErr := server.Serve(ctx, ln, endLongPolls(ctx, srv.Handler()), logger, *grace)
	if errors.Is(serveErr, context.DeadlineExceeded) {
		logger.Warn("grace period over: requests still running are cut off", "grace", *grace)
		serveErr = nil
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
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/receive") {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(shutdown, cancel)()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}
