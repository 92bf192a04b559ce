package filter

import (
	"fmt"
	"strconv"
)

// Error is a policy Parse refuses. Path names the place in the policy in JSONPath's
// notation, from $ for the whole policy: $.price[0].numeric is the operand of the numeric
// operator in the first value of the key price, and a key that is not a plain name is
// quoted, as in $["order id"]. Message says what is wrong there and what to write instead.
// The native API answers every *Error as invalid_filter.
type Error struct {
	Path    string
	Message string
}

func (e *Error) Error() string {
	return "invalid filter policy at " + e.Path + ": " + e.Message
}

func errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Message: fmt.Sprintf(format, args...)}
}

// keyPath extends path by an object key.
func keyPath(path, key string) string {
	if plainName(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// indexPath extends path by an array index.
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// plainName reports whether a key reads unambiguously after a dot: letters, digits, _, $
// and -, not starting with a digit or -.
func plainName(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '$':
		case (c >= '0' && c <= '9') || c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
