package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/queue"
)

// TestCeleryWorker runs one Celery 5.2 worker (Debian's python3-celery, on kombu 5.2.4,
// which speaks the query protocol: through botocore 1.29 for its sends, deletes and
// visibility changes, and through pycurl for its receives, forms posted to the queue's
// URL and signed without their content-type) against a real okiba server with
// authentication, configured as docs/sqs.md says, and a producer
// (testdata/celery/celery_client.py) that sends tasks and reads their results from
// Celery's file-system backend: a task, a retry with a countdown, a group, acks_late.
// The worker holds a task with a long countdown when it is stopped: its warm shutdown
// must give that message back, and nothing else may be left in the queue.
func TestCeleryWorker(t *testing.T) {
	t.Parallel()
	const suite = "the Celery worker test"
	if _, err := os.Stat(debianPython); err != nil {
		testkit.Missing(t, suite, debianPython+" is not installed", "apt-get install python3-celery python3-kombu python3-pycurl (or make deps)")
	}
	if out, err := exec.Command(debianPython, "-c", "import celery, kombu, pycurl, boto3; print(celery.__version__, kombu.__version__)").CombinedOutput(); err != nil {
		testkit.Missing(t, suite, "Debian's python3-celery, python3-kombu, python3-pycurl or python3-boto3 is not installed: "+strings.TrimSpace(string(out)),
			"apt-get install python3-celery python3-kombu python3-pycurl python3-boto3 (or make deps)")
	} else {
		t.Logf("celery, kombu: %s", strings.TrimSpace(string(out)))
	}
	// A secret with characters a URL reserves: the broker URL must carry it quoted.
	const token = "celery-t0ken/with+reserved=chars"
	const name = "celery-work"
	srv := okibatest.New(t, okibatest.Options{Token: token})
	srv.CreateQueue(t, name)
	env := append(os.Environ(), "OKIBA_URL="+srv.URL, "OKIBA_KEY=admin", "OKIBA_SECRET="+token,
		"OKIBA_QUEUE="+name, "OKIBA_RESULTS="+t.TempDir(),
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "PYTHONDONTWRITEBYTECODE=1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var workerOut testkit.SyncBuffer
	worker := exec.CommandContext(ctx, debianPython, "-m", "celery", "-A", "okiba_tasks", "worker",
		"--pool=solo", "--concurrency=1", "--without-gossip", "--without-mingle", "--without-heartbeat",
		"--loglevel=INFO", "-Q", name, "-n", "okiba-test@%h")
	worker.Dir = "testdata/celery"
	worker.Env = env
	worker.Stdout, worker.Stderr = &workerOut, &workerOut
	// The worker is ended by SIGTERM (a warm shutdown) and, should that hang, killed.
	worker.Cancel = func() error { return worker.Process.Kill() }
	if err := worker.Start(); err != nil {
		t.Fatalf("starting the Celery worker: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = worker.Process.Kill()
			<-exited
		}
		t.Logf("the Celery worker's output:\n%s", workerOut.String())
	})

	start := time.Now()
	client := exec.CommandContext(ctx, debianPython, "celery_client.py")
	client.Dir = "testdata/celery"
	client.Env = env
	out, err := client.CombinedOutput()
	t.Logf("%s celery_client.py (%v):\n%s", debianPython, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the Celery producer failed: %v", err)
	}

	// The worker holds the task with a long countdown: received, in flight, not run.
	state := func() (ready, inFlight int64) {
		q, err := srv.Broker.Queue(name)
		if err != nil {
			t.Fatalf("queue %s: %v", name, err)
		}
		return int64(q.Stats.Ready), int64(q.Stats.InFlight)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { r, f := state(); return r == 0 && f == 1 },
		"the worker to hold the task with a countdown (ready, in flight: %v)", testkit.Lazy(func() string {
			r, f := state()
			return fmt.Sprint(r, ", ", f)
		}))
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stopping the Celery worker: %v", err)
	}
	werr := testkit.Recv(t, exited, 20*time.Second, "the Celery worker's warm shutdown")
	stopped = true
	var exit *exec.ExitError
	if werr != nil && !(errors.As(werr, &exit) && exit.ExitCode() == 0) {
		t.Fatalf("the Celery worker ended with %v", werr)
	}
	// The warm shutdown made the held message visible again (ChangeMessageVisibility to
	// 0). The worker's last long poll, still waiting on the server, may take it back at
	// once and never answer it (so it would on SQS too, until the visibility timeout
	// ends): then it is in flight with a second delivery. Either way every other message
	// was deleted.
	peeked, err := srv.Broker.Peek(context.Background(), name, 0, 10)
	if err != nil {
		t.Fatalf("peek %s: %v", name, err)
	}
	switch {
	case len(peeked) != 1:
		t.Errorf("after the worker's warm shutdown the queue holds %d messages, want only the held task", len(peeked))
	case peeked[0].State == queue.StateReady && peeked[0].Deliveries == 1:
		t.Logf("the held task was given back: ready")
	case peeked[0].State == queue.StateInFlight && peeked[0].Deliveries == 2:
		t.Logf("the held task was given back, then taken by the worker's last long poll: in flight, delivered twice")
	default:
		t.Errorf("the held task after the worker's warm shutdown: %v, delivered %d times; want it given back (ready, or delivered again)", peeked[0].State, peeked[0].Deliveries)
	}
	if n := strings.Count(workerOut.String(), "succeeded in"); n != 1+1+10+1 {
		t.Errorf("the worker logged %d tasks succeeded, want 13 (add, flaky's last run, the group of 10, late)", n)
	}
	t.Logf("the Celery worker test took %v", time.Since(start).Round(time.Millisecond))
}
