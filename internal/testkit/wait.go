package testkit

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often Eventually looks again: often enough that a test waits little
// past the moment its condition holds, rarely enough to leave the machine to the code
// under test.
const pollEvery = 2 * time.Millisecond

// Eventually polls cond until it holds, failing the test after within with a message
// made of format and args ("timed out after 10s waiting for " + what). It is for
// conditions no signal announces, such as a real server's statistics; when the code
// under test can say it is done (a channel, a fake clock's WaitTimers), wait on that
// instead. Call it from the test's goroutine.
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, sprintf(format, args))
		}
		time.Sleep(pollEvery)
	}
}

// Recv waits for a value on ch, failing the test after within (the message as for
// Eventually). Call it from the test's goroutine.
func Recv[T any](t testing.TB, ch <-chan T, within time.Duration, format string, args ...any) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", within, sprintf(format, args))
		panic("unreachable: Fatalf ends the test's goroutine")
	}
}

// Lazy is an argument of Eventually's or Recv's message that is worked out only if the
// message is printed: what the condition saw last, say, or the state of the code under
// test when the wait gave up.
type Lazy func() string

func (f Lazy) String() string { return f() }

// SyncBuffer is a bytes.Buffer that goroutines may write to while the test reads it
// (a logger's output, say).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func sprintf(format string, args []any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}
