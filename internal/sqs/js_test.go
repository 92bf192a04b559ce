package sqs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// TestJavaScriptSDK runs internal/sqs/jstest/test.mjs (the AWS SDK for JavaScript v3) against a
// real okiba server. It needs Node.js and `npm ci --prefix internal/sqs/jstest` (make deps);
// without them it skips (testkit.Missing), except under CI, where it fails.
func TestJavaScriptSDK(t *testing.T) {
	t.Parallel()
	const suite = "the JavaScript SDK test"
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.Missing(t, suite, "node is not installed", "")
	}
	if _, err := os.Stat(filepath.Join("jstest", "node_modules", "@aws-sdk", "client-sqs")); err != nil {
		testkit.Missing(t, suite, "internal/sqs/jstest/node_modules is not installed", "npm ci --prefix internal/sqs/jstest (or make deps)")
	}
	// With a token, the SQS front verifies the SDK's SigV4 signatures (key "admin",
	// the token as secret): those of the JavaScript SDK cover every header the front
	// requires signed.
	const token = "js-t0ken-js-t0ken-js-t0ken"
	srv := okibatest.New(t, okibatest.Options{Token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test.mjs")
	cmd.Dir = "jstest"
	cmd.Env = append(os.Environ(), "OKIBA_URL="+srv.URL, "OKIBA_ACCESS_KEY_ID=admin", "OKIBA_SECRET_ACCESS_KEY="+token)
	out, err := cmd.CombinedOutput()
	t.Logf("node test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK test failed: %v", err)
	}
}
