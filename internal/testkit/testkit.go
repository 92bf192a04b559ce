// Package testkit is what okiba's own tests share: how a suite says it cannot run here
// (Missing), how a test waits for what no signal announces (Eventually, Recv), and the
// certificates of TLS tests (NewCA).
//
// A suite that needs something outside Go (PostgreSQL, Node.js packages, Chromium)
// calls Missing when it is absent. Locally the test skips with a message that starts
// with "SKIP:" and names the command that provides it, and `make test` lists it in its
// summary (internal/testreport); under CI=true, where .ci/run provisions every suite,
// it fails instead, so that a broken set-up cannot pass as green.
package testkit

import (
	"os"
	"testing"
)

// Deps is the command that installs and starts what the suites need (the same
// provisioning .ci/run does).
const Deps = "make deps"

// CI reports whether the tests run under CI (CI=true), where no suite may skip.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing ends the test because suite cannot run: why says what is missing, enable the
// command that provides it (Deps when empty). It skips locally and fails under CI.
func Missing(t testing.TB, suite, why, enable string) {
	t.Helper()
	if enable == "" {
		enable = Deps
	}
	if CI() {
		t.Fatalf("%s cannot run under CI: %s (.ci/run must provision it: %s)", suite, why, enable)
	}
	t.Skipf("SKIP: %s: %s; enable with: %s", suite, why, enable)
}
