package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// testLease is the member lease of the groups these tests make: short, so that a
// member that stops calling loses its partitions within the test.
const testLease = 2 * time.Second

// testPollWait keeps pulls short, so that members see rebalances soon (a pull that waits
// learns of one only when it ends).
const testPollWait = 200 * time.Millisecond

func putGroup(t testing.TB, c *client.Client, topic, group string, cfg api.GroupConfig) *api.Group {
	t.Helper()
	if cfg.MemberLease == nil {
		cfg.MemberLease = api.Ptr(testLease)
	}
	g, err := c.PutGroup(context.Background(), topic, group, cfg)
	if err != nil {
		t.Fatalf("put group %s: %v", group, err)
	}
	return g
}

func getGroup(t testing.TB, c *client.Client, topic, group string) *api.Group {
	t.Helper()
	g, err := c.Group(context.Background(), topic, group)
	if err != nil {
		t.Fatalf("group %s: %v", group, err)
	}
	return g
}

// consumeGroup runs ConsumeGroup in a goroutine and returns a channel with its result.
// The test fails at cleanup if ConsumeGroup has not returned by then.
func consumeGroup(t *testing.T, ctx context.Context, c *client.Client, topic, group string, h client.RecordHandler, opts client.ConsumeGroupOptions) <-chan error {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t, nil)
	}
	if opts.PollWait == 0 {
		opts.PollWait = testPollWait
	}
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		err := c.ConsumeGroup(ctx, topic, group, h, opts)
		close(returned)
		done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Errorf("ConsumeGroup of %s/%s had not returned 10s after the test ended", topic, group)
		}
	})
	return done
}

// handledLog records which member handled which record, in order.
type handledLog struct {
	mu      sync.Mutex
	byPart  map[int][]uint64             // offsets handled, per partition, in order
	by      map[[2]uint64]map[string]int // (partition, offset) → member → times
	times   map[[2]uint64]time.Time      // (partition, offset) → publish time
	count   int                          // distinct records handled
	reached map[int]chan struct{}        // closed when count reaches the key
}

func newHandledLog() *handledLog {
	return &handledLog{byPart: map[int][]uint64{}, by: map[[2]uint64]map[string]int{}, times: map[[2]uint64]time.Time{},
		reached: map[int]chan struct{}{}}
}

func (l *handledLog) add(member string, r client.TopicRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]uint64{uint64(r.Partition), r.Offset}
	l.byPart[r.Partition] = append(l.byPart[r.Partition], r.Offset)
	if l.by[k] == nil {
		l.by[k] = map[string]int{}
		l.count++
		for n, ch := range l.reached {
			if l.count >= n {
				close(ch)
				delete(l.reached, n)
			}
		}
	}
	l.by[k][member]++
	l.times[k] = r.Time
}

// at returns a channel closed once n distinct records were handled.
func (l *handledLog) at(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.count >= n {
		close(ch)
		return ch
	}
	l.reached[n] = ch
	return ch
}

// distinct returns how many distinct records were handled.
func (l *handledLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// handled returns how many times member handled partition p's record at offset.
func (l *handledLog) handled(p int, offset uint64, member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[[2]uint64{uint64(p), offset}][member]
}

// offsets returns partition p's offsets in the order they were handled.
func (l *handledLog) offsets(p int) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byPart[p])
}

func (l *handledLog) handler(member string) client.RecordHandler {
	return func(ctx context.Context, r client.TopicRecord) error {
		l.add(member, r)
		return nil
	}
}

// checkOrder fails the test unless each partition's records were handled in offset
// order, each once, from its first offset on without a gap.
func (l *handledLog) checkOrder(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, offs := range l.byPart {
		for i := 1; i < len(offs); i++ {
			if offs[i] != offs[i-1]+1 {
				t.Fatalf("partition %d handled in the order %v", p, offs)
			}
		}
	}
}

// checkAtLeastOnceInOrder fails the test unless each partition's records were handled
// in offset order, allowing a partition to start again from an earlier offset (it was
// handed out again, at least once) but never to jump ahead past a record.
func (l *handledLog) checkAtLeastOnceInOrder(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, offs := range l.byPart {
		for i := 1; i < len(offs); i++ {
			if offs[i] > offs[i-1]+1 {
				t.Fatalf("partition %d skipped from %d to %d: handled in the order %v", p, offs[i-1], offs[i], offs)
			}
		}
	}
}

// latch is a channel closed once: by the test, or by its deferred Close when the test
// fails first — defers run before cleanups, so a handler waiting on it returns before
// consumeGroup's cleanup waits for ConsumeGroup.
type latch struct {
	C    chan struct{}
	once sync.Once
}

func newLatch() *latch { return &latch{C: make(chan struct{})} }

func (l *latch) Close() { l.once.Do(func() { close(l.C) }) }

// publishTo publishes records with the given bodies to one partition, in order.
func publishTo(t testing.TB, c *client.Client, topic string, partition int, bodies ...string) {
	t.Helper()
	recs := make([]client.Record, len(bodies))
	for i, b := range bodies {
		recs[i] = client.Record{Partition: ptr(partition), Body: []byte(b)}
	}
	res, err := c.PublishRecords(context.Background(), topic, recs)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("publish: %v", r.Err)
		}
	}
}

// deadLetters returns the messages of a group's dead-letter queue, or none when it does
// not exist.
func deadLetters(t testing.TB, c *client.Client, queue string) []api.Message {
	t.Helper()
	if _, err := c.Queue(context.Background(), queue); client.IsCode(err, api.CodeQueueNotFound) {
		return nil
	} else if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return peekAll(t, c, queue)
}

// groupClient returns a client of srv on clk, over plain HTTP, counting its POSTs.
func groupClient(t *testing.T, srv *okibatest.Server, clk clock.Clock) (*client.Client, *countingTransport) {
	t.Helper()
	return countingClientWith(t, srv, &countingTransport{}, client.Options{Clock: clk})
}

// waitLagZero waits until the group has committed everything.
func waitLagZero(t testing.TB, c *client.Client, topic, group string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		g := getGroup(t, c, topic, group)
		return g.LagRecords == 0
	}, "group %s to commit everything", group)
}

func TestConsumeGroupHandlesEveryRecordInPartitionOrderAndCommits(t *testing.T) {
	t.Parallel()
	forEncodings(t, testConsumeGroupHandlesEveryRecordInPartitionOrderAndCommits)
}

func testConsumeGroupHandlesEveryRecordInPartitionOrderAndCommits(t *testing.T, opts client.Options) {
	srv := okibatest.New(t, okibatest.Options{})
	cl := clientFor(t, srv, opts)
	putTopic(t, cl, "t", 4, 300, "before")
	putGroup(t, cl, "t", "g", api.GroupConfig{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	done := consumeGroup(t, ctx, cl, "t", "g", l.handler("m"), client.ConsumeGroupOptions{Member: "m", MaxRecords: 64})
	testkit.Recv(t, l.at(300), 10*time.Second, "the records published before the consumer started")
	publish(t, cl, "t", "after", 300, 600)
	testkit.Recv(t, l.at(600), 10*time.Second, "the records published after the consumer started")
	// Commits happen as the consumer goes, not only when it stops.
	waitLagZero(t, cl, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	l.checkOrder(t)
	for k, by := range l.by {
		if by["m"] != 1 {
			t.Fatalf("record %v handled %d times", k, by["m"])
		}
	}
	g := getGroup(t, cl, "t", "g")
	if g.LagRecords != 0 || len(g.Members) != 0 {
		t.Fatalf("after the stop: lag %d, members %+v; want 0 and none (the member left)", g.LagRecords, g.Members)
	}
	for _, p := range g.Partitions {
		offs := l.offsets(p.Partition)
		if len(offs) == 0 || p.Committed != offs[len(offs)-1]+1 {
			t.Fatalf("partition %d committed %d, last handled %v", p.Partition, p.Committed, offs[max(len(offs)-1, 0):])
		}
	}
}

// waitBalanced waits until the group's partitions are spread over the named members with
// nothing pending, and returns each partition's owner.
func waitBalanced(t testing.TB, c *client.Client, topic, group string, members ...string) map[int]string {
	t.Helper()
	var owners map[int]string
	testkit.Eventually(t, 10*time.Second, func() bool {
		g := getGroup(t, c, topic, group)
		owners = map[int]string{}
		count := map[string]int{}
		for _, p := range g.Partitions {
			if p.Pending != "" || p.Owner == "" {
				return false
			}
			owners[p.Partition] = p.Owner
			count[p.Owner]++
		}
		for _, m := range members {
			if count[m] == 0 {
				return false
			}
		}
		return len(count) == len(members)
	}, "the partitions of %s to be spread over %v", group, members)
	return owners
}

func TestConsumeGroupTwoMembersSharePartitions(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 4, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	doneA := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("a"), client.ConsumeGroupOptions{Member: "a"})
	doneB := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("b"), client.ConsumeGroupOptions{Member: "b"})
	owners := waitBalanced(t, srv.Client, "t", "g", "a", "b")
	publish(t, srv.Client, "t", "r", 0, 400)
	testkit.Recv(t, l.at(400), 10*time.Second, "every record")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	for _, done := range []<-chan error{doneA, doneB} {
		if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
			t.Fatalf("ConsumeGroup: %v", err)
		}
	}
	l.checkOrder(t)
	handledBy := map[string]int{}
	for k, by := range l.by {
		if len(by) != 1 {
			t.Fatalf("record %v handled by %v: both members had it", k, by)
		}
		for m, n := range by {
			if n != 1 || owners[int(k[0])] != m {
				t.Fatalf("record %v handled %d times by %s, the owner of its partition being %s", k, n, m, owners[int(k[0])])
			}
			handledBy[m]++
		}
	}
	if handledBy["a"] == 0 || handledBy["b"] == 0 || handledBy["a"]+handledBy["b"] != 400 {
		t.Fatalf("handled: %v", handledBy)
	}
}

// killableTransport passes requests on until killed; from then on it fails every one
// at once, as the network of a process that died would look to the broker.
type killableTransport struct {
	base   http.RoundTripper
	killed atomic.Bool
}

func (k *killableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.killed.Load() {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errors.New("killed (test)")
	}
	return k.base.RoundTrip(r)
}

func TestConsumeGroupMemberThatDiesLosesItsPartitionsToTheOther(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 4, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	kill := &killableTransport{base: http.DefaultTransport}
	ca, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: kill}})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	// a takes its first record of each partition and hangs on it: nothing of a is
	// committed when it dies.
	var aStarted atomic.Int64
	var aDead atomic.Bool
	hangA := func(ctx context.Context, r client.TopicRecord) error {
		if aDead.Load() {
			l.add("a", r)
			return nil
		}
		aStarted.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	doneA := consumeGroup(t, ctx, ca, "t", "g", hangA, client.ConsumeGroupOptions{Member: "a", DrainTimeout: 50 * time.Millisecond})
	doneB := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("b"), client.ConsumeGroupOptions{Member: "b"})
	owners := waitBalanced(t, srv.Client, "t", "g", "a", "b")
	publish(t, srv.Client, "t", "r", 0, 200)
	ofA := 0
	for p := range 4 {
		if owners[p] == "a" {
			ofA++
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return aStarted.Load() == int64(ofA) }, "a to hang on one record of each of its %d partitions", ofA)

	kill.killed.Store(true)
	aDead.Store(true)
	// After a's lease, b is granted a's partitions and handles everything a had not
	// committed: none is lost.
	testkit.Recv(t, l.at(200), 10*time.Second, "b to handle a's records too")
	l.mu.Lock()
	for k, by := range l.by {
		if owners[int(k[0])] == "a" && (by["b"] != 1 || by["a"] != 0) {
			t.Errorf("record %v of a's partition handled by %v, want b once", k, by)
		}
	}
	l.mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}
	waitLagZero(t, srv.Client, "t", "g")

	// a comes back: the broker no longer knows its session, so it rejoins and gets
	// partitions again.
	kill.killed.Store(false)
	waitBalanced(t, srv.Client, "t", "g", "a", "b")
	publish(t, srv.Client, "t", "r", 200, 400)
	testkit.Recv(t, l.at(400), 10*time.Second, "the records published after a rejoined")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	for _, done := range []<-chan error{doneA, doneB} {
		if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
			t.Fatalf("ConsumeGroup: %v", err)
		}
	}
	l.checkOrder(t)
}

// A member stopped hard (HardStop) while handlers run: their contexts are cancelled,
// what they had finished is committed, the member leaves, and the other member takes its
// partitions and handles again exactly what had not finished — nothing lost, nothing
// finished handled twice.
func TestConsumeGroupStoppedHardLeavesWhatItHadNotFinishedToTheOther(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 4, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	hard := make(chan struct{})
	l := newHandledLog()
	// a handles offsets 0 and 1 of each partition and hangs on 2 until its context ends.
	var hung atomic.Int64
	cut := make(chan uint64, 8)
	handleA := func(hctx context.Context, r client.TopicRecord) error {
		if r.Offset < 2 {
			l.add("a", r)
			return nil
		}
		hung.Add(1)
		<-hctx.Done()
		cut <- r.Offset
		return hctx.Err()
	}
	doneA := consumeGroup(t, aCtx, srv.Client, "t", "g", handleA, client.ConsumeGroupOptions{Member: "a", HardStop: hard})
	doneB := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("b"), client.ConsumeGroupOptions{Member: "b"})
	owners := waitBalanced(t, srv.Client, "t", "g", "a", "b")
	ofA := 0
	for p := range 4 {
		if owners[p] == "a" {
			ofA++
		}
	}
	const perPart = 6
	for p := range 4 {
		publishTo(t, srv.Client, "t", p, bodiesN(fmt.Sprintf("p%d-", p), perPart)...)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return hung.Load() == int64(ofA) }, "a to hang on offset 2 of each of its %d partitions", ofA)

	close(hard)
	stopA()
	if err := testkit.Recv(t, doneA, 10*time.Second, "a to stop"); err != nil {
		t.Fatalf("ConsumeGroup of a: %v", err)
	}
	for range ofA {
		if off := testkit.Recv(t, cut, time.Second, "a's handlers to be cut"); off != 2 {
			t.Fatalf("a's handler cut at offset %d", off)
		}
	}
	testkit.Recv(t, l.at(4*perPart), 10*time.Second, "b to handle what a had not finished")
	waitLagZero(t, srv.Client, "t", "g")
	for p := range 4 {
		for off := uint64(0); off < perPart; off++ {
			a, b := l.handled(p, off, "a"), l.handled(p, off, "b")
			switch {
			case owners[p] == "a" && off < 2 && (a != 1 || b != 0):
				t.Errorf("partition %d offset %d, finished and committed by a: handled by a %d, by b %d times", p, off, a, b)
			case (owners[p] == "b" || off >= 2) && (a != 0 || b != 1):
				t.Errorf("partition %d offset %d: handled by a %d, by b %d times; want b once", p, off, a, b)
			}
		}
	}
	cancel()
	if err := testkit.Recv(t, doneB, 10*time.Second, "b to stop"); err != nil {
		t.Fatalf("ConsumeGroup of b: %v", err)
	}
	l.checkOrder(t)
}

// When a second member joins, the partition that moves to it leaves the first member at
// its next call, whatever runs: the handler running on it there has its context
// cancelled and its outcome ignored, and the new owner handles the partition from the
// committed offset — the cut record again, the records after it once.
func TestConsumeGroupPartitionMovingToANewMemberCancelsItsHandler(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 2, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	started, cut := make(chan struct{}), make(chan struct{})
	handleA := func(hctx context.Context, r client.TopicRecord) error {
		if r.Partition == 1 && r.Offset == 1 {
			close(started)
			<-hctx.Done()
			close(cut)
			return hctx.Err()
		}
		l.add("a", r)
		return nil
	}
	doneA := consumeGroup(t, ctx, srv.Client, "t", "g", handleA, client.ConsumeGroupOptions{Member: "a"})
	waitBalanced(t, srv.Client, "t", "g", "a")
	publishTo(t, srv.Client, "t", 1, "r0", "r1", "r2")
	testkit.Recv(t, started, 10*time.Second, "a to start partition 1's second record")
	testkit.Eventually(t, 10*time.Second, func() bool { return getGroup(t, srv.Client, "t", "g").Partitions[1].Committed == 1 },
		"a to commit the first record")

	// b is after a by name: partition 1 is the one to move.
	doneB := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("b"), client.ConsumeGroupOptions{Member: "b"})
	testkit.Recv(t, cut, 10*time.Second, "a's handler to be cancelled as the partition moves")
	testkit.Recv(t, l.at(3), 10*time.Second, "b to handle what a had not finished")
	owners := waitBalanced(t, srv.Client, "t", "g", "a", "b")
	if owners[1] != "b" {
		t.Fatalf("owners %v, want partition 1 with b", owners)
	}
	publishTo(t, srv.Client, "t", 0, "s0")
	testkit.Recv(t, l.at(4), 10*time.Second, "a to go on with partition 0")
	waitLagZero(t, srv.Client, "t", "g")
	want := map[[2]uint64]string{{1, 0}: "a", {1, 1}: "b", {1, 2}: "b", {0, 0}: "a"}
	for k, m := range want {
		if n := l.handled(int(k[0]), k[1], m); n != 1 || l.handled(int(k[0]), k[1], "a")+l.handled(int(k[0]), k[1], "b") != 1 {
			t.Fatalf("partition %d offset %d handled %d times by %s, %d in all; want by %s once", k[0], k[1], n, m,
				l.handled(int(k[0]), k[1], "a")+l.handled(int(k[0]), k[1], "b"), m)
		}
	}
	cancel()
	for _, done := range []<-chan error{doneA, doneB} {
		if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
			t.Fatalf("ConsumeGroup: %v", err)
		}
	}
}

// A record that keeps failing is retried in place — the records behind it wait — after a
// backoff on the client's clock (between half and all of RetryDelay·2ⁿ⁻¹), a panic
// counting as a failure; after max_failures failures it is dead-lettered with reason
// max_failures into <topic>.<group>-dlq, the group commits past it, and the partition
// goes on.
func TestConsumeGroupDeadLettersAPoisonRecordAfterMaxFailures(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MaxFailures: ptr(3)})
	publishTo(t, srv.Client, "t", 0, "poison", "ok1", "ok2")
	clk := fakeClock()
	c, _ := groupClient(t, srv, clk)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.SyncBuffer
	l := newHandledLog()
	tries := make(chan int, 10)
	var n atomic.Int32
	handler := func(_ context.Context, r client.TopicRecord) error {
		if string(r.Body) != "poison" {
			l.add("m", r)
			return nil
		}
		try := int(n.Add(1))
		tries <- try
		if try == 2 {
			panic("poison pill")
		}
		return fmt.Errorf("cannot parse %q", r.Body)
	}
	done := consumeGroup(t, ctx, c, "t", "g", handler, client.ConsumeGroupOptions{Member: "m", RetryDelay: time.Second,
		Logger: testLogger(t, &logs)})
	testkit.Recv(t, tries, 10*time.Second, "the first try")
	for try, d := range []time.Duration{time.Second, 2 * time.Second} {
		waitTimers(t, clk, 1) // the record's backoff: nothing else of the consumer waits on the clock
		clk.Advance(d/2 - time.Millisecond)
		if clk.Timers() != 1 {
			t.Fatalf("failure %d: retried before half its backoff (%v)", try+1, d/2)
		}
		if l.distinct() != 0 {
			t.Fatalf("a record behind the failing one was handled")
		}
		clk.Advance(d/2 + time.Millisecond)
		if got := testkit.Recv(t, tries, 10*time.Second, "try %d after its whole backoff (%v)", try+2, d); got != try+2 {
			t.Fatalf("try %d", got)
		}
	}
	testkit.Recv(t, l.at(2), 10*time.Second, "the records behind the poison one")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("the poison record was tried %d times, want max_failures = 3", got)
	}
	dl := deadLetters(t, srv.Client, "t.g-dlq")
	if len(dl) != 1 || dl[0].Body == nil || *dl[0].Body != "poison" || dl[0].DeadLetter == nil ||
		dl[0].DeadLetter.Reason != "max_failures" || !strings.Contains(dl[0].DeadLetter.Description, `cannot parse "poison"`) ||
		dl[0].Headers["okiba-topic"] != "t" || dl[0].Headers["okiba-offset"] != "0" {
		t.Fatalf("dead letters of t.g-dlq: %s", lazy(func() string { return fmt.Sprintf("%+v", dl) }))
	}
	for _, want := range []string{"handler panicked", "poison pill", "dead-lettering it", "record dead-lettered"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
	l.checkOrder(t)
}

// A handler that returns DeadLetter (wrapped) has its record dead-lettered at once, with
// its reason and description, whatever max_failures says.
func TestConsumeGroupDeadLetterErrorSetsTheRecordAsideAtOnce(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	publishTo(t, srv.Client, "t", 0, "ok0", "bad", "ok2")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	var badTries atomic.Int32
	done := consumeGroup(t, ctx, srv.Client, "t", "g", func(_ context.Context, r client.TopicRecord) error {
		if string(r.Body) == "bad" {
			badTries.Add(1)
			return fmt.Errorf("order 7: %w", client.DeadLetter("bad_input", "no price"))
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m"})
	testkit.Recv(t, l.at(2), 10*time.Second, "the records around the bad one")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	dl := deadLetters(t, srv.Client, "t.g-dlq")
	if badTries.Load() != 1 || len(dl) != 1 || dl[0].DeadLetter == nil || dl[0].DeadLetter.Reason != "bad_input" ||
		!strings.Contains(dl[0].DeadLetter.Description, "no price") || dl[0].Headers["okiba-offset"] != "1" {
		t.Fatalf("tried %d times; dead letters: %s", badTries.Load(), lazy(func() string { return fmt.Sprintf("%+v", dl) }))
	}
}

// With on_failure block a failing record is retried past max_failures, for as long as it
// fails, and nothing behind it runs meanwhile: the partition waits, in order.
func TestConsumeGroupBlockModeRetriesForEver(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MaxFailures: ptr(2), OnFailure: ptr("block")})
	publishTo(t, srv.Client, "t", 0, "flaky", "next")
	clk := fakeClock()
	c, _ := groupClient(t, srv, clk)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.SyncBuffer
	l := newHandledLog()
	const failures = 6 // three times max_failures
	var tries atomic.Int32
	tried := make(chan struct{}, failures+1)
	done := consumeGroup(t, ctx, c, "t", "g", func(_ context.Context, r client.TopicRecord) error {
		if string(r.Body) == "flaky" {
			n := tries.Add(1)
			tried <- struct{}{}
			if n <= failures {
				return errors.New("downstream unavailable")
			}
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m", RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 400 * time.Millisecond,
		Logger: testLogger(t, &logs)})
	for i := range failures {
		testkit.Recv(t, tried, 10*time.Second, "try %d", i+1)
		waitTimers(t, clk, 1)
		if l.distinct() != 0 {
			t.Fatalf("a record was handled while the first one kept failing")
		}
		clk.Advance(400 * time.Millisecond)
	}
	testkit.Recv(t, l.at(2), 10*time.Second, "the record to succeed at last, and the next")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	if got := tries.Load(); got != failures+1 {
		t.Fatalf("%d tries, want %d", got, failures+1)
	}
	if dl := deadLetters(t, srv.Client, "t.g-dlq"); len(dl) != 0 {
		t.Fatalf("dead letters in block mode: %+v", dl)
	}
	if !strings.Contains(logs.String(), "on_failure is block") {
		t.Fatalf("log does not say the record is retried for ever:\n%s", logs.String())
	}
	l.checkOrder(t)
}

// Seeking a running group — one partition to an offset, then every partition to a time —
// makes its consumer handle the records from there again, in order.
func TestConsumeGroupReplaysAfterASeek(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 2, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	for i := range 3 { // three publishes, so that records differ in time
		for p := range 2 {
			publishTo(t, srv.Client, "t", p, bodiesN(fmt.Sprintf("b%d-p%d-", i, p), 4)...)
		}
		if i < 2 {
			first := getTopicEnd(t, srv.Client, "t")
			testkit.Eventually(t, 5*time.Second, func() bool { return time.Now().After(first.Add(2 * time.Millisecond)) }, "the next millisecond")
		}
	}
	const perPart = 12

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var seen []client.TopicRecord
	all := newHandledLog()
	done := consumeGroup(t, ctx, srv.Client, "t", "g", func(_ context.Context, r client.TopicRecord) error {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		all.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m"})
	testkit.Recv(t, all.at(2*perPart), 10*time.Second, "every record")
	waitLagZero(t, srv.Client, "t", "g")
	since := func() (n int, next func() []client.TopicRecord) {
		mu.Lock()
		defer mu.Unlock()
		n = len(seen)
		return n, func() []client.TopicRecord {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(seen[n:])
		}
	}
	// replayed waits until the records handled since are exactly from[p] … perPart−1 of
	// each partition p, in order.
	replayed := func(next func() []client.TopicRecord, from map[int]uint64) {
		t.Helper()
		want := 0
		for _, f := range from {
			want += perPart - int(f)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return len(next()) >= want }, "%d records handled again", want)
		waitLagZero(t, srv.Client, "t", "g")
		got := map[int][]uint64{}
		for _, r := range next() {
			got[r.Partition] = append(got[r.Partition], r.Offset)
		}
		for p := range 2 {
			f, ok := from[p]
			var wantOffs []uint64
			for o := f; ok && o < perPart; o++ {
				wantOffs = append(wantOffs, o)
			}
			if !slices.Equal(got[p], wantOffs) {
				t.Fatalf("partition %d handled again %v, want %v", p, got[p], wantOffs)
			}
		}
	}

	_, next := since()
	if _, err := srv.Client.Seek(ctx, "t", "g", api.SeekRequest{Partition: ptr(1), Offset: ptr(uint64(5))}); err != nil {
		t.Fatal(err)
	}
	replayed(next, map[int]uint64{1: 5})

	// The time of the second publish: each partition replays from its first record of it.
	all.mu.Lock()
	at := all.times[[2]uint64{0, 4}]
	from := map[int]uint64{}
	for p := range 2 {
		for o := uint64(0); o < perPart; o++ {
			if !all.times[[2]uint64{uint64(p), o}].Before(at) {
				from[p] = o
				break
			}
		}
	}
	all.mu.Unlock()
	if from[0] != 4 || from[1] != 4 {
		t.Fatalf("the records' times do not tell the publishes apart: replay from %v", from)
	}
	_, next = since()
	if _, err := srv.Client.Seek(ctx, "t", "g", api.SeekRequest{Time: &at}); err != nil {
		t.Fatal(err)
	}
	replayed(next, from)
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
}

// getTopicEnd returns the publish time of the newest record of a topic.
func getTopicEnd(t testing.TB, c *client.Client, topic string) time.Time {
	t.Helper()
	tp, err := c.Topic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, p := range tp.Partitions {
		if p.LastTime != nil && p.LastTime.After(last) {
			last = *p.LastTime
		}
	}
	return last
}

// Handled records are committed CommitInterval after the first of them, by the client's
// clock, or at once when CommitRecords of them are, while a pull waits: not only before
// the next call.
func TestConsumeGroupCommitsByIntervalAndByCount(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	// A long member lease lets a pull wait 10s: no call commits while the test runs.
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MemberLease: api.Ptr(30 * time.Second)})
	publishTo(t, srv.Client, "t", 0, bodiesN("r", 5)...)
	clk := fakeClock()
	c, tr := groupClient(t, srv, clk)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := make(chan struct{})
	done := consumeGroup(t, ctx, c, "t", "g", func(hctx context.Context, _ client.TopicRecord) error {
		select {
		case <-gate:
		case <-hctx.Done():
		}
		return hctx.Err()
	}, client.ConsumeGroupOptions{Member: "m", PollWait: 10 * time.Second, CommitInterval: time.Second, CommitRecords: 3})
	committed := func() uint64 { return getGroup(t, srv.Client, "t", "g").Partitions[0].Committed }
	// The second pull waits for records: the commit before it found nothing handled.
	testkit.Eventually(t, 10*time.Second, func() bool { return tr.count("pull") == 2 }, "the second pull")

	gate <- struct{}{}
	waitTimers(t, clk, 1) // the committer, CommitInterval after the first record was handled
	clk.Advance(time.Second - time.Millisecond)
	if tr.count("commit") != 0 || clk.Timers() != 1 {
		t.Fatalf("%d commits before CommitInterval", tr.count("commit"))
	}
	clk.Advance(time.Millisecond)
	testkit.Eventually(t, 10*time.Second, func() bool { return committed() == 1 }, "the commit at CommitInterval")

	// Three more: CommitRecords commits them at once, the clock standing still.
	for range 3 {
		gate <- struct{}{}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return committed() == 4 }, "the commit at CommitRecords")
	// The committer disarms its alarm for the first of the three once it sees nothing
	// left to commit; the alarm that counts next is a new one.
	testkit.Eventually(t, 10*time.Second, func() bool { return clk.Timers() == 0 }, "the committer to disarm")

	gate <- struct{}{}
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	testkit.Eventually(t, 10*time.Second, func() bool { return committed() == 5 }, "the last commit at CommitInterval")
	if got := tr.count("commit"); got != 3 || tr.count("pull") != 2 {
		t.Fatalf("%d commits and %d pulls, want 3 and 2", got, tr.count("pull"))
	}
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
}

// A member whose handlers hold every record it may (MaxRecords) does not pull, and
// heartbeats a third of the member lease after its last call, so it keeps its lease and
// its partition for as long as a handler runs: here three lease lengths. Broker and
// client run on fake clocks moved in step.
func TestConsumeGroupHeartbeatsWhileAHandlerRunsLong(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{FakeClock: true})
	putTopic(t, srv.Client, "t", 1, 0, "")
	const lease = 3 * time.Second
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MemberLease: api.Ptr(lease)})
	publishTo(t, srv.Client, "t", 0, "slow", "next")
	clk := clock.NewFake(srv.Clock.Now())
	c, tr := groupClient(t, srv, clk)
	advance := func(d time.Duration) { srv.Clock.Advance(d); clk.Advance(d) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, release := make(chan struct{}), newLatch()
	defer release.Close()
	l := newHandledLog()
	done := consumeGroup(t, ctx, c, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		if r.Offset == 0 {
			close(started)
			select {
			case <-release.C:
			case <-hctx.Done():
				t.Errorf("long handler cancelled: %v", hctx.Err())
			}
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m", MaxRecords: 2})
	testkit.Recv(t, started, 10*time.Second, "the long handler")
	session := getGroup(t, srv.Client, "t", "g").Members[0].Session
	for i := 1; i <= 9; i++ {
		waitTimers(t, clk, 1) // the member, parked until its heartbeat is due
		if got := tr.count("heartbeat"); got != i-1 {
			t.Fatalf("%d heartbeats before heartbeat %d was due", got, i)
		}
		advance(lease / 3)
		testkit.Eventually(t, 10*time.Second, func() bool { return tr.count("heartbeat") == i }, "heartbeat %d", i)
	}
	g := getGroup(t, srv.Client, "t", "g")
	if len(g.Members) != 1 || g.Members[0].Session != session || g.Partitions[0].Owner != "m" || tr.count("pull") != 1 {
		t.Fatalf("after three leases: %+v, %d pulls; want the member with its first session and partition, one pull", g, tr.count("pull"))
	}
	release.Close()
	testkit.Recv(t, l.at(2), 10*time.Second, "both records")
	// The commit is due CommitInterval after the records were handled, on the client's
	// (fake) clock: move it on until the commit is made.
	testkit.Eventually(t, 10*time.Second, func() bool {
		if getGroup(t, srv.Client, "t", "g").Partitions[0].Committed == 2 {
			return true
		}
		advance(lease / 10)
		return false
	}, "the commit")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
}

// Concurrency bounds the handlers running across partitions, and a partition never runs
// two of its records at once.
func TestConsumeGroupConcurrencyBoundsHandlersAcrossPartitions(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 4, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	const perPart = 5
	for p := range 4 {
		publishTo(t, srv.Client, "t", p, bodiesN("r", perPart)...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const conc = 2
	var mu sync.Mutex
	running, byPart := 0, map[int]int{}
	l := newHandledLog()
	gate := make(chan struct{})
	done := consumeGroup(t, ctx, srv.Client, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		mu.Lock()
		running++
		byPart[r.Partition]++
		if running > conc || byPart[r.Partition] > 1 {
			t.Errorf("%d handlers running, %d of partition %d", running, byPart[r.Partition], r.Partition)
		}
		mu.Unlock()
		select {
		case <-gate:
		case <-hctx.Done():
		}
		l.add("m", r)
		mu.Lock()
		running--
		byPart[r.Partition]--
		mu.Unlock()
		return nil
	}, client.ConsumeGroupOptions{Member: "m", Concurrency: conc, DrainTimeout: -1})
	// Before each release, as many handlers run as Concurrency lets, or as partitions
	// have records left.
	for range 4 * perPart {
		var want int
		testkit.Eventually(t, 10*time.Second, func() bool {
			busy := 0
			for p := range 4 {
				if len(l.offsets(p)) < perPart {
					busy++
				}
			}
			want = min(conc, busy)
			mu.Lock()
			defer mu.Unlock()
			return running == want
		}, "%d handlers running", lazy(func() string { return fmt.Sprint(want) }))
		gate <- struct{}{}
	}
	testkit.Recv(t, l.at(4*perPart), 10*time.Second, "every record")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	l.checkOrder(t)
}

// Cancelling ConsumeGroup's context drains: records not started are not started, the
// running handler finishes and is committed, and the member leaves at once. The client
// runs on a fake clock, so that the drain timer says when the drain has begun.
func TestConsumeGroupDrainFinishesRunningHandlersCommitsAndLeaves(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MemberLease: api.Ptr(30 * time.Second)})
	publishTo(t, srv.Client, "t", 0, "r0", "r1", "r2")
	clk := fakeClock()
	c, _ := groupClient(t, srv, clk)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, release := make(chan struct{}), newLatch()
	defer release.Close()
	l := newHandledLog()
	done := consumeGroup(t, ctx, c, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		if r.Offset == 0 {
			close(started)
			<-release.C
			if hctx.Err() != nil {
				t.Errorf("handler cancelled within the drain timeout: %v", hctx.Err())
			}
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m"})
	testkit.Recv(t, started, 10*time.Second, "the first record")
	cancel()
	// Draining: the drain timeout, and the member's next heartbeat, wait on the clock.
	waitTimers(t, clk, 2)
	select {
	case err := <-done:
		t.Fatalf("ConsumeGroup returned while a handler ran: %v", err)
	default:
	}
	release.Close()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	g := getGroup(t, srv.Client, "t", "g")
	if g.Partitions[0].Committed != 1 || len(g.Members) != 0 || l.distinct() != 1 {
		t.Fatalf("after the drain: committed %d, members %+v, %d records handled; want 1, none, 1",
			g.Partitions[0].Committed, g.Members, l.distinct())
	}
}

// A handler still running DrainTimeout (on the client's clock) after the drain began has
// its context cancelled; its record is not committed, and the next consumer handles it.
func TestConsumeGroupDrainTimeoutCancelsTheHandlerAndLeavesItsRecord(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{MemberLease: api.Ptr(30 * time.Second)})
	publishTo(t, srv.Client, "t", 0, "stuck", "r1")
	clk := fakeClock()
	c, _ := groupClient(t, srv, clk)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, cut := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	done := consumeGroup(t, ctx, c, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		calls.Add(1)
		close(started)
		<-hctx.Done()
		close(cut)
		return hctx.Err()
	}, client.ConsumeGroupOptions{Member: "m", DrainTimeout: 5 * time.Second})
	testkit.Recv(t, started, 10*time.Second, "the handler")
	cancel()
	waitTimers(t, clk, 2) // the drain timeout, and the member's next heartbeat (a third of the lease: later)
	clk.Advance(5*time.Second - time.Millisecond)
	if clk.Timers() != 2 {
		t.Fatalf("a timer fired before the drain timeout")
	}
	select {
	case <-cut:
		t.Fatalf("handler cancelled before the drain timeout")
	default:
	}
	clk.Advance(time.Millisecond)
	testkit.Recv(t, cut, 10*time.Second, "the handler to be cancelled at the drain timeout")
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	g := getGroup(t, srv.Client, "t", "g")
	if g.Partitions[0].Committed != 0 || len(g.Members) != 0 || calls.Load() != 1 {
		t.Fatalf("after the drain: committed %d, members %+v, %d calls; want 0, none, 1", g.Partitions[0].Committed, g.Members, calls.Load())
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	l := newHandledLog()
	done2 := consumeGroup(t, ctx2, srv.Client, "t", "g", l.handler("m2"), client.ConsumeGroupOptions{Member: "m2"})
	testkit.Recv(t, l.at(2), 10*time.Second, "the next consumer to handle both records")
	cancel2()
	if err := testkit.Recv(t, done2, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
}

// lossyTransport loses the answer of one pull: the broker hands the records out, the
// client never sees them.
type lossyTransport struct {
	base   http.RoundTripper
	loseAt int // the pull whose answer is lost, counting from 1
	pulls  atomic.Int32
}

func (l *lossyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/pull") || int(l.pulls.Add(1)) != l.loseAt {
		return l.base.RoundTrip(r)
	}
	resp, err := l.base.RoundTrip(r)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil, errors.New("answer lost (test)")
}

// Records handed out in an answer that never arrived are not skipped: the consumer sees
// the gap in the next answer, commits what it handled, and rejoins, so that the broker
// hands them out again.
func TestConsumeGroupRejoinsWhenAPullAnswerIsLost(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	const n = 20
	publishTo(t, srv.Client, "t", 0, bodiesN("r", n)...)
	lossy := &lossyTransport{base: http.DefaultTransport, loseAt: 2}
	c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{Transport: lossy}})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.SyncBuffer
	l := newHandledLog()
	done := consumeGroup(t, ctx, c, "t", "g", l.handler("m"), client.ConsumeGroupOptions{Member: "m", MaxRecords: 4,
		Logger: testLogger(t, &logs)})
	testkit.Recv(t, l.at(n), 10*time.Second, "every record, those of the lost answer too")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	l.checkAtLeastOnceInOrder(t)
	if !strings.Contains(logs.String(), "never reached it; rejoining") {
		t.Fatalf("log does not tell of the rejoin:\n%s", logs.String())
	}
}

// When the broker forgets the member (here it is made to leave behind the consumer's
// back) the consumer rejoins with a new session and cancels its running handler; the
// partition's records start again from the committed offset, but only once that handler
// has returned: a partition never runs two records at once, even one that ignores its
// context.
func TestConsumeGroupRejoinWaitsForTheHandlerItCancelled(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	publishTo(t, srv.Client, "t", 0, "r0", "r1", "r2")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	running := 0
	started, release, cancelled := make(chan struct{}), newLatch(), make(chan struct{})
	defer release.Close()
	var calls atomic.Int32
	l := newHandledLog()
	done := consumeGroup(t, ctx, srv.Client, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		mu.Lock()
		running++
		if running > 1 {
			t.Errorf("two handlers of partition 0 at once (offset %d)", r.Offset)
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if calls.Add(1) == 1 {
			close(started)
			<-hctx.Done()
			close(cancelled)
			<-release.C // ignores its context for a while
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m"})
	testkit.Recv(t, started, 10*time.Second, "the first handler")
	first := getGroup(t, srv.Client, "t", "g").Members[0].Session
	if err := srv.Client.Leave(ctx, "t", "g", client.Member{Name: "m", Session: first}); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, cancelled, 10*time.Second, "the handler to be cancelled when the member was found gone")
	testkit.Eventually(t, 10*time.Second, func() bool {
		g := getGroup(t, srv.Client, "t", "g")
		return len(g.Members) == 1 && g.Members[0].Session != first && g.Partitions[0].Position == 3
	}, "the member to rejoin and be handed the records again")
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d handler calls before the cancelled one returned", got)
	}
	release.Close()
	testkit.Recv(t, l.at(3), 10*time.Second, "the records, again from the committed offset")
	waitLagZero(t, srv.Client, "t", "g")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); err != nil {
		t.Fatalf("ConsumeGroup: %v", err)
	}
	if got := l.offsets(0); !slices.Equal(got, []uint64{0, 0, 1, 2}) {
		t.Fatalf("handled %v, want 0 (cut, its outcome ignored), then 0, 1, 2", got)
	}
}

// A group deleted under a running consumer ends ConsumeGroup with group_deleted.
func TestConsumeGroupEndsWhenTheGroupIsDeleted(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 1, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newHandledLog()
	done := consumeGroup(t, ctx, srv.Client, "t", "g", l.handler("m"), client.ConsumeGroupOptions{Member: "m"})
	waitBalanced(t, srv.Client, "t", "g", "m")
	if err := srv.Client.DeleteGroup(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, done, 10*time.Second, "ConsumeGroup to return"); !client.IsCode(err, api.CodeGroupDeleted) {
		t.Fatalf("ConsumeGroup: %v, want group_deleted", err)
	}
	if err := srv.Client.ConsumeGroup(ctx, "t", "missing", l.handler("m"), client.ConsumeGroupOptions{}); !client.IsCode(err, api.CodeGroupNotFound) {
		t.Fatalf("ConsumeGroup of a missing group: %v", err)
	}
}

// ConsumeGroup returns only once every goroutine it started has: the member loop, the
// committer, the handler log's, and every partition's worker — those of partitions that
// moved, of a record waiting for its retry, and of a handler cut by the drain.
func TestConsumeGroupLeavesNoGoroutineBehind(t *testing.T) {
	// Not parallel: noLeakedGoroutines looks at every goroutine of the process.
	srv := okibatest.New(t, okibatest.Options{})
	putTopic(t, srv.Client, "t", 3, 0, "")
	putGroup(t, srv.Client, "t", "g", api.GroupConfig{})
	publishTo(t, srv.Client, "t", 0, "ok", "stuck")
	publishTo(t, srv.Client, "t", 1, "fails")
	publishTo(t, srv.Client, "t", 2, "ok")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, failed := make(chan struct{}), make(chan struct{}, 1)
	l := newHandledLog()
	done := consumeGroup(t, ctx, srv.Client, "t", "g", func(hctx context.Context, r client.TopicRecord) error {
		switch string(r.Body) {
		case "stuck":
			close(stuck)
			<-hctx.Done()
			return hctx.Err()
		case "fails":
			select {
			case failed <- struct{}{}:
			default:
			}
			return errors.New("not now")
		}
		l.add("m", r)
		return nil
	}, client.ConsumeGroupOptions{Member: "m", RetryDelay: time.Hour, DrainTimeout: -1})
	testkit.Recv(t, stuck, 10*time.Second, "the stuck handler")
	testkit.Recv(t, failed, 10*time.Second, "the failing record, now waiting for its retry")
	testkit.Recv(t, l.at(2), 10*time.Second, "the other records")
	// A second member takes a partition away: its worker ends too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done2 := consumeGroup(t, ctx2, srv.Client, "t", "g", func(context.Context, client.TopicRecord) error { return nil },
		client.ConsumeGroupOptions{Member: "n"})
	waitBalanced(t, srv.Client, "t", "g", "m", "n")
	cancel2()
	cancel()
	for _, d := range []<-chan error{done, done2} {
		if err := testkit.Recv(t, d, 10*time.Second, "ConsumeGroup to return"); err != nil {
			t.Fatalf("ConsumeGroup: %v", err)
		}
	}
	noLeakedGoroutines(t)
}
