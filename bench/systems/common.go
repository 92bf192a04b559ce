// Package systems holds one adapter per broker under test: okiba over each of its
// client paths, each peer in its durable and relaxed configurations, and the
// in-process log ceiling. Each file owns one technology; All lists them in the order
// the report shows them.
package systems

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/okiba/okiba/bench/harness"
)

// All returns every system the harness knows, okiba first, then durable peers, then
// relaxed ones, then the physical limit.
func All() []harness.System {
	return []harness.System{
		NewOkibaHTTP(),
		NewOkibaHTTP1(),
		NewOkibaHTTPJSON(),
		NewOkibaHTTPBatch(),
		NewOkibaHTTPLinger(),
		NewOkibaSQS(),
		NewRedis(true),
		NewPGQueue(),
		NewRabbit(rabbitQuorum),
		NewOkibaCluster3(),
		NewJetStreamR3(),
		NewRabbitQuorum3(),
		NewRiver(),
		NewRabbit(rabbitClassicV1),
		NewJetStream(true),
		NewSQLiteQueue(true),
		NewGoqite(true),
		NewJetStream(false),
		NewRabbit(rabbitClassicV2),
		NewRabbitStream(),
		NewRabbitStreamAMQP(),
		NewRedis(false),
		NewSQLiteQueue(false),
		NewCeiling(),
	}
}

// Select returns the systems named (comma-separated; "all" for every one).
func Select(names string) ([]harness.System, error) {
	all := All()
	if names == "" || names == "all" {
		return all, nil
	}
	var out []harness.System
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range all {
			if s.Info().Name == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Info().Name)
			}
			return nil, fmt.Errorf("unknown system %q; known: %s", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dialable reports whether addr accepts TCP connections.
func dialable(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// output runs a command and returns its trimmed output (for versions).
func output(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "unknown (" + strings.TrimSpace(err.Error()) + ")"
	}
	return strings.TrimSpace(string(b))
}

// moduleVersion is the version of a Go module this binary was built with.
func moduleVersion(path string) string {
	if v, ok := buildDeps()[path]; ok {
		return v
	}
	return "unknown"
}
