package sqs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/okiba/okiba/okibatest"
)

// env is a real okiba server with a real aws-sdk-go-v2 SQS client pointed at it.
// Message checksum validation stays on (the SDK's default).
type env struct {
	srv     *okibatest.Server
	c       *awssqs.Client
	headers *headerCapture
}

// headerCapture keeps the response headers of the client's last call.
type headerCapture struct {
	mu   sync.Mutex
	last http.Header
}

func (h *headerCapture) get(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last.Get(name)
}

func newEnv(t *testing.T, opts okibatest.Options) *env {
	t.Helper()
	srv := okibatest.New(t, opts)
	e := &env{srv: srv, headers: &headerCapture{}}
	e.c = e.client("AKIDEXAMPLE", "secret", 3)
	return e
}

// client returns an SDK client with static credentials and at most attempts tries.
func (e *env) client(key, secret string, attempts int, opts ...func(*awssqs.Options)) *awssqs.Client {
	h := e.headers
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(e.srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, Source: "test"}, nil
		}),
		RetryMaxAttempts: attempts,
		APIOptions: []func(*middleware.Stack) error{func(st *middleware.Stack) error {
			return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("okibaCaptureHeaders",
				func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleDeserialize(ctx, in)
					if r, ok := out.RawResponse.(*smithyhttp.Response); ok {
						h.mu.Lock()
						h.last = r.Header.Clone()
						h.mu.Unlock()
					}
					return out, md, err
				}), middleware.After)
		}},
	}, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// createQueue creates a queue through SQS and returns its URL.
func (e *env) createQueue(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	out, err := e.c.CreateQueue(ctxT(t), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return *out.QueueUrl
}

func (e *env) send(t *testing.T, url, body string, mod ...func(*awssqs.SendMessageInput)) *awssqs.SendMessageOutput {
	t.Helper()
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	for _, m := range mod {
		m(in)
	}
	out, err := e.c.SendMessage(ctxT(t), in)
	if err != nil {
		t.Fatalf("SendMessage %q: %v", body, err)
	}
	return out
}

func group(g, dedup string) func(*awssqs.SendMessageInput) {
	return func(in *awssqs.SendMessageInput) {
		in.MessageGroupId = aws.String(g)
		if dedup != "" {
			in.MessageDeduplicationId = aws.String(dedup)
		}
	}
}

func (e *env) receive(t *testing.T, url string, max int32, vis int32) []types.Message {
	t.Helper()
	out, err := e.c.ReceiveMessage(ctxT(t), &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max, VisibilityTimeout: vis,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

// receiveUntil receives until n messages have arrived or the deadline passes.
func (e *env) receiveUntil(t *testing.T, url string, n int, vis int32) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(15 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		out, err := e.c.ReceiveMessage(ctxT(t), &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: vis, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		got = append(got, out.Messages...)
	}
	if len(got) < n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

func (e *env) attrs(t *testing.T, url string) map[string]string {
	t.Helper()
	out, err := e.c.GetQueueAttributes(ctxT(t), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes
}

// wantAPIError checks that err is an API error with the given code.
func wantAPIError(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want API error %s", err, code)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("got error code %s (%v), want %s", ae.ErrorCode(), err, code)
	}
}

// wantAPIMessage checks that err is an API error with the given code and message.
func wantAPIMessage(t *testing.T, err error, code, message string) {
	t.Helper()
	wantAPIError(t, err, code)
	var ae smithy.APIError
	if errors.As(err, &ae); ae.ErrorMessage() != message {
		t.Fatalf("%s: message %q, want %q", code, ae.ErrorMessage(), message)
	}
}

// wantVisibilityGone checks that err is SQS's refusal of a visibility change with the
// handle of a message deleted or received again.
func wantVisibilityGone(t *testing.T, err error, handle string) {
	t.Helper()
	wantAPIMessage(t, err, "InvalidParameterValue", "Value "+handle+" for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.")
}

// wantTyped checks that err is the SDK's typed error T.
func wantTyped[T error](t *testing.T, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("got %T %v, want %T", err, err, target)
	}
	return target
}

// rawSQS posts one SQS request signed by the AWS SDK's own signer as principal key with
// secret (scoped to us-east-1, the test servers' region), and returns the status and
// the error code of the answer ("" for a success). The headers in before are set
// before signing, so the signature covers them; those in after are set after, as an
// attacker replaying a signature would.
func rawSQS(t *testing.T, url, key, secret string, body string, before, after map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range before {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sqs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	for k, v := range after {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Type string `json:"__type"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	_, code, _ := strings.Cut(e.Type, "#")
	return resp.StatusCode, code
}
