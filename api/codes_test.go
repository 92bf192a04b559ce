package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// declaredCodes returns the error codes api.go declares (the constants named Code…),
// read from the source so that a code added tomorrow is found without being listed.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{} // value → constant
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				codes[v] = name.Name
			}
		}
	}
	if len(codes) < 20 {
		t.Fatalf("found only %d codes in api.go", len(codes))
	}
	return codes
}

// TestEveryCodeHasAStatus: a client learns a code's meaning from its HTTP status too;
// a code without one would be answered 500.
func TestEveryCodeHasAStatus(t *testing.T) {
	t.Parallel()
	codes := declaredCodes(t)
	for v, name := range codes {
		if Status[v] == 0 {
			t.Errorf("%s (%q) has no HTTP status in Status", name, v)
		}
	}
	for v := range Status {
		if codes[v] == "" {
			t.Errorf("Status has %q, which is no declared code", v)
		}
	}
}

// TestDocsListEveryCode: docs/api.md's table of error codes lists every code with the
// status the server answers it with, and nothing else.
func TestDocsListEveryCode(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Error codes\n")
	if !ok {
		t.Fatal(`docs/api.md has no "## Error codes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|")
	documented := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		n, _ := strconv.Atoi(m[2])
		if _, dup := documented[m[1]]; dup {
			t.Errorf("docs/api.md lists %s twice", m[1])
		}
		documented[m[1]] = n
	}
	var missing []string
	for code, status := range Status {
		switch got, ok := documented[code]; {
		case !ok:
			missing = append(missing, code)
		case got != status:
			t.Errorf("docs/api.md gives %s status %d; the server answers %d", code, got, status)
		}
	}
	slices.Sort(missing)
	for _, code := range missing {
		t.Errorf("docs/api.md's error codes lack %s (%d)", code, Status[code])
	}
	for code := range documented {
		if Status[code] == 0 {
			t.Errorf("docs/api.md lists %s, which is no code", code)
		}
	}
}
