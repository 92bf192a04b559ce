package sqs

import "testing"

// The vectors are those published with the aws-md5-of-message-attributes package, which
// reproduces the digests SQS returns.
func TestMD5OfAttributes(t *testing.T) {
	t.Parallel()
	str := func(typ, v string) attrValue { return attrValue{DataType: typ, StringValue: v} }
	bin := attrValue{DataType: "Binary", BinaryValue: []byte("Hello binary world!")}
	cases := []struct {
		name  string
		attrs map[string]attrValue
		want  string
	}{
		{"string", map[string]attrValue{"attribName1": str("String", "attribValue 1")}, "19e27d4e946b072f3f58da80d94fd778"},
		{"custom number", map[string]attrValue{"customNumberTypeAttrib": str("Number.float", "4563442423554324324264524243.32543234")}, "9fe1b90bbd9965bdf77bac517c7d2495"},
		{"binary", map[string]attrValue{"binaryAttribute": bin}, "31a92b15d92f8db860eda32aceb656c3"},
		{"several", map[string]attrValue{
			"attribName1":            str("String", "attribValue 1"),
			"customNumberTypeAttrib": str("Number.float", "4563442423554324324264524243.32543234"),
			"binaryAttribute":        bin,
		}, "c932db14a896c663f83c260297d594ff"},
		{"none", nil, ""},
	}
	for _, c := range cases {
		if got := md5OfAttributes(c.attrs); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	if got, want := md5Hex("hello"), "5d41402abc4b2a76b9719d911017c592"; got != want {
		t.Errorf("md5Hex(hello) = %s, want %s", got, want)
	}
}

func TestValidSQSText(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"plain":                          true,
		"tab\tnl\ncr\r":                  true,
		"emoji 😀":                        true,
		"\u0000":                         false,
		"\u0008":                         false,
		"\uFFFE":                         false,
		"\xff\xfe":                       false,
		"ok\U0010FFFF":                   true,
		"\uE000\uFFFD":                   true,
		string([]byte{0xed, 0xa0, 0x80}): false, // an encoded surrogate
	} {
		if got := validSQSText(s); got != want {
			t.Errorf("validSQSText(%q) = %v, want %v", s, got, want)
		}
	}
}
