package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/bench/harness"
)

// TestSmoke runs the harness end to end on okiba alone (no peer needs installing):
// every scenario on a tiny scale, then checks that each produced a figure, that the
// exact-count checks hold, that the report was written, and that no process it
// started is left. It asserts nothing about speed.
func TestSmoke(t *testing.T) {
	out, runDir, tools := t.TempDir(), filepath.Join(t.TempDir(), "run"), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log bytes.Buffer
	err := run(ctx, []string{"--mode", "smoke", "--out", out, "--dir", runDir, "--tools", tools, "--repo", "../../..",
		"--fsync-probe", "200ms"}, &log)
	t.Logf("harness output:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(files) != 1 {
		t.Fatalf("want one results file in %s, got %v", out, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var r harness.Run
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Fsync) == 0 || r.Fsync[0].Syncs == 0 {
		t.Errorf("no fsync probe in the results")
	}
	got := map[string]harness.Result{}
	for _, res := range r.Results {
		if res.System == "okiba-http" && res.Skipped == "" {
			got[res.Cell.Scenario] = res
		}
		if res.FirstError != "" && res.Rate == 0 {
			t.Errorf("%s %s on %s failed: %s", res.Cell.Scenario, res.Cell.Name, res.System, res.FirstError)
		}
	}
	for _, s := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s8", "t1", "t2", "t3"} {
		if got[s].Rate <= 0 {
			t.Errorf("scenario %s: okiba-http has no rate: %+v", s, got[s])
		}
	}
	if x := got["s6"].Extra; x["redeliveries"] != x["redeliveries_expected"] || x["never_delivered"] != 0 || x["extra_deliveries"] != 0 {
		t.Errorf("s6: redeliveries not exact: %v", x)
	}
	if x := got["s8"].Extra; x["order_violations"] != 0 {
		t.Errorf("s8: per-key order violated: %v", x)
	}
	if x := got["s5"].Extra; x["restart_first_receive_s"] <= 0 || x["drained"] != x["filled"] {
		t.Errorf("s5/s7: want a restart time and a full drain: %v", x)
	}
	// The topic scenarios: every record pre-filled is read (t2) and every subscribed
	// queue drained (t3; the last cell run is the one with the most subscriptions).
	// t4, the cold read, runs in make bench only.
	if x := got["t2"].Extra; x["drained"] != x["filled"] || x["filled"] == 0 {
		t.Errorf("t2: want every record read: %v", x)
	}
	if x := got["t3"].Extra; x["drained"] != x["drain_expected"] || x["drain_expected"] == 0 {
		t.Errorf("t3: want every fanned-out message drained: %v", x)
	}
	md, err := os.ReadFile(strings.TrimSuffix(files[0], ".json") + ".md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## S1", "## S2", "## S3", "## T1", "## T3", "okiba-http"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := os.Stat(strings.TrimSuffix(files[0], ".json") + ".svg"); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("run directory %s left behind", runDir)
	}
	// Every okiba the harness started must be gone.
	for _, line := range strings.Split(log.String(), "\n") {
		if i := strings.Index(line, "(pid "); i >= 0 {
			var pid int
			if _, err := fmt.Sscan(line[i+5:], &pid); err == nil && pid > 0 {
				if syscall.Kill(pid, 0) == nil {
					if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); bytes.Contains(b, []byte("okiba")) {
						t.Errorf("process %d is still running: %s", pid, b)
					}
				}
			}
		}
	}
}
