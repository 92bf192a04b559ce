package auth

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
)

func TestThrottleDelaysFailuresBeyondTheBurst(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	th := &Throttle{Rate: 1, Burst: 3, MaxDelay: 5 * time.Second, Clock: fc}
	for i := range 3 {
		if d := th.Delay("10.0.0.1"); d != 0 {
			t.Fatalf("failure %d within the burst waits %v", i+1, d)
		}
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if d := th.Delay("10.0.0.1"); d != want {
			t.Fatalf("failure %d beyond the burst waits %v, want %v", i+1, d, want)
		}
	}
	if d := th.Delay("10.0.0.2"); d != 0 {
		t.Fatalf("another source waits %v", d)
	}
	// Debt stops growing at the cap: after burst + cap seconds the bucket is full again.
	fc.Advance(8 * time.Second)
	if d := th.Delay("10.0.0.1"); d != 0 {
		t.Fatalf("after the bucket refilled: %v", d)
	}
	// At the rate, a source never waits.
	for range 20 {
		fc.Advance(time.Second)
		if d := th.Delay("10.0.0.3"); d != 0 {
			t.Fatalf("a source at the rate waits %v", d)
		}
	}
}

func TestThrottleWaitsOnTheClockAndForgetsTheOldest(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	th := &Throttle{Rate: 1, Burst: 1, MaxSources: 2, Clock: fc}
	th.Delay("a")
	done := make(chan struct{})
	go func() { th.Wait(context.Background(), "a"); close(done) }()
	if err := fc.WaitTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("answered before its turn")
	default:
	}
	fc.Advance(time.Second)
	testkit.Recv(t, (<-chan struct{})(done), 5*time.Second, "the delayed answer")

	th.Delay("b")
	th.Delay("c") // "a" is forgotten: it starts with a full bucket again
	if d := th.Delay("a"); d != 0 {
		t.Fatalf("a forgotten source waits %v", d)
	}
}

func TestSourcesBelieveOnlyTrustedProxies(t *testing.T) {
	trusted, err := ParseProxies([]string{"10.0.0.0/8", "192.168.1.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := Sources{Trusted: trusted}
	for _, c := range []struct{ peer, xff, want string }{
		{"203.0.113.9:5000", "1.2.3.4", "203.0.113.9"},             // not a proxy: its header is the client's lie
		{"10.1.2.3:5000", "1.2.3.4", "1.2.3.4"},                    // a proxy says who
		{"10.1.2.3:5000", "6.6.6.6, 1.2.3.4, 10.9.9.9", "1.2.3.4"}, // the rightmost untrusted hop
		{"192.168.1.1:80", "", "192.168.1.1"},                      // nothing forwarded
		{"10.1.2.3:5000", "not-an-ip, 1.2.3.4", "1.2.3.4"},         // malformed beyond the first untrusted hop
		{"10.1.2.3:5000", "1.2.3.4, garbage", "10.1.2.3"},          // a malformed hop stops belief
		{"[::ffff:10.0.0.7]:1", "2001:db8::1", "2001:db8::1"},      // mapped peer, IPv6 client
		{"[2001:db8::5]:1", "1.2.3.4", "2001:db8::5"},              // IPv6 peer, untrusted
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := s.Of(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	if _, err := ParseProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad prefix was accepted")
	}
}
