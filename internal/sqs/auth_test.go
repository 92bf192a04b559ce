package sqs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/okiba/okiba/internal/auth"
)

// signed builds a request signed by the AWS SDK's own SigV4 signer, as a server sees it.
func signed(t *testing.T, key, secret, target, path string, body []byte, at time.Time) *http.Request {
	t.Helper()
	return signedFor(t, "sqs", "eu-west-3", key, secret, target, path, body, at)
}

// signedFor is signed with the credential scope's service and region.
func signedFor(t *testing.T, service, region, key, secret, target, path string, body []byte, at time.Time) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://localhost:7070"+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", target)
	req.Header.Set("X-Extra", "  two   spaces ")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		t.Fatal(err)
	}
	return req
}

// signedOnly builds a request whose signature covers only the given headers (as a
// client that signs less than the SDKs do, or an attacker replaying a signature,
// would send it), correct for those.
func signedOnly(t *testing.T, key, secret, target string, headers []string, body []byte, at time.Time) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://localhost:7070/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", target)
	date := at.UTC().Format(amzDate)
	req.Header.Set("X-Amz-Date", date)
	sum := sha256.Sum256(body)
	s := sigV4{keyID: key, date: date[:8], region: "eu-west-3", service: "sqs", signedHeaders: headers}
	sig := signature(secret, s, date, canonicalRequest(req, headers, hex.EncodeToString(sum[:])))
	req.Header.Set("Authorization", sigAlgorithm+" Credential="+key+"/"+date[:8]+"/eu-west-3/sqs/aws4_request, SignedHeaders="+
		strings.Join(headers, ";")+", Signature="+sig)
	return req
}

func TestSigV4(t *testing.T) {
	t.Parallel()
	keys, err := auth.NewKeyring(make([]byte, 32), nil, []auth.Static{{Name: "AKIDOKIBA", Secret: "s3cret", Grants: auth.AdminGrants}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := New(nil, Options{Keys: keys, Region: "eu-west-3"})
	now := time.Now()
	body := []byte(`{"QueueName":"orders"}`)
	cases := []struct {
		name    string
		req     *http.Request
		body    []byte
		at      time.Time
		wantErr string
	}{
		{"good", signed(t, "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), body, now, ""},
		{"good with path and query", signed(t, "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/000000000000/q%20x?b=2&a=1&a=0", body, now), body, now, ""},
		{"wrong secret", signed(t, "AKIDOKIBA", "nope", "AmazonSQS.CreateQueue", "/", body, now), body, now, "SignatureDoesNotMatch"},
		{"unknown key", signed(t, "AKIDOTHER", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), body, now, "InvalidClientTokenId"},
		{"body changed", signed(t, "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), []byte(`{"QueueName":"other"}`), now, "SignatureDoesNotMatch"},
		{"too old", signed(t, "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now.Add(-20*time.Minute)), body, now, "RequestExpired"},
		{"unsigned", httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)), body, now, "MissingAuthenticationToken"},
		// A signature must cover what says what the request does: these were accepted
		// when only host had to be signed, so that the action of a request seen once could
		// be swapped (GetQueueUrl into PurgeQueue or DeleteQueue).
		{"only host signed", signedOnly(t, "AKIDOKIBA", "s3cret", "AmazonSQS.PurgeQueue", []string{"host"}, body, now), body, now, "IncompleteSignature"},
		{"target not signed", signedOnly(t, "AKIDOKIBA", "s3cret", "AmazonSQS.DeleteQueue", []string{"content-type", "host", "x-amz-date"}, body, now), body, now, "IncompleteSignature"},
		{"content type not signed", signedOnly(t, "AKIDOKIBA", "s3cret", "AmazonSQS.DeleteQueue", []string{"host", "x-amz-date", "x-amz-target"}, body, now), body, now, "IncompleteSignature"},
		{"all required signed", signedOnly(t, "AKIDOKIBA", "s3cret", "AmazonSQS.DeleteQueue", []string{"content-type", "host", "x-amz-date", "x-amz-target"}, body, now), body, now, ""},
		// The credential scope is this front's: service sqs, its region.
		{"scoped to s3", signedFor(t, "s3", "eu-west-3", "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), body, now, "SignatureDoesNotMatch"},
		{"scoped to another region", signedFor(t, "sqs", "us-east-1", "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), body, now, "SignatureDoesNotMatch"},
	}
	for _, c := range cases {
		_, e := f.authenticate(c.req, c.body, now, "sqs")
		switch {
		case c.wantErr == "" && e != nil:
			t.Errorf("%s: %v", c.name, e)
		case c.wantErr != "" && (e == nil || e.Code != c.wantErr):
			t.Errorf("%s: got %v, want %s", c.name, e, c.wantErr)
		}
	}
	_, e := f.authenticate(signedFor(t, "sqs", "us-east-1", "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now), body, now, "sqs")
	if e == nil || !strings.Contains(e.Message, `serves region "eu-west-3", not "us-east-1"`) {
		t.Errorf("a signature for another region is not told which one to use: %v", e)
	}
	// A target header changed after signing breaks the signature too.
	req := signed(t, "AKIDOKIBA", "s3cret", "AmazonSQS.CreateQueue", "/", body, now)
	req.Header.Set("X-Amz-Target", "AmazonSQS.DeleteQueue")
	if _, e := f.authenticate(req, body, now, "sqs"); e == nil || e.Code != "SignatureDoesNotMatch" {
		t.Errorf("altered target: got %v", e)
	}

	open := New(nil, Options{})
	for _, c := range cases {
		if key, e := open.authenticate(c.req, c.body, now, "sqs"); e != nil {
			t.Errorf("without credentials %s: %v", c.name, e)
		} else if c.name == "good" && key.Name != "AKIDOKIBA" {
			t.Errorf("without credentials: key id %q", key.Name)
		}
	}
}

// TestSigV4QueryFormContentTypeUnsigned: kombu 5.2 posts its receives as a form signed
// over host and x-amz-date only, and libcurl adds the form's Content-Type after the
// signing. The query protocol's content-type decides nothing (the body is read as a
// form whatever it says, and its hash is signed), so the front accepts such a request;
// a JSON-protocol request must still sign its content-type, and the body is still
// covered.
func TestSigV4QueryFormContentTypeUnsigned(t *testing.T) {
	t.Parallel()
	keys, err := auth.NewKeyring(make([]byte, 32), nil, []auth.Static{{Name: "AKIDOKIBA", Secret: "s3cret", Grants: auth.AdminGrants}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := New(nil, Options{Keys: keys, Region: "eu-west-3"})
	now := time.Now()
	body := []byte("Action=ReceiveMessage&MaxNumberOfMessages=10")
	// kombu signs before libcurl adds the header: the same as a form signed without it.
	form := func(body []byte) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "http://localhost:7070/000000000000/orders", bytes.NewReader(body))
		date := now.UTC().Format(amzDate)
		req.Header.Set("X-Amz-Date", date)
		headers := []string{"host", "x-amz-date"}
		sum := sha256.Sum256(body)
		s := sigV4{keyID: "AKIDOKIBA", date: date[:8], region: "eu-west-3", service: "sqs", signedHeaders: headers}
		sig := signature("s3cret", s, date, canonicalRequest(req, headers, hex.EncodeToString(sum[:])))
		req.Header.Set("Authorization", sigAlgorithm+" Credential=AKIDOKIBA/"+date[:8]+"/eu-west-3/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature="+sig)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
	if !isQuery(form(body)) {
		t.Fatal("a form post is not taken for the query protocol")
	}
	if _, e := f.authenticate(form(body), body, now, "sqs"); e != nil {
		t.Errorf("a form signed over host and x-amz-date, its content-type added after signing (kombu 5.2): %v", e)
	}
	if _, e := f.authenticate(form(body), []byte("Action=DeleteQueue"), now, "sqs"); e == nil || e.Code != "SignatureDoesNotMatch" {
		t.Errorf("a form whose body changed after signing: got %v, want SignatureDoesNotMatch", e)
	}
	// The same signature on a JSON-protocol request: its content-type must be signed.
	req := form(body)
	req.Header.Set("X-Amz-Target", "AmazonSQS.ReceiveMessage")
	if _, e := f.authenticate(req, body, now, "sqs"); e == nil || e.Code != "IncompleteSignature" {
		t.Errorf("a JSON-protocol request without x-amz-target and content-type signed: got %v, want IncompleteSignature", e)
	}
}
