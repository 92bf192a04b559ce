package replica_test

import (
	"errors"
	"fmt"

	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/queue"
)

// One replica that is a whole cluster: it elects itself, takes a command, and answers
// it once the command's entry is committed. A node drives several the same way, sending
// Output.Messages to their nodes and handing what arrives to Step.
func Example() {
	store := replica.NewMemory()
	if err := replica.Bootstrap(store, []uint64{1}); err != nil {
		panic(err)
	}
	r, err := replica.New(replica.Config{ID: 1, Storage: store})
	if err != nil {
		panic(err)
	}
	process := func() replica.Output {
		out, err := r.Process()
		if err != nil {
			panic(err)
		}
		return out
	}

	_, err = r.Propose(0, nil)
	fmt.Println("before the election:", errors.Is(err, replica.ErrNotLeader))

	_ = r.Campaign()
	process() // elected; its first entry of the term is committed and applied
	fmt.Println("leads:", r.Status().Leader)

	createQueue := func(now int64, m *replica.Machines, b *replica.Batch) any {
		cfg := queue.DefaultConfig()
		cfg.DeadLetterQueue = "orders-dlq"
		created, err := m.Queues().PutQueue(now, b.Queue(), "orders", cfg)
		if err != nil {
			return err
		}
		return created
	}
	id, err := r.Propose(1_700_000_000_000, createQueue)
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", r.Status().Pending)
	for _, o := range process().Done {
		fmt.Printf("proposal %v: entry %d, created %v\n", o.ID == id, o.Index, o.Answer)
	}
	// Output:
	// before the election: true
	// leads: true
	// pending: 1
	// proposal true: entry 3, created true
}
