package queue

import (
	"runtime"
	"testing"
)

// BenchmarkMachineSendReceiveAck is the state machine's own cost per message (no I/O):
// send one, receive it, ack it.
func BenchmarkMachineSendReceiveAck(b *testing.B) {
	m, s := New(), &discardSink{}
	if _, err := m.PutQueue(t0, s, "q", testConfig("q")); err != nil {
		b.Fatal(err)
	}
	in := []SendInput{{Payload: Payload{Body: make([]byte, 1024)}, Delay: -1}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := t0 + int64(i/1000)
		m.Send(now, s, "q", in)
		ds, _ := m.Receive(now, s, "q", 1, 30_000, 0)
		m.Ack(now, s, "q", []Lease{ds[0].Lease})
	}
}

// BenchmarkIndexBytesPerMessage reports the in-memory index cost of a queued message
// (the machine keeps no body; the payload store's table adds 8 bytes a message), the
// figure behind the deep-backlog target.
func BenchmarkIndexBytesPerMessage(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		m, s := New(), &discardSink{}
		m.PutQueue(t0, s, "q", testConfig("q"))
		in := make([]SendInput, 1000)
		for j := range in {
			in[j] = SendInput{Payload: Payload{Body: []byte("x")}, Delay: -1}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for sent := 0; sent < n; sent += len(in) {
			m.Send(t0, s, "q", in)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/msg")
		runtime.KeepAlive(m)
	}
}

type discardSink struct{ off uint64 }

func (s *discardSink) Emit(r Record) { s.off += 64 }
