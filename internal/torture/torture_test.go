package torture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestTortureShort builds the okiba binary and runs a short torture (20 kill cycles by
// default; OKIBA_TORTURE_CYCLES and OKIBA_TORTURE_SEED override). `make torture` runs the
// long version through the CLI.
func TestTortureShort(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: torture needs the real binary and about half a minute: runs in its own tier (make binary), not with -short")
	}
	bin := filepath.Join(t.TempDir(), "okiba")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/okiba")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false "+os.Getenv("GOFLAGS")) // make's flags kept: its build cache
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := Config{Binary: bin, Cycles: 20, Log: testWriter{t}}
	var err error
	if s := os.Getenv("OKIBA_TORTURE_CYCLES"); s != "" {
		if cfg.Cycles, err = strconv.Atoi(s); err != nil || cfg.Cycles <= 0 {
			t.Fatalf("OKIBA_TORTURE_CYCLES=%q: want a positive number (%v)", s, err)
		}
	}
	if s := os.Getenv("OKIBA_TORTURE_SEED"); s != "" {
		if cfg.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OKIBA_TORTURE_SEED=%q: %v", s, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", rep.Seed, err)
	}
	t.Log(rep.String())
	for _, e := range rep.Examples {
		t.Log(e)
	}
	if !rep.OK() {
		t.Fatalf("the delivery guarantee failed (replay with OKIBA_TORTURE_SEED=%d)", rep.Seed)
	}
	if rep.SentOK == 0 || rep.AckedOK == 0 || rep.Kills == 0 || rep.DeferredFetched == 0 {
		t.Fatalf("the load did not run: %s", rep.String())
	}
	if tr := rep.Topic; tr.Acked == 0 || tr.Handed == 0 || tr.Commits == 0 || tr.SubAcked == 0 || tr.Checks < 2 {
		t.Fatalf("the topic load did not run: %s", rep.String())
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
