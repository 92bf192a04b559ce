package sqs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/okiba/okiba/okibatest"
)

// TestJavaScriptSDK runs sqs/jstest/test.mjs (the AWS SDK for JavaScript v3) against a
// real okiba server. It needs Node.js and `npm ci --prefix sqs/jstest`; without them it
// skips with a visible SKIP line, except in CI (CI set), where it fails.
func TestJavaScriptSDK(t *testing.T) {
	missing := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI must run the JavaScript SDK test: .ci/run installs it with npm ci)", why)
		}
		t.Skipf("SKIP: %s; run `npm ci --prefix sqs/jstest` to include the JavaScript SDK test", why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
		return
	}
	if _, err := os.Stat(filepath.Join("jstest", "node_modules", "@aws-sdk", "client-sqs")); err != nil {
		missing("sqs/jstest/node_modules is not installed")
		return
	}
	// With a token, the SQS front verifies the SDK's SigV4 signatures (key "okiba",
	// the token as secret).
	srv := okibatest.New(t, okibatest.Options{Token: "js-t0ken"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test.mjs")
	cmd.Dir = "jstest"
	cmd.Env = append(os.Environ(), "OKIBA_URL="+srv.URL, "OKIBA_ACCESS_KEY_ID=okiba", "OKIBA_SECRET_ACCESS_KEY=js-t0ken")
	out, err := cmd.CombinedOutput()
	t.Logf("node test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK test failed: %v", err)
	}
}
