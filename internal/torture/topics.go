package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// The topic load runs beside the queue load, against the same broker and through the same
// kills: publishers append keyed records to a topic of three partitions, a subscription
// fans every record into a queue that a consumer drains, and a consumer group of one or
// two members pulls and commits (docs/semantics.md "Topics"). After every restart, and at
// the end, topicHistory checks what the broker answered against what it holds:
//
//  1. lost: a publish was acknowledged and its record is not at the partition and offset
//     it was given, with its body (or the partition ends before it);
//  2. reordered: two acknowledged records of one publisher and key whose offsets are not
//     in publish order, or one key's records in two partitions;
//  3. skipped: a group's committed offset above an offset no member was handed, or a pull
//     that does not go on from where the last one left off under the same epoch;
//  4. regressed: a committed offset below one answered before it was asked for;
//  5. the subscription: a record of the topic never delivered from its queue, or
//     delivered as two messages (a redelivery of one message is allowed);
//  6. duplicated: one record twice in the log (its publish was retried with a dedup id,
//     or nobody retried it at all), or a retry of an acknowledged publish with the same
//     dedup id not answered as a duplicate of it.
//
// Records the load never published (unexpected) count too.

const (
	topicName       = "tt"
	topicSub        = "tt-sub"
	topicQueue      = "tt-q"
	topicGroup      = "tt-g"
	topicPartitions = 3
	topicKeys       = 10
	// memberLease is short so that a member that stops calling (a crash) or a broker frozen
	// past it makes the group move partitions within a cycle or two.
	memberLease = 3 * time.Second
	// topicQueueRoom is tt-q's max_messages: small enough that the subscription is often
	// paused (its queue full) and catches up in the background.
	topicQueueRoom = 100
	// checkReadMax bounds what a check after a restart reads per partition, so that a long
	// run's checks stay cheap; what it leaves is read by the next check, or at the end.
	checkReadMax = 20_000
)

// The violation kinds of the topic load; each is counted once per thing it names.
const (
	vTopicLost        = "topic lost"
	vTopicReordered   = "topic reordered"
	vTopicDuplicated  = "topic duplicated"
	vTopicUnexpected  = "topic unexpected"
	vGroupSkipped     = "group skipped"
	vGroupRehanded    = "group rehanded"
	vGroupRegressed   = "group regressed"
	vGroupRefused     = "group commit refused"
	vSubMissing       = "subscription missing"
	vSubDoubled       = "subscription doubled"
	vSubUnexpected    = "subscription unexpected"
	maxExamplesOfKind = 5
)

type recState uint8

const (
	recPending recState = iota // its publish is under way (or being retried)
	recAcked                   // the broker answered it with a partition and offset
	recFailed                  // its publish was given up: it may or may not exist
)

// pubRec is one record a publisher attempted; its body identifies it.
type pubRec struct {
	pub, seq int // the publisher, and the record's number among that publisher's records of its key
	key      string
	dedup    bool
	state    recState
	part     int
	off      uint64
}

type pos struct {
	p int
	o uint64
}

func (x pos) String() string { return fmt.Sprintf("%d/%d", x.p, x.o) }

type logRec struct{ body, key string }

// fanned is one delivery from the subscription's queue.
type fanned struct {
	msgID, recordID, topic, body string
	at                           pos
	ok                           bool // the record headers were there and parsed
}

// commitObs is one observation of a partition's committed offset, in the order they were
// recorded: recv is when it was recorded (after its answer came), prefMax the largest
// value observed up to it.
type commitObs struct {
	recv    time.Time
	prefMax uint64
}

// topicHistory is what the topic load did and saw, and the checker's model of the log.
type topicHistory struct {
	mu       sync.Mutex
	cycle    int // cycles done when the last check ran, for the examples
	draining bool

	recs  map[string]*pubRec // body → the record
	acked []string           // bodies, in the order their publishes were acknowledged

	log         [topicPartitions][]logRec // what the checks read, a prefix of each partition
	where       map[string]pos            // body → where it was first read
	ackCursor   int                       // acked[:ackCursor] were verified or are in unverified
	unverified  []string                  // acknowledged at offsets not read yet
	orderCursor [topicPartitions]int      // log offsets the order check went past
	lastSeq     map[string]int            // "publisher/key" → seq of the last acknowledged record met in offset order
	keyPart     map[string]int            // key → the partition its records were first read in

	handed  [topicPartitions][]string // body handed to a group member at each offset ("" never)
	covered [topicPartitions]int      // handed[p][:covered[p]] are all handed
	obs     [topicPartitions][]commitObs
	subs    []fanned

	violations map[string]map[string]bool
	examples   []string
	logged     int // examples[:logged] were logged during the run

	attempted, retried, duplicates, replays                 int
	pulls, handouts, commits, rejoins, crashes, leaves      int
	refused                                                 map[string]int
	subDelivered, subAcked, checks, checksSkipped, recorded int
	subPaused, subBehind                                    int // checks that found the subscription paused, or behind
}

func newTopicHistory() *topicHistory {
	return &topicHistory{
		recs: map[string]*pubRec{}, where: map[string]pos{}, lastSeq: map[string]int{}, keyPart: map[string]int{},
		violations: map[string]map[string]bool{}, refused: map[string]int{},
	}
}

// violate counts a violation of kind once per id, keeping a few examples. Callers hold mu.
func (th *topicHistory) violate(kind, id, what string) {
	m := th.violations[kind]
	if m == nil {
		m = map[string]bool{}
		th.violations[kind] = m
	}
	if m[id] {
		return
	}
	m[id] = true
	if len(m) <= maxExamplesOfKind {
		th.examples = append(th.examples, fmt.Sprintf("%s: %s (after cycle %d)", kind, what, th.cycle))
	}
}

// newExamples returns the examples recorded since the last call: the violations a check
// after a restart found, to log as they are found.
func (th *topicHistory) newExamples() []string {
	th.mu.Lock()
	defer th.mu.Unlock()
	out := th.examples[th.logged:]
	th.logged = len(th.examples)
	return out
}

func (th *topicHistory) setDraining() {
	th.mu.Lock()
	th.draining = true
	th.mu.Unlock()
}

func (th *topicHistory) isDraining() bool {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.draining
}

func (th *topicHistory) ackedCount() int {
	th.mu.Lock()
	defer th.mu.Unlock()
	return len(th.acked)
}

// topicBody formats a record's body: a unique id (publisher and number), the key, and the
// record's sequence number among its publisher's records of that key.
func topicBody(pub, n int, key string, seq int) string {
	return fmt.Sprintf("t%d-%d|%s|%d", pub, n, key, seq)
}

// publish appends batches of 1 to 8 records with keys k0..k9 until ctx ends. Half the
// batches carry a dedup id per record and are retried, as a careful producer would, after
// any failure — a kill, a refusal while the broker starts, or a timeout of 1 s that a
// frozen broker makes likely, so that a retry may race the original — until answered; a
// tenth of those answered are then sent once more, and must come back as duplicates of the
// first. Batches without dedup ids are not retried: their records may or may not exist.
// A publisher sends one batch at a time, so its acknowledged records of one key must be in
// offset order.
func publish(ctx context.Context, cl *client.Client, th *topicHistory, pub int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(pub)+3000))
	seq := map[string]int{}
	n := 0
	for ctx.Err() == nil {
		k := 1 + rng.IntN(8)
		dedup := rng.IntN(2) == 0
		recs := make([]client.Record, k)
		bodies := make([]string, k)
		th.mu.Lock()
		for i := range recs {
			n++
			key := "k" + strconv.Itoa(rng.IntN(topicKeys))
			seq[key]++
			bodies[i] = topicBody(pub, n, key, seq[key])
			recs[i] = client.Record{Key: []byte(key), HasKey: true, Body: []byte(bodies[i])}
			if dedup {
				recs[i].DedupID = fmt.Sprintf("d%d-%d", pub, n)
			}
			th.recs[bodies[i]] = &pubRec{pub: pub, seq: seq[key], key: key, dedup: dedup}
		}
		th.attempted += k
		th.mu.Unlock()
		acked := false
		for attempt := 0; ; attempt++ {
			actx, cancel := ctx, context.CancelFunc(func() {})
			if dedup {
				actx, cancel = context.WithTimeout(ctx, time.Second)
			}
			res, err := cl.PublishRecords(actx, topicName, recs)
			cancel()
			if err == nil {
				acked = th.published(bodies, res, attempt)
				break
			}
			if !dedup || attempt >= 50 || ctx.Err() != nil {
				th.failed(bodies)
				break
			}
			th.mu.Lock()
			th.retried += k
			th.mu.Unlock()
			pause(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond)
		}
		if dedup && acked && rng.IntN(10) == 0 {
			if res, err := cl.PublishRecords(ctx, topicName, recs); err == nil {
				th.replayed(bodies, res)
			}
		}
		pause(ctx, time.Duration(rng.IntN(15))*time.Millisecond)
	}
}

// published records a publish's answer; it reports whether every record was acknowledged.
func (th *topicHistory) published(bodies []string, res []client.Published, attempt int) bool {
	th.mu.Lock()
	defer th.mu.Unlock()
	all := true
	for i, b := range bodies {
		r := th.recs[b]
		if res[i].Err != nil {
			r.state = recFailed
			all = false
			continue
		}
		if res[i].Partition < 0 || res[i].Partition >= topicPartitions {
			th.violate(vTopicUnexpected, b, fmt.Sprintf("%s acknowledged in partition %d of a topic of %d", b, res[i].Partition, topicPartitions))
			r.state = recFailed
			continue
		}
		if res[i].Duplicate {
			th.duplicates++
			if !r.dedup || attempt == 0 {
				// Its dedup id was never sent before: a duplicate of what?
				th.violate(vTopicDuplicated, b, fmt.Sprintf("%s answered duplicate:true (at %d/%d) on its first publish", b, res[i].Partition, res[i].Offset))
			}
		}
		r.state, r.part, r.off = recAcked, res[i].Partition, res[i].Offset
		th.acked = append(th.acked, b)
	}
	return all
}

func (th *topicHistory) failed(bodies []string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, b := range bodies {
		th.recs[b].state = recFailed
	}
}

// replayed checks the answer to a batch sent again after it was acknowledged: each record
// must be a duplicate of itself, at the place it was given.
func (th *topicHistory) replayed(bodies []string, res []client.Published) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.replays += len(bodies)
	for i, b := range bodies {
		r := th.recs[b]
		if res[i].Err != nil || r.state != recAcked {
			continue
		}
		if !res[i].Duplicate || res[i].Partition != r.part || res[i].Offset != r.off {
			th.violate(vTopicDuplicated, b, fmt.Sprintf("%s, acknowledged at %d/%d, sent again with its dedup id: answered %d/%d duplicate=%v",
				b, r.part, r.off, res[i].Partition, res[i].Offset, res[i].Duplicate))
		}
	}
}

// consumeTopicQueue drains the subscription's queue: it acks 95% of what it receives and
// abandons the rest (the lease expires and the same message comes back); after one
// receive in 50 it stalls for 0.5 to 2 s first, a slow subscriber, so that the queue
// fills and the subscription pauses. Draining, it acks everything at once.
func consumeTopicQueue(ctx context.Context, cl *client.Client, th *topicHistory, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3200))
	wait, vis := 300*time.Millisecond, visibility
	for ctx.Err() == nil {
		ds, err := cl.Receive(ctx, topicQueue, client.ReceiveOptions{Max: 32, Wait: &wait, Visibility: &vis})
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		if len(ds) == 0 {
			continue
		}
		th.fannedOut(ds)
		all := th.isDraining()
		if !all && rng.IntN(50) == 0 {
			pause(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
		}
		var rs []string
		for _, d := range ds {
			if all || rng.IntN(100) < 95 {
				rs = append(rs, d.Receipt)
			}
		}
		if len(rs) == 0 {
			continue
		}
		errs, err := cl.Ack(ctx, topicQueue, rs...)
		if err != nil {
			continue
		}
		th.mu.Lock()
		for _, e := range errs {
			if e == nil {
				th.subAcked++
			}
		}
		th.mu.Unlock()
	}
}

func (th *topicHistory) fannedOut(ds []client.Delivery) {
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, d := range ds {
		f := fanned{msgID: d.ID, body: string(d.Body), topic: d.Headers["okiba-topic"], recordID: d.Headers["okiba-record-id"]}
		p, err1 := strconv.Atoi(d.Headers["okiba-partition"])
		o, err2 := strconv.ParseUint(d.Headers["okiba-offset"], 10, 64)
		f.at = pos{p, o}
		f.ok = err1 == nil && err2 == nil && f.topic == topicName && f.recordID != "" && p >= 0 && p < topicPartitions
		th.subs = append(th.subs, f)
		th.subDelivered++
	}
}

// setupTopic creates the topic, the subscription's queue and the subscription (from the
// first record), and the group, once: PUTs are idempotent, so a retry after a refusal
// while the broker starts is harmless.
func setupTopic(ctx context.Context, cl *client.Client, gc *groupClient) error {
	parts, segment, zero, never, room := topicPartitions, int64(32<<10), 0, "none", int64(topicQueueRoom)
	unordered := false
	steps := []struct {
		what string
		fn   func() error
	}{
		{"topic " + topicName, func() error {
			// Small segments: kills land in the background move of records into segments.
			_, err := cl.PutTopic(ctx, topicName, api.TopicConfig{Partitions: &parts, Retention: &api.Retention{Forever: true}, SegmentBytes: &segment})
			return err
		}},
		{"queue " + topicQueue, func() error {
			// Unordered and without dead letters: every record's message stays until acked.
			// Small: the subscription fills it, pauses, and copies in the background when
			// there is room again, through the kills too.
			_, err := cl.PutQueue(ctx, topicQueue, api.QueueConfig{VisibilityTimeout: api.Ptr(visibility), MaxDeliveries: &zero,
				DeadLetterQueue: &never, DedupWindow: api.Ptr(0), OrderedGroups: &unordered, MaxMessages: &room})
			return err
		}},
		{"subscription " + topicSub, func() error {
			_, err := cl.Subscribe(ctx, topicName, topicSub, api.SubscriptionRequest{Queue: topicQueue, Start: "first"})
			return err
		}},
		{"group " + topicGroup, func() error {
			start := "first"
			return gc.put(ctx, api.GroupConfig{Start: &start, MemberLease: api.Ptr(memberLease)})
		}},
	}
	for _, s := range steps {
		if err := retry(ctx, s.fn); err != nil {
			return fmt.Errorf("create %s: %w", s.what, err)
		}
	}
	return nil
}

// check reads the topic and the group and checks them against the history: after a
// restart (bounded reads, a sample of older records read again), or finally (everything
// read, twice). It returns an error only when it could not read.
func (th *topicHistory) check(ctx context.Context, cl *client.Client, gc *groupClient, rng *rand.Rand, cycle int, final bool) error {
	th.mu.Lock()
	th.cycle = cycle
	nAcked := len(th.acked) // acknowledged before anything below was asked: all must be there
	have := [topicPartitions]uint64{}
	for p := range have {
		have[p] = uint64(len(th.log[p]))
	}
	th.mu.Unlock()

	sent := time.Now()
	t, err := cl.Topic(ctx, topicName)
	if err != nil {
		return fmt.Errorf("get topic: %w", err)
	}
	if len(t.Partitions) != topicPartitions {
		return fmt.Errorf("topic %s has %d partitions, want %d", topicName, len(t.Partitions), topicPartitions)
	}
	var ends [topicPartitions]uint64
	var fresh [topicPartitions][]client.TopicRecord
	for p := range ends {
		ends[p] = t.Partitions[p].End
		to := ends[p]
		if !final && to > have[p]+checkReadMax {
			to = have[p] + checkReadMax
		}
		if fresh[p], err = readRange(ctx, cl, p, have[p], to); err != nil {
			return err
		}
	}
	// Read again what was read before: a sample after a restart, everything at the end.
	var again [topicPartitions][]client.TopicRecord
	sampled := rng.IntN(topicPartitions)
	for p := range again {
		from, to := uint64(0), have[p]
		if !final {
			if p != sampled || have[p] == 0 {
				continue
			}
			from = rng.Uint64N(have[p])
			to = min(have[p], from+200)
		}
		if again[p], err = readRange(ctx, cl, p, from, to); err != nil {
			return err
		}
	}
	var g *api.Group
	gsent := time.Now()
	if g, err = gc.get(ctx); err != nil {
		return fmt.Errorf("get group: %w", err)
	}
	sub, err := cl.Subscription(ctx, topicName, topicSub)
	if err != nil {
		return fmt.Errorf("get subscription: %w", err)
	}

	th.mu.Lock()
	defer th.mu.Unlock()
	th.checks++
	if sub.Paused {
		th.subPaused++
	}
	if sub.Lag > 0 {
		th.subBehind++
	}
	if sub.LostToRetention > 0 {
		// Retention is forever: nothing may pass the subscription by.
		th.violate(vSubMissing, "lost_to_retention", fmt.Sprintf("the subscription counts %d records lost to retention", sub.LostToRetention))
	}
	for p := range ends {
		th.merge(p, fresh[p])
		th.compare(p, again[p])
		if final && uint64(len(th.log[p])) < ends[p] {
			th.violate(vTopicLost, fmt.Sprintf("end %d", p), fmt.Sprintf("partition %d reads only to %d of its end %d", p, len(th.log[p]), ends[p]))
		}
	}
	th.verifyAcked(nAcked, ends, sent, final)
	th.checkOrder(final)
	for _, gp := range g.Partitions {
		if gp.Partition < 0 || gp.Partition >= topicPartitions {
			continue
		}
		th.observeCommitted(gp.Partition, gp.Committed, gsent, "the group's GET")
		if final && gp.Committed != ends[gp.Partition] {
			th.violate(vGroupSkipped, fmt.Sprintf("drain %d", gp.Partition), fmt.Sprintf("after the drain partition %d is committed to %d of %d", gp.Partition, gp.Committed, ends[gp.Partition]))
		}
	}
	if final {
		th.finalChecks()
	}
	return nil
}

// readRange reads partition p's offsets [from, to).
func readRange(ctx context.Context, cl *client.Client, p int, from, to uint64) ([]client.TopicRecord, error) {
	var out []client.TopicRecord
	for from < to {
		b, err := cl.ReadPartition(ctx, topicName, p, client.ReadOptions{Offset: from, Max: int(min(to-from, api.MaxReadRecords))})
		if err != nil {
			return out, fmt.Errorf("read %s/%d from %d: %w", topicName, p, from, err)
		}
		if len(b.Records) == 0 || b.Next <= from {
			break
		}
		out = append(out, b.Records...)
		from = b.Next
	}
	return out, nil
}

// merge appends records read past the model's end of partition p. Callers hold mu.
func (th *topicHistory) merge(p int, recs []client.TopicRecord) {
	for _, r := range recs {
		at := pos{p, uint64(len(th.log[p]))}
		if r.Offset != at.o || r.Partition != p {
			th.violate(vTopicLost, at.String(), fmt.Sprintf("a read of partition %d at %d answered record %d/%d", p, at.o, r.Partition, r.Offset))
			return
		}
		b, key := string(r.Body), string(r.Key)
		th.log[p] = append(th.log[p], logRec{b, key})
		th.recorded++
		switch rec := th.recs[b]; {
		case rec == nil:
			th.violate(vTopicUnexpected, at.String(), fmt.Sprintf("record %s holds %q, which nobody published", at, b))
		case !r.HasKey || key != rec.key:
			th.violate(vTopicUnexpected, at.String(), fmt.Sprintf("record %s (%s) has key %q (has key %v), published with %q", at, b, key, r.HasKey, rec.key))
		}
		if first, seen := th.where[b]; seen {
			th.violate(vTopicDuplicated, b, fmt.Sprintf("%s is at %s and %s", b, first, at))
		} else {
			th.where[b] = at
		}
	}
}

// compare checks records read again against the model. Callers hold mu.
func (th *topicHistory) compare(p int, recs []client.TopicRecord) {
	for _, r := range recs {
		at := pos{p, r.Offset}
		if r.Partition != p || r.Offset >= uint64(len(th.log[p])) {
			th.violate(vTopicLost, at.String(), fmt.Sprintf("a read of partition %d again answered record %d/%d", p, r.Partition, r.Offset))
			continue
		}
		if was := th.log[p][r.Offset]; was.body != string(r.Body) || was.key != string(r.Key) {
			th.violate(vTopicLost, at.String(), fmt.Sprintf("record %s read as %q (key %q), earlier as %q (key %q)", at, r.Body, r.Key, was.body, was.key))
		}
	}
}

// verifyAcked checks the records acknowledged before the check began (acked[:n]) against
// the model: each at its place with its body, or, not read yet, below the partition's end.
// Callers hold mu.
func (th *topicHistory) verifyAcked(n int, ends [topicPartitions]uint64, sent time.Time, final bool) {
	todo := append(th.unverified, th.acked[th.ackCursor:n]...)
	th.unverified, th.ackCursor = nil, n
	for _, b := range todo {
		r := th.recs[b]
		at := pos{r.part, r.off}
		switch {
		case r.off < uint64(len(th.log[r.part])):
			if got := th.log[r.part][r.off].body; got != b {
				th.violate(vTopicLost, b, fmt.Sprintf("%s was acknowledged at %s, which holds %q", b, at, got))
			}
		case final || r.off >= ends[r.part]:
			th.violate(vTopicLost, b, fmt.Sprintf("%s was acknowledged at %s; partition %d ends at %d (asked at %s)",
				b, at, r.part, ends[r.part], sent.Format("15:04:05.000")))
		default:
			th.unverified = append(th.unverified, b)
		}
	}
}

// checkOrder walks each partition's model in offset order, as far as every record's
// publish is settled (finally, all the way): one key's records must all be in one
// partition, and a publisher's acknowledged records of one key in its publish order.
// Records whose publish was never answered are left out of the order: the publisher gave
// up on them, and a request of theirs stuck in a frozen broker may land after later ones.
// Callers hold mu.
func (th *topicHistory) checkOrder(final bool) {
	for p := range th.log {
		for th.orderCursor[p] < len(th.log[p]) {
			o := th.orderCursor[p]
			lr := th.log[p][o]
			r := th.recs[lr.body]
			if r != nil && r.state == recPending && !final {
				break
			}
			th.orderCursor[p]++
			if r == nil {
				continue // unexpected, counted when read
			}
			if kp, seen := th.keyPart[r.key]; !seen {
				th.keyPart[r.key] = p
			} else if kp != p {
				th.violate(vTopicReordered, "key "+r.key, fmt.Sprintf("key %s has records in partitions %d and %d (%s at %d/%d)", r.key, kp, p, lr.body, p, o))
			}
			if r.state != recAcked || r.part != p || r.off != uint64(o) {
				continue
			}
			k := fmt.Sprintf("%d/%s", r.pub, r.key)
			if last, seen := th.lastSeq[k]; seen && r.seq <= last {
				th.violate(vTopicReordered, lr.body, fmt.Sprintf("%s (seq %d) is at %d/%d, after seq %d of its publisher and key", lr.body, r.seq, p, o, last))
				continue
			}
			th.lastSeq[k] = r.seq
		}
	}
}

// observeCommitted records an observation of partition p's committed offset v by a request
// sent at sent (a GET, a pull's assignment, an accepted commit), and checks it: not below
// any observation answered before that request was sent (4), and no offset below it that
// no member was handed (3). Callers hold mu.
func (th *topicHistory) observeCommitted(p int, v uint64, sent time.Time, what string) {
	obs := th.obs[p]
	before := sort.Search(len(obs), func(i int) bool { return !obs[i].recv.Before(sent) })
	if before > 0 && obs[before-1].prefMax > v {
		th.violate(vGroupRegressed, fmt.Sprintf("%d#%d", p, len(obs)), fmt.Sprintf("%s saw partition %d committed at %d, below the %d seen before it was asked",
			what, p, v, obs[before-1].prefMax))
	}
	if c := th.coveredTo(p); v > c {
		th.violate(vGroupSkipped, pos{p, c}.String(), fmt.Sprintf("%s saw partition %d committed at %d, but offset %d was never handed to a member", what, p, v, c))
	}
	m := v
	if len(obs) > 0 {
		m = max(m, obs[len(obs)-1].prefMax)
	}
	th.obs[p] = append(obs, commitObs{recv: time.Now(), prefMax: m})
}

// coveredTo returns the first offset of partition p never handed to a member. Offsets
// are only ever added to handed, so the answer only grows. Callers hold mu.
func (th *topicHistory) coveredTo(p int) uint64 {
	h := th.handed[p]
	for th.covered[p] < len(h) && h[th.covered[p]] != "" {
		th.covered[p]++
	}
	return uint64(th.covered[p])
}

// finalChecks are the checks that need everything read and settled: every offset below
// the committed ones handed out, with the record's body; every record of the topic
// delivered from the subscription's queue, as one message. Callers hold mu.
func (th *topicHistory) finalChecks() {
	for p := range th.handed {
		committed := uint64(0)
		if obs := th.obs[p]; len(obs) > 0 {
			committed = obs[len(obs)-1].prefMax
		}
		for o, b := range th.handed[p] {
			at := pos{p, uint64(o)}
			switch {
			case b == "" && at.o < committed:
				th.violate(vGroupSkipped, at.String(), fmt.Sprintf("offset %s is below the committed %d and was never handed to a member", at, committed))
			case b != "" && (at.o >= uint64(len(th.log[p])) || th.log[p][o].body != b):
				th.violate(vTopicUnexpected, "handed "+at.String(), fmt.Sprintf("a member was handed %q at %s, which the topic does not hold", b, at))
			}
		}
		for o := uint64(len(th.handed[p])); o < committed; o++ {
			th.violate(vGroupSkipped, pos{p, o}.String(), fmt.Sprintf("offset %d/%d is below the committed %d and was never handed to a member", p, o, committed))
		}
	}

	ids := map[pos]map[string]bool{}
	recordIDs := map[string]pos{}
	for _, f := range th.subs {
		if !f.ok {
			th.violate(vSubUnexpected, f.msgID, fmt.Sprintf("message %s (%q) of %s has no record headers of topic %s", f.msgID, f.body, topicQueue, topicName))
			continue
		}
		if f.at.o >= uint64(len(th.log[f.at.p])) || th.log[f.at.p][f.at.o].body != f.body {
			th.violate(vSubUnexpected, f.msgID, fmt.Sprintf("message %s (%q) names record %s, which does not hold it", f.msgID, f.body, f.at))
			continue
		}
		if at, seen := recordIDs[f.recordID]; seen && at != f.at {
			th.violate(vSubUnexpected, f.msgID, fmt.Sprintf("record id %s names records %s and %s", f.recordID, at, f.at))
		}
		recordIDs[f.recordID] = f.at
		if ids[f.at] == nil {
			ids[f.at] = map[string]bool{}
		}
		ids[f.at][f.msgID] = true
	}
	for p := range th.log {
		for o, lr := range th.log[p] {
			at := pos{p, uint64(o)}
			switch n := len(ids[at]); {
			case n == 0:
				th.violate(vSubMissing, at.String(), fmt.Sprintf("record %s (%s) never came out of %s", at, lr.body, topicQueue))
			case n > 1:
				th.violate(vSubDoubled, at.String(), fmt.Sprintf("record %s (%s) came out of %s as %d messages", at, lr.body, topicQueue, n))
			}
		}
	}
}

// waitDrained waits until the group has committed every record, the subscription has
// caught up, and its queue is empty and stays so across a lease length (abandoned leases
// expire and are drained too). It gives up when nothing shrinks for a minute.
func (th *topicHistory) waitDrained(ctx context.Context, cl *client.Client, gc *groupClient) error {
	lastProgress, least := time.Now(), int64(1<<62)
	quietSince := time.Time{}
	for time.Since(lastProgress) < time.Minute {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		left := int64(-1)
		g, err1 := gc.get(ctx)
		s, err2 := cl.Subscription(ctx, topicName, topicSub)
		q, err3 := cl.Queue(ctx, topicQueue)
		if err1 == nil && err2 == nil && err3 == nil {
			left = int64(g.LagRecords) + int64(s.Lag) + q.Stats.Ready + q.Stats.Delayed + q.Stats.InFlight
			if s.Paused {
				left++
			}
		}
		if left >= 0 && left < least {
			least, lastProgress = left, time.Now()
		}
		switch {
		case left != 0:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > visibility+500*time.Millisecond:
			return nil
		}
		pause(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("the topic load stopped draining with %d records or messages left", least)
}

// fill copies the topic load's figures and violations into rep.
func (th *topicHistory) fill(rep *Report) {
	th.mu.Lock()
	defer th.mu.Unlock()
	n := func(kind string) int { return len(th.violations[kind]) }
	rep.Topic = TopicReport{
		Attempted: th.attempted, Acked: len(th.acked), Retried: th.retried, Duplicates: th.duplicates, Replays: th.replays,
		Records: th.recorded, Checks: th.checks, ChecksSkipped: th.checksSkipped,
		Pulls: th.pulls, Handed: th.handouts, Commits: th.commits, Rejoins: th.rejoins, Crashes: th.crashes, Leaves: th.leaves,
		SubDelivered: th.subDelivered, SubAcked: th.subAcked, SubPaused: th.subPaused, SubBehind: th.subBehind,
		Lost: n(vTopicLost), Reordered: n(vTopicReordered), Duplicated: n(vTopicDuplicated), Unexpected: n(vTopicUnexpected) + n(vSubUnexpected),
		Skipped: n(vGroupSkipped), Rehanded: n(vGroupRehanded), Regressed: n(vGroupRegressed), RefusedWrongly: n(vGroupRefused),
		SubMissing: n(vSubMissing), SubDoubled: n(vSubDoubled),
	}
	var codes []string
	for c, k := range th.refused {
		codes = append(codes, fmt.Sprintf("%s %d", c, k))
	}
	sort.Strings(codes)
	rep.Topic.Refusals = strings.Join(codes, ", ")
	distinct := map[string]bool{}
	for _, f := range th.subs {
		distinct[f.msgID] = true
	}
	rep.Topic.SubRedelivered = len(th.subs) - len(distinct)
	rep.Examples = append(rep.Examples, th.examples...)
}

// TopicReport is the outcome of the topic load.
type TopicReport struct {
	Attempted  int // records publishers tried to publish
	Acked      int // records the broker answered with a partition and offset
	Retried    int // records sent again with their dedup id after a failed publish
	Duplicates int // records answered duplicate:true
	Replays    int // acknowledged records sent again on purpose with their dedup id
	Records    int // records read from the topic by the checks (the last read covers all)
	Checks     int // checks run (after restarts, and the last one)
	// ChecksSkipped counts checks after a restart that could not read (the run goes on).
	ChecksSkipped int

	Pulls, Handed, Commits       int // group pulls answered, records handed in them, offsets committed
	Rejoins, Crashes, Leaves     int // member rejoins after a failure; crashes before committing; leaves
	Refusals                     string
	SubDelivered, SubAcked       int // deliveries from the subscription's queue, acks acknowledged
	SubRedelivered               int // deliveries of a message delivered before (allowed)
	SubPaused, SubBehind         int // checks that found the subscription paused (its queue full), or behind
	Lost, Reordered, Duplicated  int
	Unexpected                   int
	Skipped, Rehanded, Regressed int
	RefusedWrongly               int // commits of handed offsets refused as regressed or past what was handed
	SubMissing, SubDoubled       int
}

// OK reports whether the topic load found no violation.
func (t TopicReport) OK() bool {
	return t.Lost == 0 && t.Reordered == 0 && t.Duplicated == 0 && t.Unexpected == 0 && t.Skipped == 0 && t.Rehanded == 0 &&
		t.Regressed == 0 && t.RefusedWrongly == 0 && t.SubMissing == 0 && t.SubDoubled == 0
}

func (t TopicReport) String() string {
	refusals := t.Refusals
	if refusals == "" {
		refusals = "none"
	}
	return fmt.Sprintf("  topic: %d records attempted, %d acknowledged (%d retried with their dedup id, %d answered duplicate, %d replayed), %d in the log, %d checks (%d skipped)\n"+
		"  topic: acknowledged publishes lost: %d of %d; reordered: %d; duplicated: %d; unexpected: %d\n"+
		"  group: %d pulls handed %d records, %d offsets committed (refused: %s), %d rejoins, %d crashes before commit, %d leaves\n"+
		"  group: offsets lost to the group (committed, never handed): %d; rehanded under one epoch: %d; committed regressed: %d; commits refused wrongly: %d\n"+
		"  subscription: %d deliveries (%d redeliveries), %d acks, paused at %d checks and behind at %d; records lost on the way to the queue: %d; duplicated as two messages: %d",
		t.Attempted, t.Acked, t.Retried, t.Duplicates, t.Replays, t.Records, t.Checks, t.ChecksSkipped,
		t.Lost, t.Acked, t.Reordered, t.Duplicated, t.Unexpected,
		t.Pulls, t.Handed, t.Commits, refusals, t.Rejoins, t.Crashes, t.Leaves,
		t.Skipped, t.Rehanded, t.Regressed, t.RefusedWrongly,
		t.SubDelivered, t.SubRedelivered, t.SubAcked, t.SubPaused, t.SubBehind, t.SubMissing, t.SubDoubled)
}
