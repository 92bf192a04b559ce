package testkit_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/internal/testkit"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine,
// as a real test's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own and returns what Fatalf said.
func run(f func(testing.TB)) string {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.msg
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	testkit.Eventually(t, 10*time.Second, func() bool { return calls.Add(1) == 3 }, "the third look")
	if calls.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", calls.Load())
	}
	msg := run(func(tb testing.TB) {
		testkit.Eventually(tb, 10*time.Millisecond, func() bool { return false }, "queue %s to drain", "q")
	})
	if !strings.Contains(msg, "timed out after 10ms waiting for queue q to drain") {
		t.Fatalf("Eventually failed with %q", msg)
	}
}

func TestRecvReturnsTheValueOrFails(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if got := testkit.Recv(t, ch, 10*time.Second, "a value"); got != 7 {
		t.Fatalf("Recv = %d, want 7", got)
	}
	msg := run(func(tb testing.TB) { testkit.Recv(tb, ch, 10*time.Millisecond, "the answer") })
	if !strings.Contains(msg, "timed out after 10ms waiting for the answer") {
		t.Fatalf("Recv failed with %q", msg)
	}
}

func TestLazyIsWorkedOutWhenTheMessageIsPrinted(t *testing.T) {
	t.Parallel()
	looks := 0
	msg := run(func(tb testing.TB) {
		testkit.Eventually(tb, 10*time.Millisecond, func() bool { looks++; return false },
			"a condition seen %s", testkit.Lazy(func() string { return fmt.Sprint(looks, " times") }))
	})
	if looks == 0 || !strings.Contains(msg, fmt.Sprintf("a condition seen %d times", looks)) {
		t.Fatalf("after %d looks Eventually failed with %q", looks, msg)
	}
}
