package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/metrics"
	"github.com/okiba/okiba/internal/testkit"
)

// certs is a test's CA and the server certificate it issued for 127.0.0.1 and
// localhost, as the files a node reads.
type certs struct {
	ca        *testkit.CA
	dir       string
	cert, key string
}

func newCerts(t *testing.T) *certs {
	t.Helper()
	c := &certs{ca: testkit.NewCA(t, "okiba test CA"), dir: t.TempDir()}
	c.cert, c.key = c.ca.IssueFiles(t, c.dir, "server", "127.0.0.1", "localhost")
	return c
}

// tlsConfig trusts the CA and presents the client certificates given.
func (c *certs) tlsConfig(clientCerts ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: c.ca.Pool(), Certificates: clientCerts}
}

// httpClient is a client of its own connections that trusts the CA.
func (c *certs) httpClient(clientCerts ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c.tlsConfig(clientCerts...)}}
}

// get makes a GET with the token and returns the status and the certificate the
// server showed.
func get(t *testing.T, hc *http.Client, url, token string) (int, *x509.Certificate, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var peer *x509.Certificate
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		peer = resp.TLS.PeerCertificates[0]
	}
	return resp.StatusCode, peer, nil
}

// The files are checked at Open, before anything is created: a half-given pair, a
// client CA without a certificate, files that are missing or hold the wrong thing are
// refused naming the key (and the file); TLS is no substitute for authentication.
func TestTLSConfigIsCheckedAtOpen(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	other, otherKey := c.ca.IssueFiles(t, c.dir, "other", "127.0.0.1")
	garbage := filepath.Join(c.dir, "garbage.pem")
	testkit.WriteFile(t, garbage, []byte("not PEM at all\n"))
	missing := filepath.Join(c.dir, "missing.pem")
	for _, tc := range []struct {
		tls      TLSConfig
		field    string
		mentions string
	}{
		{TLSConfig{CertFile: c.cert}, "tls.key_file", "give both or neither"},
		{TLSConfig{KeyFile: c.key}, "tls.cert_file", "give both or neither"},
		{TLSConfig{ClientCAFile: c.cert}, "tls.client_ca_file", "certificate and key"},
		{TLSConfig{CertFile: missing, KeyFile: c.key}, "tls.cert_file", missing},
		{TLSConfig{CertFile: garbage, KeyFile: c.key}, "tls.cert_file", garbage},
		{TLSConfig{CertFile: c.cert, KeyFile: missing}, "tls.key_file", missing},
		{TLSConfig{CertFile: c.cert, KeyFile: garbage}, "tls.key_file", garbage},
		{TLSConfig{CertFile: c.cert, KeyFile: otherKey}, "tls.key_file", "does not match"},
		{TLSConfig{CertFile: other, KeyFile: otherKey, ClientCAFile: garbage}, "tls.client_ca_file", garbage},
		{TLSConfig{CertFile: c.cert, KeyFile: c.key, ClientCAFile: missing}, "tls.client_ca_file", missing},
	} {
		data := filepath.Join(t.TempDir(), "data")
		_, err := Open(context.Background(), Config{Addr: "127.0.0.1:0", Data: data, TLS: tc.tls}, Runtime{NoGCPace: true})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.mentions) {
			t.Errorf("%+v: %v; want a ConfigError on %s mentioning %q", tc.tls, err, tc.field, tc.mentions)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%+v: a refused Open created the data directory", tc.tls)
		}
	}
	_, err := Open(context.Background(), Config{Addr: "0.0.0.0:0", Data: t.TempDir(), TLS: TLSConfig{CertFile: c.cert, KeyFile: c.key, ClientCAFile: c.ca.WriteFile(t, c.dir, "ca.pem")}}, Runtime{NoGCPace: true})
	if ee := (*ExposedError)(nil); !errors.As(err, &ee) {
		t.Errorf("a non-loopback address with TLS and client certificates but no authentication: %v", err)
	}
}

// The native API over TLS, with the Go client on its stream and on plain HTTP; the
// port speaks TLS only, and a node without TLS has nothing to reload.
func TestNativeAPIOverTLS(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	m := metrics.New(metrics.Options{NoRuntime: true})
	n := open(t, Config{AuthToken: adminToken, Console: ConsoleConfig{Disabled: true}, TLS: TLSConfig{CertFile: c.cert, KeyFile: c.key}}, Runtime{Metrics: m})
	if !strings.HasPrefix(n.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %s", n.URL())
	}
	ctx := context.Background()
	for _, noStream := range []bool{false, true} {
		cl, err := client.New(n.URL(), client.Options{Token: adminToken, NoStream: noStream, TLS: c.tlsConfig()})
		if err != nil {
			t.Fatal(err)
		}
		q := "tls-stream"
		if noStream {
			q = "tls-http"
		}
		streams := upgrades(t, m)
		if _, err := cl.PutQueue(ctx, q, api.QueueConfig{}); err != nil {
			t.Fatalf("noStream %v: create: %v", noStream, err)
		}
		if _, err := cl.Send(ctx, q, client.Message{Body: []byte("over TLS")}); err != nil {
			t.Fatalf("noStream %v: send: %v", noStream, err)
		}
		got, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 1})
		if err != nil || len(got) != 1 || string(got[0].Body) != "over TLS" {
			t.Fatalf("noStream %v: receive: %v %v", noStream, got, err)
		}
		if err := cl.AckOne(ctx, q, got[0].Receipt); err != nil {
			t.Fatalf("noStream %v: ack: %v", noStream, err)
		}
		// A stream's upgrade is counted when the stream ends: the default client's
		// calls went on one, the NoStream client's did not.
		cl.Close()
		if noStream {
			if upgrades(t, m) != streams {
				t.Errorf("the NoStream client opened a stream")
			}
		} else {
			testkit.Eventually(t, 5*time.Second, func() bool { return upgrades(t, m) > streams }, "the stream's upgrade to be counted")
		}
	}
	// A client that does not trust the CA refuses the server's certificate.
	untrusting, err := client.New(n.URL(), client.Options{Token: adminToken, NoStream: true})
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := untrusting.Queues(ctx, ""); !errors.As(err, &unknown) {
		t.Errorf("a client that does not trust the CA: %v", err)
	}
	// Plain HTTP to the TLS port is answered 400 and closed, not served.
	resp, err := http.Get("http://" + n.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
		t.Errorf("plain HTTP to the TLS port: %s %q", resp.Status, body)
	}

	plain := open(t, Config{Console: ConsoleConfig{Disabled: true}}, Runtime{})
	if err := plain.ReloadTLS(); !errors.Is(err, ErrTLSOff) {
		t.Errorf("ReloadTLS without TLS: %v", err)
	}
	if !strings.HasPrefix(plain.URL(), "http://") {
		t.Errorf("URL without TLS: %s", plain.URL())
	}
}

// upgrades is how many stream upgrades the node's metrics have counted.
func upgrades(t *testing.T, m *metrics.Metrics) int {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return requests(rec.Body.String(), "GET", "/v1/stream")
}

// A reload: connections opened before it keep working with the certificate they
// began with, new ones get the new certificate; files that are no valid pair leave the
// previous certificate serving.
func TestReloadTLS(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	n := open(t, Config{AuthToken: adminToken, Console: ConsoleConfig{Disabled: true}, TLS: TLSConfig{CertFile: c.cert, KeyFile: c.key}}, Runtime{})
	ctx := context.Background()
	url := n.URL() + "/v1/queues"

	before := c.httpClient()
	st, first, err := get(t, before, url, adminToken)
	if err != nil || st != 200 {
		t.Fatalf("before the reload: %d %v", st, err)
	}
	streamed, err := client.New(n.URL(), client.Options{Token: adminToken, TLS: c.tlsConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer streamed.Close()
	if _, err := streamed.PutQueue(ctx, "q", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}

	// New files in place of the old (as a certificate manager renews them), then reload.
	newCert, newKey := c.ca.Issue(t, "server-renewed", "127.0.0.1", "localhost")
	testkit.WriteFile(t, c.cert, newCert)
	testkit.WriteFile(t, c.key, newKey)
	if err := n.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	// The connection opened before is still open and serves, with the old certificate.
	var reused bool
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}), "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := before.Do(req)
	if err != nil {
		t.Fatalf("the connection opened before the reload: %v", err)
	}
	resp.Body.Close()
	if !reused || resp.StatusCode != 200 || !resp.TLS.PeerCertificates[0].Equal(first) {
		t.Errorf("after the reload, the old connection: reused %v, %s, certificate %s", reused, resp.Status, resp.TLS.PeerCertificates[0].Subject)
	}
	if _, err := streamed.Send(ctx, "q", client.Message{Body: []byte("after the reload")}); err != nil {
		t.Errorf("the stream opened before the reload: %v", err)
	}
	// A new connection sees the new certificate.
	st, second, err := get(t, c.httpClient(), url, adminToken)
	if err != nil || st != 200 || second.Subject.CommonName != "server-renewed" {
		t.Fatalf("a new connection after the reload: %d %v %v", st, second, err)
	}

	// Sessions resume between reloads, not across one: after a reload every connection
	// is checked by the files as they are now.
	resuming := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: c.ca.Pool(), ClientSessionCache: tls.NewLRUClientSessionCache(4)}}}
	resumed := func() bool {
		t.Helper()
		resp, err := resuming.Get(n.URL() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // the session ticket comes after the handshake
		resp.Body.Close()
		return resp.TLS.DidResume
	}
	resumed()
	if !resumed() {
		t.Fatal("a second connection did not resume the first's session: the check below would prove nothing")
	}
	if err := n.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if resumed() {
		t.Error("a session begun before the reload was resumed after it")
	}

	// A key that is not the certificate's: the reload fails and the renewed pair serves on.
	_, strayKey := c.ca.Issue(t, "stray", "127.0.0.1")
	testkit.WriteFile(t, c.key, strayKey)
	var ce *ConfigError
	if err := n.ReloadTLS(); !errors.As(err, &ce) || ce.Field != "tls.key_file" {
		t.Fatalf("reload of a mismatched pair: %v", err)
	}
	testkit.WriteFile(t, c.cert, []byte("truncated"))
	if err := n.ReloadTLS(); !errors.As(err, &ce) || ce.Field != "tls.cert_file" || !strings.Contains(err.Error(), c.cert) {
		t.Fatalf("reload of a broken certificate: %v", err)
	}
	if st, third, err := get(t, c.httpClient(), url, adminToken); err != nil || st != 200 || !third.Equal(second) {
		t.Fatalf("after failed reloads: %d %v %v", st, third, err)
	}
}

// With client CAs, a connection needs a client certificate of theirs — and a request
// over it still needs a principal. The console's own client is not held up by either.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	clients := testkit.NewCA(t, "okiba test client CA")
	caFile := clients.WriteFile(t, c.dir, "clients.pem")
	n := open(t, Config{AuthToken: adminToken, TLS: TLSConfig{CertFile: c.cert, KeyFile: c.key, ClientCAFile: caFile}},
		Runtime{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	url := n.URL() + "/v1/queues"
	worker := clients.Certificate(t, "worker")

	if st, _, err := get(t, c.httpClient(), url, adminToken); err == nil {
		t.Errorf("without a client certificate: %d", st)
	}
	// A certificate of another CA (the server's, which it does not accept from clients).
	if st, _, err := get(t, c.httpClient(c.ca.Certificate(t, "stranger")), url, adminToken); err == nil {
		t.Errorf("with a client certificate of another CA: %d", st)
	}
	if st, _, err := get(t, c.httpClient(worker), url, ""); err != nil || st != http.StatusUnauthorized {
		t.Errorf("a client certificate without a token: %d %v", st, err)
	}
	if st, _, err := get(t, c.httpClient(worker), url, adminToken); err != nil || st != 200 {
		t.Errorf("a client certificate and the token: %d %v", st, err)
	}
	if st, _, err := get(t, c.httpClient(worker), n.URL()+"/healthz", ""); err != nil || st != 200 {
		t.Errorf("/healthz with a client certificate: %d %v", st, err)
	}
	cl, err := client.New(n.URL(), client.Options{Token: adminToken, TLS: c.tlsConfig(worker)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.PutQueue(context.Background(), "gated", api.QueueConfig{}); err != nil {
		t.Errorf("the Go client with a client certificate: %v", err)
	}
	// The playground's lessons drive the node through its API without either.
	runLesson(t, n, c.httpClient(worker), adminToken)
}

// The SQS API over TLS with the AWS SDK for Go v2: queue URLs are https, and messages
// go through.
func TestSQSOverTLS(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	n := open(t, Config{AuthToken: adminToken, Console: ConsoleConfig{Disabled: true}, TLS: TLSConfig{CertFile: c.cert, KeyFile: c.key}}, Runtime{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sdk := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(n.URL()), RetryMaxAttempts: 1, HTTPClient: c.httpClient(),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: AdminName, SecretAccessKey: adminToken}, nil
		}),
	})
	q, err := sdk.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tls-sqs")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(*q.QueueUrl, n.URL()+"/") {
		t.Errorf("queue URL %s, want it under %s", *q.QueueUrl, n.URL())
	}
	if _, err := sdk.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("signed, over TLS")}); err != nil {
		t.Fatal(err)
	}
	out, err := sdk.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 1})
	if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "signed, over TLS" {
		t.Fatalf("receive: %+v %v", out, err)
	}
	if _, err := sdk.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	// The SDK's default client does not trust the test's CA.
	plain := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(n.URL()), RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: AdminName, SecretAccessKey: adminToken}, nil
		})})
	var unknown x509.UnknownAuthorityError
	if _, err := plain.ListQueues(ctx, &awssqs.ListQueuesInput{}); !errors.As(err, &unknown) {
		t.Errorf("an SDK client that does not trust the CA: %v", err)
	}
}

// The in-memory listener: connections made by its dial reach Accept; after Close,
// Accept and dial fail.
func TestInProcessListener(t *testing.T) {
	t.Parallel()
	l := newInProcessListener()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("hi"))
		c.Close()
	}()
	c, err := l.dial(context.Background(), "tcp", "127.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	if string(b) != "hi" || c.RemoteAddr().String() != "in-process" {
		t.Errorf("read %q from %s", b, c.RemoteAddr())
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	if _, err := l.dial(context.Background(), "tcp", ""); !errors.Is(err, net.ErrClosed) {
		t.Errorf("dial after Close: %v", err)
	}
}
