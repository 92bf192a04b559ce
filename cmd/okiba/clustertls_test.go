package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

// Three members over mutual TLS (--cluster-ca): they elect a leader and replicate, a
// follower forwards over TLS, and the members' paths answer no connection without a
// certificate of the cluster's authority — whatever the cluster secret's proof says —
// while ordinary clients need none.
func TestClusterMutualTLSBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SKIP: builds the okiba binary and runs a cluster of processes: runs in its own tier (make binary), not with -short")
	}
	pc := buildProcCluster(t)
	ca, other := testkit.NewCA(t, "okiba cluster CA"), testkit.NewCA(t, "another CA")
	cert, key := ca.IssueFiles(t, pc.dir, "member", "127.0.0.1")
	pc.extra = []string{"--tls-cert", cert, "--tls-key", key, "--cluster-ca", ca.WriteFile(t, pc.dir, "cluster-ca.pem")}
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc.addrs = append(pc.addrs, ln.Addr().String())
		ln.Close()
		pc.peers = append(pc.peers, fmt.Sprintf("n%d=https://%s", i+1, pc.addrs[i]))
	}
	pc.procs = make([]*childServer, 3)
	for i := range 3 {
		pc.start(i)
	}
	https := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
	}
	plain := https()
	leader := -1
	testkit.Eventually(t, 20*time.Second, func() bool {
		for i, a := range pc.addrs {
			resp, err := plain.Get("https://" + a + "/healthz")
			if err != nil {
				continue
			}
			var h api.Health
			ok := json.NewDecoder(resp.Body).Decode(&h) == nil && h.Cluster != nil && h.Cluster.Role == "leader"
			resp.Body.Close()
			if ok {
				leader = i
				return true
			}
		}
		return false
	}, "a leader over mutual TLS")
	follower := (leader + 1) % 3
	c, err := client.New("https://"+pc.addrs[follower], client.Options{TLS: &tls.Config{RootCAs: ca.Pool()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
		t.Fatalf("a queue through a follower (forwarded over TLS): %v", err)
	}
	for i := range 5 {
		if _, err := c.Send(ctx, "jobs", client.Message{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// holds says whether the follower holds n ready messages (read on it: stale).
	holds := func(n int64) func() bool {
		return func() bool {
			resp, err := plain.Get("https://" + pc.addrs[follower] + "/v1/queues/jobs?stale=true")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var q api.Queue
			return json.NewDecoder(resp.Body).Decode(&q) == nil && q.Stats.Ready == n
		}
	}
	testkit.Eventually(t, 10*time.Second, holds(5), "the follower to hold the five messages")

	// The members' paths: the proof of the secret alone is not enough.
	secret := "binary-cluster-secret-0123456789"
	post := func(hc *http.Client) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+pc.addrs[leader]+"/v1/cluster/raft", bytes.NewReader(nil))
		req.Header.Set("Okiba-Cluster-Proof", clusterProof(secret))
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(plain); err != nil || code != http.StatusForbidden {
		t.Fatalf("a raft POST without a client certificate: %d, %v (want 403)", code, err)
	}
	if code, err := post(https(other.Certificate(t, "intruder", "127.0.0.1"))); err == nil && code != http.StatusForbidden {
		t.Fatalf("a raft POST with another authority's certificate: %d (want a failed handshake or 403)", code)
	}
	if code, err := post(https(ca.Certificate(t, "member", "127.0.0.1"))); err != nil || code != http.StatusNoContent {
		t.Fatalf("a raft POST with a member's certificate and the proof: %d, %v (want 204)", code, err)
	}

	// A SIGHUP reloads the leader's certificates and has its raft streams reconnect with
	// them: replication goes on over the new connections.
	if err := pc.procs[leader].cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(pc.procs[leader].log.String(), "TLS certificates reloaded")
	}, "the leader to reload its certificates")
	for i := 5; i < 10; i++ {
		if _, err := c.Send(ctx, "jobs", client.Message{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("a send after the leader's reload: %v", err)
		}
	}
	testkit.Eventually(t, 10*time.Second, holds(10), "the follower to hold the ten messages after the leader's reload")
}

// clusterProof is the Okiba-Cluster-Proof of a secret (internal/cluster's transport).
func clusterProof(secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("okiba cluster transport"))
	return hex.EncodeToString(mac.Sum(nil))
}
