package client

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// ids names the leases, sorted.
func ids(ls []*lease) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.d.ID)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestExtendScheduleExtendsAnEighthBeforeHalfTheLease(t *testing.T) {
	t.Parallel()
	s := extendSchedule{vis: 8 * time.Second}
	leases := map[string]*lease{}
	add := func(id string, at time.Time, state leaseState) *lease {
		l := &lease{d: Delivery{ID: id}, state: state}
		s.renew(l, at)
		leases[id] = l
		return l
	}
	if due, wake := s.due(t0, leases); len(due) != 0 || !wake.IsZero() {
		t.Fatalf("no lease: due %q, wake %v; want nothing and no wake", ids(due), wake)
	}
	a, b := add("a", t0, leaseRunning), add("b", t0, leaseWaiting) // received together
	add("c", t0.Add(time.Second), leaseRunning)
	add("settling", t0, leaseSettling)
	if a.end != t0.Add(8*time.Second) || a.extendAt != t0.Add(4*time.Second) {
		t.Fatalf("a lease received at t0 ends at %v, is extended at %v", a.end.Sub(t0), a.extendAt.Sub(t0))
	}
	due, wake := s.due(t0, leases)
	if len(due) != 0 || wake != t0.Add(3*time.Second) {
		t.Fatalf("at t0: due %q, wake at %v; want none, wake at 3s", ids(due), wake.Sub(t0))
	}
	if due, _ := s.due(t0.Add(3*time.Second-time.Nanosecond), leases); len(due) != 0 {
		t.Fatalf("due %q a moment before their time", ids(due))
	}
	due, wake = s.due(t0.Add(3*time.Second), leases)
	if ids(due) != "a b" || wake != t0.Add(4*time.Second) {
		t.Fatalf("at 3s: due %q, wake at %v; want a and b together, then c at 4s", ids(due), wake.Sub(t0))
	}
	s.renew(a, t0.Add(3*time.Second))
	s.renew(b, t0.Add(3*time.Second))
	due, wake = s.due(t0.Add(4*time.Second), leases)
	if ids(due) != "c" || wake != t0.Add(6*time.Second) {
		t.Fatalf("at 4s: due %q, wake at %v; want c, then a and b at 6s", ids(due), wake.Sub(t0))
	}
	// A lease being settled is never extended, however late.
	if due, _ := s.due(t0.Add(time.Hour), leases); ids(due) != "a b c" {
		t.Fatalf("an hour on: due %q, want a b c and not the one settling", ids(due))
	}
	for vis, want := range map[time.Duration]time.Duration{8 * time.Second: 800 * time.Millisecond, time.Hour: time.Second, 5 * time.Millisecond: time.Millisecond} {
		if got := (extendSchedule{vis: vis}).retryAt(t0).Sub(t0); got != want {
			t.Errorf("lease %v: a failed extension is retried after %v, want %v", vis, got, want)
		}
	}
}
