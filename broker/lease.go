package broker

import "github.com/okiba/okiba/queue"

// LeaseOf returns the lease receipt names, verified as every settle verifies it
// (ErrInvalidReceipt for a malformed or forged one), without looking at the queue: a
// front that was told a receipt is stale can then tell a lease that merely ran out
// (the message is there, delivered as often as the lease says) from one whose message
// was deleted or received again, which SQS answers differently.
func (b *Broker) LeaseOf(receipt string) (queue.Lease, error) {
	return b.receipts.Decode(receipt)
}
