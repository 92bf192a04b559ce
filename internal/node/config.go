package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/cluster"
	"github.com/okiba/okiba/internal/crossorigin"
	"github.com/okiba/okiba/wal"
)

// Config is everything a node is told: one struct, read from a JSON file (LoadFile),
// from the environment and from flags — okiba serve applies them in that order, so a flag
// wins over the environment and the environment over the file. The zero value of every
// field means its default; later changes add keys, never files.
//
//	{
//	  "addr": "127.0.0.1:7070",
//	  "data": "/var/lib/okiba",
//	  "auth_token_file": "/etc/okiba/token",
//	  "cors_origins": ["https://app.example.com"],
//	  "sqs": {"credentials_file": "/etc/okiba/sqs-keys", "region": "eu-west-1"},
//	  "storage": {"segment_size": "64MiB", "cache_bytes": "1GiB", "min_free_disk": "off"},
//	  "limits": {"max_queues": 20000},
//	  "tls": {"cert_file": "/etc/okiba/tls.crt", "key_file": "/etc/okiba/tls.key"}
//	}
type Config struct {
	// Addr is where to listen, HOST:PORT. Defaults to 127.0.0.1:7070; port 0 picks one.
	Addr string `json:"addr,omitempty"`
	// Data is the data directory, created if missing. Defaults to ./okiba-data.
	Data string `json:"data,omitempty"`
	// AuthToken is the secret of the principal "admin", allowed everything: with it (or
	// Principals) every request but /healthz must authenticate. At least 22 characters
	// (auth.MinSecretLength). A token in a file (AuthTokenFile) is better: a flag's
	// value is visible in the process list.
	AuthToken string `json:"auth_token,omitempty"`
	// AuthTokenFile holds the token (surrounding whitespace ignored). Not with AuthToken.
	AuthTokenFile string `json:"auth_token_file,omitempty"`
	// Principals are declared here rather than made with `okiba principal create`; they
	// live in the configuration, not in the log, and hide a logged principal of the same
	// name. With any, authentication is on.
	Principals []PrincipalConfig `json:"principals,omitempty"`
	// Insecure allows a non-loopback Addr without authentication.
	Insecure bool `json:"insecure,omitempty"`
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `json:"log_level,omitempty"`
	// LogFormat is text (logfmt lines) or json (one object a line, for journald's and
	// container platforms' collectors). Defaults to text.
	LogFormat string `json:"log_format,omitempty"`
	// ShutdownGrace is how long requests in progress may take at shutdown. Defaults to 30s.
	ShutdownGrace Duration `json:"shutdown_grace,omitempty"`
	// CORSOrigins are the browser origins that may call the API (scheme://host[:port]).
	CORSOrigins []string `json:"cors_origins,omitempty"`
	// AllowedHosts are more host names a tokenless node answers to (the DNS-rebinding
	// guard); "*.example.com" allows the names under one.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// AuditLog is a file that also receives the audit log (management actions and
	// refusals, docs/security.md) as JSON lines; it is created 0600 and appended to. The
	// node's log always receives it.
	AuditLog string `json:"audit_log,omitempty"`
	// TrustedProxies are the addresses or CIDR prefixes of reverse proxies whose
	// X-Forwarded-For names the client, for the audit log and the throttling of failed
	// authentication. Others' X-Forwarded-For is ignored.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
	// SQS configures the SQS-compatible front.
	SQS SQSConfig `json:"sqs,omitzero"`
	// Console configures the web console.
	Console ConsoleConfig `json:"console,omitzero"`
	// Storage configures the log, checkpoints and memory.
	Storage StorageConfig `json:"storage,omitzero"`
	// Limits bound what the broker holds (replicated configuration: logged when changed).
	Limits LimitsConfig `json:"limits,omitzero"`
	// TLS puts the port behind TLS (tls.go). Defaults to plain HTTP.
	TLS TLSConfig `json:"tls,omitzero"`
	// Cluster makes the node a member of a replicated cluster (docs/cluster.md).
	// Defaults to a single node.
	Cluster ClusterConfig `json:"cluster,omitzero"`
}

// ClusterConfig makes the node one of a replicated cluster's founding members.
type ClusterConfig struct {
	// Node is this node's name, one of Peers'.
	Node string `json:"node,omitempty"`
	// Peers are every founding member, this one included, as NAME=URL: the URL each
	// node's own port answers on (its --addr, reachable from the others). Every member
	// is given the same list; names are mapped to raft ids at the first start, for ever.
	Peers []string `json:"peers,omitempty"`
	// Secret authenticates the nodes to each other, at least 22 characters, the same on
	// every member; SecretFile holds it instead (surrounding whitespace ignored). The
	// data directory's secret (receipts, sessions, sealed principal secrets) is derived
	// from it.
	Secret     string `json:"secret,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
	// Join is the URL of a member of a running cluster: a node on an empty data
	// directory asks to be added (as a learner, promoted once caught up) instead of
	// bootstrapping a cluster of Peers, which then needs only this node's NAME=URL.
	Join string `json:"join,omitempty"`
	// SnapshotEntries and CatchUpEntries tune the raft log's compaction: once the
	// broker's checkpoints hold SnapshotEntries entries beyond the log's snapshot, the
	// log drops them but the last CatchUpEntries (a follower further behind installs a
	// snapshot of another node's state). Defaults 10000 and 5000.
	SnapshotEntries int `json:"snapshot_entries,omitempty"`
	CatchUpEntries  int `json:"catch_up_entries,omitempty"`
	// SnapshotRate bounds how fast this node sends its state to a member installing a
	// snapshot, per second ("64MiB", the default; "off" for no bound).
	SnapshotRate Size `json:"snapshot_rate,omitempty"`
}

// PrincipalConfig declares one principal.
type PrincipalConfig struct {
	// Name is the principal's name and SQS access key id.
	Name string `json:"name"`
	// Secret is its bearer token and SQS secret access key, at least 22 characters;
	// SecretFile holds it instead (surrounding whitespace ignored).
	Secret     string `json:"secret,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
	// Grants are "PERMISSION PATTERN" strings: "send queue:orders-*", "admin".
	Grants []string `json:"grants"`
}

// SQSConfig configures the SQS-compatible API.
type SQSConfig struct {
	// Disabled turns the SQS API off.
	Disabled bool `json:"disabled,omitempty"`
	// CredentialsFile holds access keys, one "ACCESS_KEY_ID SECRET" per line: each is a
	// principal allowed everything (as Principals with the grant "admin"), and
	// authentication is on. Every principal signs SQS requests with its name as the
	// access key id and its secret; without any, any credentials are accepted.
	CredentialsFile string `json:"credentials_file,omitempty"`
	// Credentials are access keys given inline (access key id → secret), beside or
	// instead of CredentialsFile.
	Credentials map[string]string `json:"credentials,omitempty"`
	// Region appears in queue ARNs. Defaults to us-east-1.
	Region string `json:"region,omitempty"`
	// AccountID appears in queue URLs and ARNs. Defaults to 000000000000.
	AccountID string `json:"account_id,omitempty"`
	// BaseURL is the scheme and host of queue URLs. Defaults to each request's own.
	BaseURL string `json:"base_url,omitempty"`
}

// ConsoleConfig configures the web console.
type ConsoleConfig struct {
	// Disabled turns the console off.
	Disabled bool `json:"disabled,omitempty"`
}

// StorageConfig configures the broker's storage and the process's memory.
type StorageConfig struct {
	// SegmentSize is the log segment file size. Defaults to 64 MiB, at least 2 MiB.
	SegmentSize Size `json:"segment_size,omitempty"`
	// CheckpointBytes: a checkpoint after this much log. Defaults to 128 MiB.
	CheckpointBytes Size `json:"checkpoint_bytes,omitempty"`
	// CacheBytes bounds message bodies kept in memory. Defaults to 256 MiB.
	CacheBytes Size `json:"cache_bytes,omitempty"`
	// MinFreeDisk refuses sends while the disk has less free space. Defaults to twice
	// SegmentSize; "off" turns the check off.
	MinFreeDisk Size `json:"min_free_disk,omitempty"`
	// GCHeadroom lets the heap grow by this much between collections (or half of what is
	// live, once that is more). Defaults to 256 MiB; "off" keeps Go's pace, as GOGC does.
	GCHeadroom Size `json:"gc_headroom,omitempty"`
	// ScrubEvery is how often the broker reads back its checkpoints, live bodies and log
	// to check every checksum. Defaults to 24h; "off" turns the scrub off.
	ScrubEvery Every `json:"scrub_every,omitempty"`
	// ScrubRate bounds a scrub's reads a second. Defaults to 20MB (20,000,000 bytes);
	// "off" lifts the bound.
	ScrubRate Size `json:"scrub_rate,omitempty"`
}

// LimitsConfig bounds what the broker holds.
type LimitsConfig struct {
	// MaxQueues defaults to 10,000.
	MaxQueues int `json:"max_queues,omitempty"`
	// MaxInFlight, leased messages per queue, defaults to 120,000 (as SQS).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// MaxDedupIDs, dedup ids remembered by every queue together, defaults to 2,000,000
	// (about 480 MiB of memory at the bound).
	MaxDedupIDs int `json:"max_dedup_ids,omitempty"`
}

// Default values of Config.
const (
	DefaultAddr          = "127.0.0.1:7070"
	DefaultData          = "okiba-data"
	DefaultShutdownGrace = 30 * time.Second
)

// LoadFile reads a JSON configuration file. Unknown keys are refused, so that a typo is
// an error rather than a setting silently ignored.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("config file %s: more than one JSON value", path)
	}
	return c, nil
}

// Redacted is the configuration with its secrets replaced by "<redacted>", for showing
// (okiba serve --print-config); file names stay, their contents are not read.
func (c Config) Redacted() Config {
	const r = "<redacted>"
	if c.AuthToken != "" {
		c.AuthToken = r
	}
	c.Principals = slices.Clone(c.Principals)
	for i := range c.Principals {
		if c.Principals[i].Secret != "" {
			c.Principals[i].Secret = r
		}
	}
	if c.Cluster.Secret != "" {
		c.Cluster.Secret = r
	}
	if len(c.SQS.Credentials) > 0 {
		creds := make(map[string]string, len(c.SQS.Credentials))
		for k := range c.SQS.Credentials {
			creds[k] = r
		}
		c.SQS.Credentials = creds
	}
	return c
}

// Effective is the configuration with its defaults filled in, as the node would run it
// (files named are not read).
func (c Config) Effective() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Data == "" {
		c.Data = DefaultData
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	return c
}

// resolved is a Config with its defaults filled in and its files read.
type resolved struct {
	Config
	token string
	// static are the principals of the configuration: "admin" for the token, the
	// declared ones, the SQS access keys. Authentication is on when there are any.
	static   []auth.Static
	proxies  []netip.Prefix
	loopback bool
	tls      *tlsState // the TLS files as read at Open; nil without TLS
	// peers and clusterSecret, with the cluster on; peers nil for a single node.
	peers         []cluster.Peer
	clusterSecret string
}

// authOn reports whether requests must authenticate.
func (r resolved) authOn() bool { return len(r.static) > 0 }

// AdminName is the name of the --auth-token's principal.
const AdminName = "admin"

func (c Config) resolve() (resolved, error) {
	r := resolved{Config: c}
	if r.Addr == "" {
		r.Addr = DefaultAddr
	}
	if r.Data == "" {
		r.Data = DefaultData
	}
	if r.ShutdownGrace == 0 {
		r.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	var err error
	if r.loopback, err = isLoopback(r.Addr); err != nil {
		return r, fieldError("addr", err.Error())
	}
	switch {
	case c.AuthToken != "" && c.AuthTokenFile != "":
		return r, fieldError("auth_token_file", "give auth_token or auth_token_file, not both")
	case c.AuthTokenFile != "":
		b, err := os.ReadFile(c.AuthTokenFile)
		if err != nil {
			return r, &ConfigError{Field: "auth_token_file", Reason: err.Error(), Err: err}
		}
		if r.token = strings.TrimSpace(string(b)); r.token == "" {
			return r, fieldError("auth_token_file", c.AuthTokenFile+" is empty")
		}
	default:
		r.token = c.AuthToken
	}
	if r.token != "" {
		if err := auth.CheckSecret(r.token); err != nil {
			field := "auth_token"
			if c.AuthTokenFile != "" {
				field = "auth_token_file"
			}
			return r, fieldError(field, "the token "+err.Error())
		}
		r.static = append(r.static, auth.Static{Name: AdminName, Secret: r.token, Grants: auth.AdminGrants})
	}
	for i, pc := range c.Principals {
		st, err := pc.resolve()
		if err != nil {
			return r, fieldError(fmt.Sprintf("principals[%d]", i), err.Error())
		}
		r.static = append(r.static, st)
	}
	for _, o := range c.CORSOrigins {
		if _, err := crossorigin.ParseOrigin(o); err != nil {
			return r, fieldError("cors_origins", err.Error())
		}
	}
	if r.proxies, err = auth.ParseProxies(c.TrustedProxies); err != nil {
		return r, fieldError("trusted_proxies", fmt.Sprintf("want addresses or CIDR prefixes such as 10.0.0.0/8: %v", err))
	}
	for _, h := range c.AllowedHosts {
		if _, err := crossorigin.ParseHost(h); err != nil {
			return r, fieldError("allowed_hosts", err.Error())
		}
	}
	if !c.SQS.Disabled {
		keys := map[string]string{}
		if c.SQS.CredentialsFile != "" {
			if keys, err = readSQSCredentials(c.SQS.CredentialsFile); err != nil {
				return r, &ConfigError{Field: "sqs.credentials_file", Reason: err.Error(), Err: err}
			}
		}
		for k, v := range c.SQS.Credentials {
			if k == "" || v == "" {
				return r, fieldError("sqs.credentials", "an access key id and its secret must not be empty")
			}
			keys[k] = v
		}
		ids := slices.Sorted(maps.Keys(keys))
		for _, k := range ids {
			if err := access.CheckName(k); err != nil {
				return r, fieldError("sqs.credentials", fmt.Sprintf("access key id %q: %v", k, err))
			}
			if err := auth.CheckSecret(keys[k]); err != nil {
				return r, fieldError("sqs.credentials", fmt.Sprintf("the secret of access key id %q %v", k, err))
			}
			r.static = append(r.static, auth.Static{Name: k, Secret: keys[k], Grants: auth.AdminGrants})
		}
	}
	seen := map[string]bool{}
	for _, st := range r.static {
		if seen[st.Name] {
			return r, fieldError("principals", fmt.Sprintf("principal %q is declared twice (the token's principal is %q; SQS access keys are principals too)", st.Name, AdminName))
		}
		seen[st.Name] = true
	}
	if !r.authOn() && !r.loopback && !c.Insecure {
		return r, &ExposedError{Addr: r.Addr}
	}
	if err := r.resolveCluster(); err != nil {
		return r, err
	}
	if s := c.Storage.SegmentSize; s != 0 && (s < 2<<20 || s > wal.MaxSegmentSize) {
		return r, fieldError("storage.segment_size", fmt.Sprintf("must be between 2MiB and %s, got %s", Size(wal.MaxSegmentSize), s))
	}
	if c.Limits.MaxQueues < 0 || c.Limits.MaxInFlight < 0 || c.Limits.MaxDedupIDs < 0 {
		return r, fieldError("limits", "max_queues, max_in_flight and max_dedup_ids must not be negative")
	}
	if err := c.TLS.check(); err != nil {
		return r, err
	}
	if c.TLS.on() {
		if r.tls, err = loadTLS(c.TLS); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (pc PrincipalConfig) resolve() (auth.Static, error) {
	st := auth.Static{Name: pc.Name}
	if err := access.CheckName(pc.Name); err != nil {
		return st, err
	}
	switch {
	case pc.Secret != "" && pc.SecretFile != "":
		return st, errors.New("give secret or secret_file, not both")
	case pc.SecretFile != "":
		b, err := os.ReadFile(pc.SecretFile)
		if err != nil {
			return st, err
		}
		st.Secret = strings.TrimSpace(string(b))
	default:
		st.Secret = pc.Secret
	}
	if st.Secret == "" {
		return st, fmt.Errorf("principal %q has no secret: give secret or secret_file", pc.Name)
	}
	if err := auth.CheckSecret(st.Secret); err != nil {
		return st, fmt.Errorf("principal %q: the secret %v", pc.Name, err)
	}
	for _, g := range pc.Grants {
		gr, err := access.ParseGrant(g)
		if err != nil {
			return st, fmt.Errorf("principal %q: %w", pc.Name, err)
		}
		st.Grants = append(st.Grants, gr)
	}
	return st, nil
}

// ExposedError refuses to serve a non-loopback address without authentication.
type ExposedError struct{ Addr string }

func (e *ExposedError) Error() string {
	return fmt.Sprintf("refusing to listen on %s without authentication: give --auth-token-file FILE "+
		"(or OKIBA_AUTH_TOKEN, or --auth-token), or pass --insecure to serve it unauthenticated", e.Addr)
}

// ConfigError names the field of a Config that is wrong.
type ConfigError struct {
	Field  string
	Reason string
	// Err is set when the value is right but what it names failed (a file that cannot
	// be read): not a mistake in the configuration's syntax.
	Err error
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason }

func (e *ConfigError) Unwrap() error { return e.Err }

func fieldError(field, reason string) error { return &ConfigError{Field: field, Reason: reason} }

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

// ---------------------------------------------------------------------------------------
// Values with a text form

// Size is a byte count written as "64MiB", "512KiB", "1048576" or "off" (-1: for limits
// that can be turned off). In JSON it is a string or a number.
type Size int64

var sizeUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// SizeOff is the value of "off".
const SizeOff Size = -1

func (s Size) String() string {
	if s < 0 {
		return "off"
	}
	v := int64(s)
	for _, u := range sizeUnits {
		if v != 0 && v%u.n == 0 {
			return strconv.FormatInt(v/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10) + "B"
}

// ParseSize reads a Size.
func ParseSize(v string) (Size, error) {
	if strings.TrimSpace(v) == "off" {
		return SizeOff, nil
	}
	num, mult := strings.TrimSpace(v), int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (examples: 1048576, 512KiB, 64MiB, 1GiB)", v)
	}
	return Size(n * mult), nil
}

func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := ParseSize(str)
		*s = v
		return err
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil || n < 0 {
		return errors.New("a size is a string such as \"64MiB\" or \"off\", or a number of bytes")
	}
	*s = Size(n)
	return nil
}

// Every is a period written as a duration ("24h", "30m") or "off" (-1).
type Every time.Duration

func (e Every) String() string {
	if e < 0 {
		return "off"
	}
	return time.Duration(e).String()
}

func (e Every) MarshalJSON() ([]byte, error) { return json.Marshal(e.String()) }

func (e *Every) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a period is a string such as \"24h\" or \"off\"")
	}
	return e.Set(s)
}

// Set parses a period as a flag gives it.
func (e *Every) Set(s string) error {
	if strings.TrimSpace(s) == "off" {
		*e = -1
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a period (examples: 24h, 30m, off)", s)
	}
	*e = Every(v)
	return nil
}

// Duration is a time.Duration written as "30s", "250ms".
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a duration is a string such as \"30s\" or \"250ms\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a duration (examples: 30s, 250ms, 2m)", s)
	}
	*d = Duration(v)
	return nil
}

// resolveCluster reads and checks the cluster's configuration.
func (r *resolved) resolveCluster() error {
	c := r.Cluster
	if c.Node == "" && len(c.Peers) == 0 && c.Secret == "" && c.SecretFile == "" && c.Join == "" {
		if r.TLS.ClusterCAFile != "" {
			return fieldError("tls.cluster_ca_file", "the cluster's authority is for the members of a cluster (--node, --peers)")
		}
		return nil
	}
	if c.Join != "" && !(strings.HasPrefix(c.Join, "http://") || strings.HasPrefix(c.Join, "https://")) {
		return fieldError("cluster.join", fmt.Sprintf("want the URL of a member, such as http://10.0.0.1:7070, got %q", c.Join))
	}
	if c.Node == "" || len(c.Peers) == 0 {
		return fieldError("cluster.node", "a cluster member needs its name (--node) and every member's NAME=URL (--peers)")
	}
	if c.SnapshotEntries < 0 || c.CatchUpEntries < 0 {
		return fieldError("cluster.snapshot_entries", "snapshot_entries and catch_up_entries must not be negative (0 takes the defaults, 10000 and 5000)")
	}
	seen := map[string]bool{}
	for _, p := range c.Peers {
		name, url, ok := strings.Cut(p, "=")
		if !ok || name == "" || !(strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://")) {
			return fieldError("cluster.peers", fmt.Sprintf("want NAME=URL such as n1=http://10.0.0.1:7070, got %q", p))
		}
		if seen[name] {
			return fieldError("cluster.peers", fmt.Sprintf("%q is named twice", name))
		}
		seen[name] = true
		r.peers = append(r.peers, cluster.Peer{Name: name, URL: strings.TrimSuffix(url, "/")})
	}
	if !seen[c.Node] {
		return fieldError("cluster.node", fmt.Sprintf("%q is not among --peers", c.Node))
	}
	if r.TLS.ClusterCAFile != "" {
		for _, p := range r.peers {
			if !strings.HasPrefix(p.URL, "https://") {
				return fieldError("cluster.peers", fmt.Sprintf("with the cluster's authority (tls.cluster_ca_file) the members speak TLS to each other: %s's URL must be https://, got %s", p.Name, p.URL))
			}
		}
		if c.Join != "" && !strings.HasPrefix(c.Join, "https://") {
			return fieldError("cluster.join", "with the cluster's authority (tls.cluster_ca_file) the members speak TLS to each other: the URL must be https://")
		}
	}
	switch {
	case c.Secret != "" && c.SecretFile != "":
		return fieldError("cluster.secret_file", "give the cluster secret or its file, not both")
	case c.SecretFile != "":
		b, err := os.ReadFile(c.SecretFile)
		if err != nil {
			return &ConfigError{Field: "cluster.secret_file", Reason: err.Error(), Err: err}
		}
		r.clusterSecret = strings.TrimSpace(string(b))
	default:
		r.clusterSecret = c.Secret
	}
	if r.clusterSecret == "" {
		return fieldError("cluster.secret_file", "a cluster member needs the cluster secret (--cluster-secret-file; okiba token makes one)")
	}
	if err := auth.CheckSecret(r.clusterSecret); err != nil {
		return fieldError("cluster.secret_file", "the cluster secret "+err.Error())
	}
	return nil
}
