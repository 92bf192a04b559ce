package harness

import (
	"testing"
	"time"
)

func TestStampRoundTrip(t *testing.T) {
	now := time.Now()
	for _, size := range []int{0, 16, 17, 128, 1024, 70000} {
		b := NewBody(size, now, 123456789)
		if len(b) != max(size, StampSize) {
			t.Fatalf("size %d: got %d bytes", size, len(b))
		}
		for i := StampSize; i < len(b); i++ {
			if b[i] != 'a'+byte(i%26) {
				t.Fatalf("size %d: byte %d is %q", size, i, b[i])
			}
		}
		got, seq, ok := ReadStamp(b)
		if !ok || seq != 123456789 || got.Sub(now).Abs() > time.Microsecond {
			t.Fatalf("size %d: stamp %v %d %v, want %v 123456789", size, got, seq, ok, now)
		}
	}
}

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got) > float64(c.want)*1.01 {
			t.Errorf("q%.2f = %v, want %v within 1%% above", c.q, got, c.want)
		}
	}
}
