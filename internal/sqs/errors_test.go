package sqs

import (
	"testing"

	"github.com/okiba/okiba/internal/errcode"
)

// TestErrorTableNamesKnownErrors: the table of internal/errcode names SQS errors by code;
// each must be one the front knows the status and fault of, or errorOf would answer
// internal for a mapped error.
func TestErrorTableNamesKnownErrors(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k.Code] {
			t.Errorf("two kinds with code %s", k.Code)
		}
		seen[k.Code] = true
	}
	for _, r := range errcode.Rows() {
		if _, ok := kindOf(r.SQS); !ok {
			t.Errorf("the row of %s names SQS error %q, which the front does not know", r.Code, r.SQS)
		}
	}
}
