package sqs

import (
	"encoding/base64"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The answers of the hot actions written by hand, byte for byte as encoding/json (with
// SetEscapeHTML(false), as ServeHTTP's encoder) writes them, without its reflection:
// TestAppendJSONMatchesEncoder compares the two.

// jsonAppender is an answer that writes its own JSON.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

func (o sendMessageOut) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = o.appendMembers(b)
	return append(b, '}')
}

// appendMembers writes o's members, which sendBatchResultEntry embeds.
func (o *sendMessageOut) appendMembers(b []byte) []byte {
	b = appendMember(b, "MD5OfMessageBody", o.MD5OfMessageBody, false)
	if o.MD5OfMessageAttributes != "" {
		b = appendMember(b, "MD5OfMessageAttributes", o.MD5OfMessageAttributes, true)
	}
	if o.MD5OfMessageSystemAttributes != "" {
		b = appendMember(b, "MD5OfMessageSystemAttributes", o.MD5OfMessageSystemAttributes, true)
	}
	b = appendMember(b, "MessageId", o.MessageID, true)
	if o.SequenceNumber != "" {
		b = appendMember(b, "SequenceNumber", o.SequenceNumber, true)
	}
	return b
}

func (o sendMessageBatchOut) appendJSON(b []byte) []byte {
	b = append(b, `{"Successful":`...)
	b = appendList(b, o.Successful, func(e *sendBatchResultEntry, b []byte) []byte {
		b = appendMember(append(b, '{'), "Id", e.ID, false)
		b = append(b, ',')
		b = e.appendMembers(b)
		return append(b, '}')
	})
	b = append(b, `,"Failed":`...)
	b = appendList(b, o.Failed, (*batchError).appendJSON)
	return append(b, '}')
}

func (e *batchError) appendJSON(b []byte) []byte {
	b = appendMember(append(b, '{'), "Id", e.ID, false)
	b = append(b, `,"SenderFault":`...)
	b = strconv.AppendBool(b, e.SenderFault)
	b = appendMember(b, "Code", e.Code, true)
	if e.Message != "" {
		b = appendMember(b, "Message", e.Message, true)
	}
	return append(b, '}')
}

func (o receiptBatchOut) appendJSON(b []byte) []byte {
	b = append(b, `{"Successful":`...)
	b = appendList(b, o.Successful, func(e *idEntry, b []byte) []byte {
		return append(appendMember(append(b, '{'), "Id", e.ID, false), '}')
	})
	b = append(b, `,"Failed":`...)
	b = appendList(b, o.Failed, (*batchError).appendJSON)
	return append(b, '}')
}

func (o receiveMessageOut) appendJSON(b []byte) []byte {
	if len(o.Messages) == 0 {
		return append(b, "{}"...)
	}
	b = append(b, `{"Messages":`...)
	b = appendList(b, o.Messages, (*wireMessage).appendJSON)
	return append(b, '}')
}

func (m *wireMessage) appendJSON(b []byte) []byte {
	b = appendMember(append(b, '{'), "MessageId", m.MessageID, false)
	b = appendMember(b, "ReceiptHandle", m.ReceiptHandle, true)
	b = appendMember(b, "MD5OfBody", m.MD5OfBody, true)
	b = appendMember(b, "Body", m.Body, true)
	if len(m.Attributes) > 0 {
		b = append(b, `,"Attributes":{`...)
		for i, k := range slices.Sorted(maps.Keys(m.Attributes)) {
			b = appendMember(b, k, m.Attributes[k], i > 0)
		}
		b = append(b, '}')
	}
	if m.MD5OfMessageAttributes != "" {
		b = appendMember(b, "MD5OfMessageAttributes", m.MD5OfMessageAttributes, true)
	}
	if len(m.MessageAttributes) > 0 {
		b = append(b, `,"MessageAttributes":{`...)
		for i, k := range slices.Sorted(maps.Keys(m.MessageAttributes)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendString(b, k), ':')
			v := m.MessageAttributes[k]
			b = v.appendJSON(b)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func (v *wireAttrValue) appendJSON(b []byte) []byte {
	b = appendMember(append(b, '{'), "DataType", v.DataType, false)
	if v.StringValue != nil {
		b = appendMember(b, "StringValue", *v.StringValue, true)
	}
	if len(v.BinaryValue) > 0 {
		b = append(b, `,"BinaryValue":`...)
		b = appendBase64(b, v.BinaryValue)
	}
	if len(v.StringListValues) > 0 {
		b = append(b, `,"StringListValues":`...)
		b = appendList(b, v.StringListValues, func(s *string, b []byte) []byte { return appendString(b, *s) })
	}
	if len(v.BinaryListValues) > 0 {
		b = append(b, `,"BinaryListValues":`...)
		b = appendList(b, v.BinaryListValues, func(s *[]byte, b []byte) []byte {
			if *s == nil {
				return append(b, "null"...)
			}
			return appendBase64(b, *s)
		})
	}
	return append(b, '}')
}

func (empty) appendJSON(b []byte) []byte { return append(b, "{}"...) }

// appendList writes a slice as encoding/json does: nil as null.
func appendList[T any](b []byte, list []T, elem func(*T, []byte) []byte) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(&list[i], b)
	}
	return append(b, ']')
}

// appendMember writes "name":"value", after a comma unless first.
func appendMember(b []byte, name, value string, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(appendString(b, name), ':')
	return appendString(b, value)
}

func appendBase64(b []byte, v []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string the way encoding/json does without HTML
// escaping: '"' and '\\' escaped, control characters as \b \f \n \r \t or \u00XX,
// invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped (JSONP).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := plainPrefix(s); i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
