package api

import "time"

// ClientHeader carries a client's own name, by which GET /v1/queues/{name}/consumers
// lists it (the Go client's Options.Name: host/pid by default). A client that sends none
// is listed by its principal and address.
const ClientHeader = "Okiba-Client"

// MaxClientName bounds a client's name; a longer one is cut.
const MaxClientName = 128

// Consumer is a receiver of a queue that a node saw lately (GET
// /v1/queues/{name}/consumers): memory of that node only, not replicated, empty after
// a restart.
type Consumer struct {
	// Name is the client's own name (ClientHeader), empty when it sent none.
	Name string `json:"name,omitempty"`
	// Principal is who it authenticated as, empty with authentication off.
	Principal string `json:"principal,omitempty"`
	// Remote is its connection's address (a proxy's, behind one), the latest seen.
	Remote string `json:"remote"`
	// Via is the interface of its latest receive: http, stream or sqs.
	Via       string    `json:"via"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Receives counts its receive requests, Received the messages they handed it.
	Receives uint64 `json:"receives"`
	Received uint64 `json:"received"`
	// Waiting is its long polls waiting now.
	Waiting int `json:"waiting"`
	// Leases is the leases it holds now: messages it received whose lease has neither
	// ended nor been settled. LeasesCapped: at least that many (the node keeps a bounded
	// number per receiver).
	Leases       int  `json:"leases"`
	LeasesCapped bool `json:"leases_capped,omitempty"`
}

// ConsumerList is the answer of GET /v1/queues/{name}/consumers.
type ConsumerList struct {
	Queue string `json:"queue"`
	// WindowMS is how long a receiver stays listed after its last receive (with no poll
	// waiting and no lease).
	WindowMS  int64      `json:"window_ms"`
	Consumers []Consumer `json:"consumers"`
	// InFlight is the queue's leased messages, for comparison: leases taken through
	// another node, or before this node started, are in it but in no consumer's Leases.
	InFlight int64 `json:"in_flight"`
}
