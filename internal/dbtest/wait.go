package dbtest

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it is true, failing the test with
// what() if timeout passes first. It is how tests wait for a condition instead of
// sleeping.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %v: %s", timeout, what())
		}
		<-tick.C
	}
}
