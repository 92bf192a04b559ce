package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// With Servers, a call that meets a node that does not lead (503, naming the leader) or
// no node at all goes on to the leader, by itself; without them it fails.
func TestClientFailsOverToTheLeader(t *testing.T) {
	t.Parallel()
	leader := okibatest.New(t, okibatest.Options{})
	var refused atomic.Int64
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refused.Add(1)
		w.Header().Set(client.LeaderHeader, leader.URL)
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"unavailable","message":"this node follows n1"}}`))
	}))
	defer follower.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	alone, err := client.New(follower.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	if _, err := alone.PutQueue(ctx, "jobs", api.QueueConfig{}); err == nil {
		t.Fatal("a client without Servers got past a 503")
	}

	for _, first := range []string{follower.URL, dead} {
		c, err := client.New(first, client.Options{Servers: []string{dead, follower.URL, leader.URL}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
			t.Fatalf("starting at %s: %v", first, err)
		}
		for i := range 5 {
			if _, err := c.Send(ctx, "jobs", client.Message{Body: []byte{byte('a' + i)}}); err != nil {
				t.Fatalf("starting at %s: send: %v", first, err)
			}
		}
		if c.Server() != leader.URL {
			t.Fatalf("starting at %s, the client calls %s, not the leader", first, c.Server())
		}
	}
	if refused.Load() == 0 {
		t.Fatal("the follower was never asked")
	}
	if _, err := client.New(leader.URL, client.Options{Servers: []string{"ftp://x"}}); err == nil {
		t.Fatal("a server address of another scheme was taken")
	}
}

// A node that accepts the connection and never answers (paused, or cut off past the
// kernel's backlog) holds a call only for an attempt's timeout: then it goes on to the
// next node.
func TestClientFailsOverPastAHungNode(t *testing.T) {
	t.Parallel()
	leader := okibatest.New(t, okibatest.Options{})
	hang := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(hang)
	c, err := client.New(hung.URL, client.Options{Servers: []string{leader.URL}, NoStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	if _, err := c.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
		t.Fatalf("a call past a hung node: %v", err)
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("the call took %v", d)
	}
}
