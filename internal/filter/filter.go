// Package filter is the one filter language of topics' subscriptions: Amazon SNS's
// subscription filter policy, parsed once and matched against every record a topic fans
// out. The language is SNS's so that an SNS front can hand its FilterPolicy and
// FilterPolicyScope to Parse unchanged and see the same messages delivered as SNS would;
// docs/filters.md describes the language as okiba implements it.
//
// A policy is matched in one of two scopes. In Attributes, SNS's MessageAttributes, its
// keys name a record's headers, and the record's key under KeyAttribute. In Body, SNS's
// MessageBody, its keys name properties of the record's body read as a JSON object, and
// nested policy objects reach nested properties.
//
// The package is pure: no I/O, no clock, no state shared between calls but a pool of
// scratch space for reading bodies. A *Policy is immutable once parsed and safe for
// concurrent use. Everything Parse refuses is an *Error, which the native API answers
// as invalid_filter.
package filter

import (
	"bytes"
	"fmt"
)

// KeyAttribute is the attribute name under which a policy of scope Attributes matches the
// record's key. It is reserved: a header of this name is never consulted, so the fronts
// should refuse headers named so.
const KeyAttribute = "okiba-key"

// SNS's limits, enforced by Parse. docs/filters.md says how each is counted.
const (
	// MaxPolicyBytes is the largest policy, in bytes of JSON, as given and in its
	// canonical form (so that every canonical form parses again).
	MaxPolicyBytes = 256 << 10
	// MaxCombinations bounds a policy's complexity: over the alternatives its $or
	// operators spell out, the sum of the product of the lengths of its value lists, each
	// length multiplied by its key's nesting depth in scope Body.
	MaxCombinations = 150
	// MaxKeys is the most keys one alternative of a policy may name at its top level.
	MaxKeys = 5
	// MaxNumber bounds the numbers a policy compares with: from -MaxNumber to MaxNumber.
	MaxNumber = 1e9
)

// Scope says what a policy's keys name.
type Scope uint8

const (
	// Attributes matches a record's headers and its key (KeyAttribute). It is SNS's
	// MessageAttributes scope, and SNS's default, as it is the zero Scope.
	Attributes Scope = iota
	// Body matches the record's body read as a JSON object. It is SNS's MessageBody.
	Body
)

// String returns the scope's name as okiba's documentation spells it.
func (s Scope) String() string {
	switch s {
	case Attributes:
		return "attributes"
	case Body:
		return "body"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// Type is what a header holds, for the few headers whose SNS data type matters. okiba's
// own headers are Plain; an SNS front sets the others so that matching is SNS's exactly.
type Type uint8

const (
	// Plain is okiba's header: a string, which also matches numeric conditions when it
	// reads as a finite JSON number ("42", "-0.5", "3.015e2"; not "042", "+1" or " 1").
	Plain Type = iota
	// String is SNS's String (and String.anything): matched as a string only.
	String
	// Number is SNS's Number (and Number.anything): matched as a number only.
	Number
	// StringArray is SNS's String.Array: the header holds a JSON array, and the header
	// matches a condition when any element does. An empty array or one that is not JSON
	// holds nothing.
	StringArray
	// Binary is SNS's Binary (and Binary.anything), which SNS filtering ignores: the header
	// is as if absent.
	Binary
)

// Input is what a policy sees of one record. The zero Input is a record with nothing.
type Input struct {
	// Headers are the record's headers, which scope Attributes matches.
	Headers map[string]string
	// Types, when not nil, gives the SNS data type of the headers it names; every other
	// header is Plain. Only an SNS front needs it.
	Types map[string]Type
	// Key is the record's key and HasKey says whether it has one; scope Attributes
	// matches it under KeyAttribute. It is a string so that a record decoded once can be
	// matched by every subscription without a conversion each.
	Key    string
	HasKey bool
	// Body is the record's body, which scope Body reads as JSON. A body that is not a JSON
	// object matches no policy of scope Body but the empty one.
	Body []byte
}

// Policy is a parsed filter policy.
type Policy struct {
	scope     Scope
	root      *node
	trie      *tnode // the body paths the policy reads; nil in scope Attributes
	canonical []byte
}

// Parse reads policy, a filter policy in SNS's syntax, for scope. Everything it refuses
// is an *Error that names the place in the policy and what to change there. The empty
// policy, {}, matches every record in either scope, whatever its body, as an SNS
// subscription without a filter policy delivers everything.
func Parse(policy []byte, scope Scope) (*Policy, error) {
	if scope != Attributes && scope != Body {
		return nil, fmt.Errorf("filter: unknown scope %d", uint8(scope))
	}
	root, err := parse(policy, scope)
	if err != nil {
		return nil, err
	}
	p := &Policy{scope: scope, root: root}
	p.canonical = appendNode(nil, root)
	if len(p.canonical) > MaxPolicyBytes {
		return nil, errorf("$", "the policy's canonical form is %d bytes, over the limit of %d (256 KiB); "+
			"write shorter numbers or fewer values", len(p.canonical), MaxPolicyBytes)
	}
	if scope == Body {
		p.trie = &tnode{}
		bind(root, p.trie)
	}
	return p, nil
}

// Scope returns the scope the policy was parsed for.
func (p *Policy) Scope() Scope { return p.scope }

// Canonical returns the policy as JSON in a canonical form: keys sorted, no spaces, numbers
// and CIDR blocks written one way, a single anything-but operand written as a list. Two
// policies of one scope that differ only in such spelling have the same canonical form,
// and Parse of the canonical form gives an Equal policy, so it is the form to store in a
// durable record. The caller may modify the returned slice.
func (p *Policy) Canonical() []byte { return bytes.Clone(p.canonical) }

// String returns the canonical form as a string.
func (p *Policy) String() string { return string(p.canonical) }

// Equal reports whether p and q have the same scope and the same canonical form.
func (p *Policy) Equal(q *Policy) bool {
	return p.scope == q.scope && bytes.Equal(p.canonical, q.canonical)
}

// Match reports whether the record rec passes the policy. In scope Attributes it does not
// allocate, but to decode a String.Array element that has escapes. In scope Body it reads the body once, from one copy of it as a string, keeping
// only the properties the policy names: a copy costs little beside the reading, and
// lets every comparison be a string's.
func (p *Policy) Match(rec Input) bool {
	if p.scope == Body {
		return p.matchBody(rec.Body)
	}
	return p.root.matchAttrs(&rec)
}
