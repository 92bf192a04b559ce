package filter

import (
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The canonical form is the policy written back from its nodes: object keys in byte
// order, no spaces, each number in one spelling, each CIDR block masked, a single
// anything-but operand as a list of one. Lists keep the order they were given in: it
// matters to no match, but it is how the author wrote them.

func appendNode(b []byte, n *node) []byte {
	b = append(b, '{')
	// Fields are sorted; "$or", when the node has one, goes where its name sorts.
	orAt := -1
	if n.or != nil {
		orAt = sort.Search(len(n.fields), func(i int) bool { return n.fields[i].name > kwOr })
	}
	for i := 0; i <= len(n.fields); i++ {
		if i == orAt {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, kwOr)
			b = append(b, ':', '[')
			for j, alt := range n.or {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendNode(b, alt)
			}
			b = append(b, ']')
		}
		if i == len(n.fields) {
			break
		}
		if i > 0 || orAt == 0 {
			b = append(b, ',')
		}
		f := n.fields[i]
		b = appendString(b, f.name)
		b = append(b, ':')
		if f.child != nil {
			b = appendNode(b, f.child)
			continue
		}
		b = append(b, '[')
		for j := range f.conds {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendCond(b, &f.conds[j])
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendCond(b []byte, c *cond) []byte {
	op := func(b []byte, name string) []byte {
		b = append(b, '{')
		b = appendString(b, name)
		return append(b, ':')
	}
	switch c.op {
	case opString:
		return appendString(b, c.s)
	case opNumber:
		return appendNumber(b, c.n)
	case opTrue:
		return append(b, "true"...)
	case opFalse:
		return append(b, "false"...)
	case opNull:
		return append(b, "null"...)
	case opPrefix:
		b = appendString(op(b, kwPrefix), c.s)
	case opSuffix:
		b = appendString(op(b, kwSuffix), c.s)
	case opEqualsIgnoreCase:
		b = appendString(op(b, kwIgnoreCase), c.s)
	case opExists:
		b = strconv.AppendBool(op(b, kwExists), c.b)
	case opCIDR:
		b = appendString(op(b, kwCIDR), c.pfx.String())
	case opNumeric:
		b = append(op(b, kwNumeric), '[')
		r := &c.rng
		if r.eq {
			b = append(b, `"=",`...)
			b = appendNumber(b, r.v)
		}
		if r.hasLo {
			if r.loIncl {
				b = append(b, `">=",`...)
			} else {
				b = append(b, `">",`...)
			}
			b = appendNumber(b, r.lo)
		}
		if r.hasHi {
			if r.hasLo {
				b = append(b, ',')
			}
			if r.hiIncl {
				b = append(b, `"<=",`...)
			} else {
				b = append(b, `"<",`...)
			}
			b = appendNumber(b, r.hi)
		}
		b = append(b, ']')
	case opAnythingBut:
		b = append(op(b, kwAnythingBut), '[')
		for i, s := range c.strs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		for i, n := range c.nums {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendNumber(b, n)
		}
		b = append(b, ']')
	case opAnythingButPrefix, opAnythingButSuffix:
		name := kwPrefix
		if c.op == opAnythingButSuffix {
			name = kwSuffix
		}
		b = appendString(op(op(b, kwAnythingBut), name), c.s)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendNumber writes a number as a JSON number in one spelling for each float64: plain
// decimals, but exponent notation for the tiny ones, which plain decimals would write at
// great length.
func appendNumber(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && a < 1e-6 {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendString writes s, which is valid UTF-8, as a JSON string, escaping only what JSON
// requires.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			_, size := utf8.DecodeRuneInString(s[i:])
			b = append(b, s[i:i+size]...)
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
