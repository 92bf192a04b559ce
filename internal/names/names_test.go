package names_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/errcode"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	x := strings.Repeat
	for _, name := range []string{
		"a", "Z", "0", "_", "-", "orders", "Orders_2024-v1", "fifo", "x.fifo", "-.fifo",
		x("a", 80), x("a", 75) + ".fifo",
	} {
		if err := names.Validate(name); err != nil {
			t.Errorf("names.Validate(%q) = %v, want ok", name, err)
		}
	}
	for _, name := range []string{
		"", x("a", 81), x("a", 76) + ".fifo", // too long, the suffix counting
		".fifo", "a.b", "a.", ".a", "x.fifo.fifo", "x.FIFO", "x.fifox", "x.fif", // the only dot is the suffix's
		"a b", "a/b", "a:b", "a%20b", "a\x00", "a\n", "a\t", "a\x7f", // separators and control characters
		"été", "naïve", "日本", "\u00a0", "a\u200b", // unicode, even letters and invisible ones
	} {
		err := names.Validate(name)
		var ne *queue.NameError
		if !errors.As(err, &ne) || ne.Name != name {
			t.Errorf("names.Validate(%q) = %v, want a *queue.NameError naming it", name, err)
		}
	}
}

// TestValidateAnswersAsBefore: the grammar's error is answered invalid_name with the
// message the native API gave before the grammar left the core.
func TestValidateAnswersAsBefore(t *testing.T) {
	t.Parallel()
	err := names.Validate("bad.name")
	if row := errcode.Of(err); row.Code != api.CodeInvalidName || row.SQS != "InvalidParameterValue" {
		t.Fatalf("answered %s (%s), want %s", row.Code, row.SQS, api.CodeInvalidName)
	}
	const want = `invalid queue name "bad.name": a name is 1 to 80 characters from A-Z a-z 0-9 _ -, optionally ending in .fifo`
	if err.Error() != want {
		t.Fatalf("message\n got %s\nwant %s", err, want)
	}
}

func TestIsFIFO(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"x.fifo": true, ".fifo": true, "x": false, "fifo": false, "x-fifo": false, "x.FIFO": false, "x.fifo.bak": false,
	} {
		if names.IsFIFO(name) != want {
			t.Errorf("names.IsFIFO(%q) = %v", name, !want)
		}
	}
}

func TestDeadLetterName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"orders": "orders-dlq", "jobs.fifo": "jobs-dlq.fifo", "fifo": "fifo-dlq", "a-dlq": "a-dlq-dlq",
	} {
		if got := names.DeadLetterName(name); got != want {
			t.Errorf("names.DeadLetterName(%q) = %q, want %q", name, got, want)
		}
		if names.CheckDeadLetter(name, names.DeadLetterName(name)) != nil {
			t.Errorf("the default dead-letter queue of %q is refused", name)
		}
	}
	// The default fits up to 76 characters (71 before .fifo); beyond, it must be named.
	for _, name := range []string{strings.Repeat("a", 76), strings.Repeat("a", 71) + ".fifo"} {
		if d := names.DeadLetterName(name); len(d) != names.MaxLen || names.Validate(d) != nil {
			t.Errorf("names.DeadLetterName(%q) = %q, want a valid 80-character name", name, d)
		}
	}
	for _, name := range []string{strings.Repeat("a", 77), strings.Repeat("a", 72) + ".fifo"} {
		err := names.CheckDeadLetter(name, names.DeadLetterName(name))
		var ce *queue.ConfigError
		if !errors.As(err, &ce) || ce.Field != "dead_letter_queue" || !strings.Contains(ce.Reason, "give dead_letter_queue explicitly") {
			t.Errorf("default dead-letter queue of a %d-character name: %v", len(name), err)
		}
	}
}

func TestCheckDeadLetter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, dlq string }{
		{"a", "b"}, {"a.fifo", "b.fifo"}, {"a", "a-dlq"}, {"a.fifo", "a-dlq.fifo"},
		{"a", queue.NoDeadLetterQueue}, {"a.fifo", queue.NoDeadLetterQueue},
		{"a", ""}, // the core refuses an empty name, in its own words
	} {
		if err := names.CheckDeadLetter(c.name, c.dlq); err != nil {
			t.Errorf("names.CheckDeadLetter(%q, %q) = %v", c.name, c.dlq, err)
		}
	}
	for _, c := range []struct{ name, dlq, reason string }{
		{"a", "b.fifo", `a FIFO queue needs a FIFO dead-letter queue and a standard queue a standard one ("a", "b.fifo")`},
		{"a.fifo", "b", `a FIFO queue needs a FIFO dead-letter queue and a standard queue a standard one ("a.fifo", "b")`},
		{"a", "b.c", `"b.c" is not a valid queue name (` + names.Rule + `); for a long queue name give dead_letter_queue explicitly`},
		{"a.fifo", "bad name.fifo", `"bad name.fifo" is not a valid queue name (` + names.Rule + `); for a long queue name give dead_letter_queue explicitly`},
	} {
		err := names.CheckDeadLetter(c.name, c.dlq)
		var ce *queue.ConfigError
		if !errors.As(err, &ce) || ce.Field != "dead_letter_queue" || ce.Reason != c.reason {
			t.Errorf("names.CheckDeadLetter(%q, %q) = %v, want dead_letter_queue: %s", c.name, c.dlq, err, c.reason)
		}
		if row := errcode.Of(err); row.Code != api.CodeInvalidConfig {
			t.Errorf("names.CheckDeadLetter(%q, %q) answered %s", c.name, c.dlq, row.Code)
		}
	}
}

func TestCheckKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		ordered bool
	}{{"x.fifo", true}, {"x", true}, {"x", false}} {
		if err := names.CheckKind(c.name, c.ordered); err != nil {
			t.Errorf("names.CheckKind(%q, %v) = %v", c.name, c.ordered, err)
		}
	}
	err := names.CheckKind("x.fifo", false)
	var ce *queue.ConfigError
	if !errors.As(err, &ce) || ce.Field != "ordered_groups" || !strings.Contains(ce.Reason, "FIFO queue") || !strings.Contains(ce.Reason, `"x.fifo"`) {
		t.Fatalf("names.CheckKind(x.fifo, false) = %v, want ordered_groups saying why", err)
	}
	if row := errcode.Of(err); row.Code != api.CodeInvalidConfig {
		t.Fatalf("answered %s", row.Code)
	}
}

func TestCheckRedrive(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"a-dlq", "a"}, {"a-dlq.fifo", "a.fifo"}} {
		if err := names.CheckRedrive(c[0], c[1]); err != nil {
			t.Errorf("names.CheckRedrive(%q, %q) = %v", c[0], c[1], err)
		}
	}
	for _, c := range [][2]string{{"a-dlq.fifo", "a"}, {"a-dlq", "a.fifo"}} {
		err := names.CheckRedrive(c[0], c[1])
		var ce *queue.ConfigError
		if !errors.As(err, &ce) || ce.Field != "to" || !strings.Contains(ce.Reason, "not both FIFO or both standard") {
			t.Errorf("names.CheckRedrive(%q, %q) = %v", c[0], c[1], err)
		}
	}
}

// FuzzGrammarIsWithinTheCore: every name the grammar accepts, the queue core accepts
// too (its check is no grammar, only what it can hold), and DeadLetterName keeps a FIFO
// name FIFO.
func FuzzGrammarIsWithinTheCore(f *testing.F) {
	for _, s := range []string{"a", "x.fifo", strings.Repeat("z", 80), strings.Repeat("z", 75) + ".fifo", "a-b_c", ".fifo", "a.b", "é"} {
		f.Add(s)
	}
	for c := 0; c < 256; c++ {
		f.Add("a" + string(rune(c)))
	}
	f.Fuzz(func(t *testing.T, name string) {
		if names.Validate(name) != nil {
			return
		}
		if err := queue.CheckName(name); err != nil {
			t.Fatalf("the grammar accepts %q and the core refuses it: %v", name, err)
		}
		if names.IsFIFO(name) != names.IsFIFO(names.DeadLetterName(name)) {
			t.Fatalf("DeadLetterName(%q) = %q changes the kind", name, names.DeadLetterName(name))
		}
	})
}
