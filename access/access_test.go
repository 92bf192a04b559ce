package access

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustGrant(t *testing.T, s string) Grant {
	t.Helper()
	g, err := ParseGrant(s)
	if err != nil {
		t.Fatalf("ParseGrant(%q): %v", s, err)
	}
	return g
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"*", "", true}, {"*", "orders", true}, {"orders", "orders", true}, {"orders", "orders2", false},
		{"orders-*", "orders-eu", true}, {"orders-*", "orders-", true}, {"orders-*", "orders", false},
		{"*-dlq", "orders-dlq", true}, {"*-dlq", "orders-dlq2", false}, {"a*b*c", "abc", true},
		{"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYcZ", false}, {"events.*", "events.paid", true},
		{"events.*", "eventsXpaid", false}, {"**", "x", true}, {"a*", "", false},
	} {
		if got := glob(c.pat, c.name); got != c.want {
			t.Errorf("glob(%q, %q) = %v, want %v", c.pat, c.name, got, c.want)
		}
	}
}

// naive is glob by recursion, the definition the linear walk must agree with.
func naive(p, n string) bool {
	if p == "" {
		return n == ""
	}
	if p[0] == '*' {
		return naive(p[1:], n) || n != "" && naive(p, n[1:])
	}
	return n != "" && p[0] == n[0] && naive(p[1:], n[1:])
}

func TestGlobAgreesWithItsDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func(alpha string, n int) string {
		var b strings.Builder
		for range r.IntN(n) {
			b.WriteByte(alpha[r.IntN(len(alpha))])
		}
		return b.String()
	}
	for range 20000 {
		p, n := word("ab*", 7), word("ab", 8)
		if glob(p, n) != naive(p, n) {
			t.Fatalf("glob(%q, %q) = %v, the definition says %v", p, n, glob(p, n), naive(p, n))
		}
	}
}

func TestAllows(t *testing.T) {
	q, tp := QueueNamed("orders-eu"), TopicNamed("events.paid")
	for _, c := range []struct {
		grants []string
		perm   Permission
		on     Resource
		want   bool
	}{
		{nil, Send, q, false},
		{[]string{"send queue:orders-*"}, Send, q, true},
		{[]string{"send queue:orders-*"}, Receive, q, false},
		{[]string{"send queue:orders-*"}, Send, QueueNamed("payments"), false},
		{[]string{"send queue:orders-*"}, Send, TopicNamed("orders-eu"), false},
		{[]string{"manage queue:*"}, Browse, q, true},
		{[]string{"manage queue:*"}, Send, q, false},
		{[]string{"browse queue:*"}, Manage, q, false},
		{[]string{"receive topic:events.*"}, Receive, tp, true},
		{[]string{"admin"}, Manage, tp, true},
		{[]string{"admin"}, Admin, Resource{}, true},
		{[]string{"manage *"}, Admin, Resource{}, false},
		{[]string{"metrics"}, Metrics, Resource{}, true},
		{[]string{"metrics"}, Browse, q, false},
		{[]string{"browse *"}, Metrics, Resource{}, true},
		{[]string{"browse queue:*"}, Metrics, Resource{}, false},
		{[]string{"browse *"}, Browse, tp, true},
	} {
		var gs Grants
		for _, s := range c.grants {
			gs = append(gs, mustGrant(t, s))
		}
		if got := gs.Allows(c.perm, c.on); got != c.want {
			t.Errorf("%v allows %s on %s = %v, want %v", c.grants, c.perm, c.on, got, c.want)
		}
	}
}

func TestParseGrantRefusesWhatItCannotMean(t *testing.T) {
	for _, s := range []string{"", "write queue:a", "send", "send queue:", "send queue", "send bucket:a",
		"send queue:a/b", "admin queue:*", "metrics topic:x", "send queue:" + strings.Repeat("a", MaxPattern)} {
		_, err := ParseGrant(s)
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("ParseGrant(%q) = %v, want an InvalidError", s, err)
		}
	}
	g := mustGrant(t, "  receive   topic:a*  ")
	if g.String() != "receive topic:a*" {
		t.Errorf("round trip: %q", g)
	}
}

type log struct{ recs [][]byte }

func (l *log) Emit(r Record) { l.recs = append(l.recs, r.AppendTo(nil)) }

func TestMachineReplaysAndSnapshotsAlike(t *testing.T) {
	m, l := New(), &log{}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	g := func(s ...string) []Grant {
		var out []Grant
		for _, x := range s {
			out = append(out, mustGrant(t, x))
		}
		return out
	}
	if _, err := m.Create(now, l, "worker", g("receive queue:orders-*", "send queue:orders-*"), []byte("sealed-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(now, l, "worker", nil, []byte("x")); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := m.Create(now, l, "-bad", nil, []byte("x")); err == nil {
		t.Fatal("bad name accepted")
	}
	if _, err := m.Create(now, l, "ops", g("admin"), []byte("sealed-2")); err != nil {
		t.Fatal(err)
	}
	p, err := m.Grant(now+1, l, "worker", g("browse queue:*", "send queue:orders-*"))
	if err != nil || len(p.Grants) != 3 {
		t.Fatalf("grant: %v %v", p.Grants, err)
	}
	if p, err = m.Revoke(now+2, l, "worker", g("send queue:orders-*", "manage topic:x")); err != nil || len(p.Grants) != 2 {
		t.Fatalf("revoke: %v %v", p.Grants, err)
	}
	if p.Grants.Allows(Send, QueueNamed("orders-1")) {
		t.Fatal("revoked grant still allows")
	}
	// A rotation keeps the old secret for an hour, a second one keeps only the newest
	// old one, and keep 0 leaves the new one alone.
	p, _ = m.Rotate(now+3, l, "worker", []byte("sealed-3"), time.Hour)
	if len(p.Secrets) != 2 || p.Secrets[0].Expires != now+3+time.Hour.Milliseconds() || p.Secrets[1].Expires != 0 {
		t.Fatalf("after rotate: %+v", p.Secrets)
	}
	p, _ = m.Rotate(now+4, l, "worker", []byte("sealed-4"), 2*time.Hour)
	if len(p.Secrets) != 2 || string(p.Secrets[0].Sealed) != "sealed-3" || string(p.Secrets[1].Sealed) != "sealed-4" {
		t.Fatalf("after second rotate: %+v", p.Secrets)
	}
	p, _ = m.Rotate(now+5, l, "worker", []byte("sealed-5"), 0)
	if len(p.Secrets) != 1 || string(p.Secrets[0].Sealed) != "sealed-5" {
		t.Fatalf("after rotate with keep 0: %+v", p.Secrets)
	}
	ids := map[uint64]bool{}
	for _, pr := range m.List() {
		for _, s := range pr.Secrets {
			if ids[s.ID] {
				t.Fatalf("secret id %d twice", s.ID)
			}
			ids[s.ID] = true
		}
	}
	if err := m.Delete(now+6, l, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(now+6, l, "ops"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// A principal made again under a deleted one's name gets a secret id never seen.
	p, _ = m.Create(now+7, l, "ops", nil, []byte("sealed-6"))
	if ids[p.Secrets[0].ID] {
		t.Fatalf("reused secret id %d", p.Secrets[0].ID)
	}

	replayed := New()
	for _, raw := range l.recs {
		r, err := DecodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := replayed.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	a, b := m.AppendSnapshot(nil), replayed.AppendSnapshot(nil)
	if !bytes.Equal(a, b) {
		t.Fatal("replayed machine's snapshot differs")
	}
	restored, err := Restore(a)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored.AppendSnapshot(nil), a) {
		t.Fatal("restored machine's snapshot differs")
	}
	// The restored machine goes on numbering secrets where the first stopped.
	p1, _ := m.Rotate(now+8, &log{}, "ops", []byte("s"), 0)
	p2, _ := restored.Rotate(now+8, &log{}, "ops", []byte("s"), 0)
	if p1.Secrets[0].ID != p2.Secrets[0].ID {
		t.Fatalf("secret ids diverge after restore: %d vs %d", p1.Secrets[0].ID, p2.Secrets[0].ID)
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	m, l := New(), &log{}
	if _, err := m.Create(1, l, "a", []Grant{mustGrant(t, "send queue:x")}, []byte("s")); err != nil {
		t.Fatal(err)
	}
	raw := l.recs[0]
	for i := range raw {
		if _, err := DecodeRecord(raw[:i]); err == nil {
			t.Fatalf("a record cut at %d of %d decoded", i, len(raw))
		}
	}
	if _, err := DecodeRecord(append(append([]byte(nil), raw...), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodeRecord([]byte{0xCE, 0}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	snap := m.AppendSnapshot(nil)
	for i := 1; i < len(snap); i++ {
		if _, err := Restore(snap[:i]); err == nil {
			t.Fatalf("a snapshot cut at %d of %d restored", i, len(snap))
		}
	}
}

func TestLimits(t *testing.T) {
	m := New()
	for i := range MaxPrincipals {
		if _, err := m.Create(1, &log{}, "p"+strconv.Itoa(i), nil, []byte("s")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Create(1, &log{}, "onemore", nil, []byte("s")); !errors.Is(err, ErrTooMany) {
		t.Fatalf("past the limit: %v", err)
	}
	gs := make([]Grant, MaxGrants+1)
	for i := range gs {
		gs[i] = mustGrant(t, "send queue:q"+strconv.Itoa(i))
	}
	if _, err := New().Create(1, &log{}, "a", gs, []byte("s")); err == nil {
		t.Fatal("too many grants accepted")
	}
	if _, err := New().Create(1, &log{}, "a", nil, make([]byte, MaxSealed+1)); err == nil {
		t.Fatal("oversized sealed secret accepted")
	}
}
