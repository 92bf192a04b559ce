package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/okiba/okiba/internal/testkit"
)

// A member that does not take the stream (a node of an earlier version answers it 404)
// still gets every message, POSTed batch by batch: with the other follower cut off, the
// cluster commits only through it.
func TestStreamFallsBackToPostsForAMemberWithoutIt(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t}
	c.config = func(m *member, _ *Config) {
		if m.name == "n3" {
			m.noStream.Store(true)
		}
	}
	c.boot(3)
	l := c.leader()
	old := c.nodes[2]
	for _, m := range c.nodes {
		if m != l && m != old {
			m.cut.Store(true) // the majority is now the leader and n3
		}
	}
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 20)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(old.b, "jobs") == 20 }, "n3 to hold the 20 messages")
}

// followerOf boots a cluster of three and returns its leader, a follower and the
// follower's URL.
func followerOf(t *testing.T) (c *testCluster, l, f *member, url string) {
	t.Helper()
	c = newCluster(t, 3)
	l = c.leader()
	f = c.follower(l)
	return c, l, f, c.peers[slices.Index(c.nodes, f)].URL
}

// heartbeatFrame is a heartbeat between two members that do not exist, in the
// transport's framing: well formed, and nothing to the member that steps it.
func heartbeatFrame(t *testing.T) []byte {
	t.Helper()
	b, err := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(99), From: proto.Uint64(98)})
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

// postStream sends body as one raft stream to m and returns the answer's status and text.
func postStream(t *testing.T, url string, body []byte, proofed bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+RaftStreamPath, io.NopCloser(bytes.NewReader(body))) // unknown length: chunked
	if err != nil {
		t.Fatal(err)
	}
	if proofed {
		req.Header.Set(SecretHeader, proof(testSecret))
	}
	// A connection of its own, as a sender's stream has: a refusal ends its connection
	// (the handler's deadline), and one kept alive for the next case would race that.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(text))
}

// What is not a stream of the cluster's messages is refused with a reason, and the
// member goes on as before; a well-formed stream that ends is answered 204.
func TestStreamRefusesWhatIsNotAStreamOfMessages(t *testing.T) {
	t.Parallel()
	_, l, f, url := followerOf(t)
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 5)

	hb := heartbeatFrame(t)
	frame := func(b []byte) []byte { return append(binary.AppendUvarint(nil, uint64(len(b))), b...) }
	for _, tc := range []struct {
		name    string
		body    []byte
		proofed bool
		status  int
		says    string
	}{
		{"without the cluster's proof", hb, false, http.StatusUnauthorized, "prove they know its secret"},
		{"a message over 64 MiB", binary.AppendUvarint(nil, maxBatch+1), true, http.StatusBadRequest, "more than 64 MiB"},
		{"a frame cut short", append(binary.AppendUvarint(nil, 40), hb[1:]...), true, http.StatusBadRequest, "ended inside a frame"},
		{"a length cut short", []byte{0x80}, true, http.StatusBadRequest, "ended inside a frame"},
		{"bytes that are no message", frame([]byte{0xff, 0xff, 0xff}), true, http.StatusBadRequest, "malformed message"},
		{"an empty stream", nil, true, http.StatusNoContent, ""},
		{"messages, then the end", append(slices.Clone(hb), hb...), true, http.StatusNoContent, ""},
	} {
		status, text := postStream(t, url, tc.body, tc.proofed)
		if status != tc.status || !strings.Contains(text, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, status, text, tc.status, tc.says)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, url+RaftStreamPath, nil)
	req.Header.Set(SecretHeader, proof(testSecret))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v, want 405", resp, err)
	}
	sendN(t, l.b, "jobs", 5, 5)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 10 }, "the follower to hold the 10 messages")
}

// A stream into a member ends when the member's Raft closes, though its sender has not
// ended it: a node's shutdown does not wait on the others' streams.
func TestStreamEndsWhenTheRaftCloses(t *testing.T) {
	t.Parallel()
	_, _, f, url := followerOf(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+RaftStreamPath, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(SecretHeader, proof(testSecret))
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	if _, err := pw.Write(heartbeatFrame(t)); err != nil {
		t.Fatal(err) // the handler reads: the stream is open
	}
	select {
	case err := <-answered:
		t.Fatalf("the stream ended before the Raft closed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	f.raft.Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the stream ended with %v, want an answer", err)
		}
	case <-ctx.Done():
		t.Fatal("the stream outlived its receiver's Raft")
	}
}

// RenewStreams (a TLS reload) has the leader's streams open again, on new connections,
// with its next messages: its heartbeats reach a follower by a stream the follower had
// not taken before.
func TestRenewStreamsOpensThemAgain(t *testing.T) {
	t.Parallel()
	_, l, f, _ := followerOf(t)
	testkit.Eventually(t, 10*time.Second, func() bool { return f.streams.Load() > 0 }, "the leader's stream to the follower")
	before := f.streams.Load()
	l.raft.RenewStreams()
	testkit.Eventually(t, 10*time.Second, func() bool { return f.streams.Load() > before }, "a new stream after the renewal")
	mustQueue(t, l.b, "jobs")
	sendN(t, l.b, "jobs", 0, 5)
	testkit.Eventually(t, 10*time.Second, func() bool { return ready(f.b, "jobs") == 5 }, "the follower to hold the 5 messages")
}
