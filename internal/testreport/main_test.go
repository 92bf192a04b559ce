package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A real `go test -json` of a small package: a pass, a marked skip, an unmarked skip and
// a failure, through run, then summarised.
func TestRunAndSummary(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir), the process's.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not in PATH: %v", err)
	}
	mod := t.TempDir()
	write(t, filepath.Join(mod, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	write(t, filepath.Join(mod, "m_test.go"), `package m

import "testing"

func TestPasses(t *testing.T) {}
func TestNeedsDB(t *testing.T) { t.Skip("SKIP: the database tests: no server; enable with: make deps") }
func TestDiscards(t *testing.T) { t.Skip("no leases") }
func TestSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: runs in its own tier")
	}
}
`)
	write(t, filepath.Join(mod, "fail", "f_test.go"), `package fail

import "testing"

func TestBroken(t *testing.T) { t.Log("the broken detail"); t.Fatal("wrong") }
`)
	dir := t.TempDir()
	if err := start(dir, time.Now().Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Chdir(mod)
	var out bytes.Buffer
	code, err := run(dir, []string{"-tier", "unit", "-budget", "100", "-json", "--", goBin, "test", "-json", "-short", "-count=1", "."}, &out)
	if err != nil || code != 0 {
		t.Fatalf("run: code %d, %v\n%s", code, err, out.String())
	}
	for _, want := range []string{"ok  \texample.com/m", "--- SKIP: example.com/m TestNeedsDB: the database tests: no server; enable with: make deps", "tier unit: ok in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "no leases") {
		t.Errorf("an unmarked skip was printed:\n%s", out.String())
	}

	out.Reset()
	code, err = run(dir, []string{"-tier", "long", "-budget", "100", "-json", "--", goBin, "test", "-json", "-count=1", "-run", "Split|Broken", "./..."}, &out)
	if err != nil || code == 0 {
		t.Fatalf("run of a failing package: code %d, %v\n%s", code, err, out.String())
	}
	for _, want := range []string{"the broken detail", "FAIL\texample.com/m/fail", "tier long: FAILED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("failing run output lacks %q:\n%s", want, out.String())
		}
	}

	// Locally the summary reports the skip and passes the run but for the failed tier;
	// TestSplit ran in tier long, so it is not a skipped suite.
	out.Reset()
	ok, err := summary(dir, time.Now(), false, nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Errorf("summary passed although a tier failed:\n%s", out.String())
	}
	s := out.String()
	for _, want := range []string{"unit", "long", "FAILED", "total", "SKIP the database tests: no server; enable with: make deps", "1 test(s): example.com/m.TestNeedsDB"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "TestSplit") || strings.Contains(s, "no leases") {
		t.Errorf("summary lists a test that ran elsewhere, or an unmarked skip:\n%s", s)
	}
}

func TestSummaryUnderCI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	if err := start(dir, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "records")
	if err := appendJSON(filepath.Join(rec, "tiers.jsonl"), tierRecord{Tier: "unit", Seconds: 50, Budget: 240, OK: true}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if ok, err := summary(dir, now, true, nil, &out); err != nil || !ok {
		t.Fatalf("clean run under CI: ok=%v err=%v\n%s", ok, err, out.String())
	}
	if !strings.Contains(out.String(), "skipped suites: none") || !strings.Contains(out.String(), "all tiers passed") {
		t.Errorf("clean summary:\n%s", out.String())
	}

	// A skip under CI fails the run.
	if err := appendJSON(filepath.Join(rec, "tests.jsonl"), testRecord{Tier: "unit", Package: "p", Test: "TestPG/postgres", Skipped: true, Reason: "PostgreSQL tests: down"}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if ok, _ := summary(dir, now, true, nil, &out); ok {
		t.Errorf("a skipped suite passed under CI:\n%s", out.String())
	}
	out.Reset()
	if ok, _ := summary(dir, now, false, nil, &out); !ok {
		t.Errorf("a skipped suite failed locally:\n%s", out.String())
	}

	// A run that stopped early says which tiers did not run, and fails.
	out.Reset()
	if ok, _ := summary(dir, now, false, []string{"unit", "storage"}, &out); ok || !strings.Contains(out.String(), "not run: storage") {
		t.Errorf("an incomplete run:\n%s", out.String())
	}

	// Past the total budget under CI: fails; locally: reported only.
	dir2 := t.TempDir()
	if err := start(dir2, now.Add(-TotalBudget-time.Second)); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if ok, _ := summary(dir2, now, true, nil, &out); ok || !strings.Contains(out.String(), "past the 15m0s budget") {
		t.Errorf("a run past the budget passed under CI:\n%s", out.String())
	}
	out.Reset()
	if ok, _ := summary(dir2, now, false, nil, &out); !ok || !strings.Contains(out.String(), "OVER") {
		t.Errorf("locally, a run past the budget: ok=%v\n%s", ok, out.String())
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
