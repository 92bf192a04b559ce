package queue

import (
	"runtime"
	"strconv"
	"sync"
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

// BenchmarkMachineReceiveBatch is the machine's cost per message of a receive of 64 from
// a backlog and the ack of them: plain; with an admission filter that looks each
// candidate up under a mutex, as the broker's asks its payload store's cache (the cached
// path); and deferring every candidate first, then leasing them in a second call, as the
// broker does with bodies it must read (the deep path, without its reads).
func BenchmarkMachineReceiveBatch(b *testing.B) {
	for _, mode := range []string{"plain", "admit", "deferred"} {
		b.Run(mode, func(b *testing.B) {
			m, s := New(), &discardSink{}
			if _, err := m.PutQueue(t0, s, "q", testConfig("q")); err != nil {
				b.Fatal(err)
			}
			in := make([]SendInput, 1000)
			for i := range in {
				in[i] = SendInput{Payload: Payload{Body: make([]byte, 1024)}, Delay: -1}
			}
			for range 100 { // a backlog of 100k, so that the ready heap is deep
				m.Send(t0, s, "q", in)
			}
			cached := map[Ref]*Payload{}
			var mu sync.Mutex
			lookup := func(c Candidate) bool {
				mu.Lock()
				_, ok := cached[c.Ref] // nothing is: the lookup is the cost
				mu.Unlock()
				return ok
			}
			admit := func(c Candidate) Admission { lookup(c); return Admit }
			deferAll := func(c Candidate) Admission { lookup(c); return Defer }
			leases := make([]Lease, 0, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += 64 {
				if m.ReadyCount("q") < 100_000-1000 {
					b.StopTimer()
					m.Send(t0, s, "q", in)
					b.StartTimer()
				}
				var ds []Delivery
				switch mode {
				case "plain":
					ds, _ = m.Receive(t0, s, "q", 64, 30_000, 0)
				case "admit":
					ds, _, _ = m.ReceiveWith(t0, s, "q", ReceiveSpec{Max: 64, Visibility: 30_000, Admit: admit})
				case "deferred":
					m.ReceiveWith(t0, s, "q", ReceiveSpec{Max: 64, Visibility: 30_000, Admit: deferAll})
					ds, _, _ = m.ReceiveWith(t0, s, "q", ReceiveSpec{Max: 64, Visibility: 30_000, Admit: admit})
				}
				leases = leases[:0]
				for _, d := range ds {
					leases = append(leases, d.Lease)
				}
				m.Ack(t0, s, "q", leases)
			}
		})
	}
}

// BenchmarkMachineReceiveFair is BenchmarkMachineReceiveBatch's plain mode on an
// unordered queue whose 100k backlog is spread over tenants (groups): fair delivery's
// cost per message, two heaps instead of one. tenants=1 is one noisy tenant; 1000, many.
func BenchmarkMachineReceiveFair(b *testing.B) {
	for _, tenants := range []int{1, 1000} {
		b.Run(strconv.Itoa(tenants), func(b *testing.B) {
			m, s := New(), &discardSink{}
			if _, err := m.PutQueue(t0, s, "q", unordered()); err != nil {
				b.Fatal(err)
			}
			in := make([]SendInput, 1000)
			next := 0
			fill := func() {
				for i := range in {
					in[i] = SendInput{Payload: Payload{Body: make([]byte, 1024), Group: "t" + strconv.Itoa(next%tenants)}, Delay: -1}
					next++
				}
				m.Send(t0, s, "q", in)
			}
			for range 100 {
				fill()
			}
			leases := make([]Lease, 0, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += 64 {
				if m.ReadyCount("q") < 100_000-1000 {
					b.StopTimer()
					fill()
					b.StartTimer()
				}
				ds, _ := m.Receive(t0, s, "q", 64, 30_000, 0)
				leases = leases[:0]
				for _, d := range ds {
					leases = append(leases, d.Lease)
				}
				m.Ack(t0, s, "q", leases)
			}
		})
	}
}
