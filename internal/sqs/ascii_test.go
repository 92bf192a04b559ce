package sqs

import (
	"regexp"
	"strings"
	"testing"
)

// TestPlainPrefix checks plainPrefix against a byte-by-byte reading, for every byte
// value at every position of a word.
func TestPlainPrefix(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' }
	want := func(s string) int {
		n := 0
		for n+8 <= len(s) {
			for _, c := range []byte(s[n : n+8]) {
				if !plain(c) {
					return n
				}
			}
			n += 8
		}
		return n
	}
	base := strings.Repeat("abcdefgh", 3)
	for c := range 256 {
		for pos := range len(base) {
			s := base[:pos] + string([]byte{byte(c)}) + base[pos+1:]
			if got, w := plainPrefix(s), want(s); got != w {
				t.Fatalf("byte %#x at %d: plainPrefix %d, want %d", c, pos, got, w)
			}
		}
	}
	for _, s := range []string{"", "short", base, base + "tail"} {
		if got, w := plainPrefix(s), want(s); got != w {
			t.Errorf("%q: %d, want %d", s, got, w)
		}
	}
}

// TestValidBatchID holds validBatchID to SQS's rule as a regular expression states it.
func TestValidBatchID(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	ids := []string{"", "a", "A-z_0", strings.Repeat("x", 80), strings.Repeat("x", 81), "a b", "a.b", "é", "a\x00", "-", "_"}
	for c := range 256 {
		ids = append(ids, "id"+string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := validBatchID(id), rule.MatchString(id); got != want {
			t.Errorf("validBatchID(%q) = %v, want %v", id, got, want)
		}
	}
}
