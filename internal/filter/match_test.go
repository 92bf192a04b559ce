package filter

import (
	"testing"
)

// matchCase is one record against one policy.
type matchCase struct {
	name   string
	policy string
	in     Input
	want   bool
}

// headers builds an Input of headers from name, value pairs.
func headers(kv ...string) Input {
	h := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return Input{Headers: h}
}

func body(s string) Input { return Input{Body: []byte(s)} }

func runMatches(t *testing.T, scope Scope, cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(c.policy), scope)
			if err != nil {
				t.Fatalf("Parse(%s): %v", c.policy, err)
			}
			if got := p.Match(c.in); got != c.want {
				t.Errorf("policy %s, record %+v (body %s): Match = %v, want %v", c.policy, c.in, c.in.Body, got, c.want)
			}
		})
	}
}

func TestExactStrings(t *testing.T) {
	t.Parallel()
	const sports = `{"sport": ["cricket", "hurling"]}`
	runMatches(t, Attributes, []matchCase{
		{"first of the list", sports, headers("sport", "cricket"), true},
		{"second of the list", sports, headers("sport", "hurling"), true},
		{"not in the list", sports, headers("sport", "curling"), false},
		{"case matters", sports, headers("sport", "Cricket"), false},
		{"missing", sports, headers("team", "cricket"), false},
		{"other headers are ignored", sports, headers("sport", "cricket", "team", "x"), true},
		{"keys are AND", `{"sport": ["cricket"], "venue": ["lords"]}`, headers("sport", "cricket", "venue", "oval"), false},
		{"keys are AND, both match", `{"sport": ["cricket"], "venue": ["lords"]}`, headers("sport", "cricket", "venue", "lords"), true},
		{"a number-looking string is a string", `{"code": ["007"]}`, headers("code", "007"), true},
		{"string 7 is not the number 007", `{"code": ["7"]}`, headers("code", "007"), false},
		{"empty string", `{"note": [""]}`, headers("note", ""), true},
		{"many values use a set", `{"n": ["a","b","c","d","e","f","g","h","i","j"]}`, headers("n", "j"), true},
		{"many values, none matches", `{"n": ["a","b","c","d","e","f","g","h","i","j"]}`, headers("n", "k"), false},
	})
}

func TestNumbers(t *testing.T) {
	t.Parallel()
	runMatches(t, Attributes, []matchCase{
		{"numeric = same spelling", `{"price": [{"numeric": ["=", 301.5]}]}`, headers("price", "301.5"), true},
		{"numeric = exponent", `{"price": [{"numeric": ["=", 301.5]}]}`, headers("price", "3.015e2"), true},
		{"numeric = fifth decimal differs", `{"price": [{"numeric": ["=", 301.5]}]}`, headers("price", "301.50001"), false},
		{"numeric = sixth decimal is below accuracy", `{"price": [{"numeric": ["=", 301.5]}]}`, headers("price", "301.500001"), true},
		{"numeric = not a number", `{"price": [{"numeric": ["=", 301.5]}]}`, headers("price", "cheap"), false},
		{"number literal", `{"qty": [12]}`, headers("qty", "12.0"), true},
		{"number literal, other number", `{"qty": [12]}`, headers("qty", "13"), false},
		{"leading zero is not JSON", `{"qty": [12]}`, headers("qty", "012"), false},
		{"plus sign is not JSON", `{"qty": [12]}`, headers("qty", "+12"), false},
		{"spaces are not JSON", `{"qty": [12]}`, headers("qty", " 12"), false},
		{"hexadecimal is not JSON", `{"qty": [16]}`, headers("qty", "0x10"), false},
		{"infinity is not a number", `{"qty": [{"numeric": [">", 0]}]}`, headers("qty", "1e400"), false},
		{"range, inside", `{"t": [{"numeric": [">", 0, "<=", 150]}]}`, headers("t", "75"), true},
		{"range, upper bound included", `{"t": [{"numeric": [">", 0, "<=", 150]}]}`, headers("t", "150"), true},
		{"range, lower bound excluded", `{"t": [{"numeric": [">", 0, "<=", 150]}]}`, headers("t", "0"), false},
		{"range, just above", `{"t": [{"numeric": [">", 0, "<=", 150]}]}`, headers("t", "150.00001"), false},
		{"range, inclusive lower", `{"t": [{"numeric": [">=", -5, "<", 5]}]}`, headers("t", "-5"), true},
		{"range, exclusive upper", `{"t": [{"numeric": [">=", -5, "<", 5]}]}`, headers("t", "5"), false},
		{"negative numbers", `{"delta": [{"numeric": ["<", 0]}]}`, headers("delta", "-0.5"), true},
		{"zero is not negative", `{"delta": [{"numeric": ["<", 0]}]}`, headers("delta", "-0"), false},
		{"a range is a number condition only", `{"t": [{"numeric": [">", 0]}]}`, headers("t", "big"), false},
		{"numeric OR string in one list", `{"t": [{"numeric": [">", 10]}, "unknown"]}`, headers("t", "unknown"), true},
	})
}

func TestAnythingBut(t *testing.T) {
	t.Parallel()
	runMatches(t, Attributes, []matchCase{
		{"strings, other value", `{"sport": [{"anything-but": ["cricket", "hurling"]}]}`, headers("sport", "curling"), true},
		{"strings, excluded value", `{"sport": [{"anything-but": ["cricket", "hurling"]}]}`, headers("sport", "hurling"), false},
		{"strings, missing key", `{"sport": [{"anything-but": ["cricket"]}]}`, headers("team", "x"), false},
		{"strings, or missing with exists", `{"sport": [{"anything-but": ["cricket"]}, {"exists": false}]}`, headers("team", "x"), true},
		{"single string", `{"sport": [{"anything-but": "cricket"}]}`, headers("sport", "golf"), true},
		{"single string excluded", `{"sport": [{"anything-but": "cricket"}]}`, headers("sport", "cricket"), false},
		{"numbers, other value", `{"size": [{"anything-but": [100, 500]}]}`, headers("size", "101"), true},
		{"numbers, fraction", `{"size": [{"anything-but": [100, 500]}]}`, headers("size", "100.1"), true},
		{"numbers, excluded", `{"size": [{"anything-but": [100, 500]}]}`, headers("size", "1e2"), false},
		{"numbers, a string is not one of them", `{"size": [{"anything-but": [100]}]}`, headers("size", "large"), true},
		{"single number", `{"size": [{"anything-but": 7}]}`, headers("size", "7"), false},
		{"prefix, other value", `{"event": [{"anything-but": {"prefix": "order-"}}]}`, headers("event", "refund-issued"), true},
		{"prefix, excluded", `{"event": [{"anything-but": {"prefix": "order-"}}]}`, headers("event", "order-placed"), false},
		{"prefix, missing", `{"event": [{"anything-but": {"prefix": "order-"}}]}`, headers("other", "x"), false},
		{"suffix, other value", `{"file": [{"anything-but": {"suffix": ".tmp"}}]}`, headers("file", "report.pdf"), true},
		{"suffix, excluded", `{"file": [{"anything-but": {"suffix": ".tmp"}}]}`, headers("file", "x.tmp"), false},
		{"many strings use a set", `{"c": [{"anything-but": ["a","b","c","d","e","f","g","h","i"]}]}`, headers("c", "i"), false},
		{"many strings, other value", `{"c": [{"anything-but": ["a","b","c","d","e","f","g","h","i"]}]}`, headers("c", "z"), true},
	})
}

func TestStringOperators(t *testing.T) {
	t.Parallel()
	runMatches(t, Attributes, []matchCase{
		{"prefix", `{"city": [{"prefix": "San "}]}`, headers("city", "San Jose"), true},
		{"prefix, whole value", `{"city": [{"prefix": "San "}]}`, headers("city", "San "), true},
		{"prefix, no", `{"city": [{"prefix": "San "}]}`, headers("city", "Santa Cruz"), false},
		{"prefix, shorter value", `{"city": [{"prefix": "San "}]}`, headers("city", "Sa"), false},
		{"prefix, not on numbers only", `{"n": [{"prefix": "4"}]}`, headers("n", "42"), true},
		{"suffix", `{"host": [{"suffix": ".example.org"}]}`, headers("host", "mail.example.org"), true},
		{"suffix, no", `{"host": [{"suffix": ".example.org"}]}`, headers("host", "example.org.evil"), false},
		{"equals-ignore-case", `{"tier": [{"equals-ignore-case": "GoLd"}]}`, headers("tier", "gold"), true},
		{"equals-ignore-case, upper", `{"tier": [{"equals-ignore-case": "GoLd"}]}`, headers("tier", "GOLD"), true},
		{"equals-ignore-case, longer", `{"tier": [{"equals-ignore-case": "GoLd"}]}`, headers("tier", "golden"), false},
		{"equals-ignore-case, unicode", `{"name": [{"equals-ignore-case": "ÉCOLE"}]}`, headers("name", "école"), true},
		{"cidr v4", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "10.0.0.33"), true},
		{"cidr v4, outside", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "10.0.1.1"), false},
		{"cidr, host bits in the block", `{"ip": [{"cidr": "10.0.0.77/24"}]}`, headers("ip", "10.0.0.1"), true},
		{"cidr, not an address", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "ten"), false},
		{"cidr v6", `{"ip": [{"cidr": "2001:db8::/32"}]}`, headers("ip", "2001:db8:1::5"), true},
		{"cidr v6, outside", `{"ip": [{"cidr": "2001:db8::/32"}]}`, headers("ip", "2001:db9::5"), false},
		{"cidr v4 block, v4-mapped address", `{"ip": [{"cidr": "10.0.0.0/8"}]}`, headers("ip", "::ffff:10.1.2.3"), true},
		{"cidr v4 block, v6 address", `{"ip": [{"cidr": "10.0.0.0/8"}]}`, headers("ip", "2001:db8::1"), false},
	})
}

func TestExists(t *testing.T) {
	t.Parallel()
	runMatches(t, Attributes, []matchCase{
		{"true, present", `{"store": [{"exists": true}]}`, headers("store", "north"), true},
		{"true, empty value is present", `{"store": [{"exists": true}]}`, headers("store", ""), true},
		{"true, missing", `{"store": [{"exists": true}]}`, headers("region", "eu"), false},
		{"false, missing", `{"store": [{"exists": false}]}`, headers("region", "eu"), true},
		{"false, present", `{"store": [{"exists": false}]}`, headers("store", "north"), false},
		// SNS: exists false needs the message to carry some attribute.
		{"false, no attributes at all", `{"store": [{"exists": false}]}`, Input{}, false},
		{"false, only a key", `{"store": [{"exists": false}]}`, Input{Key: "k", HasKey: true}, true},
		{"the empty policy matches a record without attributes", `{}`, Input{}, true},
	})
}

func TestKeyAttribute(t *testing.T) {
	t.Parallel()
	keyed := func(k string) Input { return Input{Key: k, HasKey: true} }
	runMatches(t, Attributes, []matchCase{
		{"prefix of the key", `{"okiba-key": [{"prefix": "user-"}]}`, keyed("user-42"), true},
		{"other key", `{"okiba-key": [{"prefix": "user-"}]}`, keyed("team-7"), false},
		{"no key", `{"okiba-key": [{"prefix": "user-"}]}`, headers("x", "user-1"), false},
		{"empty key is a key", `{"okiba-key": [""]}`, keyed(""), true},
		{"key exists", `{"okiba-key": [{"exists": true}]}`, keyed(""), true},
		{"key does not exist", `{"okiba-key": [{"exists": false}]}`, headers("x", "1"), true},
		{"a header of the reserved name is not the key", `{"okiba-key": ["a"]}`, headers("okiba-key", "a"), false},
		{"key as a number", `{"okiba-key": [{"numeric": [">=", 1000]}]}`, keyed("1234"), true},
		{"key and a header", `{"okiba-key": ["k1"], "kind": ["order"]}`,
			Input{Key: "k1", HasKey: true, Headers: map[string]string{"kind": "order"}}, true},
	})
}

func TestOr(t *testing.T) {
	t.Parallel()
	// metric && (name || namespace)
	const std = `{"source": ["monitor"], "$or": [{"metricName": ["cpu"]}, {"namespace": ["ec2"]}]}`
	// (a || b) && (c || d), two $or in nested alternatives
	const nested = `{"source": ["monitor"], "$or": [
		{"metricName": ["cpu", "latency"]},
		{"metricType": ["gauge"], "$or": [{"metricId": [1234]}, {"spaceId": [1000]}]},
		{"scope": ["service"]}]}`
	runMatches(t, Attributes, []matchCase{
		{"standard, first alternative", std, headers("source", "monitor", "metricName", "cpu"), true},
		{"standard, second alternative", std, headers("source", "monitor", "namespace", "ec2"), true},
		{"standard, neither", std, headers("source", "monitor", "namespace", "s3"), false},
		{"standard, the AND fails", std, headers("source", "billing", "metricName", "cpu"), false},
		{"nested, inner first", nested, headers("source", "monitor", "metricType", "gauge", "metricId", "1234"), true},
		{"nested, inner second", nested, headers("source", "monitor", "metricType", "gauge", "spaceId", "1000"), true},
		{"nested, inner neither", nested, headers("source", "monitor", "metricType", "gauge", "spaceId", "9"), false},
		{"nested, last alternative", nested, headers("source", "monitor", "scope", "service"), true},
		{"an alternative may repeat an outer key",
			`{"a": [{"prefix": "x"}], "$or": [{"a": ["xy"]}, {"b": ["1"]}]}`, headers("a", "xy"), true},
		{"an alternative may repeat an outer key, and both must hold",
			`{"a": [{"prefix": "x"}], "$or": [{"a": ["y"]}, {"b": ["1"]}]}`, headers("a", "y"), false},
		// SNS reads "$or" as a plain key unless it holds two or more objects without keywords.
		{"one alternative is a plain key", `{"$or": [{"prefix": "ab"}]}`, headers("$or", "abc"), true},
		{"one alternative is a plain key, not an OR", `{"$or": [{"prefix": "ab"}]}`, headers("prefix", "ab"), false},
	})
}

func TestTypedHeaders(t *testing.T) {
	t.Parallel()
	typed := func(name, value string, typ Type) Input {
		return Input{Headers: map[string]string{name: value, "other": "x"}, Types: map[string]Type{name: typ}}
	}
	runMatches(t, Attributes, []matchCase{
		{"String is not a number", `{"n": [5]}`, typed("n", "5", String), false},
		{"String is a string", `{"n": ["5"]}`, typed("n", "5", String), true},
		{"Number is a number", `{"n": [{"numeric": [">", 4]}]}`, typed("n", "5", Number), true},
		{"Number is not a string", `{"n": ["5"]}`, typed("n", "5", Number), false},
		{"Number, lenient spelling", `{"n": [0.5]}`, typed("n", ".5", Number), true},
		{"Number, anything-but a string", `{"n": [{"anything-but": ["5"]}]}`, typed("n", "5", Number), true},
		{"Number, no prefix", `{"n": [{"prefix": "5"}]}`, typed("n", "5", Number), false},
		{"String.Array, any element", `{"sport": ["rugby"]}`, typed("sport", `["soccer", "rugby", "hockey"]`, StringArray), true},
		{"String.Array, no element", `{"sport": ["golf"]}`, typed("sport", `["soccer", "rugby"]`, StringArray), false},
		{"String.Array, the array's text is no value", `{"sport": [{"prefix": "["}]}`, typed("sport", `["soccer"]`, StringArray), false},
		{"String.Array, anything-but with one other element", `{"sport": [{"anything-but": ["rugby", "tennis"]}]}`,
			typed("sport", `["rugby", "baseball"]`, StringArray), true},
		{"String.Array, anything-but, all excluded", `{"sport": [{"anything-but": ["rugby", "tennis"]}]}`,
			typed("sport", `["rugby", "tennis"]`, StringArray), false},
		{"String.Array, numbers in it", `{"price": [{"anything-but": [100, 500]}]}`, typed("price", `[100, 50]`, StringArray), true},
		{"String.Array, numeric", `{"price": [{"numeric": ["<", 60]}]}`, typed("price", `[100, 50]`, StringArray), true},
		{"String.Array, a number is not a string", `{"price": ["50"]}`, typed("price", `[100, 50]`, StringArray), false},
		{"String.Array, escapes", `{"s": ["a\"b"]}`, typed("s", `["a\"b"]`, StringArray), true},
		{"String.Array, empty holds nothing", `{"s": [{"exists": false}]}`, typed("s", `[]`, StringArray), true},
		{"String.Array, empty, exists true", `{"s": [{"exists": true}]}`, typed("s", `[]`, StringArray), false},
		{"String.Array, not JSON holds nothing", `{"s": [{"exists": true}]}`, typed("s", `[soccer`, StringArray), false},
		{"String.Array, null element", `{"s": [null]}`, typed("s", `["a", null]`, StringArray), true},
		{"Binary is ignored", `{"blob": [{"exists": true}]}`, typed("blob", "AAEC", Binary), false},
		{"Binary is as if absent", `{"blob": [{"exists": false}]}`, typed("blob", "AAEC", Binary), true},
		{"only Binary attributes are no attributes", `{"x": [{"exists": false}]}`,
			Input{Headers: map[string]string{"blob": "AA"}, Types: map[string]Type{"blob": Binary}}, false},
		{"Plain by default", `{"other": ["x"]}`, typed("n", "5", Number), true},
	})
}

func TestBody(t *testing.T) {
	t.Parallel()
	const state = `{"detail": {"state": ["running"]}}`
	const order = `{"items": {"sku": ["a"], "qty": [2]}}`
	runMatches(t, Body, []matchCase{
		{"nested key", state, body(`{"detail": {"state": "running", "id": 7}}`), true},
		{"nested key, other value", state, body(`{"detail": {"state": "stopped"}}`), false},
		{"nested key, missing", state, body(`{"detail": {}}`), false},
		{"nested key, parent not an object", state, body(`{"detail": "running"}`), false},
		{"dotted name is one key", `{"a.b": ["x"]}`, body(`{"a": {"b": "x"}}`), false},
		{"dotted name is one key, present", `{"a.b": ["x"]}`, body(`{"a.b": "x"}`), true},
		{"array of strings", `{"tags": ["blue"]}`, body(`{"tags": ["red", "blue"]}`), true},
		{"array of strings, none", `{"tags": ["green"]}`, body(`{"tags": ["red", "blue"]}`), false},
		{"nested arrays flatten", `{"m": [3]}`, body(`{"m": [[1, 2], [3]]}`), true},
		{"anything-but on an array", `{"tags": [{"anything-but": ["red"]}]}`, body(`{"tags": ["red", "blue"]}`), true},
		{"anything-but on an array, all excluded", `{"tags": [{"anything-but": ["red"]}]}`, body(`{"tags": ["red", "red"]}`), false},
		{"array of objects, one element matches all", order, body(`{"items": [{"sku": "b", "qty": 1}, {"sku": "a", "qty": 2}]}`), true},
		{"array of objects, keys from different elements", order, body(`{"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}`), false},
		{"array of objects, deeper", `{"a": {"b": {"c": ["x"]}}}`, body(`{"a": [{"b": [{"c": "y"}, {"c": "x"}]}]}`), true},
		{"types: a number is not a string", `{"n": ["5"]}`, body(`{"n": 5}`), false},
		{"types: a string is not a number", `{"n": [5]}`, body(`{"n": "5"}`), false},
		{"types: numbers compare by value", `{"n": [5]}`, body(`{"n": 5.0}`), true},
		{"types: exponent", `{"price": [{"numeric": ["=", 301.5]}]}`, body(`{"price": 3.015e2}`), true},
		{"types: true", `{"b": [true]}`, body(`{"b": true}`), true},
		{"types: true is not a string", `{"b": [true]}`, body(`{"b": "true"}`), false},
		{"types: false", `{"b": [false]}`, body(`{"b": false}`), true},
		{"null matches null", `{"a": [null]}`, body(`{"a": null}`), true},
		{"null does not match missing", `{"a": [null]}`, body(`{"b": 1}`), false},
		{"null does not match the string", `{"a": [null]}`, body(`{"a": "null"}`), false},
		{"null in an array", `{"a": [null]}`, body(`{"a": [1, null]}`), true},
		{"anything-but does not match null", `{"a": [{"anything-but": ["x"]}]}`, body(`{"a": null}`), false},
		{"anything-but matches another type", `{"a": [{"anything-but": ["x"]}]}`, body(`{"a": 3}`), true},
		{"prefix needs a string", `{"a": [{"prefix": "3"}]}`, body(`{"a": 3}`), false},
		{"exists true", `{"a": [{"exists": true}]}`, body(`{"a": 0}`), true},
		{"exists true, null is no value", `{"a": [{"exists": true}]}`, body(`{"a": null}`), false},
		{"exists true, empty array is no value", `{"a": [{"exists": true}]}`, body(`{"a": []}`), false},
		{"exists true, object is not a leaf", `{"a": [{"exists": true}]}`, body(`{"a": {"b": 1}}`), false},
		{"exists false, missing", `{"a": [{"exists": false}]}`, body(`{"b": 1}`), true},
		{"exists false, null", `{"a": [{"exists": false}]}`, body(`{"a": null}`), true},
		{"exists false, object is not a leaf", `{"a": [{"exists": false}]}`, body(`{"a": {"b": 1}}`), true},
		{"exists false, present", `{"a": [{"exists": false}]}`, body(`{"a": "x"}`), false},
		{"exists false under a missing parent", `{"a": {"b": [{"exists": false}]}}`, body(`{"c": 1}`), true},
		{"exists false in an empty body object", `{"a": [{"exists": false}]}`, body(`{}`), true},
		{"$or under a key", `{"d": {"$or": [{"x": [1]}, {"y": [2]}]}}`, body(`{"d": {"y": 2}}`), true},
		{"$or under a key, neither", `{"d": {"$or": [{"x": [1]}, {"y": [2]}]}}`, body(`{"d": {"y": 3}}`), false},
		{"$or across levels", `{"$or": [{"d": {"x": [1]}}, {"e": ["z"]}]}`, body(`{"e": "z"}`), true},
		{"$or across levels, nested", `{"$or": [{"d": {"x": [1]}}, {"e": ["z"]}]}`, body(`{"d": {"x": 1}}`), true},
		{"$or in an array element", `{"i": {"$or": [{"a": [1]}, {"b": [2]}], "c": [3]}}`, body(`{"i": [{"a": 1, "c": 0}, {"b": 2, "c": 3}]}`), true},
		{"$or in an array element, split", `{"i": {"$or": [{"a": [1]}, {"b": [2]}], "c": [3]}}`, body(`{"i": [{"a": 1}, {"c": 3}]}`), false},
		{"escapes in the body", `{"s": ["é\n"]}`, body(`{"s": "\u00e9\n"}`), true},
		{"surrogate pair", `{"s": ["😀"]}`, body(`{"s": "\ud83d\ude00"}`), true},
		{"escaped key", `{"a b": [1]}`, body(`{"a\u0020b": 1}`), true},
		{"repeated key: the last counts", `{"a": [2]}`, body(`{"a": 1, "a": 2}`), true},
		{"repeated key: the first does not", `{"a": [1]}`, body(`{"a": 1, "a": 2}`), false},
		{"keys the policy does not name are skipped", `{"a": [1]}`, body(`{"z": {"deep": [[{"x": "\u0041"}]]}, "a": 1}`), true},
		{"whitespace around", `{"a": [1]}`, body(" \n\t{ \"a\" : 1 }\r\n"), true},
		{"not an object", `{"a": [1]}`, body(`[{"a": 1}]`), false},
		{"a string", `{"a": [1]}`, body(`"a"`), false},
		{"not JSON", `{"a": [1]}`, body(`{"a": 1`), false},
		{"not JSON after the object", `{"a": [1]}`, body(`{"a": 1} x`), false},
		{"not JSON where skipped", `{"a": [1]}`, body(`{"a": 1, "b": [1,]}`), false},
		{"empty body", `{"a": [{"exists": false}]}`, body(``), false},
		{"the empty policy matches any body", `{}`, body(`not json`), true},
		{"key and headers are not the body", `{"a": ["x"]}`, Input{Headers: map[string]string{"a": "x"}, Body: []byte(`{}`)}, false},
		{"a leaf and a nested key of one name",
			`{"$or": [{"a": ["x"]}, {"a": {"b": ["y"]}}]}`, body(`{"a": {"b": "y"}}`), true},
		{"many keys at one level", `{"k1":[1],"k2":[1],"k3":[1],"$or":[{"k4":[1]},{"k5":[1]},{"k6":[1]},{"k7":[1]},{"k8":[1]},{"k9":[1]},{"k10":[1]}]}`,
			body(`{"k1":1,"k2":1,"k3":1,"k10":1}`), true},
	})
}

func TestMatchAttributesDoesNotAllocate(t *testing.T) {
	p, err := Parse([]byte(`{"kind": ["order", "refund"], "amount": [{"numeric": [">", 10, "<=", 1000]}],
		"okiba-key": [{"prefix": "eu-"}], "$or": [{"vip": [{"exists": true}]}, {"tier": [{"equals-ignore-case": "GOLD"}]}]}`), Attributes)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Headers: map[string]string{"kind": "refund", "amount": "99.5", "tier": "gold"}, Key: "eu-1234", HasKey: true}
	if !p.Match(in) {
		t.Fatal("the record should match")
	}
	if n := testing.AllocsPerRun(100, func() { p.Match(in) }); n != 0 {
		t.Errorf("Match allocates %v times per call in scope Attributes; want 0", n)
	}
	// An SNS front's typed headers, and a CIDR block, read without allocating too.
	p, err = Parse([]byte(`{"ip": [{"cidr": "10.0.0.0/8"}], "sport": ["rugby"], "n": [{"numeric": [">", 1]}], "gone": [{"exists": false}]}`), Attributes)
	if err != nil {
		t.Fatal(err)
	}
	in = Input{Headers: map[string]string{"ip": "10.1.2.3", "sport": `["soccer", "rugby"]`, "n": "2"},
		Types: map[string]Type{"sport": StringArray, "n": Number}}
	if !p.Match(in) {
		t.Fatal("the record with typed headers should match")
	}
	if n := testing.AllocsPerRun(100, func() { p.Match(in) }); n != 0 {
		t.Errorf("Match allocates %v times per call on typed headers; want 0", n)
	}
}

// TestMatchConcurrently shares one policy among goroutines, as a topic's fan-out will;
// under the race detector (make test) it holds that matching shares nothing it writes.
func TestMatchConcurrently(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`{"a": {"b": ["x"]}, "c": [{"numeric": [">", 1]}]}`), Body)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{`{"a": {"b": "x"}, "c": 2}`, `{"a": [{"b": "y"}], "c": 2}`, `{"a": {"b": "x"}, "c": 0}`}
	want := []bool{true, false, false}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				k := (g + i) % len(bodies)
				if got := p.Match(body(bodies[k])); got != want[k] {
					t.Errorf("Match(%s) = %v, want %v", bodies[k], got, want[k])
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}
