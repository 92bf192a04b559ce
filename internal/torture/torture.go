// Package torture checks okiba's delivery guarantee against the real binary, the way an
// operator would: it runs `okiba serve` as a child process under concurrent load
// (producers with batches, consumers that ack, nack, dead-letter and abandon, ordered
// groups), kills it with SIGKILL at random moments — during checkpoints, compaction and
// redrive too — sometimes freezes it with SIGSTOP past its leases, restarts it on the
// same data directory, and at the end drains every queue into a checker that counts,
// Jepsen-style:
//
//   - lost: a send was acknowledged, and the message was never delivered, not even from
//     the dead-letter queue;
//   - vanished: a message's last delivery was never settled (no ack, no dead-letter
//     attempted) and it never came back: a dirty read, or a loss;
//   - resurrected: delivered by a receive sent after an ack of it was acknowledged;
//   - unexpected: delivered, but never attempted by a producer;
//   - reordered: a message of a group delivered by a receive sent after a later message
//     of its group was acknowledged as acked (unless it was dead-lettered or redriven,
//     which moves it to the tail), or a receive returning a group's messages out of order;
//   - duplicated: delivered more than once before its ack (allowed; reported as a rate).
//
// Every number must be zero but the duplicates. Beside the queues, a topic load goes
// through the same kills — keyed publishes with dedup retries, a subscription into a queue,
// a consumer group — and is checked after every restart and at the end (topics.go). Runs
// are seeded; the seed is printed.
package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// Config configures a run. The zero value of every field but Binary means its default.
type Config struct {
	// Binary is the okiba executable to run as the server. Required.
	Binary string
	// Dir is the data directory; default a new temporary directory (removed after a
	// clean run).
	Dir string
	// Cycles is the number of kill (or freeze) cycles. Defaults to 20.
	Cycles int
	// Duration, when set, runs cycles until it has passed (Cycles is then a minimum).
	Duration time.Duration
	// Seed makes the run's choices repeatable; 0 picks one (printed in the report).
	Seed uint64
	// Producers and Consumers on the native API. Default 4 and 4.
	Producers, Consumers int
	// SQSProducers and SQSConsumers drive the same queue through the SQS API. Default 1
	// and 1; negative for none.
	SQSProducers, SQSConsumers int
	// TopicPublishers publish to the topic of the topic load (topics.go), which also runs
	// its subscription's consumer and a group of two members. Default 2; negative for no
	// topic load.
	TopicPublishers int
	// SegmentSize and CheckpointBytes for the server, small by default (2MiB, 256KiB) so
	// that kills land in segment rolls, checkpoints and compaction.
	SegmentSize, CheckpointBytes string
	// Log receives progress lines. Defaults to discarding.
	Log io.Writer
}

func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" {
		return c, errors.New("torture: Config.Binary (the okiba executable) is required")
	}
	if c.Cycles <= 0 {
		c.Cycles = 20
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Producers <= 0 {
		c.Producers = 4
	}
	if c.Consumers <= 0 {
		c.Consumers = 4
	}
	if c.SQSProducers == 0 {
		c.SQSProducers = 1
	}
	if c.SQSConsumers == 0 {
		c.SQSConsumers = 1
	}
	if c.TopicPublishers == 0 {
		c.TopicPublishers = 2
	}
	if c.SegmentSize == "" {
		c.SegmentSize = "2MiB"
	}
	if c.CheckpointBytes == "" {
		c.CheckpointBytes = "256KiB"
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c, nil
}

// Report is the outcome of a run.
type Report struct {
	Seed         uint64
	Cycles       int
	Kills, Stops int
	Redrives     int
	Attempted    int // messages producers tried to send
	SentOK       int // sends the broker acknowledged
	Delivered    int // deliveries, redeliveries included
	AckedOK      int // acks the broker acknowledged
	SQSSentOK    int // of SentOK, through the SQS API
	SQSAckedOK   int // deletes through the SQS API that settled
	// DeferredFetched counts deliveries of deferred messages fetched by id.
	DeferredFetched int
	DeadLettered    int // messages drained from the dead-letter queue at the end
	Lost            int
	Vanished        int
	Resurrected     int
	Unexpected      int
	Reordered       int
	Duplicated      int // messages delivered more than once before their ack
	DuplicateRate   float64
	Duration        time.Duration
	// Topic is the topic load's outcome; zero when it did not run.
	Topic TopicReport
	// Examples holds a few violating message bodies per category, for debugging.
	Examples []string
}

// OK reports whether the guarantee held.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Vanished == 0 && r.Resurrected == 0 && r.Unexpected == 0 && r.Reordered == 0 && r.Topic.OK()
}

func (r Report) String() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	s := fmt.Sprintf("%s seed=%d cycles=%d kills=%d stops=%d redrives=%d duration=%s\n"+
		"  attempted %d, sends acknowledged %d (%d via SQS), deliveries %d, acks acknowledged %d (%d via SQS), dead letters drained %d\n"+
		"  acknowledged lost: %d of %d; vanished: %d; resurrected: %d; unexpected: %d; reordered: %d\n"+
		"  duplicated before ack: %d (%.2f%% of delivered messages); deferred messages fetched by id: %d",
		verdict, r.Seed, r.Cycles, r.Kills, r.Stops, r.Redrives, r.Duration.Round(time.Millisecond),
		r.Attempted, r.SentOK, r.SQSSentOK, r.Delivered, r.AckedOK, r.SQSAckedOK, r.DeadLettered,
		r.Lost, r.SentOK, r.Vanished, r.Resurrected, r.Unexpected, r.Reordered,
		r.Duplicated, 100*r.DuplicateRate, r.DeferredFetched)
	if r.Topic.Checks > 0 {
		s += "\n" + r.Topic.String()
	}
	return s
}

const (
	queueName  = "torture"
	dlqName    = "torture-dlq"
	visibility = 2 * time.Second
	maxBacklog = 20_000 // the queue's max_messages
)

// Run performs one torture run. It returns an error only if the run itself could not be
// carried out (the server would not start, for instance); violations are in the Report.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	start := time.Now()
	rep = Report{Seed: cfg.Seed}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "okiba-torture-"); err != nil {
			return rep, err
		}
		defer func() {
			if err == nil && rep.OK() {
				os.RemoveAll(dir)
			}
		}()
	}
	fmt.Fprintf(cfg.Log, "torture: seed %d, data %s, %d cycles\n", cfg.Seed, dir, cfg.Cycles)

	srv := &server{cfg: cfg, dir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "server.log")}
	if err := srv.start(ctx); err != nil {
		return rep, err
	}
	defer srv.kill()

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}
	cl, err := client.New(srv.url, client.Options{HTTPClient: hc})
	if err != nil {
		return rep, err
	}
	// Half the native producers and consumers use the Go client's default transport, the
	// stream (docs/api.md), whose connections the kills break mid-frame.
	scl, err := client.New(srv.url, client.Options{})
	if err != nil {
		return rep, err
	}
	defer scl.Close()
	native := func(i int) *client.Client {
		if i%2 == 1 {
			return scl
		}
		return cl
	}
	five, backlog := 5, int64(maxBacklog)
	if err := retry(ctx, func() error {
		// max_messages bounds the backlog (producers outrun consumers over a long run):
		// refused sends are backpressure, and exercise it.
		_, err := cl.PutQueue(ctx, queueName, api.QueueConfig{
			VisibilityTimeout: api.Ptr(visibility), MaxDeliveries: &five, BackoffBase: api.Ptr(50 * time.Millisecond),
			BackoffMax: api.Ptr(time.Second), DedupWindow: api.Ptr(time.Duration(0)), MaxMessages: &backlog,
		})
		return err
	}); err != nil {
		return rep, fmt.Errorf("create queue: %w", err)
	}
	var th *topicHistory
	gc := newGroupClient(srv.url, hc)
	checkRng := rand.New(rand.NewPCG(cfg.Seed, 3300))
	if cfg.TopicPublishers > 0 {
		if err := setupTopic(ctx, cl, gc); err != nil {
			return rep, err
		}
		th = newTopicHistory()
	}

	h := newHistory()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for p := 0; p < cfg.Producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			produce(loadCtx, native(p), h, p, cfg.Seed)
		}(p)
	}
	sq := &sqsClient{url: srv.url, hc: hc}
	for p := 0; p < cfg.SQSProducers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			produceSQS(loadCtx, sq, h, 100+p, cfg.Seed)
		}(p)
	}
	for p := 0; th != nil && p < cfg.TopicPublishers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			publish(loadCtx, cl, th, p, cfg.Seed)
		}(p)
	}
	consumeCtx, stopConsume := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	for c := 0; c < cfg.Consumers; c++ {
		cwg.Add(1)
		go func(c int) {
			defer cwg.Done()
			consume(consumeCtx, native(c), h, c, cfg.Seed, queueName, false)
		}(c)
	}
	for c := 0; c < cfg.SQSConsumers; c++ {
		cwg.Add(1)
		go func(c int) {
			defer cwg.Done()
			consumeSQS(consumeCtx, sq, h, c, cfg.Seed)
		}(c)
	}
	if th != nil {
		// m0 stays; m1 comes and goes, so that partitions move between them.
		cwg.Add(3)
		go func() { defer cwg.Done(); runMember(consumeCtx, gc, th, "m0", cfg.Seed, 3100, false) }()
		go func() { defer cwg.Done(); runMember(consumeCtx, gc, th, "m1", cfg.Seed, 3101, true) }()
		go func() { defer cwg.Done(); consumeTopicQueue(consumeCtx, cl, th, cfg.Seed) }()
	}

	for cycle := 0; cycle < cfg.Cycles || (cfg.Duration > 0 && time.Since(start) < cfg.Duration); cycle++ {
		if ctx.Err() != nil {
			break
		}
		pause(ctx, time.Duration(50+rng.IntN(350))*time.Millisecond)
		switch r := rng.IntN(100); {
		case r < 8:
			// Freeze the broker past its leases: consumers' leases expire, and time
			// stepping on while the process is stopped must not confuse it.
			rep.Stops++
			srv.freeze()
			pause(ctx, visibility+time.Duration(rng.IntN(1000))*time.Millisecond)
			srv.thaw()
		case r < 16:
			// Redrive the dead letters, then kill during the move.
			rep.Redrives++
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			// Redrive exactly the dead letters marked as moved (they rejoin their
			// groups' tails), so that the order check knows every moved message.
			if ids := h.markDeadLetters(rctx, cl); len(ids) > 0 && len(ids) <= 100_000 {
				cl.Redrive(rctx, dlqName, api.RedriveRequest{Rate: 200, IDs: ids})
			}
			cancel()
			pause(ctx, time.Duration(rng.IntN(150))*time.Millisecond)
			fallthrough
		default:
			rep.Kills++
			srv.kill()
			if err := srv.start(ctx); err != nil {
				stopLoad()
				stopConsume()
				wg.Wait()
				cwg.Wait()
				return rep, fmt.Errorf("cycle %d: restart: %w", cycle, err)
			}
			if th != nil {
				if err := th.check(ctx, cl, gc, checkRng, cycle+1, false); err != nil {
					th.mu.Lock()
					th.checksSkipped++
					th.mu.Unlock()
					fmt.Fprintf(cfg.Log, "torture: cycle %d: topic check skipped: %v\n", cycle, err)
				}
				for _, e := range th.newExamples() {
					fmt.Fprintf(cfg.Log, "torture: seed %d, cycle %d: %s\n", cfg.Seed, cycle+1, e)
				}
			}
		}
		rep.Cycles = cycle + 1
		if (cycle+1)%10 == 0 {
			depth := int64(-1)
			if q, err := cl.Queue(ctx, queueName); err == nil {
				depth = q.Stats.Ready + q.Stats.Delayed + q.Stats.InFlight
			}
			topics := ""
			if th != nil {
				topics = fmt.Sprintf(", %d publishes acknowledged", th.ackedCount())
			}
			fmt.Fprintf(cfg.Log, "torture: %d cycles, %d sends acknowledged, %d queued%s\n", cycle+1, h.sentOK(), depth, topics)
		}
	}

	// Drain: producers stop, consumers ack everything, the dead letters are drained too.
	stopLoad()
	wg.Wait()
	h.setDraining()
	topicDrained := make(chan error, 1)
	if th != nil {
		th.setDraining()
		go func() { topicDrained <- th.waitDrained(ctx, cl, gc) }()
	} else {
		topicDrained <- nil
	}
	fmt.Fprintf(cfg.Log, "torture: draining\n")
	var dwg sync.WaitGroup
	dctx, stopDrain := context.WithCancel(ctx)
	for c := 0; c < 2; c++ {
		dwg.Add(1)
		go func(c int) {
			defer dwg.Done()
			consume(dctx, cl, h, 100+c, cfg.Seed, dlqName, true)
		}(c)
	}
	err = waitEmpty(ctx, cl, h)
	terr := <-topicDrained
	stopConsume()
	stopDrain()
	cwg.Wait()
	dwg.Wait()
	if err == nil {
		err = terr
	}
	if err != nil {
		return rep, fmt.Errorf("drain: %w (server log: %s)", err, srv.logPath)
	}
	h.check(&rep)
	if th != nil {
		if err := th.check(ctx, cl, gc, checkRng, rep.Cycles, true); err != nil {
			return rep, fmt.Errorf("the topic load's last check: %w (server log: %s)", err, srv.logPath)
		}
		th.fill(&rep)
	}
	rep.Duration = time.Since(start)
	if !rep.OK() {
		fmt.Fprintf(cfg.Log, "torture: violations; data kept in %s, server log %s\n", dir, srv.logPath)
	}
	return rep, nil
}

// waitEmpty waits until both queues are empty and stay so across a lease length (leases
// abandoned by consumers expire and are drained too), and no redrive is running. It gives
// up when the queues stop shrinking for a minute.
func waitEmpty(ctx context.Context, cl *client.Client, h *history) error {
	lastProgress, least := time.Now(), int64(1<<62)
	quietSince := time.Time{}
	for time.Since(lastProgress) < time.Minute {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		total := int64(-1)
		q, err1 := cl.Queue(ctx, queueName)
		d, err2 := cl.Queue(ctx, dlqName)
		tasks, err3 := cl.RedriveTasks(ctx)
		running := false
		for _, t := range tasks {
			running = running || t.State == "running"
		}
		if err1 == nil && err3 == nil && (err2 == nil || client.IsCode(err2, api.CodeQueueNotFound)) {
			total = q.Stats.Ready + q.Stats.Delayed + q.Stats.InFlight + q.Stats.Deferred
			if err2 == nil {
				total += d.Stats.Ready + d.Stats.Delayed + d.Stats.InFlight + d.Stats.Deferred
			}
		}
		if total >= 0 && total < least {
			least, lastProgress = total, time.Now()
		}
		switch {
		case total != 0 || running || h.settling():
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > visibility+500*time.Millisecond:
			return nil
		}
		pause(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("queues stopped draining with %d messages left", least)
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retry retries fn while the server is coming up.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = fn(); err == nil {
			return nil
		}
		pause(ctx, 100*time.Millisecond)
	}
	return err
}

// server is the okiba child process.
type server struct {
	cfg     Config
	dir     string
	logPath string
	port    int
	url     string
	cmd     *exec.Cmd
	done    chan struct{}
}

func (s *server) start(ctx context.Context) error {
	if s.port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		s.url = "http://127.0.0.1:" + strconv.Itoa(s.port)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(s.cfg.Binary, "serve", "--addr", "127.0.0.1:"+strconv.Itoa(s.port), "--data", s.dir,
			"--segment-size", s.cfg.SegmentSize, "--checkpoint-bytes", s.cfg.CheckpointBytes, "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "OKIBA_ADDR=", "OKIBA_DATA=")
		if err := cmd.Start(); err != nil {
			logf.Close()
			return err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		s.cmd, s.done = cmd, done
		if err := s.waitHealthy(ctx, done); err == nil {
			logf.Close()
			return nil
		} else if attempt >= 20 {
			logf.Close()
			return fmt.Errorf("okiba serve did not become healthy (see %s): %w", s.logPath, err)
		}
		s.kill()
		pause(ctx, 100*time.Millisecond) // the port may still be held by the killed process
	}
}

func (s *server) waitHealthy(ctx context.Context, done chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("okiba serve exited")
		default:
		}
		resp, err := hc.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		pause(ctx, 20*time.Millisecond)
	}
	return errors.New("timed out")
}

func (s *server) signal(sig os.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.thaw() // a stopped process dies on SIGKILL too, but be sure
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// body formats a message body; bodies are unique, so they identify messages.
func body(producer, n int, group string, seq int) string {
	if group == "" {
		return fmt.Sprintf("p%d-%d", producer, n)
	}
	return fmt.Sprintf("p%d-%d|%s|%d", producer, n, group, seq)
}

// parseBody returns a body's group and sequence.
func parseBody(b string) (group string, seq int, ok bool) {
	parts := strings.Split(b, "|")
	if len(parts) != 3 {
		return "", 0, false
	}
	seq, err := strconv.Atoi(parts[2])
	return parts[1], seq, err == nil
}
