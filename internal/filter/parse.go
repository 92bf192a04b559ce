package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A policy is read in two passes: the JSON into a tree of values that keeps every key
// (encoding/json's maps would hide a repeated one), then the tree into nodes, checking
// each place against the grammar, and last the limits, which need the whole policy.

// maxNesting bounds how deep the policy's JSON may nest. No policy that deep stays within
// MaxCombinations (each level of keys or of $or adds at least one combination), so the
// bound only keeps a hostile policy from recursing far.
const maxNesting = 1000

// jv is one JSON value of a policy.
type jv struct {
	kind jkind
	str  string  // jString
	num  float64 // jNumber
	text string  // jNumber, as written
	arr  []*jv   // jArray
	keys []string
	vals []*jv // jObject, in the order written
}

func parse(policy []byte, scope Scope) (*node, error) {
	if len(policy) > MaxPolicyBytes {
		return nil, errorf("$", "the policy is %d bytes, over the limit of %d (256 KiB)", len(policy), MaxPolicyBytes)
	}
	if !utf8.Valid(policy) {
		return nil, errorf("$", "the policy is not valid UTF-8; write it as UTF-8 text")
	}
	dec := json.NewDecoder(bytes.NewReader(policy))
	dec.UseNumber()
	top, err := readValue(dec, "$", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf("$", "malformed JSON: more follows the policy's closing brace; give one JSON object")
	}
	if top.kind != jObject {
		return nil, errorf("$", "the policy must be a JSON object, as in {\"color\": [\"red\"]}")
	}
	b := builder{scope: scope}
	root, err := b.object(top, "$", 1)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(root, scope); err != nil {
		return nil, err
	}
	return root, nil
}

// readValue reads the next JSON value from dec; path is where it lies, for errors.
func readValue(dec *json.Decoder, path string, depth int) (*jv, error) {
	if depth > maxNesting {
		return nil, errorf(path, "the policy nests more than %d levels deep; no policy so deep can stay within %d combinations",
			maxNesting, MaxCombinations)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(path, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jv{kind: jObject}
			var seen map[string]struct{} // for objects of many keys, so that checking stays linear
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, syntaxError(path, err)
				}
				key, ok := kt.(string)
				if !ok { // the decoder reports a non-string key as a syntax error; this is a safety net
					return nil, errorf(path, "malformed JSON: an object key must be a string")
				}
				if seen == nil && len(v.keys) > mapAbove {
					seen = make(map[string]struct{}, 2*len(v.keys))
					for _, k := range v.keys {
						seen[k] = struct{}{}
					}
				}
				dup := false
				if seen != nil {
					_, dup = seen[key]
					seen[key] = struct{}{}
				} else {
					dup = slices.Contains(v.keys, key)
				}
				if dup {
					return nil, errorf(keyPath(path, key), "the key appears twice in one object; give each key once, with all its values in one list")
				}
				val, err := readValue(dec, keyPath(path, key), depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, key)
				v.vals = append(v.vals, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxError(path, err)
			}
			return v, nil
		case '[':
			v := &jv{kind: jArray}
			for dec.More() {
				val, err := readValue(dec, indexPath(path, len(v.arr)), depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxError(path, err)
			}
			return v, nil
		}
		return nil, errorf(path, "malformed JSON: unexpected %q", rune(t))
	case string:
		return &jv{kind: jString, str: t}, nil
	case json.Number:
		f, err := strconv.ParseFloat(t.String(), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, errorf(path, "the number %s is too large to compare; numbers range from -1e9 to 1e9", t)
		}
		if f == 0 {
			f = 0 // -0 and 0 are one number, and written one way
		}
		return &jv{kind: jNumber, num: f, text: t.String()}, nil
	case bool:
		if t {
			return &jv{kind: jTrue}, nil
		}
		return &jv{kind: jFalse}, nil
	case nil:
		return &jv{kind: jNull}, nil
	}
	return nil, errorf(path, "malformed JSON")
}

func syntaxError(path string, err error) *Error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return errorf(path, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(path, "malformed JSON: the policy ends before its value does")
	}
	return errorf(path, "malformed JSON: %v", err)
}

// node is one object of a policy: every field must match, and, when the object has an
// $or, one of its alternatives too. Fields are sorted by name.
type node struct {
	fields []*field
	or     []*node
}

// field is one key of a policy object: a list of conditions (a leaf), or in scope Body a
// nested object.
type field struct {
	name  string
	conds []cond
	child *node
	// id is the index of name among its level's names in the policy's trie (scope Body).
	id int
	// strs holds the literal strings of conds when there are enough of them for a map
	// to beat a scan.
	strs map[string]struct{}
	// needNum says whether a condition compares numbers, so that a Plain header is read as
	// one; hasExists whether one is an exists.
	needNum, hasExists bool
}

// opKind is what one condition tests.
type opKind uint8

const (
	opString            opKind = iota // "red"
	opNumber                          // 42
	opTrue                            // true
	opFalse                           // false
	opNull                            // null
	opPrefix                          // {"prefix": "re"}
	opSuffix                          // {"suffix": "ed"}
	opEqualsIgnoreCase                // {"equals-ignore-case": "RED"}
	opExists                          // {"exists": true}
	opCIDR                            // {"cidr": "10.0.0.0/8"}
	opNumeric                         // {"numeric": [">", 0, "<=", 100]}
	opAnythingBut                     // {"anything-but": ["red", "blue"]} or [1, 2]
	opAnythingButPrefix               // {"anything-but": {"prefix": "re"}}
	opAnythingButSuffix               // {"anything-but": {"suffix": "ed"}}
)

// cond is one condition of a leaf's list.
type cond struct {
	op   opKind
	s    string       // the string operand
	n, q float64      // the number operand, as written and quantized
	b    bool         // exists's operand
	pfx  netip.Prefix // cidr's, masked
	rng  numRange     // numeric's
	// anything-but's list: strings, or numbers as written and quantized; strSet when the
	// strings are many.
	strs   []string
	nums   []float64
	qnums  []float64
	strSet map[string]struct{}
}

// numRange is a numeric condition: equal to a number, or between bounds.
type numRange struct {
	eq            bool
	v, qv         float64 // "="
	hasLo, loIncl bool
	lo, qlo       float64
	hasHi, hiIncl bool
	hi, qhi       float64
}

// mapAbove is how many strings a list needs before a map holds them.
const mapAbove = 8

// Operator names, and the names $or's alternatives may not use as keys: SNS reads an $or
// whose alternatives name one of these as a key called "$or", not as an OR.
const (
	kwPrefix      = "prefix"
	kwSuffix      = "suffix"
	kwIgnoreCase  = "equals-ignore-case"
	kwAnythingBut = "anything-but"
	kwNumeric     = "numeric"
	kwExists      = "exists"
	kwCIDR        = "cidr"
	kwOr          = "$or"
)

var reserved = []string{kwPrefix, kwSuffix, kwIgnoreCase, kwAnythingBut, kwNumeric, kwExists, kwCIDR,
	"wildcard", "exactly", "=", "<", "<=", ">", ">="}

const operatorList = "prefix, suffix, equals-ignore-case, anything-but, numeric, exists, cidr"

type builder struct{ scope Scope }

// object builds the node of a policy object whose keys lie at nesting depth depth.
func (b *builder) object(v *jv, path string, depth int) (*node, error) {
	n := &node{}
	order := make([]int, len(v.keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(v.keys[i], v.keys[j]) })
	for _, i := range order {
		key, val := v.keys[i], v.vals[i]
		kp := keyPath(path, key)
		if key == kwOr && isOr(val) {
			for j, alt := range val.arr {
				ap := indexPath(kp, j)
				if len(alt.keys) == 0 {
					return nil, errorf(ap, "an alternative of $or names no key; give each alternative at least one key, or remove it")
				}
				an, err := b.object(alt, ap, depth)
				if err != nil {
					return nil, err
				}
				n.or = append(n.or, an)
			}
			continue
		}
		f := &field{name: key}
		switch val.kind {
		case jArray:
			if err := b.leaf(f, val, kp); err != nil {
				return nil, err
			}
		case jObject:
			if b.scope == Attributes {
				return nil, errorf(kp, "scope attributes has no nested keys: give the attribute a list of conditions, as in [\"red\"]; "+
					"nested keys match a JSON body, in scope body")
			}
			if len(val.keys) == 0 {
				return nil, errorf(kp, "an empty object names no nested key; give the key a list of conditions, as in [\"red\"], or nested keys")
			}
			child, err := b.object(val, kp, depth+1)
			if err != nil {
				return nil, err
			}
			f.child = child
		default:
			if b.scope == Attributes {
				return nil, errorf(kp, "a key's conditions are a list, as in [\"red\"], even when there is one")
			}
			return nil, errorf(kp, "a key's conditions are a list, as in [\"red\"], even when there is one, or an object of nested keys")
		}
		n.fields = append(n.fields, f)
	}
	return n, nil
}

// isOr reports whether the value of a key "$or" is SNS's OR: a list of at least two
// objects, none of which names a reserved keyword. Anything else makes "$or" a plain key.
func isOr(v *jv) bool {
	if v.kind != jArray || len(v.arr) < 2 {
		return false
	}
	for _, alt := range v.arr {
		if alt.kind != jObject {
			return false
		}
		for _, k := range alt.keys {
			if slices.Contains(reserved, k) {
				return false
			}
		}
	}
	return true
}

// leaf reads a key's list of conditions into f.
func (b *builder) leaf(f *field, list *jv, path string) error {
	if len(list.arr) == 0 {
		return errorf(path, "an empty list matches nothing; give at least one condition, as in [\"red\"]")
	}
	nstr := 0
	for i, e := range list.arr {
		c, err := condition(e, indexPath(path, i))
		if err != nil {
			return err
		}
		switch c.op {
		case opString:
			nstr++
		case opNumber, opNumeric:
			f.needNum = true
		case opAnythingBut:
			f.needNum = f.needNum || len(c.nums) > 0
		case opExists:
			f.hasExists = true
		}
		f.conds = append(f.conds, c)
	}
	if nstr > mapAbove {
		f.strs = make(map[string]struct{}, nstr)
		for _, c := range f.conds {
			if c.op == opString {
				f.strs[c.s] = struct{}{}
			}
		}
	}
	return nil
}

// condition reads one element of a key's list.
func condition(e *jv, path string) (cond, error) {
	switch e.kind {
	case jString:
		return cond{op: opString, s: e.str}, nil
	case jNumber:
		if err := checkNumber(e, path); err != nil {
			return cond{}, err
		}
		return cond{op: opNumber, n: e.num, q: quantize(e.num)}, nil
	case jTrue:
		return cond{op: opTrue}, nil
	case jFalse:
		return cond{op: opFalse}, nil
	case jNull:
		return cond{op: opNull}, nil
	case jArray:
		return cond{}, errorf(path, "a condition cannot be a list; put its values in the key's list itself")
	}
	if len(e.keys) != 1 {
		return cond{}, errorf(path, "an operator is an object with exactly one key, as in {\"prefix\": \"re\"}; this one has %d", len(e.keys))
	}
	op, arg := e.keys[0], e.vals[0]
	path = keyPath(path, op)
	switch op {
	case kwPrefix, kwSuffix, kwIgnoreCase:
		if arg.kind != jString {
			return cond{}, errorf(path, "%s takes a string, as in {%q: \"re\"}", op, op)
		}
		c := cond{op: opPrefix, s: arg.str}
		if op == kwSuffix {
			c.op = opSuffix
		} else if op == kwIgnoreCase {
			c.op = opEqualsIgnoreCase
		}
		return c, nil
	case kwExists:
		if arg.kind != jTrue && arg.kind != jFalse {
			return cond{}, errorf(path, "exists takes true or false")
		}
		return cond{op: opExists, b: arg.kind == jTrue}, nil
	case kwCIDR:
		if arg.kind != jString {
			return cond{}, errorf(path, "cidr takes a string, as in {\"cidr\": \"10.0.0.0/24\"}")
		}
		pfx, err := netip.ParsePrefix(arg.str)
		if err != nil {
			return cond{}, errorf(path, "%q is not a CIDR block such as 10.0.0.0/24 or 2001:db8::/32", arg.str)
		}
		return cond{op: opCIDR, pfx: pfx.Masked()}, nil
	case kwNumeric:
		r, err := numeric(arg, path)
		if err != nil {
			return cond{}, err
		}
		return cond{op: opNumeric, rng: r}, nil
	case kwAnythingBut:
		return anythingBut(arg, path)
	}
	return cond{}, errorf(path, "unknown operator %q; the operators are %s", op, operatorList)
}

// checkNumber refuses a number outside the range SNS compares.
func checkNumber(e *jv, path string) error {
	if math.Abs(e.num) > MaxNumber {
		return errorf(path, "%s is outside the range numbers compare in, -1e9 to 1e9", e.text)
	}
	return nil
}

// numeric reads the operand of numeric: one comparison, or a lower and an upper bound.
func numeric(arg *jv, path string) (numRange, error) {
	const shape = "numeric takes a comparison, as in [\">\", 0], or a range, as in [\">\", 0, \"<=\", 100]"
	if arg.kind != jArray || (len(arg.arr) != 2 && len(arg.arr) != 4) {
		return numRange{}, errorf(path, shape)
	}
	var r numRange
	for i := 0; i < len(arg.arr); i += 2 {
		opv, numv := arg.arr[i], arg.arr[i+1]
		if opv.kind != jString {
			return numRange{}, errorf(indexPath(path, i), "expected an operator, one of =, <, <=, >, >=; %s", shape)
		}
		op := opv.str
		switch op {
		case "=", "<", "<=", ">", ">=":
		default:
			return numRange{}, errorf(indexPath(path, i), "unknown numeric operator %q; use one of =, <, <=, >, >=", op)
		}
		if numv.kind != jNumber {
			return numRange{}, errorf(indexPath(path, i+1), "%s must be followed by a number, written without quotes", op)
		}
		if err := checkNumber(numv, indexPath(path, i+1)); err != nil {
			return numRange{}, err
		}
		x := numv.num
		switch {
		case i == 2 && op != "<" && op != "<=":
			return numRange{}, errorf(indexPath(path, i), "a range's second operator is < or <=, as in [\">\", 0, \"<=\", 100]")
		case i == 0 && len(arg.arr) == 4 && op != ">" && op != ">=":
			return numRange{}, errorf(indexPath(path, i), "a range starts with its lower bound, > or >=, as in [\">\", 0, \"<=\", 100]")
		}
		switch op {
		case "=":
			r.eq, r.v, r.qv = true, x, quantize(x)
		case ">", ">=":
			r.hasLo, r.loIncl, r.lo, r.qlo = true, op == ">=", x, quantize(x)
		case "<", "<=":
			r.hasHi, r.hiIncl, r.hi, r.qhi = true, op == "<=", x, quantize(x)
		}
	}
	if r.hasLo && r.hasHi && r.qlo >= r.qhi {
		return numRange{}, errorf(path, "the lower bound must be less than the upper bound (numbers compare to five decimal places)")
	}
	return r, nil
}

// anythingBut reads the operand of anything-but: a string or number, a list of strings or
// of numbers, or a prefix or suffix.
func anythingBut(arg *jv, path string) (cond, error) {
	c := cond{op: opAnythingBut}
	switch arg.kind {
	case jString:
		c.strs = []string{arg.str}
		return c, nil
	case jNumber:
		if err := checkNumber(arg, path); err != nil {
			return cond{}, err
		}
		c.nums, c.qnums = []float64{arg.num}, []float64{quantize(arg.num)}
		return c, nil
	case jArray:
		if len(arg.arr) == 0 {
			return cond{}, errorf(path, "anything-but's list is empty; give the values to exclude")
		}
		first := arg.arr[0].kind
		for i, e := range arg.arr {
			ep := indexPath(path, i)
			switch {
			case e.kind != jString && e.kind != jNumber:
				return cond{}, errorf(ep, "anything-but excludes strings or numbers only")
			case e.kind != first:
				return cond{}, errorf(ep, "anything-but's list holds strings or numbers, not both; use one anything-but for each")
			case e.kind == jString:
				c.strs = append(c.strs, e.str)
			default:
				if err := checkNumber(e, ep); err != nil {
					return cond{}, err
				}
				c.nums = append(c.nums, e.num)
				c.qnums = append(c.qnums, quantize(e.num))
			}
		}
		if len(c.strs) > mapAbove {
			c.strSet = make(map[string]struct{}, len(c.strs))
			for _, s := range c.strs {
				c.strSet[s] = struct{}{}
			}
		}
		return c, nil
	case jObject:
		if len(arg.keys) != 1 || (arg.keys[0] != kwPrefix && arg.keys[0] != kwSuffix) {
			return cond{}, errorf(path, "anything-but's object is {\"prefix\": \"...\"} or {\"suffix\": \"...\"}")
		}
		op, v := arg.keys[0], arg.vals[0]
		if v.kind != jString || v.str == "" {
			return cond{}, errorf(keyPath(path, op), "anything-but's %s takes a string that is not empty", op)
		}
		c := cond{op: opAnythingButPrefix, s: v.str}
		if op == kwSuffix {
			c.op = opAnythingButSuffix
		}
		return c, nil
	}
	return cond{}, errorf(path, "anything-but takes a string, a number, a list of either, or {\"prefix\": ...} or {\"suffix\": ...}")
}

// checkLimits enforces MaxCombinations and MaxKeys over the whole policy.
func checkLimits(root *node, scope Scope) error {
	if n := combinations(root, 1); n > MaxCombinations {
		how := "the product of its lists' lengths"
		if scope == Body {
			how = "the product of its lists' lengths, each times its key's nesting depth"
		}
		return errorf("$", "the policy is too complex: %d combinations, over the limit of %d; each alternative of its $or counts %s, "+
			"and the alternatives add up; use fewer values or split the subscription", n, MaxCombinations, how)
	}
	for _, names := range topKeys(root) {
		if len(names) > MaxKeys {
			return errorf("$", "the policy names %d keys at its top level (%s) in one alternative, over the limit of %d; "+
				"nest keys in scope body or split the subscription", len(names), strings.Join(names, ", "), MaxKeys)
		}
	}
	return nil
}

// capCount keeps counts from overflowing; any count past it is over every limit anyway.
const capCount = 1 << 40

func mulCap(a, b int) int {
	if a != 0 && b > capCount/a {
		return capCount
	}
	return a * b
}

// combinations counts the policy's combinations: the product over a node's fields and
// its $or (whose alternatives add up), a leaf counting its list's length times its depth.
func combinations(n *node, depth int) int {
	total := 1
	for _, f := range n.fields {
		if f.child != nil {
			total = mulCap(total, combinations(f.child, depth+1))
		} else {
			total = mulCap(total, mulCap(len(f.conds), depth))
		}
	}
	if n.or != nil {
		sum := 0
		for _, alt := range n.or {
			sum = min(sum+combinations(alt, depth), capCount)
		}
		total = mulCap(total, sum)
	}
	return total
}

// topKeys returns, for each alternative the policy's top-level $or spells out, the keys it
// names at the top level, sorted. It is called once the combinations are within the
// limit, which bounds the number of alternatives.
func topKeys(n *node) [][]string {
	var own []string
	for _, f := range n.fields {
		own = append(own, f.name)
	}
	if n.or == nil {
		return [][]string{own}
	}
	var out [][]string
	for _, alt := range n.or {
		for _, keys := range topKeys(alt) {
			merged := append(slices.Clone(own), keys...)
			slices.Sort(merged)
			out = append(out, slices.Compact(merged))
		}
	}
	return out
}
