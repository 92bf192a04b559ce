package client

// ProducerAccepted reports how many Sends p's owner goroutine has taken, so that tests
// can wait until messages are gathered instead of sleeping.
func ProducerAccepted(p *Producer) int64 { return p.accepted.Load() }

// StreamConns is how many stream connections a client opens at most.
const StreamConns = streamConns
