package errcode

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/queue"
)

const module = "github.com/okiba/okiba"

// domain are the packages whose exported errors the fronts may meet, by directory
// relative to this one.
var domain = []string{"../../access", "../../queue", "../../topic", "../../broker", "../receipt", "../crossorigin", "../filter"}

// exported is what the source of one package exports of errors.
type exported struct {
	errs  map[string]token.Position // "github.com/okiba/okiba/queue.ErrQueueFull" or ".FullError"
	alias map[string]string         // a sentinel defined as another: broker.ErrInvalidReceipt = receipt.ErrInvalid
}

// discover reads the non-test Go files of the domain packages and returns their
// exported sentinels (package-level variables named Err…) and typed errors (types with
// an Error() string method), so that an error added tomorrow is found without anyone
// listing it.
func discover(t *testing.T) exported {
	t.Helper()
	out := exported{errs: map[string]token.Position{}, alias: map[string]string{}}
	fset := token.NewFileSet()
	for _, dir := range domain {
		pkg := module + "/" + filepath.ToSlash(filepath.Join("internal/errcode", dir)) // this directory's, seen from the module root
		for _, f := range parseDir(t, fset, dir) {
			imports := importNames(f)
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.GenDecl:
					if d.Tok != token.VAR {
						continue
					}
					for _, spec := range d.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if !name.IsExported() || !strings.HasPrefix(name.Name, "Err") {
								continue
							}
							id := pkg + "." + name.Name
							out.errs[id] = fset.Position(name.Pos())
							if i < len(vs.Values) {
								if target := reference(vs.Values[i], pkg, imports); target != "" {
									out.alias[id] = target
								}
							}
						}
					}
				case *ast.FuncDecl:
					if d.Recv == nil || d.Name.Name != "Error" || d.Type.Params.NumFields() != 0 || d.Type.Results.NumFields() != 1 {
						continue
					}
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						out.errs[pkg+"."+id.Name] = fset.Position(id.Pos())
					}
				}
			}
		}
	}
	return out
}

// referenced returns what this package's own (non-test) source names of other
// packages: "github.com/okiba/okiba/queue.FullError" for queue.FullError.
func referenced(t *testing.T) map[string]bool {
	t.Helper()
	refs := map[string]bool{}
	for _, f := range parseDir(t, token.NewFileSet(), ".") {
		imports := importNames(f)
		ast.Inspect(f, func(n ast.Node) bool {
			if e, ok := n.(ast.Expr); ok {
				if r := reference(e, "", imports); r != "" {
					refs[r] = true
				}
			}
			return true
		})
	}
	return refs
}

// reference returns the qualified name e stands for, when it is an identifier of pkg or
// a selector of an imported package.
func reference(e ast.Expr, pkg string, imports map[string]string) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && imports[x.Name] != "" {
			return imports[x.Name] + "." + e.Sel.Name
		}
	case *ast.Ident:
		if pkg != "" && e.IsExported() {
			return pkg + "." + e.Name
		}
	}
	return ""
}

func importNames(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = p
	}
	return m
}

func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// TestEveryDomainErrorHasARow: each exported sentinel and typed error of the domain
// packages appears in the table, so that each has a native code, an HTTP status and an
// SQS error chosen for it instead of falling through to internal.
func TestEveryDomainErrorHasARow(t *testing.T) {
	t.Parallel()
	ex := discover(t)
	refs := referenced(t)
	if len(ex.errs) < 20 {
		t.Fatalf("found only %d exported errors in %v: the discovery is broken", len(ex.errs), domain)
	}
	covered := func(id string) bool {
		if refs[id] || refs[ex.alias[id]] {
			return true
		}
		for from, to := range ex.alias {
			if to == id && refs[from] {
				return true
			}
		}
		return false
	}
	var missing []string
	for id, pos := range ex.errs {
		if !covered(id) {
			missing = append(missing, fmt.Sprintf("%s (%s:%d)", strings.TrimPrefix(id, module+"/"), filepath.Base(pos.Filename), pos.Line))
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("%s has no row in internal/errcode/table.go: give it a native code, and the SQS error it is", m)
	}
}

// TestRowsAreComplete: every row has a native code with an HTTP status and an SQS code.
func TestRowsAreComplete(t *testing.T) {
	t.Parallel()
	for i, r := range table {
		if len(r.match) == 0 {
			t.Errorf("row %d (%s) matches nothing", i, r.Code)
		}
		if api.Status[r.Code] == 0 {
			t.Errorf("row %d: code %q has no HTTP status in api.Status", i, r.Code)
		}
		if r.SQS == "" {
			t.Errorf("row %d (%s) has no SQS error", i, r.Code)
		}
	}
	if got := Of(errors.New("something unforeseen")); !got.Internal() || got.SQS != "InternalError" {
		t.Errorf("an unknown error maps to %+v, want internal", got)
	}
}

// first returns the index of the row Of takes for err, -1 for none.
func first(err error) int {
	for i := range table {
		if table[i].Matches(err) {
			return i
		}
	}
	return -1
}

// TestEachRowWinsForItsErrors: every sentinel of a row, and an instance of every typed
// error, is answered by that row and not by one before it. An error matched by several
// rows (a typed error and the sentinel it wraps) is answered by the first: where their
// rows differ the typed error must come first, which this checks for all of them.
func TestEachRowWinsForItsErrors(t *testing.T) {
	t.Parallel()
	for i, r := range table {
		for _, m := range r.match {
			var example error
			switch {
			case m.sentinel != nil:
				example = m.sentinel
			case m.when:
				continue // a condition on fields: see TestOrderMatters
			default:
				example = reflect.New(m.typ.Elem()).Interface().(error)
			}
			for _, err := range []error{example, fmt.Errorf("on the way up: %w", example)} {
				if got := first(err); got != i {
					t.Errorf("%T %v: row %d (%s) answers it before its own row %d (%s)", example, err, got, table[got].Code, i, r.Code)
				}
			}
		}
	}
}

// TestOrderMatters: a typed error that wraps a sentinel with a different answer gets
// its own.
func TestOrderMatters(t *testing.T) {
	t.Parallel()
	inFlight := &queue.LimitError{Limit: "max_in_flight", Value: 2, What: `"q" has 2 messages in flight`}
	if own, sentinel := first(inFlight), first(queue.ErrLimit); own >= sentinel || !table[sentinel].Matches(inFlight) {
		t.Fatalf("the max_in_flight row (%d) must come before ErrLimit's (%d), which matches it too", own, sentinel)
	}
	for _, c := range []struct {
		err   error
		code  string
		retry time.Duration
	}{
		{inFlight, api.CodeTooManyInFlight, time.Second},
		{fmt.Errorf("receive: %w", inFlight), api.CodeTooManyInFlight, time.Second},
		{&queue.LimitError{Limit: "max_queues", Value: 4}, api.CodeTooManyQueues, 0},
		{&queue.LimitError{Limit: "max_topics", Value: 4}, api.CodeTooManyTopics, 0},
		{&queue.LimitError{Limit: "max_groups", Value: 4}, api.CodeTooManyGroups, 0},
		{&queue.LimitError{Limit: "max_members", Value: 4}, api.CodeTooManyMembers, 0},
		{&queue.LimitError{Limit: "max_subscriptions", Value: 4}, api.CodeTooManySubscriptions, 0},
		{&queue.FullError{Queue: "q", Limit: "max_messages", Value: 1}, api.CodeQueueFull, time.Second},
		{&queue.ParamError{Field: "max", Reason: "must be between 1 and 1000, got 0"}, api.CodeInvalidRequest, 0},
	} {
		if got := Of(c.err); got.Code != c.code || got.RetryAfter != c.retry {
			t.Errorf("%v: %s retry %v, want %s retry %v", c.err, got.Code, got.RetryAfter, c.code, c.retry)
		}
	}
}

func TestSQSText(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("%w: %q", queue.ErrQueueNotFound, "orders")
	r := Of(err)
	if got := r.SQSText(err, "orders"); got != "The specified queue orders does not exist." {
		t.Errorf("queue not found: %q", got)
	}
	full := &queue.FullError{Queue: "q", Limit: "max_bytes", Value: 10}
	r = Of(full)
	if got := r.SQSText(full, "q"); got != full.Error() {
		t.Errorf("a row without a message gives the error's: %q", got)
	}
}
