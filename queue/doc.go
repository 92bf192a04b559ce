// Package queue is okiba's queue semantics: a pure, deterministic state machine over
// every queue of a broker, with time passed in.
//
// A command (Send, Receive, Ack, Nack, Extend, DeadLetter, PutQueue, StartRedrive, Tick,
// …) takes the current time and a Sink. It validates its input, decides, emits Records
// that describe the outcome — which message was leased until when, where a dead letter
// went — and applies each record to the in-memory state as it emits it. Apply replays
// records; because records carry every decision (ids, times, jitter already turned into
// a visible-at), replay needs no clock and no randomness and rebuilds exactly the state
// that was built live. AppendSnapshot and Restore bound replay: a checkpoint holds the
// state, the log only what came after.
//
// The machine does no I/O, starts no goroutines and takes no locks. The broker owns it
// under one lock, appends emitted records to the write-ahead log in emission order, and
// answers a caller only once its records are durable. Because the log is a prefix of
// emissions, an effect that a caller observes through its own (durable) record never
// depends on a record that a crash could lose: there are no dirty reads.
//
// What a receive leases is the machine's decision, but only the broker knows which bodies
// it can hand over: ReceiveWith asks an admission filter about each candidate, and a
// deferred candidate is reported instead of leased, for the broker to read and lease in a
// second call that continues the receive — the two lease what one would have, so the
// node's cache never decides what a receive takes. A message whose body is corrupt on the
// node is taken aside by Quarantine, a dead letter of reason corrupt, like any other.
//
// Time-driven transitions come in two kinds. Delays ending and leases ending are pure
// functions of time, applied by settle both live and during replay without records.
// Transitions with consequences beyond the message — a lease that ends into a dead
// letter (max_deliveries reached, or past retention), retention expiry — are decided
// live and logged as records.
//
// Memory: the index of a deep backlog is most of a broker's heap, so messages live in an
// arena of pointer-free chunks (index.go), named by 32-bit refs from the arrival index and
// the heaps; the garbage collector marks a few thousand chunks instead of every message.
//
// Semantics follow docs/semantics.md: receipts bound to one lease (Lease.Epoch is the delivery
// count), strict per-group order with a held head, dedup windows fixed at the first
// accepted send, dead letters that record why, retention that never cuts a live lease,
// and backpressure that refuses sends but never dead letters.
package queue
