package sqs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// TestAWSSDKGoV1 runs internal/sqs/sdkv1test, a module of its own holding aws-sdk-go v1
// at v1.47.5 (the last release whose SQS client speaks the query protocol), against a
// real okiba server with authentication: `go test` in that directory, with the server's
// URL and a key in its environment. The module's go.mod is not the product's, so the
// deprecated SDK never reaches okiba's own build; its modules come from the module
// cache or the proxy, as the bench module's do.
func TestAWSSDKGoV1(t *testing.T) {
	t.Parallel()
	const suite = "the aws-sdk-go v1 query-protocol test"
	goCmd, err := exec.LookPath("go")
	if err != nil {
		testkit.Missing(t, suite, "the go command is not on PATH", "install Go (or add it to PATH)")
	}
	dir, err := filepath.Abs("sdkv1test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// GOWORK=off: a go.work of the developer's must not join this module to another.
	env := append(os.Environ(), "GOWORK=off")
	if out, err := goCmdIn(ctx, goCmd, dir, env, "mod", "download").CombinedOutput(); err != nil {
		testkit.Missing(t, suite, "its modules cannot be downloaded: "+strings.TrimSpace(string(out)), "cd internal/sqs/sdkv1test && go mod download")
	}
	const token = "sdk-v1-t0ken-sdk-v1-t0ken"
	srv := okibatest.New(t, okibatest.Options{Token: token})
	start := time.Now()
	cmd := goCmdIn(ctx, goCmd, dir, append(env, "OKIBA_SQS_URL="+srv.URL, "OKIBA_SQS_KEY=admin", "OKIBA_SQS_SECRET="+token),
		"test", "-count=1", "-v", ".")
	out, err := cmd.CombinedOutput()
	t.Logf("go test in internal/sqs/sdkv1test (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the aws-sdk-go v1 test failed: %v", err)
	}
	if strings.Contains(string(out), "SKIP") {
		t.Fatalf("the aws-sdk-go v1 tests skipped although the server's URL was given")
	}
}

func goCmdIn(ctx context.Context, goCmd, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir, cmd.Env = dir, env
	return cmd
}
