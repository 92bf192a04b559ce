package client

import "time"

// ProducerAccepted reports how many Sends p's owner goroutine has taken, so that tests
// can wait until messages are gathered instead of sleeping.
func ProducerAccepted(p *Producer) int64 { return p.accepted.Load() }

// StreamConns is how many stream connections a client opens at most.
const StreamConns = streamConns

// StreamIdle is how long, by the client's clock, a stream may go unused.
const StreamIdle = streamIdle

// SetDefaultProducerLinger changes the default linger's cap, until restore is called.
func SetDefaultProducerLinger(d time.Duration) (restore func()) {
	old := defaultProducerLinger
	defaultProducerLinger = d
	return func() { defaultProducerLinger = old }
}

// HandlerLogBurst and HandlerLogInterval are the handler-error log's rate: the first
// HandlerLogBurst lines of each HandlerLogInterval.
const (
	HandlerLogBurst    = handlerLogBurst
	HandlerLogInterval = handlerLogInterval
)
