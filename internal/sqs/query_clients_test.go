package sqs_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// TestAWSCLIQueryProtocol drives Debian's AWS CLI 2.9 (/usr/bin/aws, which speaks the
// query protocol to SQS) against a server with authentication, in six calls (each
// costs a second of Python start-up): a queue with attributes, a batch of sends with
// message attributes (the CLI checks their digests), a receive, a batch delete, and
// errors whose query codes differ from the JSON protocol's, which also shows that the
// CLI spoke the query protocol.
func TestAWSCLIQueryProtocol(t *testing.T) {
	t.Parallel()
	const suite = "the AWS CLI query-protocol test"
	if _, err := os.Stat(debianAWS); err != nil {
		testkit.Missing(t, suite, debianAWS+" is not installed", "apt-get install awscli (or make deps)")
	}
	version, err := exec.Command(debianAWS, "--version").CombinedOutput()
	if err != nil {
		testkit.Missing(t, suite, debianAWS+" --version fails: "+strings.TrimSpace(string(version)), "apt-get install awscli (or make deps)")
	}
	t.Logf("%s --version: %s", debianAWS, strings.TrimSpace(string(version)))
	_, authed, env := queryServers(t)
	env = append(env, "AWS_ACCESS_KEY_ID=admin", "AWS_SECRET_ACCESS_KEY="+strings.TrimPrefix(env[3], "OKIBA_ADMIN_SECRET="),
		"AWS_DEFAULT_REGION=us-east-1", "AWS_PAGER=", "AWS_MAX_ATTEMPTS=1")
	type result struct {
		out    map[string]any
		stderr string
		err    error
	}
	// run runs one call of the CLI; it may run on any goroutine.
	run := func(args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, debianAWS, append([]string{"--endpoint-url", authed.URL, "--output", "json", "sqs"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		r := result{out: map[string]any{}}
		r.err = cmd.Run()
		r.stderr = stderr.String()
		if stdout.Len() > 0 {
			if err := json.Unmarshal(stdout.Bytes(), &r.out); err != nil && r.err == nil {
				r.err = fmt.Errorf("%s: %w: %s", args[0], err, &stdout)
			}
		}
		return r
	}
	want := func(r result, ok bool, what string) result {
		t.Helper()
		if (r.err == nil) != ok {
			t.Fatalf("aws sqs %s: %v (%v)\nstderr: %s", what, r.err, r.out, r.stderr)
		}
		return r
	}

	r := want(run("create-queue", "--queue-name", "cli-work", "--attributes", "VisibilityTimeout=40"), true, "create-queue")
	url, _ := r.out["QueueUrl"].(string)
	if !strings.HasSuffix(url, "/000000000000/cli-work") {
		t.Fatalf("create-queue: %v", r.out)
	}
	r = want(run("create-queue", "--queue-name", "cli-work", "--attributes", "VisibilityTimeout=41"), false, "create-queue with other attributes")
	if !strings.Contains(r.stderr, "QueueAlreadyExists") {
		t.Errorf("create-queue with other attributes (the query protocol's code, QueueNameExists in JSON): %s", r.stderr)
	}
	r = want(run("send-message-batch", "--queue-url", url, "--entries",
		`[{"Id":"a","MessageBody":"héllo <cli>","MessageAttributes":{"k":{"DataType":"String","StringValue":"v & w"},"b":{"DataType":"Binary","BinaryValue":"AAH+/w=="}}},`+
			`{"Id":"b","MessageBody":"batch b","DelaySeconds":0}]`), true, "send-message-batch")
	if ok, _ := r.out["Successful"].([]any); len(ok) != 2 || ok[0].(map[string]any)["MD5OfMessageBody"] != md5Hex("héllo <cli>") {
		t.Errorf("send-message-batch: %v", r.out)
	}
	r = want(run("receive-message", "--queue-url", url, "--max-number-of-messages", "10", "--attribute-names", "All",
		"--message-attribute-names", "All", "--wait-time-seconds", "1"), true, "receive-message")
	msgs, _ := r.out["Messages"].([]any)
	bodies := map[string]string{}
	var entries []map[string]string
	for i, m := range msgs {
		m := m.(map[string]any)
		bodies[m["Body"].(string)] = m["MD5OfBody"].(string)
		entries = append(entries, map[string]string{"Id": "m" + strconv.Itoa(i), "ReceiptHandle": m["ReceiptHandle"].(string)})
		if m["Body"] == "héllo <cli>" {
			attrs := m["MessageAttributes"].(map[string]any)
			if attrs["k"].(map[string]any)["StringValue"] != "v & w" || attrs["b"].(map[string]any)["BinaryValue"] != "AAH+/w==" {
				t.Errorf("received attributes: %v", attrs)
			}
		}
	}
	if len(bodies) != 2 || bodies["batch b"] != md5Hex("batch b") {
		t.Fatalf("receive-message: %v", r.out)
	}
	js, _ := json.Marshal(entries)
	if ok, _ := want(run("delete-message-batch", "--queue-url", url, "--entries", string(js)), true, "delete-message-batch").out["Successful"].([]any); len(ok) != 2 {
		t.Errorf("delete-message-batch deleted %d", len(ok))
	}
	r = want(run("change-message-visibility", "--queue-url", url, "--receipt-handle", entries[0]["ReceiptHandle"], "--visibility-timeout", "10"), false, "change-message-visibility of a deleted message")
	if !strings.Contains(r.stderr, "InvalidParameterValue") || !strings.Contains(r.stderr, "Message does not exist or is not available for visibility timeout change") {
		t.Errorf("change-message-visibility of a deleted message: %s", r.stderr)
	}
	if n := authed.Broker.Queues("cli-work"); len(n) != 1 || n[0].Stats.Ready+n[0].Stats.InFlight != 0 || n[0].Config.VisibilityTimeout != 40*time.Second {
		t.Errorf("the queue after the CLI: %+v", n)
	}
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
