// Package replica is one node's replica of okiba's replicated record stream: the
// queue, topic and access machines of a node, fed by a raft log (go.etcd.io/raft/v3)
// instead of the node's own write-ahead log.
//
// What is replicated is what the machines emit: every command a leader evaluates
// becomes one raft entry (entry.go) holding the records its command emitted, with the
// time it ran at and the id of the proposal. The payload store's frames, where one node
// keeps its bodies, never travel; a follower's machines apply the records exactly as a
// restarting broker replays its log (Machines, routed by the record's first byte as
// broker/checkpoint.go routes them).
//
// The Replica (replica.go) wraps a raft.RawNode and follows its Ready contract: each
// Process saves entries and hard state to the Storage before it hands back the
// messages to send, applies what is committed, and advances. It does no I/O of its own
// and starts no goroutines, so a test drives several in one goroutine (sim_test.go) and
// a node will drive one from its transport. The leader runs commands speculatively on
// its machines and answers each only when its entry is committed; a leader that loses
// its term rebuilds its machines from the committed state before it does anything
// else, so no uncommitted effect is ever seen. docs/architecture.md, "Replication (in
// progress)", says how this fits the rest.
//
// Storage is Memory (in memory, for tests) or WALStorage (walstorage.go): the raft log
// as records of okiba's write-ahead log, with first bytes 0xD0..0xDF — a range no
// other okiba record uses (queue kinds < 64, topic 64..127, payload-store frames
// 0x80..0xBF, access 0xC0..0xCF); 0xD0 entry, 0xD1 hard state, 0xD2 snapshot installed,
// 0xD3 snapshot taken, the rest reserved. Snapshots are files beside the log.
//
// What runs in a node: the entry format and WALStorage, under internal/cluster, which
// drives a node's broker by the same rules. The Replica and its Machines (no bodies) are
// the protocol's model, checked by the deterministic simulation; its snapshots hold the
// machines, not the bodies.
package replica
