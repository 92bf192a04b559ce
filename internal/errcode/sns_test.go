package errcode

import "testing"

// TestSNSCodesCoverTable: every row's native code has an SNS code, and that code is in
// the SNS catalogue, so that no domain error reaches an SNS client as InternalError by
// omission.
func TestSNSCodesCoverTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, e := range snsErrors {
		if seen[e.Code] || e.Status < 400 || e.Status > 599 {
			t.Errorf("%+v: given twice or incomplete", e)
		}
		seen[e.Code] = true
	}
	for _, r := range append(Rows(), internal) {
		c, ok := snsOfNative[r.Code]
		if !ok {
			t.Errorf("native code %s has no SNS code", r.Code)
			continue
		}
		if _, ok := SNSErrorOf(c); !ok {
			t.Errorf("native code %s maps to SNS code %s, which is not in snsErrors", r.Code, c)
		}
	}
}
