package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// The client flags for a server that speaks TLS (okiba serve --tls-cert): which CA to
// trust, and which client certificate to present when the server asks for one
// (--tls-client-ca). The certificate is a gate for the connection only: the server
// still wants --token.

func (c *clientFlags) registerTLS(f *flags) {
	f.StringVar(&c.caCert, "ca-cert", "", "trust the CA certificates in `FILE` (PEM) for an https:// --server, instead of the system's (env OKIBA_CA_CERT)")
	f.StringVar(&c.clientCert, "client-cert", "", "present the client certificate in `FILE` (PEM) to a server that asks for one, with --client-key (env OKIBA_CLIENT_CERT)")
	f.StringVar(&c.clientKey, "client-key", "", "the private key of --client-cert, in `FILE` (PEM; env OKIBA_CLIENT_KEY)")
}

// tlsConfig is the client's TLS configuration from the flags and the environment: nil
// (the system's roots, no client certificate) when none is given.
func (c *clientFlags) tlsConfig(f *flags) (*tls.Config, error) {
	a := f.app
	ca := a.pick(c.caCert, "OKIBA_CA_CERT", "")
	cert := a.pick(c.clientCert, "OKIBA_CLIENT_CERT", "")
	key := a.pick(c.clientKey, "OKIBA_CLIENT_KEY", "")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, f.fail("give --client-cert and --client-key together")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		data, err := os.ReadFile(ca)
		if err != nil {
			return nil, f.fail("--ca-cert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, f.fail("--ca-cert: %s holds no PEM certificate", ca)
		}
		tc.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, f.fail("--client-cert %s, --client-key %s: %v", cert, key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
