package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

// The tests of the real binary (serve, the systemd unit, the container image) run the
// release's build of it, made once per test process by the Makefile's release-binary:
// what they check is what ships.

// testVersion is what the tests' build is stamped with.
const testVersion = "v0.0.0-test"

var release struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	if os.Getenv("OKIBA_TEST_AS_OKIBA") == "1" {
		// The test binary as the okiba command, for a shell to run (the completion test).
		os.Exit(newOSApp().run(context.Background(), os.Args[1:]))
	}
	code := m.Run()
	if release.dir != "" {
		os.RemoveAll(release.dir)
	}
	os.Exit(code)
}

// releaseBinary returns the path of okiba built as make release builds it, for this
// machine. The first caller builds it (the tiers share its build cache: a link).
func releaseBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP: builds the okiba binary: runs in its own tier (make binary), not with -short")
	}
	release.once.Do(func() {
		if release.dir, release.err = os.MkdirTemp("", "okiba-release-"); release.err == nil {
			release.bin, release.err = buildRelease(t, release.dir)
		}
	})
	if release.err != nil {
		t.Fatal(release.err)
	}
	return release.bin
}

// buildRelease runs make release-binary into dir and returns the binary's path.
func buildRelease(t *testing.T, dir string) (string, error) {
	t.Helper()
	for _, tool := range []string{"make", "go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Missing(t, "the okiba binary's tests", "no "+tool+" command in PATH to build it", "PATH=/usr/local/go/bin:$PATH, apt-get install make git")
		}
	}
	cmd := exec.Command("make", "--no-print-directory", "-s", "-C", "../..", "release-binary", "DIST="+dir, "VERSION="+testVersion)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: out}
	}
	return filepath.Join(dir, "okiba-"+runtime.GOOS+"-"+runtime.GOARCH), nil
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "make release-binary: " + e.err.Error() + "\n" + string(e.out)
}

// TestReleaseReproducible builds the release binary a second time and finds the same
// bytes: nothing of the build's time, place or machine gets in (-trimpath, the commit's
// date rather than the clock's), and the version, commit and date are stamped.
func TestReleaseReproducible(t *testing.T) {
	t.Parallel()
	first := releaseBinary(t)
	second, err := buildRelease(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two builds of one commit differ: sha256 %x and %x", sha256.Sum256(a), sha256.Sum256(b))
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(a, []byte(root)) {
		t.Errorf("the binary holds the path of the tree it was built in, %s (no -trimpath?)", root)
	}
	fa, _ := os.Stat(first)
	fb, _ := os.Stat(second)
	if !fa.ModTime().Equal(fb.ModTime()) {
		t.Errorf("the files' times differ (%v, %v): they should be SOURCE_DATE_EPOCH's", fa.ModTime(), fb.ModTime())
	}

	out, err := exec.Command(first, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "okiba " + testVersion + " ("
	if head, err := exec.Command("git", "-C", "../..", "log", "-1", "--format=%H %cI").Output(); err == nil {
		hash, date, _ := strings.Cut(strings.TrimSpace(string(head)), " ")
		want += "commit " + hash[:12]
		if !strings.Contains(string(out), want) || !strings.Contains(string(out), utcRFC3339(t, date)) {
			t.Errorf("okiba version says %q, want it to name %s of %s", out, hash[:12], utcRFC3339(t, date))
		}
	}
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), runtime.Version()) {
		t.Errorf("okiba version says %q, want %q… and %s", out, want, runtime.Version())
	}
}

// utcRFC3339 turns git's strict ISO 8601 date into the UTC RFC 3339 that okiba prints.
func utcRFC3339(t *testing.T, iso string) string {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		t.Fatalf("git's date %q: %v", iso, err)
	}
	return tm.UTC().Format(time.RFC3339)
}
