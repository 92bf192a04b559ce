package filter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// parseError parses policy, which must fail, and returns the *Error.
func parseError(t *testing.T, policy string, scope Scope) *Error {
	t.Helper()
	p, err := Parse([]byte(policy), scope)
	if err == nil {
		t.Fatalf("Parse(%.200s, %v) = %s, want an error", policy, scope, p)
	}
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Parse(%.200s) error %v is a %T, want *filter.Error", policy, err, err)
	}
	return fe
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, policy string
		scope        Scope
		path, says   string // says: a fragment of the message
	}{
		{"malformed JSON", `{"a": [1, }`, Attributes, "$.a[1]", "malformed JSON at byte"},
		{"cut short", `{"a": ["x"`, Attributes, "$.a", "ends before"},
		{"not an object", `["a"]`, Attributes, "$", "must be a JSON object"},
		{"null policy", `null`, Attributes, "$", "must be a JSON object"},
		{"empty input", ``, Attributes, "$", "ends before"},
		{"two values", `{} {}`, Attributes, "$", "more follows"},
		{"not UTF-8", "{\"a\": [\"\xff\"]}", Attributes, "$", "UTF-8"},
		{"repeated key", `{"a": ["x"], "a": ["y"]}`, Attributes, "$.a", "appears twice"},
		{"repeated nested key", `{"d": {"a": ["x"], "a": ["y"]}}`, Body, "$.d.a", "appears twice"},
		{"empty list", `{"a": []}`, Attributes, "$.a", "empty list"},
		{"a bare value", `{"a": "x"}`, Attributes, "$.a", "are a list"},
		{"a bare value in a body", `{"a": 5}`, Body, "$.a", "or an object of nested keys"},
		{"nested in attributes", `{"a": {"b": ["x"]}}`, Attributes, "$.a", "no nested keys"},
		{"empty nested object", `{"a": {}}`, Body, "$.a", "empty object"},
		{"list in a list", `{"a": [["x"]]}`, Attributes, "$.a[0]", "cannot be a list"},
		{"unknown operator", `{"a": [{"regex": "x.*"}]}`, Attributes, "$.a[0].regex", `unknown operator "regex"`},
		{"wildcard is not SNS's", `{"a": [{"wildcard": "x*"}]}`, Attributes, "$.a[0].wildcard", "unknown operator"},
		{"two operators in one object", `{"a": [{"prefix": "x", "suffix": "y"}]}`, Attributes, "$.a[0]", "exactly one key"},
		{"empty operator object", `{"a": [{}]}`, Attributes, "$.a[0]", "exactly one key"},
		{"prefix of a number", `{"a": [{"prefix": 5}]}`, Attributes, "$.a[0].prefix", "takes a string"},
		{"suffix of null", `{"a": [{"suffix": null}]}`, Attributes, "$.a[0].suffix", "takes a string"},
		{"equals-ignore-case of a list", `{"a": [{"equals-ignore-case": ["x"]}]}`, Attributes, "$.a[0].equals-ignore-case", "takes a string"},
		{"exists of a string", `{"a": [{"exists": "yes"}]}`, Attributes, "$.a[0].exists", "true or false"},
		{"cidr without a mask", `{"ip": [{"cidr": "10.0.0.1"}]}`, Attributes, "$.ip[0].cidr", "not a CIDR block"},
		{"cidr out of range", `{"ip": [{"cidr": "300.0.0.0/8"}]}`, Attributes, "$.ip[0].cidr", "not a CIDR block"},
		{"cidr of a number", `{"ip": [{"cidr": 10}]}`, Attributes, "$.ip[0].cidr", "takes a string"},
		{"numeric of a number", `{"n": [{"numeric": 5}]}`, Attributes, "$.n[0].numeric", "takes a comparison"},
		{"numeric empty", `{"n": [{"numeric": []}]}`, Attributes, "$.n[0].numeric", "takes a comparison"},
		{"numeric operator alone", `{"n": [{"numeric": [">"]}]}`, Attributes, "$.n[0].numeric", "takes a comparison"},
		{"numeric of three", `{"n": [{"numeric": [">", 1, "<"]}]}`, Attributes, "$.n[0].numeric", "takes a comparison"},
		{"numeric quoted number", `{"n": [{"numeric": [">", "5"]}]}`, Attributes, "$.n[0].numeric[1]", "followed by a number"},
		{"numeric unknown operator", `{"n": [{"numeric": ["!=", 5]}]}`, Attributes, "$.n[0].numeric[0]", `unknown numeric operator "!="`},
		{"numeric number first", `{"n": [{"numeric": [5, ">"]}]}`, Attributes, "$.n[0].numeric[0]", "expected an operator"},
		{"range upper first", `{"n": [{"numeric": ["<", 5, ">", 1]}]}`, Attributes, "$.n[0].numeric[0]", "starts with its lower bound"},
		{"range of = ", `{"n": [{"numeric": ["=", 5, "<", 9]}]}`, Attributes, "$.n[0].numeric[0]", "starts with its lower bound"},
		{"range two lower bounds", `{"n": [{"numeric": [">", 1, ">=", 9]}]}`, Attributes, "$.n[0].numeric[2]", "second operator is < or <="},
		{"range lower above upper", `{"n": [{"numeric": [">", 10, "<", 1]}]}`, Attributes, "$.n[0].numeric", "lower bound must be less"},
		{"range empty", `{"n": [{"numeric": [">=", 5, "<=", 5]}]}`, Attributes, "$.n[0].numeric", "lower bound must be less"},
		{"range below accuracy", `{"n": [{"numeric": [">", 1.000001, "<", 1.000002]}]}`, Attributes, "$.n[0].numeric", "five decimal places"},
		{"numeric operand too large", `{"n": [{"numeric": [">", 2e9]}]}`, Attributes, "$.n[0].numeric[1]", "-1e9 to 1e9"},
		{"number literal too large", `{"n": [1000000001]}`, Attributes, "$.n[0]", "-1e9 to 1e9"},
		{"number too large for a float", `{"n": [1e400]}`, Attributes, "$.n[0]", "too large"},
		{"anything-but empty", `{"a": [{"anything-but": []}]}`, Attributes, "$.a[0].anything-but", "empty"},
		{"anything-but mixed", `{"a": [{"anything-but": ["x", 1]}]}`, Attributes, "$.a[0].anything-but[1]", "not both"},
		{"anything-but null", `{"a": [{"anything-but": [null]}]}`, Attributes, "$.a[0].anything-but[0]", "strings or numbers only"},
		{"anything-but true", `{"a": [{"anything-but": true}]}`, Attributes, "$.a[0].anything-but", "takes a string, a number"},
		{"anything-but number too large", `{"a": [{"anything-but": [1, 5e9]}]}`, Attributes, "$.a[0].anything-but[1]", "-1e9 to 1e9"},
		{"anything-but empty prefix", `{"a": [{"anything-but": {"prefix": ""}}]}`, Attributes, "$.a[0].anything-but.prefix", "not empty"},
		{"anything-but of equals-ignore-case", `{"a": [{"anything-but": {"equals-ignore-case": "x"}}]}`, Attributes, "$.a[0].anything-but", `{"prefix"`},
		{"$or alternative empty", `{"$or": [{}, {"a": ["x"]}]}`, Attributes, "$.$or[0]", "names no key"},
		{"$or with keywords is a plain key", `{"$or": [{"numeric": 123}, {"prefix": "abc"}]}`, Attributes, "$.$or[0].numeric", "takes a comparison"},
		{"$or of one object is a plain key", `{"$or": [{"a": ["x"]}]}`, Attributes, "$.$or[0].a", "unknown operator"},
		{"error inside an alternative", `{"$or": [{"a": ["x"]}, {"b": [{"prefix": 1}]}]}`, Attributes, "$.$or[1].b[0].prefix", "takes a string"},
		{"nested in an alternative in attributes", `{"$or": [{"a": ["x"]}, {"b": {"c": ["y"]}}]}`, Attributes, "$.$or[1].b", "no nested keys"},
		{"quoted key in the path", `{"order id": []}`, Attributes, `$["order id"]`, "empty list"},
		{"key starting with a digit", `{"d": {"2nd": []}}`, Body, `$.d["2nd"]`, "empty list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fe := parseError(t, c.policy, c.scope)
			if fe.Path != c.path {
				t.Errorf("Path = %q, want %q (%v)", fe.Path, c.path, fe)
			}
			if !strings.Contains(fe.Message, c.says) {
				t.Errorf("Message = %q, want it to say %q", fe.Message, c.says)
			}
			if want := "invalid filter policy at " + fe.Path + ": " + fe.Message; fe.Error() != want {
				t.Errorf("Error() = %q, want %q", fe.Error(), want)
			}
		})
	}
}

func TestParseUnknownScope(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{}`), Scope(7))
	var fe *Error
	if err == nil || errors.As(err, &fe) {
		t.Errorf("Parse with an unknown scope: %v; want an error that is not a *filter.Error, the caller's mistake", err)
	}
}

// values returns a JSON list of n distinct strings.
func values(n int) string {
	v := make([]string, n)
	for i := range v {
		v[i] = fmt.Sprintf(`"v%d"`, i)
	}
	return "[" + strings.Join(v, ",") + "]"
}

func TestComplexityLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, policy string
		scope        Scope
		ok           bool
	}{
		{"150 values", `{"a": ` + values(150) + `}`, Attributes, true},
		{"151 values", `{"a": ` + values(151) + `}`, Attributes, false},
		{"10 x 15", `{"a": ` + values(10) + `, "b": ` + values(15) + `}`, Attributes, true},
		{"10 x 15 x 2", `{"a": ` + values(10) + `, "b": ` + values(15) + `, "c": ` + values(2) + `}`, Attributes, false},
		{"$or: 10 x (5 + 10)", `{"a": ` + values(10) + `, "$or": [{"b": ` + values(5) + `}, {"c": ` + values(10) + `}]}`, Attributes, true},
		{"$or: 10 x (5 + 11)", `{"a": ` + values(10) + `, "$or": [{"b": ` + values(5) + `}, {"c": ` + values(11) + `}]}`, Attributes, false},
		{"nested $or: 2 x (3 + 3 x (10 + 14))",
			`{"a": ` + values(2) + `, "$or": [{"b": ` + values(3) + `}, {"c": ` + values(3) + `, "$or": [{"d": ` + values(10) + `}, {"e": ` + values(14) + `}]}]}`,
			Attributes, true},
		{"nested $or: 2 x (3 + 3 x (10 + 15))",
			`{"a": ` + values(2) + `, "$or": [{"b": ` + values(3) + `}, {"c": ` + values(3) + `, "$or": [{"d": ` + values(10) + `}, {"e": ` + values(15) + `}]}]}`,
			Attributes, false},
		// SNS's own example: four values three keys deep and three values two deep,
		// (3 x 4) x (2 x 3) = 72; a third key of three values makes it 216.
		{"nested keys count their depth", `{"key_a": {"key_b": {"key_c": ` + values(4) + `}}, "key_d": {"key_e": ` + values(3) + `}}`, Body, true},
		{"nested keys count their depth, over", `{"key_a": {"key_b": {"key_c": ` + values(4) + `}}, "key_d": {"key_e": ` + values(3) + `}, "key_f": ` + values(3) + `}`, Body, false},
		{"depth 3 x 50 values", `{"a": {"b": {"c": ` + values(50) + `}}}`, Body, true},
		{"depth 3 x 51 values", `{"a": {"b": {"c": ` + values(51) + `}}}`, Body, false},
		{"an operator counts as one value", `{"a": [{"anything-but": ` + values(500) + `}]}`, Attributes, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(c.policy), c.scope)
			if c.ok && err != nil {
				t.Fatalf("Parse: %v; want it accepted", err)
			}
			if !c.ok {
				fe := parseError(t, c.policy, c.scope)
				if fe.Path != "$" || !strings.Contains(fe.Message, "too complex") {
					t.Errorf("error %v; want the policy refused as too complex at $", fe)
				}
			}
		})
	}
}

func TestKeyLimit(t *testing.T) {
	t.Parallel()
	keys := func(prefix string, n int) string {
		k := make([]string, n)
		for i := range k {
			k[i] = fmt.Sprintf(`"%s%d": ["x"]`, prefix, i)
		}
		return strings.Join(k, ",")
	}
	cases := []struct {
		name, policy string
		scope        Scope
		ok           bool
	}{
		{"five keys", `{` + keys("k", 5) + `}`, Attributes, true},
		{"six keys", `{` + keys("k", 6) + `}`, Attributes, false},
		{"six keys in a body", `{` + keys("k", 6) + `}`, Body, false},
		{"nested keys do not count", `{"d": {` + keys("k", 6) + `}}`, Body, true}, // 2^6 combinations
		{"four and one in each alternative", `{` + keys("k", 4) + `, "$or": [{` + keys("a", 1) + `}, {` + keys("b", 1) + `}]}`, Attributes, true},
		{"five and one in an alternative", `{` + keys("k", 5) + `, "$or": [{` + keys("a", 1) + `}, {` + keys("b", 1) + `}]}`, Attributes, false},
		{"an alternative repeating a key", `{` + keys("k", 5) + `, "$or": [{` + keys("k", 1) + `}, {` + keys("k", 2) + `}]}`, Attributes, true},
		{"many alternatives of few keys", `{"$or": [{` + keys("a", 5) + `}, {` + keys("b", 5) + `}, {` + keys("c", 5) + `}]}`, Attributes, true},
		{"one alternative of six", `{"$or": [{` + keys("a", 5) + `}, {` + keys("b", 6) + `}]}`, Attributes, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(c.policy), c.scope)
			if c.ok && err != nil {
				t.Fatalf("Parse: %v; want it accepted", err)
			}
			if !c.ok {
				fe := parseError(t, c.policy, c.scope)
				if fe.Path != "$" || !strings.Contains(fe.Message, "keys at its top level") {
					t.Errorf("error %v; want the policy refused for its keys at $", fe)
				}
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	t.Parallel()
	const base = `{"a": ["x"]}`
	padded := func(n int) []byte { return []byte(base + strings.Repeat(" ", n-len(base))) }
	if _, err := Parse(padded(MaxPolicyBytes), Attributes); err != nil {
		t.Errorf("a policy of exactly %d bytes: %v; want it accepted", MaxPolicyBytes, err)
	}
	fe := parseError(t, string(padded(MaxPolicyBytes+1)), Attributes)
	if !strings.Contains(fe.Message, "over the limit") {
		t.Errorf("a policy one byte over: %v", fe)
	}
	// The canonical form writes 1e9 as 1000000000: within the limit as given, over it
	// once canonical, which must parse again.
	nums := strings.Repeat("1e9,", 30000)
	fe = parseError(t, `{"a": [{"anything-but": [`+nums+`1]}]}`, Attributes)
	if !strings.Contains(fe.Message, "canonical form") {
		t.Errorf("a policy whose canonical form is too large: %v", fe)
	}
}

func TestNestingLimit(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 2000) + `["x"]` + strings.Repeat(`}`, 2000)
	fe := parseError(t, deep, Body)
	if !strings.Contains(fe.Message, "nests more than") {
		t.Errorf("a policy 2000 levels deep: %v", fe)
	}
	deepArrays := `{"a": ` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`
	parseError(t, deepArrays, Attributes)
}

func TestParseStaysLinear(t *testing.T) {
	t.Parallel()
	// The largest objects a policy can hold must not take quadratic time to check for
	// repeated keys; 20,000 keys fit in 256 KiB.
	var b strings.Builder
	b.WriteString(`{"d": {`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":[1]`, i)
	}
	b.WriteString(`, "k7": [2]}}`)
	fe := parseError(t, b.String(), Body)
	if fe.Path != "$.d.k7" || !strings.Contains(fe.Message, "twice") {
		t.Errorf("a repeated key among many: %v", fe)
	}
}
