package main

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

const tlsToken = "tls-token-tls-token-tls-token"

// serveTLS runs okiba serve in-process with the args, and returns its https URL and log.
func serveTLS(t *testing.T, env map[string]string, args ...string) (string, *testkit.SyncBuffer, func() int) {
	t.Helper()
	url, log, stop := serveInProcess(t, env, append([]string{"--addr", "127.0.0.1:0", "--auth-token", tlsToken}, args...)...)
	if !strings.Contains(log.String(), `msg="okiba serving" url=https://`) {
		t.Fatalf("serve with TLS does not serve https:\n%s", log.String())
	}
	return strings.Replace(url, "http://", "https://", 1), log, stop
}

// served is the common name of the certificate the server at url shows a new connection.
func served(t *testing.T, ca *testkit.CA, url string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := hc.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].Subject.CommonName
}

// okiba serve with --tls-cert and --tls-key: the CLI works over it with --ca-cert (or
// OKIBA_CA_CERT) and refuses the server without; SIGHUP reloads the files, and a bad
// pair leaves the previous certificate serving.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testkit.NewCA(t, "okiba test CA")
	caFile := ca.WriteFile(t, dir, "ca.pem")
	cert, key := ca.IssueFiles(t, dir, "server", "127.0.0.1", "localhost")
	url, log, stop := serveTLS(t, map[string]string{"OKIBA_DATA": t.TempDir()}, "--tls-cert", cert, "--tls-key", key)
	contains(t, "log", log.String(), `msg="TLS on`, `subject="CN=server"`, "names=localhost,127.0.0.1", "client_certificates=false")

	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url, "OKIBA_TOKEN": tlsToken}}
	h.ok("queue", "create", "q", "--ca-cert", caFile)
	h.ok("send", "q", "over TLS", "--ca-cert", caFile)
	r := h.fails(1, "queue", "list")
	contains(t, "stderr without --ca-cert", r.err, "certificate signed by unknown authority")
	h.env["OKIBA_CA_CERT"] = caFile
	if got := h.recvJSON("q", "--ack"); len(got) != 1 || got[0].Body != "over TLS" {
		t.Fatalf("recv with OKIBA_CA_CERT: %+v", got)
	}

	// Renewed files, then SIGHUP: new connections get the new certificate.
	renewed, renewedKey := ca.Issue(t, "server-renewed", "127.0.0.1", "localhost")
	testkit.WriteFile(t, cert, renewed)
	testkit.WriteFile(t, key, renewedKey)
	syscall.Kill(os.Getpid(), syscall.SIGHUP) // serve has taken SIGHUP since before it served
	testkit.Eventually(t, 5*time.Second, func() bool { return strings.Contains(log.String(), "TLS certificates reloaded") }, "the reload")
	if cn := served(t, ca, url); cn != "server-renewed" {
		t.Errorf("after SIGHUP a new connection gets %s", cn)
	}
	// A key that is not the certificate's: logged, and the renewed pair serves on.
	_, stray := ca.Issue(t, "stray", "127.0.0.1")
	testkit.WriteFile(t, key, stray)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testkit.Eventually(t, 5*time.Second, func() bool { return strings.Contains(log.String(), "TLS certificates not reloaded") }, "the failed reload")
	if cn := served(t, ca, url); cn != "server-renewed" {
		t.Errorf("after a failed reload a new connection gets %s", cn)
	}
	h.ok("queue", "get", "q")
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d:\n%s", code, log.String())
	}
	contains(t, "log", log.String(), "SIGHUP: reading the TLS files again", "does not match")
}

// --tls-client-ca: the CLI gets in with --client-cert and --client-key (and still
// needs its token), not without.
func TestServeTLSClientCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testkit.NewCA(t, "okiba test CA")
	clients := testkit.NewCA(t, "okiba test client CA")
	caFile := ca.WriteFile(t, dir, "ca.pem")
	cert, key := ca.IssueFiles(t, dir, "server", "127.0.0.1")
	clientCert, clientKey := clients.IssueFiles(t, dir, "worker")
	url, log, _ := serveTLS(t, map[string]string{"OKIBA_DATA": t.TempDir(), "OKIBA_TLS_CLIENT_CA": clients.WriteFile(t, dir, "clients.pem")},
		"--tls-cert", cert, "--tls-key", key)
	contains(t, "log", log.String(), "client_certificates=true")

	h := &harness{t: t, env: map[string]string{"OKIBA_SERVER": url, "OKIBA_CA_CERT": caFile, "OKIBA_TOKEN": tlsToken}}
	contains(t, "stderr without a client certificate", h.fails(1, "queue", "list").err, "certificate required")
	h.ok("queue", "create", "gated", "--client-cert", clientCert, "--client-key", clientKey)
	h.env["OKIBA_CLIENT_CERT"], h.env["OKIBA_CLIENT_KEY"] = clientCert, clientKey
	h.ok("queue", "get", "gated")
	delete(h.env, "OKIBA_TOKEN")
	contains(t, "stderr without the token", h.fails(1, "queue", "get", "gated").err, "unauthorized")
}

// Mistakes in the TLS flags are refused, naming the flag (and the file).
func TestTLSFlagMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testkit.NewCA(t, "okiba test CA")
	cert, key := ca.IssueFiles(t, dir, "server", "127.0.0.1")
	missing := filepath.Join(dir, "missing.pem")
	h := &harness{t: t, env: map[string]string{"OKIBA_DATA": filepath.Join(dir, "data")}}
	serve := []string{"serve", "--addr", "127.0.0.1:0"}
	contains(t, "stderr", h.fails(2, append(serve, "--tls-cert", cert)...).err, "--tls-key", "give both or neither")
	contains(t, "stderr", h.fails(2, append(serve, "--tls-key", key, "--tls-client-ca", cert)...).err, "--tls-cert")
	contains(t, "stderr", h.fails(1, append(serve, "--tls-cert", missing, "--tls-key", key)...).err, "--tls-cert", missing)
	contains(t, "stderr", h.fails(1, append(serve, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", key)...).err, "--tls-client-ca", key)
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("a refused serve created the data directory: %v", err)
	}
	h.env["OKIBA_SERVER"] = "https://127.0.0.1:1"
	contains(t, "stderr", h.fails(2, "queue", "list", "--ca-cert", missing).err, "--ca-cert", missing)
	contains(t, "stderr", h.fails(2, "queue", "list", "--ca-cert", key).err, "--ca-cert", "no PEM certificate")
	contains(t, "stderr", h.fails(2, "queue", "list", "--client-cert", cert).err, "--client-cert and --client-key")
}

// --print-config shows the TLS keys, from the file, the environment or the flags.
func TestServePrintConfigTLS(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "okiba.json")
	testkit.WriteFile(t, file, []byte(`{"tls": {"cert_file": "/etc/okiba/file.crt", "key_file": "/etc/okiba/file.key"}}`))
	h := &harness{t: t, env: map[string]string{"OKIBA_TLS_KEY": "/etc/okiba/env.key"}}
	out := h.ok("serve", "--config", file, "--print-config", "--tls-client-ca", "/etc/okiba/clients.pem")
	contains(t, "print-config", out, `"tls": {`, `"cert_file": "/etc/okiba/file.crt"`, `"key_file": "/etc/okiba/env.key"`, `"client_ca_file": "/etc/okiba/clients.pem"`)
}
