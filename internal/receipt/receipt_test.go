package receipt

import (
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/queue"
)

func codec(t testing.TB, secret string) *Codec {
	c, err := New([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c := codec(t, "0123456789abcdef0123456789abcdef")
	for _, l := range []queue.Lease{
		{QueueID: 1, Seq: 1, MsgID: 1, Epoch: 1},
		{QueueID: 1 << 40, Seq: 1<<63 + 5, MsgID: ^uint64(0), Epoch: ^uint32(0)},
	} {
		s := c.Encode(l)
		if len(s) > MaxLen {
			t.Fatalf("receipt %q longer than MaxLen", s)
		}
		got, err := c.Decode(s)
		if err != nil || got != l {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", l, got, err)
		}
	}
}

func TestRejectsTamperingAndForeignKeys(t *testing.T) {
	t.Parallel()
	c := codec(t, "0123456789abcdef0123456789abcdef")
	other := codec(t, "fedcba9876543210fedcba9876543210")
	s := c.Encode(queue.Lease{QueueID: 3, Seq: 9, MsgID: 77, Epoch: 2})
	if _, err := other.Decode(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("receipt from another broker accepted: %v", err)
	}
	b := []byte(s)
	for i := range b {
		mod := append([]byte(nil), b...)
		if mod[i] == 'A' {
			mod[i] = 'B'
		} else {
			mod[i] = 'A'
		}
		if l, err := c.Decode(string(mod)); err == nil {
			t.Fatalf("altered receipt (byte %d) accepted as %+v", i, l)
		}
	}
	for _, bad := range []string{"", "!!!", strings.Repeat("A", MaxLen+1), "AQ"} {
		if _, err := c.Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Decode(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	c := codec(f, "0123456789abcdef0123456789abcdef")
	f.Add(c.Encode(queue.Lease{QueueID: 1, Seq: 2, MsgID: 3, Epoch: 4}))
	f.Add("")
	f.Add("AQEBAQE")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := c.Decode(s)
		if err != nil {
			return
		}
		// Anything accepted must be exactly what we would have issued.
		if c.Encode(l) != s {
			t.Fatalf("accepted %q, which is not the canonical receipt of %+v", s, l)
		}
	})
}

// BenchmarkEncodeDecode is the receipt cost of one delivery and its ack.
func BenchmarkEncodeDecode(b *testing.B) {
	c := codec(b, "0123456789abcdef0123456789abcdef")
	l := queue.Lease{QueueID: 3, Seq: 99, MsgID: 1 << 60, Epoch: 2}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := c.Decode(c.Encode(l)); err != nil {
			b.Fatal(err)
		}
	}
}
