package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

// consumeScript is the command of TestConsume: it prints what it was told and settles by
// the body — fail the first delivery, dead-letter, outlast the lease, or succeed.
const consumeScript = `body=$(cat)
echo "ran $OKIBA_MESSAGE_ID q=$OKIBA_QUEUE d=$OKIBA_DELIVERIES body=$body trace=$OKIBA_HEADER_TRACE_ID group=$OKIBA_GROUP receipt=${OKIBA_RECEIPT:+yes}"
case "$body" in
fail-once) if [ "$OKIBA_DELIVERIES" = 1 ]; then echo "failing the first delivery" >&2; exit 1; fi ;;
poison) exit 42 ;;
slow) sleep 2.5 ;;
esac
exit 0`

// startConsume runs okiba consume in-process until the returned stop is called; stop
// returns its exit status.
func (h *harness) startConsume(args ...string) (out, errs *testkit.SyncBuffer, stop func() int) {
	h.t.Helper()
	out, errs = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	a := &app{Stdout: out, Stderr: errs, Stdin: strings.NewReader(""), Getenv: getenv(h.env)}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- a.run(ctx, append([]string{"consume"}, args...)) }()
	var once func() int
	stopped := -1
	once = func() int {
		if stopped < 0 {
			cancel()
			select {
			case stopped = <-code:
			case <-time.After(30 * time.Second):
				h.t.Fatalf("okiba consume did not stop:\n%s", errs.String())
			}
		}
		return stopped
	}
	h.t.Cleanup(func() { once() })
	return out, errs, once
}

func TestConsume(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.ok("queue", "create", "jobs", "--visibility-timeout", "1s", "--backoff-base", "10ms", "--backoff-max", "50ms", "--max-deliveries", "3")
	h.ok("send", "jobs", "hello", "--header", "trace-id=t-1", "--group", "g1")
	h.send("jobs", "fail-once", "poison", "slow")

	out, errs, stop := h.startConsume("jobs", "--concurrency", "4", "--dead-letter-code", "42", "--dead-letter-reason", "poisoned", "--", sh, "-c", consumeScript)
	testkit.Eventually(t, 20*time.Second, func() bool {
		q := h.queue("jobs")
		return q.Stats.Acked == 3 && q.Stats.DeadLetters == 1
	}, "three acks and a dead letter")
	if code := stop(); code != 0 {
		t.Fatalf("consume exited %d after a stop:\n%s", code, errs.String())
	}
	o := out.String()
	contains(t, "the commands' stdout", o, "body=hello trace=t-1 group=g1 receipt=yes", "q=jobs d=1 body=slow", "d=2 body=fail-once")
	contains(t, "the commands' stderr and the log", errs.String(), "failing the first delivery", "exit status 1")
	// The slow one outlived its 1 s lease twice over and ran once: its lease was extended.
	if n := strings.Count(o, "body=slow"); n != 1 {
		t.Errorf("the slow message ran %d times, want 1 (lease extended while it ran):\n%s", n, o)
	}
	if n := strings.Count(o, "body=hello"); n != 1 {
		t.Errorf("an acked message ran %d times", n)
	}
	if q := h.queue("jobs"); q.Stats.Ready+q.Stats.InFlight+q.Stats.Delayed != 0 {
		t.Errorf("messages left: %+v", q.Stats)
	}
	dead := decodeLines[dlqLine](t, h.ok("dlq", "list", "jobs", "--json"))
	if len(dead) != 1 || dead[0].Body != "poison" || dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != "poisoned" ||
		!strings.Contains(dead[0].DeadLetter.Description, "exited with status 42") {
		t.Errorf("dead letters: %+v", dead)
	}
}

// A stop waits for the running command: its message is acked, not cut short.
func TestConsumeStopsGracefully(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok("queue", "create", "jobs")
	h.send("jobs", "long")
	out, errs, stop := h.startConsume("jobs", "--", "sh", "-c", `echo started; sleep 1; echo finished`)
	testkit.Eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), "started") }, "the command to start")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errs.String())
	}
	contains(t, "stdout", out.String(), "finished")
	if q := h.queue("jobs"); q.Stats.Acked != 1 || q.Stats.Ready+q.Stats.InFlight != 0 {
		t.Errorf("after a graceful stop: %+v", q.Stats)
	}
}

func TestConsumeUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs"}, "no command"},
		{[]string{"jobs", "--"}, "no command"},
		{[]string{"jobs", "--concurrency", "0", "--", "true"}, "--concurrency must be between 1 and 1000"},
		{[]string{"jobs", "--dead-letter-code", "256", "--", "true"}, "--dead-letter-code must be an exit status"},
		{[]string{"jobs", "--", "no-such-command-anywhere"}, `cannot run "no-such-command-anywhere"`},
		{[]string{"--", "true"}, "missing arguments"},
	} {
		contains(t, fmt.Sprint(tc.args), h.fails(2, append([]string{"consume"}, tc.args...)...).err, tc.want)
	}
	contains(t, "a missing queue", h.fails(1, "consume", "nope", "--", "true").err, "queue_not_found")
	if got := headerEnvName("trace-id.v2 ü"); got != "OKIBA_HEADER_TRACE_ID_V2__" {
		t.Errorf("headerEnvName = %q", got)
	}
}
