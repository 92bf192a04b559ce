package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/crossorigin"
	"github.com/okiba/okiba/internal/gcpace"
	"github.com/okiba/okiba/internal/node"
	"github.com/okiba/okiba/internal/payload"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/wal"
)

const serveUsage = `
Usage: okiba serve [--config FILE] [--addr HOST:PORT] [--data DIR] [flags]

Settings come from a JSON configuration file (--config FILE, or OKIBA_CONFIG; every flag
has a key, docs/operations.md), then the environment (OKIBA_ADDR, OKIBA_DATA,
OKIBA_AUTH_TOKEN, OKIBA_LOG_LEVEL, OKIBA_LOG_FORMAT, OKIBA_SQS_REGION, OKIBA_SQS_ACCOUNT_ID,
OKIBA_CORS_ORIGINS, OKIBA_ALLOWED_HOSTS, OKIBA_AUDIT_LOG, OKIBA_TRUSTED_PROXIES,
OKIBA_TLS_CERT, OKIBA_TLS_KEY, OKIBA_TLS_CLIENT_CA), then flags: a flag wins over the
environment, and the environment over the file.

Runs a broker on a data directory and serves the native HTTP API on --addr, and on the
same address the Amazon SQS-compatible API (JSON and query protocols; docs/sqs.md), unless --sqs=false,
Prometheus metrics at /metrics, and the web console at / (docs/console.md), unless
--console=false.

Authentication is on when the server has a principal in its configuration: the
--auth-token is the secret of the principal "admin", which may do everything; the
configuration file declares more ("principals"), and "okiba principal create" makes them
in the log (docs/security.md). Each principal's secret is a bearer token for the native
API and the stream, its name and secret an SQS access key, and it signs in to the
console; its grants say what it may do (send, receive, browse, manage on queue:… and
topic:… patterns; admin; metrics, which /metrics needs). Secrets are at least 22
characters. Failed sign-ins are answered more slowly per source address, and every
management action and refusal goes to the audit log (the log, and --audit-log FILE).

The data directory is locked: a second okiba on the same directory fails with "in use".
At start-up okiba recovers from the latest checkpoint and the log after it, then logs one
line with the recovery summary, the version and the listening URL. Logs go to stderr, as
key=value lines or, with --log-format json, one JSON object a line.

Without authentication okiba listens only on loopback. To bind any other address give a
token (--auth-token-file FILE, env OKIBA_AUTH_TOKEN, or --auth-token TOKEN, which other
users of the machine can see in the process list), declare principals, or say --insecure
explicitly. SQS clients sign their requests (SigV4) with a principal's name as the access
key id ("admin" with the token) and its secret; --sqs-credentials-file (lines
"ACCESS_KEY_ID SECRET") declares more, each allowed everything. Without authentication the
SQS API accepts any credentials.

With --tls-cert FILE and --tls-key FILE the port speaks TLS 1.2 or later, and only TLS,
for every interface (the URL is then https://…; clients of a private CA trust it with
okiba --ca-cert FILE, or client.Options.TLS). TLS does not replace authentication: a
non-loopback --addr still needs it. --tls-client-ca FILE also demands of every
connection a client certificate issued by a CA in FILE; requests over it still prove a
principal. On SIGHUP okiba reads the three files again: new connections get the new
certificate, open ones keep theirs, and files that do not make a valid pair are logged
and leave the previous certificate serving. Without TLS, SIGHUP ends okiba as before.

Any web page the user visits can send requests to the broker, so okiba refuses those that
a browser marks as coming from a page of another origin (Sec-Fetch-Site, Origin), on
every path but /healthz and the console's sign-in page: 403 forbidden (AccessDenied for
SQS). List the origins of browser applications that may call it with --cors-origins;
they get CORS answers. Without a token, okiba also answers only requests that name it by
an IP address, localhost (or a name under .localhost), this machine's host name, the host
of --addr or a name in --allowed-hosts, so that a page cannot reach it through DNS
rebinding. Programs that send no browser headers (the Go client, SDKs, curl) are not
affected by the first rule. docs/security.md says more.

On SIGINT or SIGTERM okiba stops accepting connections, answers waiting long polls at
once (with no messages), lets other requests finish within --shutdown-grace, and closes
the broker, which writes a final checkpoint so the next start is quick. A second signal
exits at once; nothing acknowledged is lost either way.`

const serveExamples = `
okiba serve
okiba serve --addr 127.0.0.1:8080 --data /var/lib/okiba --log-level debug
OKIBA_AUTH_TOKEN=$(okiba token) okiba serve --addr 0.0.0.0:7070
okiba serve --addr 0.0.0.0:7070 --auth-token-file /etc/okiba/token
okiba serve --addr 10.0.0.5:7070 --insecure   # no authentication: a trusted network only
okiba serve --auth-token-file /etc/okiba/token --sqs-credentials-file /etc/okiba/sqs-keys
aws sqs list-queues --endpoint-url http://127.0.0.1:7070   # any credentials without a token
okiba serve --cors-origins https://app.example.com,http://localhost:5173   # browser applications
okiba serve --addr 10.0.0.5:7070 --insecure --allowed-hosts broker.lan,*.broker.lan
okiba serve --addr 0.0.0.0:7070 --auth-token-file /etc/okiba/token --tls-cert /etc/okiba/tls.crt --tls-key /etc/okiba/tls.key
kill -HUP $(pidof okiba)   # after replacing the certificate files: reload them`

type serveCmd struct{ app *app }

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.flags("serve", serveUsage, serveExamples)
	configFile := f.String("config", "", "read settings from the JSON `FILE` first (env OKIBA_CONFIG); the environment and flags override it")
	addr := f.String("addr", "", "listen on `HOST:PORT` (default 127.0.0.1:7070; env OKIBA_ADDR); port 0 picks a free port")
	data := f.String("data", "", "data directory `DIR`, created if missing (default ./okiba-data; env OKIBA_DATA)")
	token := f.String("auth-token", "", "turn authentication on, with this `TOKEN` as the secret of the principal admin (at least 22 characters; `okiba token` makes one; env OKIBA_AUTH_TOKEN)")
	tokenFile := f.String("auth-token-file", "", "read the bearer token from `FILE` (surrounding whitespace is ignored)")
	insecure := f.Bool("insecure", false, "allow a non-loopback --addr without authentication")
	level := f.String("log-level", "", "log `LEVEL`: debug, info, warn or error (default info; env OKIBA_LOG_LEVEL)")
	logFormat := f.String("log-format", "", "log `FORMAT`: text (key=value lines) or json (an object a line, for journald and container log collectors) (default text; env OKIBA_LOG_FORMAT)")
	grace := f.Duration("shutdown-grace", node.DefaultShutdownGrace, "how long requests in progress may take to finish at shutdown")
	sqsOn := f.Bool("sqs", true, "serve the SQS-compatible API on the same address")
	consoleOn := f.Bool("console", true, "serve the web console at / (docs/console.md)")
	sqsKeys := f.String("sqs-credentials-file", "", "SQS access keys, one \"ACCESS_KEY_ID SECRET\" per line, from `FILE`; requests must then be signed by one of them")
	sqsRegion := f.String("sqs-region", "", "`REGION` in SQS queue ARNs, and the region signatures must name (default us-east-1; env OKIBA_SQS_REGION)")
	sqsAccount := f.String("sqs-account-id", "", "account `ID` in SQS queue URLs and ARNs (default 000000000000; env OKIBA_SQS_ACCOUNT_ID)")
	sqsBase := f.String("sqs-base-url", "", "scheme and host of SQS queue `URL`s, e.g. https://sqs.example.com (default: those each request came in with)")
	corsOrigins := f.String("cors-origins", "", "comma-separated `ORIGINS` (scheme://host[:port]) of browser applications that may call the API; other pages' requests are refused (env OKIBA_CORS_ORIGINS)")
	auditLog := f.String("audit-log", "", "also write the audit log (management actions, refusals) as JSON lines to `FILE`, created 0600 (env OKIBA_AUDIT_LOG)")
	proxies := f.String("trusted-proxies", "", "comma-separated `ADDRESSES` or CIDR prefixes of reverse proxies whose X-Forwarded-For names the client, for the audit log and the throttling of failed sign-ins (env OKIBA_TRUSTED_PROXIES)")
	allowedHosts := f.String("allowed-hosts", "", "comma-separated host `NAMES` that requests may address without a token, besides localhost, this machine's name and the --addr host; *.example.com stands for every name under it (env OKIBA_ALLOWED_HOSTS)")
	var segment, ckpt, cache byteSize
	f.Var(&segment, "segment-size", fmt.Sprintf("log segment file `SIZE` (default %s, at least %s)", sizeString(wal.DefaultSegmentSize), sizeString(broker.MinSegmentSize)))
	f.Var(&ckpt, "checkpoint-bytes", fmt.Sprintf("take a checkpoint after this `SIZE` of log; bounds replay at start-up (default %s; more with a deep backlog, docs/operations.md)", sizeString(broker.DefaultCheckpointBytes)))
	f.Var(&cache, "cache-bytes", fmt.Sprintf("`SIZE` of message bodies kept in memory; the rest are read from the log (default %s)", sizeString(payload.DefaultCacheBytes)))
	maxQueues := f.Int("max-queues", 0, fmt.Sprintf("most queues the broker holds (default %d)", queue.DefaultMaxQueues))
	maxInFlight := f.Int("max-in-flight", 0, fmt.Sprintf("most leased messages per queue (default %d, as SQS)", queue.DefaultMaxInFlight))
	maxDedup := f.Int("max-dedup-ids", 0, fmt.Sprintf("most dedup ids every queue remembers together, about 240 bytes each (default %d)", queue.DefaultDedupTotal))
	tlsCert := f.String("tls-cert", "", "serve TLS only, with the certificate chain in `FILE` (PEM, the server's first; env OKIBA_TLS_CERT); needs --tls-key; SIGHUP reloads it")
	tlsKey := f.String("tls-key", "", "the private key of --tls-cert, in `FILE` (PEM; env OKIBA_TLS_KEY)")
	tlsClientCA := f.String("tls-client-ca", "", "require of every connection a client certificate issued by a CA in `FILE` (PEM; env OKIBA_TLS_CLIENT_CA); requests still authenticate")
	nodeName := f.String("node", "", "this node's `NAME` in a replicated cluster, one of --peers (env OKIBA_NODE; docs/cluster.md)")
	peers := f.String("peers", "", "every founding member of the cluster, this one included, as comma-separated `NAME=URL` pairs: each node's own port (env OKIBA_PEERS)")
	join := f.String("join", "", "join the running cluster a member at `URL` belongs to, on an empty data directory (as a learner, promoted once caught up); --peers then names only this node (env OKIBA_JOIN)")
	clusterCA := f.String("cluster-ca", "", "authenticate the cluster's members to each other by mutual TLS: the authority that issued their certificates, in `FILE` (PEM; env OKIBA_CLUSTER_CA); needs --tls-cert/--tls-key and https peers")
	clusterSecret := f.String("cluster-secret-file", "", "the cluster's secret in `FILE`, the same on every member, at least 22 characters (env OKIBA_CLUSTER_SECRET gives it itself)")
	printConfig := f.Bool("print-config", false, "print the effective configuration as JSON, secrets redacted, and exit")
	var minFree, gcHeadroom byteSize
	f.Var(&gcHeadroom, "gc-headroom", fmt.Sprintf("let the heap grow by this `SIZE` between garbage collections, or by half of what is live once that is more (default %s; \"off\" keeps Go's default, as does setting GOGC)", sizeString(gcpace.DefaultMinHeadroom)))
	var scrubEvery node.Every
	var scrubRate byteSize
	f.Var(&scrubEvery, "scrub-every", "read back the checkpoints, live bodies and log every `PERIOD`, checking every checksum (default 24h; \"off\" turns the scrub off)")
	f.Var(&scrubRate, "scrub-rate", "bound a scrub's reads to `SIZE` a second (default 20MB, 20000000 bytes; \"off\" lifts the bound)")
	f.Var(&minFree, "min-free-disk", "refuse a send that would leave the data directory's disk less free `SIZE` (default twice --segment-size, raised to a segment more than the reserve kept for receives, acks and the next checkpoint; \"off\" turns the check off)")
	if _, err := f.parseArgs(args, 0, 0, "[flags]"); err != nil {
		return err
	}

	// The file, then the environment, then flags.
	var cfg node.Config
	if path := a.pick(*configFile, "OKIBA_CONFIG", ""); path != "" {
		var err error
		if cfg, err = node.LoadFile(path); err != nil {
			return err
		}
	}
	env := func(name string, dst *string) {
		if v := a.env(name); v != "" {
			*dst = v
		}
	}
	env("OKIBA_ADDR", &cfg.Addr)
	env("OKIBA_DATA", &cfg.Data)
	env("OKIBA_LOG_LEVEL", &cfg.LogLevel)
	env("OKIBA_LOG_FORMAT", &cfg.LogFormat)
	env("OKIBA_SQS_REGION", &cfg.SQS.Region)
	env("OKIBA_SQS_ACCOUNT_ID", &cfg.SQS.AccountID)
	env("OKIBA_AUDIT_LOG", &cfg.AuditLog)
	env("OKIBA_TLS_CERT", &cfg.TLS.CertFile)
	env("OKIBA_TLS_KEY", &cfg.TLS.KeyFile)
	env("OKIBA_TLS_CLIENT_CA", &cfg.TLS.ClientCAFile)
	env("OKIBA_CLUSTER_CA", &cfg.TLS.ClusterCAFile)
	if v := a.env("OKIBA_AUTH_TOKEN"); v != "" {
		cfg.AuthToken, cfg.AuthTokenFile = v, ""
	}
	env("OKIBA_NODE", &cfg.Cluster.Node)
	env("OKIBA_JOIN", &cfg.Cluster.Join)
	if v := a.env("OKIBA_CLUSTER_SECRET"); v != "" {
		cfg.Cluster.Secret, cfg.Cluster.SecretFile = v, ""
	}
	// The lists are checked here, to name the flag (and its variable) in the error; the
	// node checks those from a file under their keys.
	for _, l := range []struct {
		flag, env, val string
		dst            *[]string
		parse          func(string) (string, error)
	}{
		{"cors-origins", "OKIBA_CORS_ORIGINS", *corsOrigins, &cfg.CORSOrigins, crossorigin.ParseOrigin},
		{"peers", "OKIBA_PEERS", *peers, &cfg.Cluster.Peers, func(v string) (string, error) { return v, nil }},
		{"allowed-hosts", "OKIBA_ALLOWED_HOSTS", *allowedHosts, &cfg.AllowedHosts, crossorigin.ParseHost},
		{"trusted-proxies", "OKIBA_TRUSTED_PROXIES", *proxies, &cfg.TrustedProxies, func(v string) (string, error) {
			_, err := auth.ParseProxies([]string{v})
			return v, err
		}},
	} {
		v := a.pick(l.val, l.env, "")
		if v == "" {
			continue
		}
		list, err := commaList(v, l.parse)
		if err != nil {
			return f.fail("--%s: %v", l.flag, err)
		}
		*l.dst = list
	}
	given := f.given()
	if *token != "" && *tokenFile != "" {
		return f.fail("give --auth-token or --auth-token-file, not both")
	}
	for name, apply := range map[string]func(){
		"addr":                 func() { cfg.Addr = *addr },
		"data":                 func() { cfg.Data = *data },
		"auth-token":           func() { cfg.AuthToken, cfg.AuthTokenFile = *token, "" },
		"auth-token-file":      func() { cfg.AuthTokenFile, cfg.AuthToken = *tokenFile, "" },
		"insecure":             func() { cfg.Insecure = *insecure },
		"audit-log":            func() { cfg.AuditLog = *auditLog },
		"log-level":            func() { cfg.LogLevel = *level },
		"log-format":           func() { cfg.LogFormat = *logFormat },
		"shutdown-grace":       func() { cfg.ShutdownGrace = node.Duration(*grace) },
		"sqs":                  func() { cfg.SQS.Disabled = !*sqsOn },
		"console":              func() { cfg.Console.Disabled = !*consoleOn },
		"sqs-credentials-file": func() { cfg.SQS.CredentialsFile = *sqsKeys },
		"sqs-region":           func() { cfg.SQS.Region = *sqsRegion },
		"sqs-account-id":       func() { cfg.SQS.AccountID = *sqsAccount },
		"sqs-base-url":         func() { cfg.SQS.BaseURL = *sqsBase },
		"segment-size":         func() { cfg.Storage.SegmentSize = node.Size(segment) },
		"checkpoint-bytes":     func() { cfg.Storage.CheckpointBytes = node.Size(ckpt) },
		"cache-bytes":          func() { cfg.Storage.CacheBytes = node.Size(cache) },
		"min-free-disk":        func() { cfg.Storage.MinFreeDisk = node.Size(minFree) },
		"gc-headroom":          func() { cfg.Storage.GCHeadroom = node.Size(gcHeadroom) },
		"scrub-every":          func() { cfg.Storage.ScrubEvery = scrubEvery },
		"scrub-rate":           func() { cfg.Storage.ScrubRate = node.Size(scrubRate) },
		"max-queues":           func() { cfg.Limits.MaxQueues = *maxQueues },
		"max-in-flight":        func() { cfg.Limits.MaxInFlight = *maxInFlight },
		"max-dedup-ids":        func() { cfg.Limits.MaxDedupIDs = *maxDedup },
		"tls-cert":             func() { cfg.TLS.CertFile = *tlsCert },
		"tls-key":              func() { cfg.TLS.KeyFile = *tlsKey },
		"tls-client-ca":        func() { cfg.TLS.ClientCAFile = *tlsClientCA },
		"cluster-ca":           func() { cfg.TLS.ClusterCAFile = *clusterCA },
		"node":                 func() { cfg.Cluster.Node = *nodeName },
		"join":                 func() { cfg.Cluster.Join = *join },
		"cluster-secret-file":  func() { cfg.Cluster.SecretFile, cfg.Cluster.Secret = *clusterSecret, "" },
	} {
		if given[name] {
			apply()
		}
	}
	if a.env("GOGC") != "" {
		cfg.Storage.GCHeadroom = node.SizeOff // GOGC set: the operator chose the pace
	}
	if *printConfig {
		enc := json.NewEncoder(a.Stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(cfg.Effective().Redacted()) // keys left out have their defaults
	}

	if runtime.GOOS == "windows" {
		// The data directory cannot be locked here (internal/vfs), and two brokers on one
		// directory would lose messages: refused rather than run unprotected.
		return errors.New("okiba serve does not run on Windows: it cannot lock its data directory there. " +
			"Run the broker on Linux or macOS (or in WSL 2, or the container image) and use this okiba as its client, with --server URL")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(cmp.Or(cfg.LogLevel, "info"))); err != nil {
		return f.fail("--log-level must be debug, info, warn or error, got %q", cfg.LogLevel)
	}
	var logger *slog.Logger
	switch cfg.LogFormat {
	case "", "text":
		logger = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: lv}))
	case "json":
		logger = slog.New(slog.NewJSONHandler(a.Stderr, &slog.HandlerOptions{Level: lv}))
	default:
		return f.fail("--log-format must be text or json, got %q", cfg.LogFormat)
	}
	var hup chan os.Signal
	if cfg.TLS.CertFile != "" || cfg.TLS.KeyFile != "" {
		// Taken before the node serves, so that a SIGHUP never finds the signal's default
		// action (the end of the process) once the start-up line is out.
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	n, err := node.Open(ctx, cfg, node.Runtime{Logger: logger})
	if err != nil {
		var ce *node.ConfigError
		var ee *node.ExposedError
		var corrupt *wal.CorruptionError
		switch {
		case errors.As(err, &corrupt) && corrupt.Salvageable:
			return fmt.Errorf("%w\n"+
				"The damage is in the last batch of the log, which okiba never discards by itself. "+
				"To start without those records (okiba salvage keeps a copy of what it cuts), run:\n  okiba salvage %s", err, cmp.Or(cfg.Data, node.DefaultData))
		case errors.As(err, &ee):
			return f.fail("%v", err)
		case errors.As(err, &ce) && ce.Err != nil:
			return fmt.Errorf("%s: %w", flagOf(ce.Field), ce.Err)
		case errors.As(err, &ce):
			return f.fail("%s: %s", flagOf(ce.Field), ce.Reason)
		}
		return err
	}
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-n.Stopped():
			running = false
		case <-hup:
			logger.Info("SIGHUP: reading the TLS files again", "cert_file", cfg.TLS.CertFile, "key_file", cfg.TLS.KeyFile, "client_ca_file", cfg.TLS.ClientCAFile)
			_ = n.ReloadTLS() // it logs what it did, or why the previous certificate serves on
		}
	}
	grace2 := cmp.Or(time.Duration(cfg.ShutdownGrace), node.DefaultShutdownGrace)
	logger.Info("shutting down: no new connections; finishing requests in progress", "grace", grace2)
	gctx, cancel := context.WithTimeout(context.Background(), grace2)
	defer cancel()
	return n.Close(gctx)
}

// commaList splits a comma-separated flag value and checks each element with parse.
// Spaces around elements are dropped; an empty element is refused, as a stray comma
// usually hides a mistake.
func commaList(v string, parse func(string) (string, error)) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []string
	for i, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("element %d of %q is empty", i+1, v)
		}
		if _, err := parse(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// flagOf names the flag of a configuration key: "storage.segment_size" is
// --segment-size, "sqs.credentials_file" --sqs-credentials-file, "tls.cert_file"
// --tls-cert.
func flagOf(key string) string {
	if strings.HasPrefix(key, "principals") {
		return "the configuration file's " + key // no flag: principals are declared in the file
	}
	section, name, nested := strings.Cut(key, ".")
	switch {
	case !nested:
		name = section
	case section == "sqs":
		name = "sqs_" + name
	case section == "tls":
		name = "tls_" + strings.TrimSuffix(name, "_file")
	case section == "cluster" && strings.HasPrefix(name, "secret"):
		name = "cluster_secret_file"
	}
	return "--" + strings.ReplaceAll(name, "_", "-")
}
