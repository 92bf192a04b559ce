package topic

import "testing"

// Values of Kafka's murmur2 for these keys, as Kafka's own partitioner computes them:
// a topic's keys must land where a Kafka producer puts them.
func TestMurmur2MatchesKafka(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key  string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := murmur2([]byte(c.key)); got != c.want {
			t.Errorf("murmur2(%q) = %d, want %d", c.key, got, c.want)
		}
	}
}

func TestKeyPartitionIsStableAndInRange(t *testing.T) {
	t.Parallel()
	for n := 1; n <= MaxPartitions; n++ {
		for _, k := range []string{"", "a", "order-42", "\xff\xfe"} {
			p := KeyPartition([]byte(k), n)
			if p < 0 || p >= n {
				t.Fatalf("KeyPartition(%q, %d) = %d", k, n, p)
			}
			if p != KeyPartition([]byte(k), n) {
				t.Fatalf("KeyPartition(%q, %d) is not stable", k, n)
			}
		}
	}
	// "foobar": Kafka's toPositive(-790332482) % 10.
	if got, want := KeyPartition([]byte("foobar"), 10), int(-790332482&0x7fffffff)%10; got != want {
		t.Fatalf("KeyPartition(foobar, 10) = %d, want %d", got, want)
	}
}
