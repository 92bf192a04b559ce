package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

// forwarder passes requests to target; with lose set, it passes the first send on and
// then breaks the connection instead of answering, as a node dying after its commit.
func forwarder(t *testing.T, target string, lose bool, sends *atomic.Int64) *httptest.Server {
	t.Helper()
	u, _ := url.Parse(target)
	var lost atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.StreamPath {
			http.NotFound(w, r) // plain HTTP, so that each call is one request here
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.HasSuffix(r.URL.Path, "/messages") && r.Method == http.MethodPost {
			sends.Add(1)
		}
		req, _ := http.NewRequest(r.Method, "http://"+u.Host+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if lose && strings.HasSuffix(r.URL.Path, "/messages") && lost.CompareAndSwap(false, true) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close() // the send happened; its answer never arrives
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A send whose answer is lost is sent again by the client, and the server answers the
// retry with the original's ids: one message in the queue for two requests that carried
// it, in either encoding.
func TestIdempotentSendSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		srv := okibatest.New(t, okibatest.Options{})
		var sends atomic.Int64
		lossy := forwarder(t, srv.URL, true, &sends)
		other := forwarder(t, srv.URL, false, &sends)
		c, err := client.New(lossy.URL, client.Options{Servers: []string{other.URL}, JSON: json, FailoverTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.PutQueue(ctx, "jobs", api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Send(ctx, "jobs", client.Message{Body: []byte("once")})
		if err != nil {
			t.Fatalf("json %v: send: %v", json, err)
		}
		if sends.Load() != 2 {
			t.Fatalf("json %v: the send reached the server %d times, want 2 (the first answer lost)", json, sends.Load())
		}
		direct, _ := client.New(srv.URL, client.Options{})
		defer direct.Close()
		page, err := direct.Peek(ctx, "jobs", client.PeekOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) != 1 || page.Messages[0].ID != res.ID {
			t.Fatalf("json %v: the queue holds %d messages (want 1, id %s): %+v", json, len(page.Messages), res.ID, page.Messages)
		}
		if c.ProducerID() == "" {
			t.Fatalf("json %v: no producer id", json)
		}
	}
}
