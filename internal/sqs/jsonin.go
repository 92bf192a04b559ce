package sqs

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// A hand-written reader of the JSON requests the hot actions get (sends, receives,
// deletes, visibility changes), which encoding/json would read by reflection, after a
// scan of its own, and which check (permissions.go) read once more for QueueUrl: on a
// batch of ten 1 KiB messages that was a fifth of the server's CPU per message.
//
// It never decides anything encoding/json would decide otherwise: it takes only the
// plain shape (members named exactly as SQS names them, each once, of the types the
// struct has, no nulls, nothing after the object) and gives up — reports false — on
// anything else: a member spelt in another case (which encoding/json matches), a key
// with escapes or non-ASCII, a null, a number that is not a plain integer, a list
// member of attribute values, invalid JSON anywhere. The caller then zeroes the struct
// and decodes the body with encoding/json, which answers it as before, errors and all.
// TestFastDecodeMatchesJSON holds the two to the same result on every input it tries,
// valid or not (FuzzFastDecode runs it on more).

// jsonScan reads one JSON document.
type jsonScan struct {
	b []byte
	i int
}

// fastDecoder is a request struct the scanner can fill.
type fastDecoder interface {
	decodeFast(s *jsonScan) bool
}

// decodeFast fills v from the whole of body, reporting false (v partly filled) where
// encoding/json must decide. An empty body is an empty object, as decode has it.
func decodeFast(body []byte, v fastDecoder) bool {
	s := &jsonScan{b: body}
	if s.peek() == 0 && s.i == len(s.b) { // (peek's 0 may be a NUL byte, not the end)
		return true
	}
	if !v.decodeFast(s) {
		return false
	}
	return s.peek() == 0 && s.i == len(s.b)
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *jsonScan) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// lit consumes byte c after white space.
func (s *jsonScan) lit(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// object reads an object, calling member for each key with the scanner at its value;
// member reads the value or reports false.
func (s *jsonScan) object(member func(key string) bool) bool {
	if !s.lit('{') {
		return false
	}
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.key()
		if !ok || !s.lit(':') || !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// key reads an object key of printable ASCII without escapes, the only keys taken here.
// It does not allocate: the key is only compared.
func (s *jsonScan) key() (string, bool) {
	if !s.lit('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			k := s.b[start:s.i]
			s.i++
			return unsafeString(k), true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return "", false
		}
		s.i++
	}
	return "", false
}

// members tracks the known members of one object.
type members struct {
	names []string
	seen  uint32
}

// which reports the index in m.names of key, or -1 for a member the struct does not
// have, whose value it skips. It reports false where encoding/json decides: a key seen
// before (the last would win), or one equal to a known name but for case (encoding/json
// matches case-insensitively).
func (m *members) which(s *jsonScan, key string) (int, bool) {
	for i, n := range m.names {
		if key == n {
			if m.seen&(1<<i) != 0 {
				return 0, false
			}
			m.seen |= 1 << i
			return i, true
		}
	}
	for _, n := range m.names {
		if strings.EqualFold(key, n) {
			return 0, false
		}
	}
	return -1, s.skip(0)
}

// str reads a string value. One with escapes or invalid UTF-8 is unquoted by
// encoding/json itself (it is rare, and its rules are fiddly).
func (s *jsonScan) str() (string, bool) {
	if !s.lit('"') {
		return "", false
	}
	start := s.i
	s.i += plainPrefix(unsafeString(s.b[s.i:]))
	plain := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if plain && utf8.Valid(raw) {
				return string(raw), true
			}
			var out string
			if json.Unmarshal(s.b[start-1:s.i], &out) != nil {
				return "", false
			}
			return out, true
		case c == '\\':
			plain = false
			s.i += 2
			continue
		case c < 0x20:
			return "", false
		}
		s.i++
	}
	return "", false
}

func (s *jsonScan) strPtr() (*string, bool) {
	v, ok := s.str()
	return &v, ok
}

// int64Ptr reads an integer, as encoding/json reads a number into an int64: a plain
// integer in range. Fractions and exponents (a type error there) give up.
func (s *jsonScan) int64Ptr() (*int64, bool) {
	s.peek()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 1 && s.b[digits] == '0' {
		return nil, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return nil, false
		}
	}
	v, err := strconv.ParseInt(unsafeString(s.b[start:s.i]), 10, 64)
	return &v, err == nil
}

// array reads an array, calling elem with the scanner at each element. An empty array
// is reported as such (encoding/json gives an empty, non-nil slice for it).
func (s *jsonScan) array(elem func() bool) bool {
	if !s.lit('[') {
		return false
	}
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *jsonScan) strings() ([]string, bool) {
	out := []string{}
	ok := s.array(func() bool {
		v, ok := s.str()
		out = append(out, v)
		return ok
	})
	return out, ok
}

// maxSkipDepth bounds the nesting of a member skipped here; deeper ones are left to
// encoding/json (which has its own bound).
const maxSkipDepth = 64

// skip reads any valid JSON value.
func (s *jsonScan) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch s.peek() {
	case '{':
		return s.object(func(string) bool { return s.skip(depth + 1) })
	case '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		s.i++
		s.i += plainPrefix(unsafeString(s.b[s.i:]))
		for s.i < len(s.b) {
			c := s.b[s.i]
			switch {
			case c == '"':
				s.i++
				return true
			case c == '\\':
				if !s.escape() {
					return false
				}
				continue
			case c < 0x20:
				return false
			}
			s.i++
		}
		return false
	case 't':
		return s.word("true")
	case 'f':
		return s.word("false")
	case 'n':
		return s.word("null")
	default:
		return s.number()
	}
}

// escape reads one escape sequence of a string.
func (s *jsonScan) escape() bool {
	if s.i+1 >= len(s.b) {
		return false
	}
	switch s.b[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return true
	case 'u':
		if s.i+6 > len(s.b) {
			return false
		}
		for _, c := range s.b[s.i+2 : s.i+6] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		s.i += 6
		return true
	}
	return false
}

func (s *jsonScan) word(w string) bool {
	if !strings.HasPrefix(unsafeString(s.b[s.i:]), w) {
		return false
	}
	s.i += len(w)
	return true
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() bool {
	digits := func() int {
		start := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i - start
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	start := s.i
	if n := digits(); n == 0 || n > 1 && s.b[start] == '0' {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// The request structs of the hot actions.

var sendEntryMembers = []string{"Id", "MessageBody", "DelaySeconds", "MessageAttributes", "MessageSystemAttributes", "MessageDeduplicationId", "MessageGroupId"}

// member reads member i of sendEntryMembers.
func (e *sendEntry) member(s *jsonScan, i int) bool {
	var ok bool
	switch i {
	case 0:
		e.ID, ok = s.strPtr()
	case 1:
		e.MessageBody, ok = s.strPtr()
	case 2:
		e.DelaySeconds, ok = s.int64Ptr()
	case 3:
		e.MessageAttributes, ok = s.attrValues()
	case 4:
		e.MessageSystemAttributes, ok = s.attrValues()
	case 5:
		e.MessageDeduplicationID, ok = s.strPtr()
	case 6:
		e.MessageGroupID, ok = s.strPtr()
	}
	return ok
}

func (e *sendEntry) decodeFast(s *jsonScan) bool {
	m := members{names: sendEntryMembers}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		return ok && (i < 0 || e.member(s, i))
	})
}

var sendMessageMembers = append([]string{"QueueUrl"}, sendEntryMembers...)

func (in *sendMessageIn) decodeFast(s *jsonScan) bool {
	m := members{names: sendMessageMembers}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i < 0:
			return true
		case i == 0:
			in.QueueURL, ok = s.strPtr()
			return ok
		}
		return in.sendEntry.member(s, i-1)
	})
}

func (in *sendMessageBatchIn) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"QueueUrl", "Entries"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			in.QueueURL, ok = s.strPtr()
			return ok
		case i == 1:
			in.Entries = []sendEntry{}
			return s.array(func() bool {
				in.Entries = append(in.Entries, sendEntry{})
				return in.Entries[len(in.Entries)-1].decodeFast(s)
			})
		}
		return true
	})
}

// attrValues reads a map of message attribute values. Keys are taken as key takes
// them; a key seen twice gives up (encoding/json merges the two).
func (s *jsonScan) attrValues() (map[string]wireAttrValue, bool) {
	out := map[string]wireAttrValue{}
	ok := s.object(func(key string) bool {
		if _, dup := out[key]; dup {
			return false
		}
		var v wireAttrValue
		if !v.decodeFast(s) {
			return false
		}
		out[strings.Clone(key)] = v
		return true
	})
	return out, ok
}

func (v *wireAttrValue) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"DataType", "StringValue", "BinaryValue", "StringListValues", "BinaryListValues"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			v.DataType, ok = s.str()
		case i == 1:
			v.StringValue, ok = s.strPtr()
		case i == 2:
			v.BinaryValue, ok = s.bytes()
		case i > 2:
			return false // lists: rare, and refused by parseAttr anyway
		}
		return ok
	})
}

// bytes reads a []byte as encoding/json does: a base64 (standard encoding) string.
func (s *jsonScan) bytes() ([]byte, bool) {
	str, ok := s.str()
	if !ok {
		return nil, false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(str)))
	n, err := base64.StdEncoding.Decode(b, []byte(str))
	return b[:n], err == nil
}

func (in *receiveMessageIn) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"QueueUrl", "AttributeNames", "MessageSystemAttributeNames", "MessageAttributeNames",
		"MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds", "ReceiveRequestAttemptId"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			in.QueueURL, ok = s.strPtr()
		case i == 1:
			in.AttributeNames, ok = s.strings()
		case i == 2:
			in.MessageSystemAttributeNames, ok = s.strings()
		case i == 3:
			in.MessageAttributeNames, ok = s.strings()
		case i == 4:
			in.MaxNumberOfMessages, ok = s.int64Ptr()
		case i == 5:
			in.VisibilityTimeout, ok = s.int64Ptr()
		case i == 6:
			in.WaitTimeSeconds, ok = s.int64Ptr()
		case i == 7:
			in.ReceiveRequestAttemptID, ok = s.strPtr()
		}
		return ok
	})
}

func (in *deleteMessageIn) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"QueueUrl", "ReceiptHandle"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			in.QueueURL, ok = s.strPtr()
		case i == 1:
			in.ReceiptHandle, ok = s.strPtr()
		}
		return ok
	})
}

func (in *changeVisibilityIn) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"QueueUrl", "ReceiptHandle", "VisibilityTimeout"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			in.QueueURL, ok = s.strPtr()
		case i == 1:
			in.ReceiptHandle, ok = s.strPtr()
		case i == 2:
			in.VisibilityTimeout, ok = s.int64Ptr()
		}
		return ok
	})
}

func (in *receiptBatchIn) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"QueueUrl", "Entries"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			in.QueueURL, ok = s.strPtr()
			return ok
		case i == 1:
			in.Entries = []receiptEntry{}
			return s.array(func() bool {
				in.Entries = append(in.Entries, receiptEntry{})
				return in.Entries[len(in.Entries)-1].decodeFast(s)
			})
		}
		return true
	})
}

func (e *receiptEntry) decodeFast(s *jsonScan) bool {
	m := members{names: []string{"Id", "ReceiptHandle", "VisibilityTimeout"}}
	return s.object(func(key string) bool {
		i, ok := m.which(s, key)
		switch {
		case !ok:
			return false
		case i == 0:
			e.ID, ok = s.strPtr()
		case i == 1:
			e.ReceiptHandle, ok = s.strPtr()
		case i == 2:
			e.VisibilityTimeout, ok = s.int64Ptr()
		}
		return ok
	})
}

// fastInputs makes the request struct of each action the scanner reads.
var fastInputs = map[string]func() fastDecoder{
	"SendMessage":                  func() fastDecoder { return new(sendMessageIn) },
	"SendMessageBatch":             func() fastDecoder { return new(sendMessageBatchIn) },
	"ReceiveMessage":               func() fastDecoder { return new(receiveMessageIn) },
	"DeleteMessage":                func() fastDecoder { return new(deleteMessageIn) },
	"DeleteMessageBatch":           func() fastDecoder { return new(receiptBatchIn) },
	"ChangeMessageVisibility":      func() fastDecoder { return new(changeVisibilityIn) },
	"ChangeMessageVisibilityBatch": func() fastDecoder { return new(receiptBatchIn) },
}

// predecode reads a JSON request of a hot action once, before check and the handler
// both look at it (decodeIn, namedQueue); a body the scanner leaves to encoding/json is
// read by each as before.
func (q *request) predecode() {
	if q.form != nil {
		return
	}
	mk := fastInputs[q.action]
	if mk == nil {
		return
	}
	if in := mk(); decodeFast(q.body, in) {
		q.pre = in
	}
}

// decodeIn is decode for the request struct of a hot action: what predecode read, or
// decode's reading.
func decodeIn[T any](q *request, v *T) *apiError {
	if p, ok := q.pre.(*T); ok {
		*v = *p
		return nil
	}
	return q.decode(v)
}

// queueURLer is a predecoded request's QueueUrl, for check.
type queueURLer interface{ queueURL() *string }

func (in *sendMessageIn) queueURL() *string      { return in.QueueURL }
func (in *sendMessageBatchIn) queueURL() *string { return in.QueueURL }
func (in *receiveMessageIn) queueURL() *string   { return in.QueueURL }
func (in *deleteMessageIn) queueURL() *string    { return in.QueueURL }
func (in *changeVisibilityIn) queueURL() *string { return in.QueueURL }
func (in *receiptBatchIn) queueURL() *string     { return in.QueueURL }

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
