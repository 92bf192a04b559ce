package filter

import (
	"testing"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, policy, want string
		scope              Scope
	}{
		{"keys sorted, spaces gone", `{ "b" : ["x"], "a" : [ "y" ] }`, `{"a":["y"],"b":["x"]}`, Attributes},
		{"$or sorts by its name", `{"z": ["1"], "$or": [{"b": ["2"]}, {"a": ["3"]}], "#": ["4"]}`,
			`{"#":["4"],"$or":[{"b":["2"]},{"a":["3"]}],"z":["1"]}`, Attributes},
		{"lists keep their order", `{"a": ["z", "y", 3, {"prefix": "p"}]}`, `{"a":["z","y",3,{"prefix":"p"}]}`, Attributes},
		{"numbers in one spelling", `{"a": [3.015e2, 1E2, -0, 0.50, 1e-7]}`, `{"a":[301.5,100,0,0.5,1e-07]}`, Attributes},
		{"numeric", `{"a": [{"numeric": [">=", 1e1, "<", 2e1]}, {"numeric": ["=", 5]}, {"numeric": ["<=", -1]}]}`,
			`{"a":[{"numeric":[">=",10,"<",20]},{"numeric":["=",5]},{"numeric":["<=",-1]}]}`, Attributes},
		{"a single anything-but as a list", `{"a": [{"anything-but": "x"}, {"anything-but": 5}]}`,
			`{"a":[{"anything-but":["x"]},{"anything-but":[5]}]}`, Attributes},
		{"anything-but prefix and suffix", `{"a": [{"anything-but": {"prefix": "p"}}, {"anything-but": {"suffix": "s"}}]}`,
			`{"a":[{"anything-but":{"prefix":"p"}},{"anything-but":{"suffix":"s"}}]}`, Attributes},
		{"cidr masked", `{"ip": [{"cidr": "10.1.2.3/8"}, {"cidr": "2001:DB8:0:0::1/32"}]}`,
			`{"ip":[{"cidr":"10.0.0.0/8"},{"cidr":"2001:db8::/32"}]}`, Attributes},
		{"literals and exists", `{"a": [true, false, null, {"exists": false}]}`, `{"a":[true,false,null,{"exists":false}]}`, Body},
		{"string escapes", `{"a\u0022": ["\u00e9\t\u0001\/<>&"]}`, `{"a\"":["é\t\u0001/<>&"]}`, Attributes},
		{"nested", `{"d": {"y": [1], "x": {"w": [2]}}}`, `{"d":{"x":{"w":[2]},"y":[1]}}`, Body},
		{"a plain key named $or", `{"$or": [{"prefix": "a"}]}`, `{"$or":[{"prefix":"a"}]}`, Attributes},
		{"empty", ` { } `, `{}`, Attributes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(c.policy), c.scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(p.Canonical()); got != c.want {
				t.Errorf("Canonical() = %s, want %s", got, c.want)
			}
			if p.String() != c.want {
				t.Errorf("String() = %s, want %s", p, c.want)
			}
			q, err := Parse(p.Canonical(), c.scope)
			if err != nil {
				t.Fatalf("Parse(Canonical()): %v", err)
			}
			if !p.Equal(q) || q.String() != c.want {
				t.Errorf("Parse(Canonical()) = %s, not equal", q)
			}
		})
	}
}

func TestEqual(t *testing.T) {
	t.Parallel()
	parse := func(s string, scope Scope) *Policy {
		p, err := Parse([]byte(s), scope)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := parse(`{"b": [1e2], "a": [{"anything-but": "x"}]}`, Attributes)
	if b := parse(`{"a":[{"anything-but":["x"]}],"b":[100]}`, Attributes); !a.Equal(b) {
		t.Errorf("%s and %s differ only in spelling; want Equal", a, b)
	}
	if b := parse(`{"a":[{"anything-but":["x"]}],"b":[100]}`, Body); a.Equal(b) {
		t.Error("policies of two scopes are Equal; want not")
	}
	if b := parse(`{"a":[{"anything-but":["y"]}],"b":[100]}`, Attributes); a.Equal(b) {
		t.Errorf("%s and %s are Equal; want not", a, b)
	}
	if a.Scope() != Attributes {
		t.Errorf("Scope() = %v", a.Scope())
	}
	c := a.Canonical()
	c[0] = 'X'
	if a.String()[0] != '{' {
		t.Error("changing what Canonical returned changed the policy")
	}
}

func TestScopeString(t *testing.T) {
	t.Parallel()
	for s, want := range map[Scope]string{Attributes: "attributes", Body: "body", 9: "Scope(9)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}
