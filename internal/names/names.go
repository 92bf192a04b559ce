// Package names is the queue-name grammar that the native API and the SQS front share,
// and the rules that tie a name to a kind of queue. The grammar is SQS's, so that every
// queue can be reached through both APIs: 1 to 80 characters from A-Z a-z 0-9 _ -,
// optionally ending in .fifo (the suffix counts toward the 80). A .fifo name is a FIFO
// queue on both fronts, which okiba means by ordered groups.
//
// The queue core knows none of this: it checks only that a name is something it can
// store (queue.CheckName), and kinds by their configuration (ordered_groups). The broker
// applies these rules for every front and in-process user (broker.PutQueue,
// broker.StartRedrive); the fronts use them to answer in their own words first.
//
// Errors are the core's types, so the one table in internal/errcode answers them: a
// *queue.NameError (invalid_name) for the grammar, a *queue.ConfigError (invalid_config,
// naming the field) for the rules.
package names

import (
	"fmt"
	"strings"

	"github.com/okiba/okiba/queue"
)

// MaxLen is the longest name, in bytes (every allowed character is one byte).
const MaxLen = 80

// fifoSuffix ends the name of every FIFO queue.
const fifoSuffix = ".fifo"

// Rule states the grammar, as error messages quote it.
const Rule = "1 to 80 characters from A-Z a-z 0-9 _ -, optionally ending in .fifo"

// Validate checks name against the grammar. The error is a *queue.NameError that
// quotes Rule.
func Validate(name string) error {
	if !valid(name) {
		return &queue.NameError{Name: name, Rule: Rule}
	}
	return nil
}

// ValidateTopic checks a topic's name against the same grammar: topics and queues are
// separate namespaces with one rule, so that a topic and the queue fed from it may share
// a name. The error is a *queue.NameError about a topic.
func ValidateTopic(name string) error {
	if !valid(name) {
		return &queue.NameError{Name: name, Rule: Rule, Of: "topic"}
	}
	return nil
}

func valid(name string) bool {
	if len(name) == 0 || len(name) > MaxLen {
		return false
	}
	base, _ := strings.CutSuffix(name, fifoSuffix)
	if base == "" {
		return false
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// IsFIFO reports whether name is a FIFO queue's: whether it ends in .fifo.
func IsFIFO(name string) bool { return strings.HasSuffix(name, fifoSuffix) }

// DeadLetterName is the name of the dead-letter queue made for name when none is given:
// "<name>-dlq", or "<base>-dlq.fifo" for "<base>.fifo", so that a FIFO queue's
// dead-letter queue is FIFO too. For a name of more than 76 characters the result is too
// long to be valid, and the dead-letter queue must be named explicitly.
func DeadLetterName(name string) string {
	if base, ok := strings.CutSuffix(name, fifoSuffix); ok {
		return base + "-dlq" + fifoSuffix
	}
	return name + "-dlq"
}

// CheckDeadLetter checks the dead_letter_queue of queue name: a valid name of the same
// kind, FIFO for a FIFO queue and standard for a standard one. "none" and "" pass (the
// core answers for those: "none" turns dead-lettering off and "" is refused). The error
// is a *queue.ConfigError on dead_letter_queue.
func CheckDeadLetter(name, dlq string) error {
	if dlq == queue.NoDeadLetterQueue || dlq == "" {
		return nil
	}
	if !valid(dlq) {
		return &queue.ConfigError{Field: "dead_letter_queue",
			Reason: fmt.Sprintf("%q is not a valid queue name (%s); for a long queue name give dead_letter_queue explicitly", dlq, Rule)}
	}
	if IsFIFO(name) != IsFIFO(dlq) {
		return &queue.ConfigError{Field: "dead_letter_queue",
			Reason: fmt.Sprintf("a FIFO queue needs a FIFO dead-letter queue and a standard queue a standard one (%q, %q)", name, dlq)}
	}
	return nil
}

// CheckKind checks that a queue created as name has the kind its name says: a .fifo name
// is a FIFO queue, whose groups are delivered in order, so it needs ordered_groups. A
// name without the suffix may be either (native queues are ordered by default; SQS
// standard queues are not). The error is a *queue.ConfigError on ordered_groups.
func CheckKind(name string, orderedGroups bool) error {
	if IsFIFO(name) && !orderedGroups {
		return &queue.ConfigError{Field: "ordered_groups",
			Reason: fmt.Sprintf("%q ends in .fifo, which makes it a FIFO queue on every API, and a FIFO queue delivers each group in order: ordered_groups must be true (or choose a name without .fifo)", name)}
	}
	return nil
}

// CheckRedrive checks that a redrive from source to target stays within one kind, FIFO
// or standard. The error is a *queue.ConfigError on to.
func CheckRedrive(source, target string) error {
	if IsFIFO(source) != IsFIFO(target) {
		return &queue.ConfigError{Field: "to",
			Reason: fmt.Sprintf("redrive moves messages between queues of the same kind: %q and %q are not both FIFO or both standard", source, target)}
	}
	return nil
}
