package client

import (
	"fmt"
	"testing"
)

func TestFormatIDMatchesTheAPI(t *testing.T) {
	t.Parallel()
	for _, id := range []uint64{0, 1, 0xabc, 7549747200117440512, 1<<64 - 1} {
		if got, want := formatID(id), fmt.Sprintf("%016x", id); got != want {
			t.Errorf("formatID(%d) = %q, want %q", id, got, want)
		}
	}
}
