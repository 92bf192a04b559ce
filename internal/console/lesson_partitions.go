package console

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/client"
)

// Lesson 4: partitions and ordering. Orders (keys) each send a numbered series of
// events; each key is hashed to one of P partitions, partition(key) = hash(key) mod P,
// and each partition is a queue with one consumer. Events of one key all land in one
// partition, in order, so their numbers come out ascending in every lane; different keys
// run in parallel in different lanes. With P = 1 everything is in one lane: total order,
// parallelism 1. Within a partition okiba's groups (group = key) keep each key's order
// even if several consumers shared the lane.
type partitionsLesson struct {
	mu         sync.Mutex
	keys       int
	partitions int
	perKey     int
	service    time.Duration
	queues     []string
	lanes      []laneState
	sendOrder  []string // "key#seq" in the order sent
	processed  int
	t0         time.Time
	finishedMS int64
}

type laneState struct {
	Partition int        `json:"partition"`
	Keys      []string   `json:"keys"`
	Items     []laneItem `json:"items"`
	Ordered   bool       `json:"ordered"`
	last      map[string]int
}

type laneItem struct {
	Key string `json:"k"`
	Seq int    `json:"s"`
}

func newPartitionsLesson(p map[string]float64) (lesson, error) {
	keys, err := param(p, "keys", 4, 1, 8)
	if err != nil {
		return nil, err
	}
	parts, err := param(p, "partitions", 3, 1, 8)
	if err != nil {
		return nil, err
	}
	per, err := param(p, "per_key", 5, 1, 20)
	if err != nil {
		return nil, err
	}
	svc, err := param(p, "service_ms", 120, 0, 2000)
	if err != nil {
		return nil, err
	}
	return &partitionsLesson{keys: int(keys), partitions: int(parts), perKey: int(per), service: time.Duration(svc) * time.Millisecond}, nil
}

// keyName is the name of key k (0 → order-A).
func keyName(k int) string { return "order-" + string(rune('A'+k)) }

// partitionOf is hash(key) mod P, with FNV-1a mixed by MurmurHash3's finaliser (plain
// FNV-1a of keys that differ in their last letter spreads badly over small P).
func partitionOf(key string, p int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	x := h.Sum32()
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return int(x % uint32(p))
}

func (l *partitionsLesson) start(r *run) error {
	l.lanes = make([]laneState, l.partitions)
	for i := range l.lanes {
		q, err := r.queue("p" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		l.queues = append(l.queues, q)
		l.lanes[i] = laneState{Partition: i, Keys: []string{}, Items: []laneItem{}, Ordered: true, last: map[string]int{}}
	}
	for k := 0; k < l.keys; k++ {
		p := partitionOf(keyName(k), l.partitions)
		l.lanes[p].Keys = append(l.lanes[p].Keys, keyName(k))
	}
	l.t0 = time.Now()
	// Interleave the keys as an order system would: A1 B1 C1 … A2 B2 …
	for s := 1; s <= l.perKey; s++ {
		for k := 0; k < l.keys; k++ {
			key := keyName(k)
			m := client.Message{Body: []byte(key + "#" + strconv.Itoa(s)), Group: key}
			if _, err := r.c.Send(r.ctx, l.queues[partitionOf(key, l.partitions)], m); err != nil {
				return err
			}
			l.sendOrder = append(l.sendOrder, key+"#"+strconv.Itoa(s))
		}
	}
	for i := range l.queues {
		r.spawn(l.consume(r, i))
	}
	return nil
}

func (l *partitionsLesson) control(r *run, req controlRequest) error {
	return fmt.Errorf("this lesson has no live controls: start a new run with other settings")
}

// consume is partition i's one consumer.
func (l *partitionsLesson) consume(r *run, i int) func(ctx context.Context) {
	return func(ctx context.Context) {
		q := l.queues[i]
		for ctx.Err() == nil {
			m, err := r.receiveOne(ctx, q, 30*time.Second)
			if err != nil || m == nil {
				continue
			}
			if !wait(ctx, l.service) {
				return
			}
			key, seqText, _ := strings.Cut(string(m.Body), "#")
			seq, _ := strconv.Atoi(seqText)
			if r.c.AckOne(ctx, q, m.Receipt) != nil {
				continue
			}
			l.mu.Lock()
			lane := &l.lanes[i]
			if seq < lane.last[key] {
				lane.Ordered = false
			}
			lane.last[key] = seq
			lane.Items = append(lane.Items, laneItem{Key: key, Seq: seq})
			l.processed++
			if l.processed == l.keys*l.perKey {
				l.finishedMS = time.Since(l.t0).Milliseconds()
			}
			l.mu.Unlock()
		}
	}
}

func (l *partitionsLesson) state(r *run) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := l.keys * l.perKey
	all := true
	lanes := make([]laneState, len(l.lanes))
	for i, ln := range l.lanes {
		all = all && ln.Ordered
		lanes[i] = laneState{Partition: ln.Partition, Keys: ln.Keys, Items: append([]laneItem{}, ln.Items...), Ordered: ln.Ordered}
	}
	// With one partition, the lane is the send order itself: total order.
	total1 := false
	if l.partitions == 1 && l.processed == total {
		total1 = true
		for j, it := range l.lanes[0].Items {
			if it.Key+"#"+strconv.Itoa(it.Seq) != l.sendOrder[j] {
				total1 = false
			}
		}
	}
	return map[string]any{
		"keys": l.keys, "partitions": l.partitions, "per_key": l.perKey, "service_ms": l.service.Milliseconds(),
		"lanes": lanes, "processed": l.processed, "total": total, "done": l.processed == total,
		"all_ordered": all, "total_order": total1, "elapsed_ms": l.finishedMS,
	}
}
