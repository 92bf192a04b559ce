package client

// StreamConns is how many stream connections a client opens at most.
const StreamConns = streamConns

// StreamIdle is how long, by the client's clock, a stream may go unused.
const StreamIdle = streamIdle

// HandlerLogBurst and HandlerLogInterval are the handler-error log's rate: the first
// HandlerLogBurst lines of each HandlerLogInterval.
const (
	HandlerLogBurst    = handlerLogBurst
	HandlerLogInterval = handlerLogInterval
)

// NewWatchedProducer is NewProducer, with a channel that says, each time the producer's
// owner goroutine has taken in what was queued and waits (its linger's timer armed),
// how many Sends it has taken in all. The channel holds the latest count only: a test
// reads until it sees the count it waits for.
func NewWatchedProducer(c *Client, queue string, opts ProducerOptions) (*Producer, <-chan int64) {
	p := newProducer(c, queue, opts)
	parked := make(chan int64, 1)
	p.b.parked = latest(parked)
	p.b.start()
	return p, parked
}

// latest returns a parked hook that keeps the latest count in ch: the owner is the only
// sender, so after the drain there is room.
func latest(ch chan int64) func(int64) {
	return func(n int64) {
		select {
		case <-ch:
		default:
		}
		ch <- n
	}
}

// NewWatchedTopicPublisher is NewTopicPublisher with the channel of NewWatchedProducer:
// how many Publishes the owner has taken in, each time it waits.
func NewWatchedTopicPublisher(c *Client, topic string, opts TopicPublisherOptions) (*TopicPublisher, <-chan int64) {
	p := newTopicPublisher(c, topic, opts)
	parked := make(chan int64, 1)
	p.b.parked = latest(parked)
	p.b.start()
	return p, parked
}
