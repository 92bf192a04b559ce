package sqs_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// Debian's own SQS clients, which speak the query protocol, against real okiba
// servers. They are found at their Debian paths: another python3 or aws earlier on PATH
// (pyenv, pip, the AWS CLI's own installer) may carry a botocore new enough to speak
// the JSON protocol and would quietly test that instead.
const (
	debianPython = "/usr/bin/python3"
	debianAWS    = "/usr/bin/aws"
)

// queryServers starts the two servers the query-protocol clients use: one open, one
// with authentication, on which "admin" may do everything and "reader" only browse.
func queryServers(t *testing.T) (open, authed *okibatest.Server, env []string) {
	const token, readerSecret = "query-admin-t0ken-query-admin", "query-reader-s3cret-query-reader"
	open = okibatest.New(t, okibatest.Options{})
	authed = okibatest.New(t, okibatest.Options{Token: token, Principals: []okibatest.Principal{
		{Name: "reader", Secret: readerSecret, Grants: []string{"browse queue:*"}},
	}})
	return open, authed, []string{
		"OKIBA_OPEN_URL=" + open.URL, "OKIBA_AUTH_URL=" + authed.URL,
		"OKIBA_ADMIN_KEY=admin", "OKIBA_ADMIN_SECRET=" + token,
		"OKIBA_READER_KEY=reader", "OKIBA_READER_SECRET=" + readerSecret,
		// No configuration or credentials of the machine's own leak into the clients.
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
}

// TestBoto3QueryProtocol runs testdata/boto3_query.py with Debian's python3-boto3
// (botocore 1.29, the query protocol): every action botocore 1.29 knows, attributes and
// their digests, FIFO, batches, the receipt errors as SQS words them, refusals that
// change nothing, the request shapes kombu sends, SNS requests, SigV4 in headers and
// presigned, permissions. One Python process for every case.
func TestBoto3QueryProtocol(t *testing.T) {
	t.Parallel()
	const suite = "the boto3 query-protocol test"
	if _, err := os.Stat(debianPython); err != nil {
		testkit.Missing(t, suite, debianPython+" is not installed", "apt-get install python3-boto3 (or make deps)")
	}
	if err := exec.Command(debianPython, "-c", "import boto3").Run(); err != nil {
		testkit.Missing(t, suite, "Debian's python3-boto3 is not installed", "apt-get install python3-boto3 (or make deps)")
	}
	_, _, env := queryServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, debianPython, "testdata/boto3_query.py")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s testdata/boto3_query.py (%v):\n%s", debianPython, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the boto3 query-protocol test failed: %v", err)
	}
}
