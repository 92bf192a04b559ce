package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

func sqsClient(url, key, secret string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region: "eu-central-1", BaseEndpoint: aws.String(url), RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, nil
		}),
	})
}

// TestServeSQS checks that okiba serve answers SQS clients on its address: with any
// credentials when it has no token, and only with a configured access key when it has.
func TestServeSQS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, _, stop := serveInProcess(t, map[string]string{"OKIBA_DATA": t.TempDir()}, "--addr", "127.0.0.1:0", "--sqs-account-id", "123456789012")
	c := sqsClient(url, "anything", "goes")
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("cafe")})
	if err != nil {
		t.Fatal(err)
	}
	if want := url + "/123456789012/cafe"; *out.QueueUrl != want {
		t.Errorf("queue URL %s, want %s", *out.QueueUrl, want)
	}
	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url}}
	if q := h.queue("cafe"); q.Config.Retention.D() != 96*time.Hour {
		t.Errorf("SQS-created queue seen natively: %+v", q.Config)
	}
	stop()

	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	keys := filepath.Join(dir, "keys")
	os.WriteFile(token, []byte("s3cret-s3cret-s3cret-s3cret\n"), 0o600)
	os.WriteFile(keys, []byte("# SQS keys\nAKIDAPP appsecret-appsecret-appsecret\n\nAKIDOPS:opssecret-opssecret-opssecret\n"), 0o600)
	// With authentication, signatures must be scoped to the server's region, which the
	// clients here are configured with.
	url, _, stop = serveInProcess(t, map[string]string{"OKIBA_DATA": t.TempDir()}, "--addr", "127.0.0.1:0",
		"--auth-token-file", token, "--sqs-credentials-file", keys, "--sqs-region", "eu-central-1")
	defer stop()
	for _, k := range [][2]string{{"AKIDAPP", "appsecret-appsecret-appsecret"}, {"AKIDOPS", "opssecret-opssecret-opssecret"}, {"admin", "s3cret-s3cret-s3cret-s3cret"}} {
		if _, err := sqsClient(url, k[0], k[1]).ListQueues(ctx, &awssqs.ListQueuesInput{}); err != nil {
			t.Errorf("key %s: %v", k[0], err)
		}
	}
	_, err = sqsClient(url, "okiba", "s3cret-s3cret-s3cret-s3cret").ListQueues(ctx, &awssqs.ListQueuesInput{})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidClientTokenId" {
		t.Errorf("an access key id that names no principal: %v", err)
	}
	_, err = sqsClient(url, "AKIDAPP", "appsecret-appsecret-appsecret").ListQueues(ctx, &awssqs.ListQueuesInput{},
		func(o *awssqs.Options) { o.Region = "us-east-1" })
	if !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" || !strings.Contains(ae.ErrorMessage(), `"eu-central-1"`) {
		t.Errorf("a client signing for another region is not told the server's: %v", err)
	}
	h.env["OKIBA_DATA"] = filepath.Join(dir, "data")
	r := h.fails(1, "serve", "--addr", "127.0.0.1:0", "--sqs-credentials-file", filepath.Join(dir, "missing"))
	contains(t, "stderr", r.err, "--sqs-credentials-file")
}
