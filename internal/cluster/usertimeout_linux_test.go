package cluster

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/sys/unix"
)

// The streams' connections carry TCP_USER_TIMEOUT, whichever transport the node gave
// (its own default, or the mutual-TLS one, both *http.Transport).
func TestStreamConnectionsHaveAUserTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }() // until the dialer closes it
		}
	}()
	for name, base := range map[string]*http.Client{
		"no transport":  {},
		"a transport":   {Transport: &http.Transport{}},
		"with a dialer": {Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext}},
	} {
		tr, ok := streamClient(base).Transport.(*http.Transport)
		if !ok {
			t.Fatalf("%s: the stream client's transport is a %T", name, streamClient(base).Transport)
		}
		conn, err := tr.DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		conn.Close()
		if gerr != nil || got != int(streamWriteTimeout.Milliseconds()) {
			t.Errorf("%s: TCP_USER_TIMEOUT %d (%v), want %d", name, got, gerr, streamWriteTimeout.Milliseconds())
		}
		if base.Transport != nil && tr == base.Transport {
			t.Errorf("%s: the node's own transport was changed, not a copy", name)
		}
	}
}
