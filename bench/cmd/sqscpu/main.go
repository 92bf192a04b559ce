// Command sqscpu measures the server's CPU per message on okiba's SQS path beside its
// native path, in one run on one server: it starts `okiba serve` (built from the
// working tree, or --bin) with a fresh data directory, then, in interleaved rounds, moves
// the same number of 1 KiB messages through each path — sends in batches of 10 from
// --producers goroutines, then receives of 10 and batch deletes/acks of what each
// receive got from --consumers goroutines — and reads the server process's CPU time
// (utime + stime of /proc/<pid>/stat, every thread) before and after each phase.
//
// The SQS path is aws-sdk-go-v2 (SendMessageBatch of 10, ReceiveMessage of 10 with
// WaitTimeSeconds 1, DeleteMessageBatch); the native path is the Go client on its
// default transport, the binary stream (SendBatch of 10, Receive of 10, Ack of the
// receive's receipts). Both run against the same broker, one queue each, so that the
// group commit and the disk are the same for both. The client's CPU is not counted:
// it is the server's share that okiba controls. docs/benchmarks.md ("The SQS path")
// records runs.
//
//	cd bench && go run ./cmd/sqscpu [--messages 20000] [--rounds 3] [--producers 16] [--consumers 8] [--auth]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// The principal --auth starts the server with: the SQS front then verifies every
// request's SigV4 signature, payload hash included, and the native client sends its
// secret as a bearer token.
const (
	benchKey    = "bench"
	benchSecret = "bench-secret-0123456789abcdef"
)

type config struct {
	bin                  string
	server               string // a running server instead, with its pid
	pid                  int
	messages, rounds     int
	producers, consumers int
	size                 int
	auth                 bool
	paths                []string
}

func main() {
	var c config
	var paths string
	flag.StringVar(&c.bin, "bin", "", "the okiba binary (default: built from the working tree into a temporary directory)")
	flag.IntVar(&c.messages, "messages", 20000, "messages per path and round (a multiple of 10)")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds; each runs every path once, the paths' order alternating")
	flag.IntVar(&c.producers, "producers", 16, "concurrent senders of batches of 10")
	flag.IntVar(&c.consumers, "consumers", 8, "concurrent receive → delete loops")
	flag.IntVar(&c.size, "size", 1024, "body bytes")
	flag.BoolVar(&c.auth, "auth", false, "run the server with a principal: SQS requests are verified (SigV4), native ones carry its token")
	flag.StringVar(&c.server, "server", "", "measure a running server at this URL instead of starting one (with --pid)")
	flag.IntVar(&c.pid, "pid", 0, "the process id of --server")
	flag.StringVar(&paths, "paths", "sqs,native", "the paths to measure, in the first round's order")
	flag.Parse()
	c.paths = strings.Split(paths, ",")
	c.messages = (c.messages + 9) / 10 * 10
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "sqscpu:", err)
		os.Exit(1)
	}
}

// path is one way of moving messages through the server.
type path interface {
	send(ctx context.Context, body string) error // one batch of 10
	// drain receives up to 10 and settles what it got, returning how many.
	drain(ctx context.Context) (int, error)
}

type result struct {
	path                string
	sendCPU, drainCPU   time.Duration
	sendWall, drainWall time.Duration
}

func run(c config) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "sqscpu-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if c.server != "" {
		if c.pid == 0 {
			return errors.New("--server needs --pid: the process whose CPU time is measured")
		}
		return measure(ctx, c, c.server, c.pid)
	}
	if c.bin == "" {
		c.bin = filepath.Join(tmp, "okiba")
		build := exec.Command("go", "build", "-o", c.bin, "./cmd/okiba")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/okiba: %v\n%s", err, out)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	args := []string{"serve", "--addr", addr, "--data", filepath.Join(tmp, "data"), "--log-level", "warn"}
	env := os.Environ()
	if c.auth {
		cfg := filepath.Join(tmp, "okiba.json")
		js := fmt.Sprintf(`{"principals": [{"name": %q, "secret": %q, "grants": ["admin"]}]}`, benchKey, benchSecret)
		if err := os.WriteFile(cfg, []byte(js), 0o600); err != nil {
			return err
		}
		args = append(args, "--config", cfg)
	}
	srv := exec.Command(c.bin, args...)
	srv.Env = env
	srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	}()
	return measure(ctx, c, "http://"+addr, srv.Process.Pid)
}

// measure runs the rounds against the server at url, process pid.
func measure(ctx context.Context, c config, url string, pid int) error {
	token := ""
	if c.auth {
		token = benchSecret
	}
	nc, err := client.New(url, client.Options{Token: token})
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := waitHealthy(ctx, nc); err != nil {
		return err
	}
	paths := map[string]path{}
	for _, name := range c.paths {
		switch name {
		case "sqs":
			p, err := newSQSPath(ctx, url, name)
			if err != nil {
				return err
			}
			paths[name] = p
		case "native":
			if _, err := nc.PutQueue(ctx, name, api.QueueConfig{}); err != nil {
				return err
			}
			paths[name] = &nativePath{c: nc, queue: name}
		default:
			return fmt.Errorf("unknown path %q: sqs or native", name)
		}
	}
	body := strings.Repeat("x", c.size)
	fmt.Printf("okiba %s, %d messages of %d bytes per path and round, %d producers (batches of 10), %d consumers (receive 10, settle them), auth %v, GOMAXPROCS of the server: default, %d CPUs\n",
		c.bin, c.messages, c.size, c.producers, c.consumers, c.auth, runtime.NumCPU())
	// A warm-up round of each path, not reported: connections, the server's heap.
	for _, name := range c.paths {
		if _, err := round(ctx, c, pid, name, paths[name], body, c.messages/4); err != nil {
			return err
		}
	}
	var results []result
	order := slices.Clone(c.paths)
	for r := range c.rounds {
		for _, name := range order {
			res, err := round(ctx, c, pid, name, paths[name], body, c.messages)
			if err != nil {
				return err
			}
			results = append(results, res)
			fmt.Printf("round %d %-6s send %5.1f µs/msg (%6.0f msgs/s)  drain %5.1f µs/msg (%6.0f msgs/s)  total %5.1f µs/msg\n",
				r+1, name, perMsg(res.sendCPU, c.messages), rate(res.sendWall, c.messages),
				perMsg(res.drainCPU, c.messages), rate(res.drainWall, c.messages), perMsg(res.sendCPU+res.drainCPU, c.messages))
		}
		slices.Reverse(order)
	}
	fmt.Println("medians (server CPU per message):")
	med := map[string]float64{}
	for _, name := range c.paths {
		var send, drain, total []float64
		for _, r := range results {
			if r.path == name {
				send = append(send, perMsg(r.sendCPU, c.messages))
				drain = append(drain, perMsg(r.drainCPU, c.messages))
				total = append(total, perMsg(r.sendCPU+r.drainCPU, c.messages))
			}
		}
		med[name] = median(total)
		fmt.Printf("  %-6s send %5.1f µs  drain %5.1f µs  total %5.1f µs\n", name, median(send), median(drain), median(total))
	}
	if s, n := med["sqs"], med["native"]; s > 0 && n > 0 {
		fmt.Printf("  sqs / native: %.2f×\n", s/n)
	}
	return nil
}

// round sends n messages through p, then drains them, and returns the server's CPU time
// and the wall time of each phase.
func round(ctx context.Context, c config, pid int, name string, p path, body string, n int) (result, error) {
	res := result{path: name}
	var sent atomic.Int64
	cpu0, t0 := cpuOf(pid), time.Now()
	if err := parallel(c.producers, func() error {
		for sent.Add(10) <= int64(n) {
			if err := p.send(ctx, body); err != nil {
				return fmt.Errorf("%s send: %w", name, err)
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	cpu1, t1 := cpuOf(pid), time.Now()
	var got atomic.Int64
	if err := parallel(c.consumers, func() error {
		for got.Load() < int64(n) {
			k, err := p.drain(ctx)
			if err != nil {
				return fmt.Errorf("%s drain: %w", name, err)
			}
			got.Add(int64(k))
		}
		return nil
	}); err != nil {
		return res, err
	}
	cpu2, t2 := cpuOf(pid), time.Now()
	if g := got.Load(); g != int64(n) {
		return res, fmt.Errorf("%s: drained %d of %d", name, g, n)
	}
	res.sendCPU, res.drainCPU = cpu1-cpu0, cpu2-cpu1
	res.sendWall, res.drainWall = t1.Sub(t0), t2.Sub(t1)
	return res, nil
}

func parallel(n int, f func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sqsPath is aws-sdk-go-v2 as okibabench's okiba-sqs runs it.
type sqsPath struct {
	c   *sqs.Client
	url *string
}

func newSQSPath(ctx context.Context, endpoint, queue string) (*sqsPath, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second}}
	c := sqs.New(sqs.Options{
		BaseEndpoint:     aws.String(endpoint),
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider(benchKey, benchSecret, ""),
		HTTPClient:       hc,
		RetryMaxAttempts: 1,
	})
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queue), Attributes: map[string]string{"VisibilityTimeout": "60"}})
	if err != nil {
		return nil, err
	}
	return &sqsPath{c: c, url: out.QueueUrl}, nil
}

func (p *sqsPath) send(ctx context.Context, body string) error {
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)}
	}
	out, err := p.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: p.url, Entries: entries})
	if err == nil && len(out.Failed) > 0 {
		err = fmt.Errorf("%d failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
	}
	return err
}

func (p *sqsPath) drain(ctx context.Context) (int, error) {
	out, err := p.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: p.url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) == 0 {
		return 0, err
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
	for i, m := range out.Messages {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	del, err := p.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: p.url, Entries: entries})
	if err == nil && len(del.Failed) > 0 {
		err = fmt.Errorf("delete: %d failed: %s", len(del.Failed), aws.ToString(del.Failed[0].Message))
	}
	return len(out.Messages), err
}

// nativePath is the Go client on its default transport (the binary stream).
type nativePath struct {
	c     *client.Client
	queue string
}

func (p *nativePath) send(ctx context.Context, body string) error {
	msgs := make([]client.Message, 10)
	for i := range msgs {
		msgs[i] = client.Message{Body: []byte(body)}
	}
	res, err := p.c.SendBatch(ctx, p.queue, msgs)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func (p *nativePath) drain(ctx context.Context) (int, error) {
	wait := time.Second
	ds, err := p.c.Receive(ctx, p.queue, client.ReceiveOptions{Max: 10, Wait: &wait})
	if err != nil || len(ds) == 0 {
		return 0, err
	}
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
	}
	errs, err := p.c.Ack(ctx, p.queue, receipts...)
	if err != nil {
		return 0, err
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	return len(ds), nil
}

// cpuOf is the CPU time (user + system) pid has used, all its threads.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc.
const clockTicks = 100

func waitHealthy(ctx context.Context, c *client.Client) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Health(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("okiba did not become healthy: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func perMsg(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

func rate(d time.Duration, n int) float64 { return float64(n) / d.Seconds() }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
