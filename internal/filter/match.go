package filter

import (
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Matching follows SNS. A policy matches when every key of it matches, and one
// alternative of each $or. A key matches when any of its conditions matches any value
// the record holds under it: a header, the elements of a String.Array header, the body's
// property, or the elements of an array the body holds there. A value is typed as JSON
// types it: a string matches string conditions, a number numeric ones, true, false and
// null only themselves; a Plain header is a string and, if it reads as a number, a number
// too. anything-but matches every value but null that its operand would not match. A key
// holds a value unless it is missing, null, an empty array, or (in a body) an object:
// exists says which, and every other condition needs a value.

// quantize rounds x to the five decimal places SNS compares numbers to, as an integer
// count of 1e-5, so that two numbers SNS finds equal are equal float64s.
func quantize(x float64) float64 { return math.Round(x * 1e5) }

// lit says which JSON literal a value is, if any.
type lit uint8

const (
	litNone lit = iota
	litTrue
	litFalse
	litNull
)

// scalar is one value a condition tests.
type scalar struct {
	s        string
	q        float64 // quantized
	str, num bool
	lit      lit
}

func (r *numRange) contains(q float64) bool {
	if r.eq {
		return q == r.qv
	}
	if r.hasLo && (q < r.qlo || q == r.qlo && !r.loIncl) {
		return false
	}
	if r.hasHi && (q > r.qhi || q == r.qhi && !r.hiIncl) {
		return false
	}
	return true
}

// matches reports whether one value passes c, which is not an exists.
func (c *cond) matches(v *scalar) bool {
	switch c.op {
	case opString:
		return v.str && v.s == c.s
	case opNumber:
		return v.num && v.q == c.q
	case opTrue:
		return v.lit == litTrue
	case opFalse:
		return v.lit == litFalse
	case opNull:
		return v.lit == litNull
	case opPrefix:
		return v.str && strings.HasPrefix(v.s, c.s)
	case opSuffix:
		return v.str && strings.HasSuffix(v.s, c.s)
	case opEqualsIgnoreCase:
		return v.str && strings.EqualFold(v.s, c.s)
	case opCIDR:
		if !v.str {
			return false
		}
		a, err := netip.ParseAddr(v.s)
		if err != nil {
			return false
		}
		return c.pfx.Contains(a) || a.Is4In6() && c.pfx.Contains(a.Unmap())
	case opNumeric:
		return v.num && c.rng.contains(v.q)
	case opAnythingBut:
		if v.lit == litNull {
			return false
		}
		if v.str {
			if c.strSet != nil {
				if _, ok := c.strSet[v.s]; ok {
					return false
				}
			} else {
				for _, s := range c.strs {
					if v.s == s {
						return false
					}
				}
			}
		}
		if v.num {
			for _, q := range c.qnums {
				if v.q == q {
					return false
				}
			}
		}
		return true
	case opAnythingButPrefix:
		return v.lit != litNull && !(v.str && strings.HasPrefix(v.s, c.s))
	case opAnythingButSuffix:
		return v.lit != litNull && !(v.str && strings.HasSuffix(v.s, c.s))
	}
	return false
}

// matchValue reports whether one value passes a condition of f other than exists.
func (f *field) matchValue(v *scalar) bool {
	if f.strs != nil && v.str {
		if _, ok := f.strs[v.s]; ok {
			return true
		}
	}
	for i := range f.conds {
		c := &f.conds[i]
		switch c.op {
		case opExists:
			continue
		case opString:
			if f.strs != nil {
				continue
			}
		}
		if c.matches(v) {
			return true
		}
	}
	return false
}

// matchExists reports whether an exists of f says yes to a key that holds a value or not.
func (f *field) matchExists(holds bool) bool {
	if !f.hasExists {
		return false
	}
	for i := range f.conds {
		if c := &f.conds[i]; c.op == opExists && c.b == holds {
			return true
		}
	}
	return false
}

// Scope Attributes.

func (n *node) matchAttrs(in *Input) bool {
	for _, f := range n.fields {
		if !f.matchAttr(in) {
			return false
		}
	}
	if n.or == nil {
		return true
	}
	for _, alt := range n.or {
		if alt.matchAttrs(in) {
			return true
		}
	}
	return false
}

func (f *field) matchAttr(in *Input) bool {
	var v string
	var ok bool
	typ := Plain
	if f.name == KeyAttribute {
		v, ok = in.Key, in.HasKey
	} else {
		v, ok = in.Headers[f.name]
		if ok && in.Types != nil {
			typ = in.Types[f.name]
		}
	}
	if !ok || typ == Binary {
		// SNS: exists false needs the message to have some attribute.
		return f.matchExists(false) && hasAttributes(in)
	}
	var sc scalar
	switch typ {
	case StringArray:
		return f.matchArrayHeader(v)
	case String:
		sc.str, sc.s = true, v
	case Number:
		sc.q, sc.num = snsNumber(v)
	default:
		sc.str, sc.s = true, v
		if f.needNum {
			sc.q, sc.num = plainNumber(v)
		}
	}
	return f.matchExists(true) || f.matchValue(&sc)
}

// matchArrayHeader matches an SNS String.Array header, a JSON array, as a body's value;
// text that is not JSON holds nothing.
func (f *field) matchArrayHeader(v string) bool {
	sc := scanner{src: v} // keeps no nodes, so it stays on the stack
	var st leafScan
	ok := f.scanLeaf(&sc, &st)
	if sc.space(); !ok || sc.i != len(v) {
		st = leafScan{}
	}
	return f.matchExists(st.holds) || st.matched
}

// leafScan is what scanLeaf found: whether the value held anything exists counts, and
// whether a condition other than exists matched it.
type leafScan struct{ holds, matched bool }

// scanLeaf reads the value at the scanner's position as matchLeaf would read its nodes,
// without keeping them: arrays flattened, objects no value.
func (f *field) scanLeaf(sc *scanner, st *leafScan) bool {
	sc.space()
	if sc.i >= len(sc.src) {
		return false
	}
	var v scalar
	switch c := sc.src[sc.i]; {
	case c == '[':
		if sc.depth++; sc.depth > maxBodyNesting {
			return false
		}
		sc.i++
		if sc.space(); sc.i < len(sc.src) && sc.src[sc.i] == ']' {
			sc.i++
			sc.depth--
			return true
		}
		for {
			if !f.scanLeaf(sc, st) {
				return false
			}
			if sc.space(); sc.i >= len(sc.src) {
				return false
			}
			switch sc.src[sc.i] {
			case ',':
				sc.i++
			case ']':
				sc.i++
				sc.depth--
				return true
			default:
				return false
			}
		}
	case c == '{':
		_, ok := sc.value(nil)
		return ok
	case c == '"':
		s, ok := sc.str(true)
		if !ok {
			return false
		}
		v.str, v.s = true, s
	case c == 't', c == 'f', c == 'n':
		word, l := "null", litNull
		if c == 't' {
			word, l = "true", litTrue
		} else if c == 'f' {
			word, l = "false", litFalse
		}
		if _, ok := sc.literal(word, jNull, nil); !ok {
			return false
		}
		v.lit = l
	default:
		n := jsonNumberLen(sc.src[sc.i:])
		if n == 0 {
			return false
		}
		x, _ := strconv.ParseFloat(sc.src[sc.i:sc.i+n], 64)
		sc.i += n
		v.num, v.q = true, quantize(x)
	}
	st.holds = st.holds || v.lit != litNull
	st.matched = st.matched || f.matchValue(&v)
	return true
}

// hasAttributes reports whether the record has an attribute SNS filtering sees.
func hasAttributes(in *Input) bool {
	if in.HasKey {
		return true
	}
	for name := range in.Headers {
		if name != KeyAttribute && (in.Types == nil || in.Types[name] != Binary) {
			return true
		}
	}
	return false
}

// plainNumber reads a Plain header as a number: JSON's syntax, a finite value.
func plainNumber(v string) (float64, bool) {
	if v == "" || jsonNumberLen(v) != len(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return quantize(f), true
}

// snsNumber reads an SNS Number header, which SNS has checked, more leniently: any
// decimal strconv reads, such as "+1" or ".5", but no hexadecimal, infinity or NaN.
func snsNumber(v string) (float64, bool) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9', c == '+', c == '-', c == '.', c == 'e', c == 'E':
		default:
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return quantize(f), true
}

// Scope Body.

func (p *Policy) matchBody(body []byte) bool {
	if len(p.root.fields) == 0 && p.root.or == nil {
		return true // {}
	}
	sc := getScanner()
	defer putScanner(sc)
	top, ok := sc.scan(string(body), p.trie)
	if !ok || sc.nodes[top].kind != jObject {
		return false
	}
	return p.root.matchOne(sc, top)
}

// matchAt matches n against the value at v (-1 for none). An array matches when one of
// its elements does, arrays within it flattened; an empty one holds nothing.
func (n *node) matchAt(sc *scanner, v int32) bool {
	if v >= 0 && sc.nodes[v].kind == jArray {
		seen := false
		if n.matchElements(sc, v, &seen) {
			return true
		}
		if seen {
			return false
		}
		v = -1
	}
	return n.matchOne(sc, v)
}

func (n *node) matchElements(sc *scanner, arr int32, seen *bool) bool {
	for e := sc.nodes[arr].first; e >= 0; e = sc.nodes[e].next {
		if sc.nodes[e].kind == jArray {
			if n.matchElements(sc, e, seen) {
				return true
			}
			continue
		}
		*seen = true
		if n.matchOne(sc, e) {
			return true
		}
	}
	return false
}

// matchOne matches n against one value that is not an array: its fields are the
// members of an object, and missing from anything else.
func (n *node) matchOne(sc *scanner, v int32) bool {
	for _, f := range n.fields {
		m := member(sc, v, f.id)
		if f.child != nil {
			if !f.child.matchAt(sc, m) {
				return false
			}
		} else if !f.matchLeaf(sc, m) {
			return false
		}
	}
	if n.or == nil {
		return true
	}
	for _, alt := range n.or {
		if alt.matchOne(sc, v) {
			return true
		}
	}
	return false
}

// member returns the member of the object v with the trie index id, or -1. Should a body
// repeat a key, the last one counts, as for encoding/json.
func member(sc *scanner, v int32, id int) int32 {
	if v < 0 || sc.nodes[v].kind != jObject {
		return -1
	}
	m := int32(-1)
	for c := sc.nodes[v].first; c >= 0; c = sc.nodes[c].next {
		if sc.nodes[c].field == int32(id) {
			m = c
		}
	}
	return m
}

// matchLeaf matches f's conditions against the value at v (-1 for none).
func (f *field) matchLeaf(sc *scanner, v int32) bool {
	if f.hasExists && f.matchExists(holds(sc, v)) {
		return true
	}
	return v >= 0 && f.matchValues(sc, v)
}

func (f *field) matchValues(sc *scanner, v int32) bool {
	n := &sc.nodes[v]
	var s scalar
	switch n.kind {
	case jObject:
		return false
	case jArray:
		for e := n.first; e >= 0; e = sc.nodes[e].next {
			if f.matchValues(sc, e) {
				return true
			}
		}
		return false
	case jString:
		s.str, s.s = true, n.s
	case jNumber:
		s.num, s.q = true, n.q
	case jTrue:
		s.lit = litTrue
	case jFalse:
		s.lit = litFalse
	case jNull:
		s.lit = litNull
	}
	return f.matchValue(&s)
}

// holds reports whether the value at v is one exists counts: not missing, null, an
// object, or an array of nothing else.
func holds(sc *scanner, v int32) bool {
	if v < 0 {
		return false
	}
	switch n := &sc.nodes[v]; n.kind {
	case jNull, jObject:
		return false
	case jArray:
		for e := n.first; e >= 0; e = sc.nodes[e].next {
			if holds(sc, e) {
				return true
			}
		}
		return false
	}
	return true
}
