package sqs

import "encoding/binary"

// plainPrefix returns the length of the longest prefix of s made of whole 8-byte words
// of printable ASCII (0x20–0x7e) other than '"' and '\\': bytes that are valid SQS
// text, that a JSON string holds as they are and that JSON writes as they are. Bodies
// are mostly such bytes, and the checks that walk them (validSQSText, the JSON scanner
// and writer) skip them eight at a time and look at the rest a byte at a time.
func plainPrefix(s string) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64([]byte(s[i : i+8]))
		// A byte ≥ 0x80, or one whose value v makes one of these subtractions borrow:
		// v < 0x20, v == '"', v == '\\', v == 0x7f.
		bad := x & highs
		bad |= (x - 0x20*ones) &^ x & highs
		q := x ^ '"'*ones
		bad |= (q - ones) &^ q & highs
		b := x ^ '\\'*ones
		bad |= (b - ones) &^ b & highs
		d := x ^ 0x7f*ones
		bad |= (d - ones) &^ d & highs
		if bad != 0 {
			break
		}
	}
	return i
}
