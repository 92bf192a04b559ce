package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// probes are records that every policy FuzzParse finds is matched against, before and
// after a trip through its canonical form.
var probes = []Input{
	{},
	headers("a", "x", "b", "1", "c", "10.0.0.1", "$or", "ab"),
	{Headers: map[string]string{"a": `["x", 1, null]`, "b": "2"}, Types: map[string]Type{"a": StringArray, "b": Number}},
	{Key: "x", HasKey: true, Headers: map[string]string{"n": "-3.5e1"}},
	body(`{"a": "x", "b": 1, "c": {"d": [null, true, "y", 2.5]}, "e": []}`),
	body(`{"a": [{"b": "x"}, {"b": 1}], "$or": "ab"}`),
	body(`["not", "an", "object"]`),
}

// FuzzParse holds that Parse never panics, refuses only with an *Error, and writes every
// policy it accepts in a canonical form that parses to an equal policy, which matches
// the same records.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"customer_interests": ["rugby", "football"], "price_usd": [{"numeric": [">", 100]}]}`,
		`{"source": ["x"], "$or": [{"metricName": ["cpu"]}, {"namespace": ["ec2"]}]}`,
		`{"detail": {"state": [{"anything-but": {"prefix": "init"}}], "ip": [{"cidr": "10.0.0.0/8"}]}}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, policy []byte, inBody bool) {
		scope := Attributes
		if inBody {
			scope = Body
		}
		p, err := Parse(policy, scope)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Path == "" || fe.Message == "" {
				t.Fatalf("Parse(%q) = %v (%T); want a *filter.Error with a path and a message", policy, err, err)
			}
			return
		}
		canonical := p.Canonical()
		q, err := Parse(canonical, scope)
		if err != nil {
			t.Fatalf("Parse(%q) = %s, whose canonical form does not parse: %v", policy, canonical, err)
		}
		if again := q.Canonical(); !bytes.Equal(again, canonical) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", canonical, again)
		}
		if !p.Equal(q) || !json.Valid(canonical) {
			t.Fatalf("Parse(%s) is not Equal to the policy it came from", canonical)
		}
		for _, in := range probes {
			if p.Match(in) != q.Match(in) {
				t.Fatalf("%s and its canonical form %s disagree on %+v", policy, canonical, in)
			}
		}
	})
}

// scanPolicies are body policies FuzzScan matches each body with.
var scanPolicies = []string{
	`{"a": ["x", 1, null, true, {"prefix": "é"}], "b": {"c": [{"exists": false}], "d": [{"numeric": [">", 0]}]}}`,
	`{"$or": [{"a": {"b": [{"anything-but": ["x"]}]}}, {"c": [{"exists": true}]}]}`,
	`{"a": [{"suffix": "\u0000"}, {"equals-ignore-case": "X"}, ""], "k": {"$or": [{"x": [false]}, {"y": [{"anything-but": 3}]}]}}`,
	`{"a b": [{"exists": true}], "\ud83d\ude00": ["\ufffd"]}`,
}

// leafPolicies are lists of conditions FuzzScan matches each text with, as a String.Array
// header.
var leafPolicies = []string{
	`{"a": ["x", 1, null, true, false, {"prefix": "é"}]}`,
	`{"a": [{"exists": true}]}`,
	`{"a": [{"exists": false}, {"numeric": [">", 0, "<", 10]}]}`,
	`{"a": [{"anything-but": ["x"]}, {"suffix": "\u0000"}]}`,
}

// FuzzScan holds the body scanner to encoding/json: it accepts the bodies json.Valid
// does, and a policy matches a body read by it as it matches the body encoding/json
// decodes.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a": "x", "b": {"c": 1, "d": 2}}`,
		`{"a": [{"z": 1}, "\u00e9"], "c": null}`,
		`{"k": [{"x": false}, {"y": 4}], "a b": 0}`,
	} {
		f.Add([]byte(s))
	}
	var ps []*Policy
	for _, s := range scanPolicies {
		p, err := Parse([]byte(s), Body)
		if err != nil {
			f.Fatal(err)
		}
		ps = append(ps, p)
	}
	var leaves []*field
	for _, s := range leafPolicies {
		p, err := Parse([]byte(s), Attributes)
		if err != nil {
			f.Fatal(err)
		}
		leaves = append(leaves, p.root.fields[0])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := getScanner()
		top, ok := sc.scan(string(b), leafTrie)
		if ok != json.Valid(b) {
			t.Fatalf("scanner accepts %q: %v; json.Valid: %v", b, ok, !ok)
		}
		if !ok {
			top = -1 // not JSON: it holds nothing
		}
		// A String.Array header is read without nodes; it must read as the nodes do.
		for i, leaf := range leaves {
			if got, want := leaf.matchArrayHeader(string(b)), leaf.matchLeaf(sc, top); got != want {
				t.Fatalf("conditions %s on the String.Array %q: %v, but %v read as nodes", leafPolicies[i], b, got, want)
			}
		}
		putScanner(sc)
		var v any
		decoded := json.Unmarshal(b, &v) == nil // a number beyond float64 is valid but not decodable
		obj, isObj := v.(map[string]any)
		for i, p := range ps {
			got := p.Match(Input{Body: b})
			if !decoded || !isObj {
				if got && (!ok || bytes.TrimSpace(b)[0] != '{') {
					t.Fatalf("policy %d matches %q, which is not a JSON object", i, b)
				}
				continue
			}
			ref := getScanner()
			top := refNodes(ref, obj, p.trie)
			want := p.root.matchOne(ref, top)
			putScanner(ref)
			if got != want {
				t.Fatalf("policy %s on %q: Match = %v, but %v on encoding/json's reading", p, b, got, want)
			}
		}
	})
}

// refNodes writes a value encoding/json decoded as the scanner's nodes, keeping what t
// names, as the scanner would.
func refNodes(sc *scanner, v any, t *tnode) int32 {
	switch x := v.(type) {
	case nil:
		return sc.add(jnode{kind: jNull})
	case bool:
		if x {
			return sc.add(jnode{kind: jTrue})
		}
		return sc.add(jnode{kind: jFalse})
	case float64:
		return sc.add(jnode{kind: jNumber, q: quantize(x)})
	case string:
		return sc.add(jnode{kind: jString, s: x})
	case []any:
		arr := sc.add(jnode{kind: jArray})
		last := int32(-1)
		for _, e := range x {
			c := refNodes(sc, e, t)
			if last < 0 {
				sc.nodes[arr].first = c
			} else {
				sc.nodes[last].next = c
			}
			last = c
		}
		return arr
	case map[string]any:
		obj := sc.add(jnode{kind: jObject})
		last := int32(-1)
		for k, e := range x {
			id := t.lookup(k)
			if id < 0 {
				continue
			}
			c := refNodes(sc, e, t.kids[id])
			sc.nodes[c].field = int32(id)
			if last < 0 {
				sc.nodes[obj].first = c
			} else {
				sc.nodes[last].next = c
			}
			last = c
		}
		return obj
	}
	panic("unexpected value from encoding/json")
}
