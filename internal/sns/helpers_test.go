package sns_test

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// env is a real okiba server with real aws-sdk-go-v2 SNS and SQS clients pointed at it.
type env struct {
	srv *okibatest.Server
	sns *awssns.Client
	sqs *awssqs.Client
}

func newEnv(t *testing.T, opts okibatest.Options) *env {
	t.Helper()
	srv := okibatest.New(t, opts)
	return &env{srv: srv, sns: snsClient(srv.URL, "AKIDEXAMPLE", "secret-of-the-example-key"), sqs: sqsClient(srv.URL, "AKIDEXAMPLE", "secret-of-the-example-key")}
}

func creds(key, secret string) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, Source: "test"}, nil
	})
}

func snsClient(url, key, secret string) *awssns.Client {
	return awssns.New(awssns.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: creds(key, secret), RetryMaxAttempts: 1})
}

func sqsClient(url, key, secret string) *awssqs.Client {
	return awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: creds(key, secret), RetryMaxAttempts: 1})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) createTopic(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	out, err := e.sns.CreateTopic(ctxT(t), &awssns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", name, err)
	}
	return *out.TopicArn
}

// createQueue makes a queue through SQS and returns its URL and ARN.
func (e *env) createQueue(t *testing.T, name string) (string, string) {
	t.Helper()
	ctx := ctxT(t)
	var attrs map[string]string
	if strings.HasSuffix(name, ".fifo") {
		attrs = map[string]string{"FifoQueue": "true"}
	}
	out, err := e.sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	a, err := e.sqs.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{"QueueArn"}})
	if err != nil {
		t.Fatal(err)
	}
	return *out.QueueUrl, a.Attributes["QueueArn"]
}

func (e *env) subscribe(t *testing.T, topicARN, endpoint string, attrs map[string]string) string {
	t.Helper()
	out, err := e.sns.Subscribe(ctxT(t), &awssns.SubscribeInput{TopicArn: aws.String(topicARN), Protocol: aws.String("sqs"),
		Endpoint: aws.String(endpoint), Attributes: attrs, ReturnSubscriptionArn: true})
	if err != nil {
		t.Fatalf("Subscribe %s: %v", endpoint, err)
	}
	return *out.SubscriptionArn
}

// receive waits for n messages in a queue (every message attribute asked for) and
// deletes them.
func (e *env) receive(t *testing.T, url string, n int) []sqstypes.Message {
	t.Helper()
	ctx := ctxT(t)
	var got []sqstypes.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		out, err := e.sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := e.sqs.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("received %d messages from %s, want %d", len(got), url, n)
	}
	return got
}

// empty checks that a queue has nothing to receive now.
func (e *env) empty(t *testing.T, url string) {
	t.Helper()
	out, err := e.sqs.ReceiveMessage(ctxT(t), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("queue %s has %d messages, want none: %q", url, len(out.Messages), *out.Messages[0].Body)
	}
}

// notification is an SNS envelope as a subscriber reads it.
type notification struct {
	Type, MessageId, TopicArn, Subject, Message, Timestamp, SignatureVersion, Signature, SigningCertURL, UnsubscribeURL, SequenceNumber string
	MessageAttributes                                                                                                                   map[string]struct{ Type, Value string }
}

// verify checks an envelope's signature as an SNS message validator does: fetch the
// certificate at SigningCertURL, rebuild the string to sign, check with its key.
func verify(t *testing.T, n notification) {
	t.Helper()
	resp, err := http.Get(n.SigningCertURL)
	if err != nil {
		t.Fatalf("fetching the signing certificate: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", n.SigningCertURL, resp.StatusCode, raw)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("the certificate is not PEM: %q", raw)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range [][2]string{{"Message", n.Message}, {"MessageId", n.MessageId}, {"Subject", n.Subject}, {"Timestamp", n.Timestamp}, {"TopicArn", n.TopicArn}, {"Type", n.Type}} {
		if kv[0] == "Subject" && kv[1] == "" {
			continue
		}
		b.WriteString(kv[0] + "\n" + kv[1] + "\n")
	}
	sig, err := base64.StdEncoding.DecodeString(n.Signature)
	if err != nil {
		t.Fatal(err)
	}
	pub := cert.PublicKey.(*rsa.PublicKey)
	switch n.SignatureVersion {
	case "1":
		sum := sha1.Sum([]byte(b.String()))
		err = rsa.VerifyPKCS1v15(pub, crypto.SHA1, sum[:], sig)
	case "2":
		sum := sha256.Sum256([]byte(b.String()))
		err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig)
	default:
		t.Fatalf("SignatureVersion %q", n.SignatureVersion)
	}
	if err != nil {
		t.Fatalf("the envelope's signature does not verify: %v", err)
	}
}

func parseEnvelope(t *testing.T, body string) notification {
	t.Helper()
	var n notification
	if err := json.Unmarshal([]byte(body), &n); err != nil {
		t.Fatalf("the body is not an SNS envelope: %v: %s", err, body)
	}
	if n.Type != "Notification" {
		t.Fatalf("envelope Type %q: %s", n.Type, body)
	}
	return n
}

// wantCode checks that err is an API error with code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want API error %s", err, code)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("got error %s (%s), want %s", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
}

func okibatestRecord(body string) client.Record { return client.Record{Body: []byte(body)} }
