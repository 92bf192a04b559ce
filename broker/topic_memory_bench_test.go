package broker

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/topic"
)

// BenchmarkTopicHeap measures what a topic's retained records cost the broker's heap:
// OKIBA_TOPIC_MEMORY_RECORDS records of 64 bytes (default 1M; `make
// bench-topic-memory` runs 100M) are published in batches of 1000 by 8 goroutines to a
// topic of one partition with retention forever, then, once the background move into
// the partition's segment files has settled, the live heap after a collection is
// compared with the live heap before the first publish. The design keeps one entry per
// segment and nothing per record, so the growth should follow the segment count.
// A warm-up topic of 1M records, published the same way, is filled and moved
// before the first reading, so that the buffers a loaded broker holds whatever its
// topics (the log's, sized by the load) are not counted as the measured topic's. OKIBA_TOPIC_MEMORY_HEAPPROFILE=FILE writes a heap profile at the end, before the
// broker closes.
func BenchmarkTopicHeap(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("OKIBA_TOPIC_MEMORY_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		topicHeap(b, n)
	}
}

func liveHeap() (heap, inuse uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapInuse
}

func topicHeap(b *testing.B, n int) {
	b.StopTimer()
	dir := b.TempDir()
	br, err := Open(Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	// A warm-up topic first, filled and moved, so that what every loaded broker holds
	// whatever its topics (the log's write buffers, the tail cache's, the mover's) is in
	// the heap before the measured topic exists, and its growth is the topic's own.
	for _, name := range []string{"warm", "mem"} {
		if _, _, err := br.PutTopic(ctx, name, func(cfg *topic.Config, exists bool) error {
			cfg.Partitions = 1
			cfg.RetentionAge = 0 // forever
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	publishN(b, br, "warm", 1_000_000)
	waitMoved(b, br)
	waitRested(b, br)
	heap0, inuse0 := liveHeap()
	b.StartTimer()
	start := time.Now()
	publishN(b, br, "mem", n)
	pubSec := time.Since(start).Seconds()
	b.StopTimer()
	// Let the background move into segment files finish (the mover may lag a fast
	// in-process publisher; what it has not moved yet is held in the log's tail), then
	// read the live heap until two readings a second apart agree within 1 %.
	waitMoved(b, br)
	waitRested(b, br)
	var heap1, inuse1 uint64
	prev := uint64(0)
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		heap1, inuse1 = liveHeap()
		if prev > 0 && heap1 <= prev+prev/100 && heap1+prev/100 >= prev {
			break
		}
		prev = heap1
	}
	if path := os.Getenv("OKIBA_TOPIC_MEMORY_HEAPPROFILE"); path != "" {
		// What holds the growth: go tool pprof -sample_index=inuse_space -top broker.test PATH
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	// One more publish, and the heap again: whether what is held waits for the next
	// publish (the move of the last records) or stays.
	if _, err := br.Publish(ctx, "mem", []topic.PublishInput{{Partition: topic.AnyPartition, Body: make([]byte, 64)}}); err != nil {
		b.Fatal(err)
	}
	waitMoved(b, br)
	heap2, _ := liveHeap()
	n++
	info, err := br.Topic("mem")
	if err != nil {
		b.Fatal(err)
	}
	segs := 0
	for _, p := range info.Partitions {
		segs += p.Segments
	}
	var files int64
	filepath.Walk(filepath.Join(dir, "topics"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files += fi.Size()
		}
		return nil
	})
	growth := int64(heap1) - int64(heap0)
	b.ReportMetric(float64(n), "records")
	b.ReportMetric(float64(n)/pubSec, "records/s")
	b.ReportMetric(float64(segs), "segments")
	b.ReportMetric(float64(growth)/(1<<20), "heap-MiB/topic")
	b.ReportMetric(float64(int64(inuse1)-int64(inuse0))/(1<<20), "heapinuse-MiB/topic")
	b.ReportMetric(float64(int64(heap2)-int64(heap0))/(1<<20), "heap-MiB/topic-after-one-more")
	b.ReportMetric(float64(growth)/float64(max(segs, 1)), "heap-B/segment")
	b.ReportMetric(float64(files)/(1<<20), "segment-file-MiB")
	if info.Records != int64(n) {
		b.Errorf("topic retains %d records, want %d", info.Records, n)
	}
}

// waitMoved waits until the mover has moved every published record into the
// partitions' files: until then the log's tail holds 16 bytes per record, which is
// the mover's lag, not what a topic keeps.
func waitMoved(b *testing.B, br *Broker) {
	testkit.Eventually(b, 5*time.Minute, func() bool {
		recs, _ := br.store.TopicBacklog()
		return recs == 0
	}, "the mover to move every record")
}

// publishN publishes n records of 64 bytes to topic name, in batches of 1000 from 8
// goroutines.
func publishN(b *testing.B, br *Broker, name string, n int) {
	const batch = 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := make([]topic.PublishInput, batch)
			bodies := make([]byte, 64*batch)
			for {
				first := next.Add(batch) - batch
				if first >= int64(n) {
					return
				}
				k := min(batch, n-int(first))
				for j := 0; j < k; j++ {
					body := bodies[j*64 : (j+1)*64]
					binary.LittleEndian.PutUint64(body, uint64(first)+uint64(j))
					in[j] = topic.PublishInput{Partition: topic.AnyPartition, Body: body}
				}
				res, err := br.Publish(ctx, name, in[:k])
				if err != nil {
					b.Error(err)
					return
				}
				for _, r := range res {
					if r.Err != nil {
						b.Error(r.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// waitRested waits until the mover, caught up, has let go of the buffers it keeps for
// the next records between bursts (payload.Store.Rest): what a broker at rest holds.
func waitRested(b *testing.B, br *Broker) {
	testkit.Eventually(b, time.Minute, func() bool { return br.store.Kept() == 0 }, "the mover to rest")
}
