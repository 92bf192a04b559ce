package sqs

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
)

// md5Hex is MD5OfMessageBody / MD5OfBody: the MD5 of the body string's UTF-8 bytes, in
// lower-case hex.
func md5Hex(s string) string { return md5HexBytes([]byte(s)) }

// md5HexBytes is md5Hex of bytes already at hand (no copy into a string and back).
func md5HexBytes(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// attrValue is one message attribute (or message system attribute) as SQS sees it.
type attrValue struct {
	DataType    string
	StringValue string
	BinaryValue []byte
}

// isBinary reports whether a data type's base is Binary ("Binary" or "Binary.<custom>").
func isBinary(dataType string) bool {
	base, _, _ := strings.Cut(dataType, ".")
	return base == "Binary"
}

// md5OfAttributes computes MD5OfMessageAttributes (and, over system attributes,
// MD5OfMessageSystemAttributes) as SQS does: for each attribute in ascending order of
// name, the name, the data type, one transport byte (1 for String and Number types, 2
// for Binary types) and the value, where every string or byte value is preceded by its
// length as a 4-byte big-endian integer; then the MD5 of the whole, in lower-case hex.
// An empty set has no digest ("").
func md5OfAttributes(attrs map[string]attrValue) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	slices.Sort(names)
	h := md5.New()
	for _, n := range names {
		a := attrs[n]
		writeLenPrefixed(h, []byte(n))
		writeLenPrefixed(h, []byte(a.DataType))
		if isBinary(a.DataType) {
			h.Write([]byte{2})
			writeLenPrefixed(h, a.BinaryValue)
		} else {
			h.Write([]byte{1})
			writeLenPrefixed(h, []byte(a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeLenPrefixed(h hash.Hash, b []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	h.Write(n[:])
	h.Write(b)
}
