package filter

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// A body is read by a scanner of its own rather than by encoding/json: a policy reads a
// few properties of a body, and decoding the rest into maps would cost an allocation for
// every value. The scanner checks the whole body against JSON's grammar, as json.Valid
// does, but keeps only the values at the paths the policy's trie names, as nodes in a
// slice that a pool lends from one Match to the next. Strings are read as encoding/json
// reads them: escapes decoded, a lone surrogate or a byte that is not UTF-8 read as
// U+FFFD.

// jkind is the kind of a JSON value.
type jkind uint8

const (
	jNull jkind = iota
	jFalse
	jTrue
	jNumber
	jString
	jObject
	jArray
)

// jnode is one value the scanner kept.
type jnode struct {
	kind jkind
	// field is, for a member of an object, the index of its name among the names its
	// level of the trie holds.
	field int32
	// first is an object's first kept member or an array's first element, next the
	// following sibling; -1 for none.
	first, next int32
	s           string  // jString
	q           float64 // jNumber, quantized
}

// tnode is one level of the paths a policy of scope Body reads: the names it reads at that
// level, each with the level below it. A policy's trie is built by Parse and never
// changes after.
type tnode struct {
	names []string
	kids  []*tnode
	index map[string]int // when names are many
}

// leafTrie reads a value without keeping any member of its objects.
var leafTrie = &tnode{}

// child returns the index and level of name, adding them if they are new.
func (t *tnode) child(name string) (int, *tnode) {
	if i := t.lookup(name); i >= 0 {
		return i, t.kids[i]
	}
	t.names = append(t.names, name)
	t.kids = append(t.kids, &tnode{})
	if len(t.names) > mapAbove {
		if t.index == nil {
			t.index = make(map[string]int, len(t.names))
			for i, n := range t.names {
				t.index[n] = i
			}
		} else {
			t.index[name] = len(t.names) - 1
		}
	}
	return len(t.names) - 1, t.kids[len(t.kids)-1]
}

func (t *tnode) lookup(name string) int {
	if t.index != nil {
		if i, ok := t.index[name]; ok {
			return i
		}
		return -1
	}
	for i, n := range t.names {
		if n == name {
			return i
		}
	}
	return -1
}

// bind gives each field of n, and of its alternatives and nested objects, the index of
// its name in the trie level t.
func bind(n *node, t *tnode) {
	for _, f := range n.fields {
		id, kid := t.child(f.name)
		f.id = id
		if f.child != nil {
			bind(f.child, kid)
		}
	}
	for _, alt := range n.or {
		bind(alt, t)
	}
}

// maxBodyNesting is as deep as a body may nest, encoding/json's bound too; a deeper body
// is not JSON to okiba and matches nothing.
const maxBodyNesting = 10000

// scanner reads one JSON text.
type scanner struct {
	src   string
	i     int
	depth int
	nodes []jnode
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

func getScanner() *scanner { return scanners.Get().(*scanner) }

func putScanner(sc *scanner) {
	if cap(sc.nodes) > 1<<12 {
		return // let an unusually large body's nodes go
	}
	clear(sc.nodes) // drop the strings into the body
	*sc = scanner{nodes: sc.nodes[:0]}
	scanners.Put(sc)
}

// scan reads src, keeping what t names, and returns the index of the top value; false if
// src is not one JSON value.
func (sc *scanner) scan(src string, t *tnode) (int32, bool) {
	sc.src, sc.i, sc.depth, sc.nodes = src, 0, 0, sc.nodes[:0]
	v, ok := sc.value(t)
	if !ok {
		return -1, false
	}
	sc.space()
	return v, sc.i == len(sc.src)
}

func (sc *scanner) add(n jnode) int32 {
	n.first, n.next = -1, -1
	sc.nodes = append(sc.nodes, n)
	return int32(len(sc.nodes) - 1)
}

func (sc *scanner) space() {
	i, s := sc.i, sc.src
	for i < len(s) && s[i] <= ' ' && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	sc.i = i
}

// value reads the value at the scanner's position. With t nil it only checks the value
// and returns -1; otherwise it keeps the value, and the members of its objects that t
// names.
func (sc *scanner) value(t *tnode) (int32, bool) {
	sc.space()
	if sc.i >= len(sc.src) {
		return -1, false
	}
	switch c := sc.src[sc.i]; {
	case c == '{':
		return sc.object(t)
	case c == '[':
		return sc.array(t)
	case c == '"':
		s, ok := sc.str(t != nil)
		if !ok || t == nil {
			return -1, ok
		}
		return sc.add(jnode{kind: jString, s: s}), true
	case c == 't':
		return sc.literal("true", jTrue, t)
	case c == 'f':
		return sc.literal("false", jFalse, t)
	case c == 'n':
		return sc.literal("null", jNull, t)
	case c == '-' || (c >= '0' && c <= '9'):
		return sc.number(t)
	}
	return -1, false
}

func (sc *scanner) literal(word string, k jkind, t *tnode) (int32, bool) {
	if !strings.HasPrefix(sc.src[sc.i:], word) {
		return -1, false
	}
	sc.i += len(word)
	if t == nil {
		return -1, true
	}
	return sc.add(jnode{kind: k}), true
}

func (sc *scanner) number(t *tnode) (int32, bool) {
	n := jsonNumberLen(sc.src[sc.i:])
	if n == 0 {
		return -1, false
	}
	text := sc.src[sc.i : sc.i+n]
	sc.i += n
	if t == nil {
		return -1, true
	}
	// A number too large for a float64 reads as an infinity, larger than every bound.
	f, _ := strconv.ParseFloat(text, 64)
	return sc.add(jnode{kind: jNumber, q: quantize(f)}), true
}

func (sc *scanner) object(t *tnode) (int32, bool) {
	if sc.depth++; sc.depth > maxBodyNesting {
		return -1, false
	}
	sc.i++ // {
	obj := int32(-1)
	if t != nil {
		obj = sc.add(jnode{kind: jObject})
	}
	last := int32(-1)
	sc.space()
	if sc.i < len(sc.src) && sc.src[sc.i] == '}' {
		sc.i++
		sc.depth--
		return obj, true
	}
	for {
		sc.space()
		if sc.i >= len(sc.src) || sc.src[sc.i] != '"' {
			return -1, false
		}
		need := t != nil && len(t.names) > 0
		key, ok := sc.str(need)
		if !ok {
			return -1, false
		}
		var kid *tnode
		id := -1
		if need {
			if id = t.lookup(key); id >= 0 {
				kid = t.kids[id]
			}
		}
		sc.space()
		if sc.i >= len(sc.src) || sc.src[sc.i] != ':' {
			return -1, false
		}
		sc.i++
		v, ok := sc.value(kid)
		if !ok {
			return -1, false
		}
		if v >= 0 {
			sc.nodes[v].field = int32(id)
			if last < 0 {
				sc.nodes[obj].first = v
			} else {
				sc.nodes[last].next = v
			}
			last = v
		}
		sc.space()
		if sc.i >= len(sc.src) {
			return -1, false
		}
		switch sc.src[sc.i] {
		case ',':
			sc.i++
		case '}':
			sc.i++
			sc.depth--
			return obj, true
		default:
			return -1, false
		}
	}
}

func (sc *scanner) array(t *tnode) (int32, bool) {
	if sc.depth++; sc.depth > maxBodyNesting {
		return -1, false
	}
	sc.i++ // [
	arr := int32(-1)
	if t != nil {
		arr = sc.add(jnode{kind: jArray})
	}
	last := int32(-1)
	sc.space()
	if sc.i < len(sc.src) && sc.src[sc.i] == ']' {
		sc.i++
		sc.depth--
		return arr, true
	}
	for {
		v, ok := sc.value(t)
		if !ok {
			return -1, false
		}
		if v >= 0 {
			if last < 0 {
				sc.nodes[arr].first = v
			} else {
				sc.nodes[last].next = v
			}
			last = v
		}
		sc.space()
		if sc.i >= len(sc.src) {
			return -1, false
		}
		switch sc.src[sc.i] {
		case ',':
			sc.i++
		case ']':
			sc.i++
			sc.depth--
			return arr, true
		default:
			return -1, false
		}
	}
}

// plainByte marks the bytes a JSON string holds as they are: not the quote, the
// backslash or a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string at the scanner's position, its text decoded only if need.
func (sc *scanner) str(need bool) (string, bool) {
	s := sc.src
	start := sc.i + 1
	escaped := false
	for i := start; i < len(s); {
		c := s[i]
		if plainByte[c] {
			i++
			continue
		}
		switch c {
		case '"':
			sc.i = i + 1
			if !need {
				return "", true
			}
			raw := s[start:i]
			if !escaped && utf8.ValidString(raw) {
				return raw, true
			}
			return unescape(raw), true
		case '\\':
			escaped = true
			if i+1 >= len(s) {
				return "", false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+5 >= len(s) || hex4(s[i+2:i+6]) < 0 {
					return "", false
				}
				i += 6
			default:
				return "", false
			}
		default: // a control character
			return "", false
		}
	}
	return "", false
}

// hex4 decodes four hexadecimal digits, or returns -1.
func hex4(s string) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unescape decodes the text of a JSON string that str has checked.
func unescape(raw string) string {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(raw[i:])
			b = utf8.AppendRune(b, r) // RuneError for a byte that is not UTF-8
			i += size
			continue
		}
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				// A surrogate counts only with its pair; alone it reads as U+FFFD.
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != utf8.RuneError {
						b = utf8.AppendRune(b, pair)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b = utf8.AppendRune(b, r)
			continue
		default: // " \ /
			b = append(b, raw[i+1])
		}
		i += 2
	}
	return string(b)
}

// jsonNumberLen returns the length of the JSON number at the start of s, or 0 if none is.
func jsonNumberLen(s string) int {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return 0
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return 0
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return 0
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	return i
}
