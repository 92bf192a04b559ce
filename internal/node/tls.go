package node

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// TLSConfig turns TLS on for the node's port. With a certificate and its key, every
// interface on Addr — the native API and its stream, the SQS API, the console, /metrics
// and /healthz — speaks TLS 1.2 or later, and only TLS: a plain HTTP request is answered
// 400 and the connection closed. Off by default.
//
// The files are read at Open and again by (*Node).ReloadTLS (okiba serve: on SIGHUP),
// so that certificates are rotated by replacing the files, without a restart.
type TLSConfig struct {
	// CertFile holds the server's certificate in PEM, followed by the intermediate
	// certificates clients need to reach their trusted roots. Give it with KeyFile, or
	// neither.
	CertFile string `json:"cert_file,omitempty"`
	// KeyFile holds the private key of CertFile's first certificate in PEM (PKCS #1,
	// PKCS #8 or SEC 1).
	KeyFile string `json:"key_file,omitempty"`
	// ClientCAFile holds the PEM certificates of the authorities whose client
	// certificates the server accepts: a connection that presents none of theirs fails
	// its handshake. It is a gate for connections only: a request over one still proves
	// a principal (a bearer token, a session, a signature). Defaults to asking for no
	// client certificate. Needs CertFile and KeyFile.
	ClientCAFile string `json:"client_ca_file,omitempty"`
	// ClusterCAFile holds the PEM certificates of the authority that issues the cluster's
	// members their certificates: with it, the nodes authenticate each other by mutual
	// TLS besides the cluster secret — each node presents its own certificate (CertFile)
	// when it calls another, trusts only this authority for the others' (their URLs in
	// --peers must be https), and answers the nodes' paths (/v1/cluster/raft, join,
	// snapshot, peers) only over a connection whose client certificate it issued. Other
	// clients need no certificate for it (ClientCAFile still decides that). Needs
	// CertFile and KeyFile, whose certificate must be good for both server and client
	// authentication. Read at Open; member certificates rotate on a reload, the authority
	// at a restart.
	ClusterCAFile string `json:"cluster_ca_file,omitempty"`
}

// on reports whether TLS is configured.
func (c TLSConfig) on() bool { return c.CertFile != "" || c.KeyFile != "" }

// check refuses a half-given TLS configuration, naming the key that is missing.
func (c TLSConfig) check() error {
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return fieldError("tls.key_file", "the certificate is given without its key: give both or neither")
	case c.KeyFile != "" && c.CertFile == "":
		return fieldError("tls.cert_file", "the key is given without its certificate: give both or neither")
	case c.ClientCAFile != "" && !c.on():
		return fieldError("tls.client_ca_file", "client certificates are asked for in a TLS handshake, which needs the server's certificate and key too")
	case c.ClusterCAFile != "" && !c.on():
		return fieldError("tls.cluster_ca_file", "the members authenticate each other with their certificates: give this node's (--tls-cert and --tls-key) too")
	}
	return nil
}

// tlsState is one reading of the TLS files: the configuration every handshake from
// its loading to the next reload uses.
type tlsState struct {
	config *tls.Config
	leaf   *x509.Certificate
	pair   tls.Certificate
	// cluster is the pool of ClusterCAFile, nil without it.
	cluster *x509.CertPool
}

// loadTLS reads and checks the files of c. Each error is a *ConfigError naming the key
// whose file is at fault, and its message names the file.
func loadTLS(c TLSConfig) (*tlsState, error) {
	fileError := func(field string, err error) error {
		return &ConfigError{Field: field, Reason: err.Error(), Err: err}
	}
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, fileError("tls.cert_file", err)
	}
	leaf, err := firstCertificate(certPEM)
	if err != nil {
		return nil, fileError("tls.cert_file", fmt.Errorf("%s: %w", c.CertFile, err))
	}
	keyPEM, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fileError("tls.key_file", err)
	}
	// The certificates parse (above), so what fails here is the key: missing, malformed,
	// or not the certificate's.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fileError("tls.key_file", fmt.Errorf("%s (for %s): %w", c.KeyFile, c.CertFile, err))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// The stream is an HTTP/1.1 Upgrade, which HTTP/2 has no room for.
		NextProtos: []string{"http/1.1"},
		// Each reading gets session ticket keys of its own (tls.Config makes them): a
		// reload ends the resumption of sessions begun under the previous certificate
		// and client CAs, so that every connection after it is checked by the new ones.
	}
	if c.ClientCAFile != "" {
		caPEM, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fileError("tls.client_ca_file", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fileError("tls.client_ca_file", fmt.Errorf("%s holds no PEM certificate", c.ClientCAFile))
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	st := &tlsState{config: cfg, leaf: leaf, pair: pair}
	if c.ClusterCAFile != "" {
		caPEM, err := os.ReadFile(c.ClusterCAFile)
		if err != nil {
			return nil, fileError("tls.cluster_ca_file", err)
		}
		st.cluster = x509.NewCertPool()
		if !st.cluster.AppendCertsFromPEM(caPEM) {
			return nil, fileError("tls.cluster_ca_file", fmt.Errorf("%s holds no PEM certificate", c.ClusterCAFile))
		}
		// The members' certificates are asked for, not demanded: other clients connect
		// without one unless ClientCAFile demands theirs. Whether a request may reach the
		// nodes' paths is decided per request (clusterPeer).
		if cfg.ClientCAs == nil {
			cfg.ClientCAs, cfg.ClientAuth = x509.NewCertPool(), tls.VerifyClientCertIfGiven
		}
		cfg.ClientCAs.AppendCertsFromPEM(caPEM)
	}
	return st, nil
}

// clusterPeer reports whether r came over a connection whose client certificate the
// cluster's authority issued (always true without one: the cluster secret then proves
// the node alone).
func (n *Node) clusterPeer(r *http.Request) error {
	if n.tls == nil {
		return nil
	}
	st := n.tls.Load()
	if st.cluster == nil {
		return nil
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return errors.New("this path is for the cluster's members, which present a certificate of the cluster's authority (tls.cluster_ca_file)")
	}
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: st.cluster, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("this path is for the cluster's members: the client certificate is not one of the cluster's authority: %w", err)
	}
	return nil
}

// clusterTransport is how this node calls the others when the cluster's authority is
// configured: it trusts that authority only, and presents the node's current
// certificate (a reload changes it for the next connection).
func (n *Node) clusterTransport(st *tlsState) *http.Transport {
	t := forwardTransport.Clone() // its dialer gives up on an unreachable node in a second
	t.TLSClientConfig = &tls.Config{
		RootCAs:    st.cluster,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cur := st // before the port listens (a join, the probe at bootstrap)
			if n.tls != nil {
				cur = n.tls.Load()
			}
			return &cur.pair, nil
		},
	}
	return t
}

// firstCertificate parses the first certificate of a PEM file, the one the key goes with.
func firstCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return nil, errors.New("holds no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("its first certificate cannot be read: %w", err)
			}
			return c, nil
		}
	}
}

// logAttrs describe a reading for the log: whom the certificate names and until when,
// with a warning attribute when it is not valid now (clients will refuse it; it is
// served anyway, since the files are the operator's to fix).
func (s *tlsState) logAttrs(now time.Time) []any {
	names := append(s.leaf.DNSNames[:len(s.leaf.DNSNames):len(s.leaf.DNSNames)], ipStrings(s.leaf.IPAddresses)...)
	attrs := []any{"subject", s.leaf.Subject.String(), "names", strings.Join(names, ","),
		"not_after", s.leaf.NotAfter.UTC().Format(time.RFC3339), "client_certificates", s.config.ClientAuth == tls.RequireAndVerifyClientCert}
	switch {
	case now.After(s.leaf.NotAfter):
		attrs = append(attrs, "warning", "the certificate has expired")
	case now.Before(s.leaf.NotBefore):
		attrs = append(attrs, "warning", "the certificate is not valid yet")
	}
	return attrs
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// tlsListener makes each accepted connection a TLS server connection with the
// configuration current when it was accepted, which net/http then handshakes: a reload
// applies to the connections that come after it and leaves open ones alone.
type tlsListener struct {
	net.Listener
	current *atomic.Pointer[tlsState]
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.current.Load().config), nil
}

// ErrTLSOff is ReloadTLS's answer on a node without TLS.
var ErrTLSOff = errors.New("TLS is off: there are no certificates to reload")

// ReloadTLS reads the TLS files again (okiba serve does on SIGHUP): connections
// accepted after it use the new certificate and client CAs, those already open keep
// what they were set up with. When the new files do not make a valid pair (or the
// client CA file no certificate), the previous ones go on serving and the error, a
// *ConfigError, says what is wrong.
func (n *Node) ReloadTLS() error {
	if n.tls == nil {
		return ErrTLSOff
	}
	n.reloading.Lock() // the log's order is the order of the readings served
	defer n.reloading.Unlock()
	st, err := loadTLS(n.cfg.TLS)
	if err != nil {
		n.log.Error("TLS certificates not reloaded: the previous ones go on serving", "error", err)
		return err
	}
	n.tls.Store(st)
	if n.raft != nil {
		n.raft.RenewStreams() // the raft streams to the other members reconnect with it
	}
	n.log.Info("TLS certificates reloaded: new connections use them", st.logAttrs(time.Now())...)
	return nil
}
