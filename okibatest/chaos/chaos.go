// Package chaos injects the faults of an at-least-once world into okiba clients,
// deterministically, for tests and demos of idempotent consumers:
//
//   - lost acks: the consumer processed a message and acked it, but the ack never
//     reached the broker, so the message comes back when its lease ends (Transport.LoseAck);
//   - crashes: from some moment on, nothing a consumer sends reaches the broker — its
//     acks, nacks and lease extensions are lost — so whatever it held comes back
//     (Transport.Crash);
//   - broker restarts: an embedded broker closed and reopened on the same data directory
//     and address (Broker.Restart).
//
// Whether a fault happens is decided by Dice: a hash of a seed, the fault's name, the
// message and the attempt, so a run with the same seed makes the same decisions for the
// same messages, whatever the scheduling.
package chaos

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"sync/atomic"
)

// Dice decides faults from a seed. The zero value is seed 0.
type Dice struct {
	Seed uint64
}

// Roll returns a number in [0, 1) determined by the seed, the fault's name, a key (a
// message or event id) and an attempt number (a delivery count).
func (d Dice) Roll(fault, key string, attempt uint64) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], d.Seed)
	h.Write(b[:])
	h.Write([]byte(fault))
	h.Write([]byte{0})
	h.Write([]byte(key))
	binary.LittleEndian.PutUint64(b[:], attempt)
	h.Write(b[:])
	return float64(mix(h.Sum64())>>11) / (1 << 53)
}

// Hit reports whether a fault with probability rate happens for key at attempt.
func (d Dice) Hit(rate float64, fault, key string, attempt uint64) bool {
	return rate > 0 && d.Roll(fault, key, attempt) < rate
}

// mix is SplitMix64's finaliser: it spreads FNV's bits so that nearby inputs give
// unrelated outputs.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Rate is a probability that can be changed while goroutines read it (a chaos knob at
// run time). The zero value is 0.
type Rate struct{ bits atomic.Uint64 }

// NewRate returns a Rate set to p.
func NewRate(p float64) *Rate {
	r := &Rate{}
	r.Set(p)
	return r
}

// Set sets the probability, clamped to [0, 1].
func (r *Rate) Set(p float64) {
	if math.IsNaN(p) || p < 0 {
		p = 0
	}
	r.bits.Store(math.Float64bits(min(p, 1)))
}

// Get returns the probability.
func (r *Rate) Get() float64 { return math.Float64frombits(r.bits.Load()) }
