package sns_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// debianPython is Debian's python3, whose python3-boto3 (botocore 1.29) speaks the
// query protocol; another python3 earlier on PATH might carry another botocore.
const debianPython = "/usr/bin/python3"

// TestBoto3SNS runs testdata/boto3_sns.py with Debian's python3-boto3, SNS and SQS
// clients, in one Python process, against a server with authentication, and verifies
// the signature of the envelope it received.
func TestBoto3SNS(t *testing.T) {
	t.Parallel()
	const suite = "the boto3 SNS test"
	if _, err := os.Stat(debianPython); err != nil {
		testkit.Missing(t, suite, debianPython+" is not installed", "apt-get install python3-boto3 (or make deps)")
	}
	if err := exec.Command(debianPython, "-c", "import boto3").Run(); err != nil {
		testkit.Missing(t, suite, "Debian's python3-boto3 is not installed", "apt-get install python3-boto3 (or make deps)")
	}
	const readerSecret = "sns-reader-s3cret-sns-reader"
	srv := okibatest.New(t, okibatest.Options{Token: adminToken, Principals: []okibatest.Principal{
		{Name: "reader", Secret: readerSecret, Grants: []string{"browse topic:boto-news"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, debianPython, "testdata/boto3_sns.py")
	cmd.Env = append(os.Environ(), "OKIBA_URL="+srv.URL, "OKIBA_ADMIN_KEY=admin", "OKIBA_ADMIN_SECRET="+adminToken,
		"OKIBA_READER_KEY=reader", "OKIBA_READER_SECRET="+readerSecret,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	t.Logf("%s testdata/boto3_sns.py (%v):\n%s", debianPython, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the boto3 SNS test failed: %v", err)
	}
	var found bool
	for line := range strings.SplitSeq(string(out), "\n") {
		if js, ok := strings.CutPrefix(line, "envelope: "); ok {
			var n notification
			if err := json.Unmarshal([]byte(js), &n); err != nil {
				t.Fatal(err)
			}
			verify(t, n)
			found = true
		}
	}
	if !found {
		t.Fatal("the script printed no envelope")
	}
}
