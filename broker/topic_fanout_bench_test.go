package broker

import (
	"fmt"
	"sync"
	"testing"

	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// BenchmarkTopicFanout is the in-process form of the harness's t3 (targets 3a–3b of the
// topics issue): 16 goroutines publish batches of 64 records of 1 KiB into a topic of
// four partitions with 0, 1 or 10 subscriptions, each into a queue of its own with no
// filter, so a publish with 10 subscriptions also enqueues ten messages. The broker's
// cost per publish is what it reports (ns/op is per record); the HTTP layer and the
// client are not in it.
func BenchmarkTopicFanout(b *testing.B) {
	for _, subs := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("subs%d", subs), func(b *testing.B) {
			br, err := Open(Config{Dir: b.TempDir(), MinFreeBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if _, _, err := br.PutTopic(ctx, "t", func(cfg *topic.Config, _ bool) error {
				cfg.Partitions = 4
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			for i := range subs {
				q := fmt.Sprintf("q%d", i)
				if _, _, err := br.PutQueue(ctx, q, func(c *queue.Config, _ bool) error {
					c.DeadLetterQueue, c.MaxDeliveries = queue.NoDeadLetterQueue, 0
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if _, _, err := br.Subscribe(ctx, "t", q, topic.SubscriptionConfig{Queue: q}, SubStart{}); err != nil {
					b.Fatal(err)
				}
			}
			const producers, batch = 16, 64
			body := make([]byte, 1024)
			in := make([]topic.PublishInput, batch)
			for i := range in {
				in[i] = topic.PublishInput{Partition: topic.AnyPartition, Body: body}
			}
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + producers*batch - 1) / (producers * batch)
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if _, err := br.Publish(ctx, "t", in); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
