package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/service"
)

// matrixGrants are the principals of the permission matrix: one single grant each.
var matrixGrants = []string{
	"", // none
	"send queue:*", "receive queue:*", "browse queue:*", "manage queue:*",
	"send topic:*", "receive topic:*", "browse topic:*", "manage topic:*",
	"admin", "metrics",
}

// matrixAlso are the extra checks of the rules that say one (auth.Rule.Also), by their
// words: what the grants must allow besides. A rule whose words are not here fails the
// matrix: whoever adds a check says here what it needs.
var matrixAlso = map[string]func(access.Grants) bool{
	"on queue:playground-* and topic:playground-*: a lesson creates and deletes queues and topics named playground-<run>-…":                                                   playing,
	"on queue:playground-* and topic:playground-*: a lesson creates and deletes queues and topics named playground-<run>-…; a run answers only the principal that started it": playing,
}

func playing(g access.Grants) bool {
	return g.Allows(access.Manage, access.QueueNamed("playground-1-work")) && g.Allows(access.Manage, access.TopicNamed("playground-1-orders"))
}

// matrixPath fills a route's pattern with names the matrix's state has.
func matrixPath(pattern string) string {
	return strings.NewReplacer("{$}", "", "{name}", "orders", "{lesson}", "nope", "{id}", "nope", "{file...}", "console.css").Replace(pattern)
}

// TestPermissionMatrix: every route of the console, asked by a browser signed in as
// each principal of matrixGrants, is refused (403 forbidden, naming the permission, as a
// page or as the API's error body) exactly when its rule says so, and answered otherwise.
// The table is the console's own (Routes), so a route without a rule fails here.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	ctx := context.Background()
	if _, err := e.api.PutQueue(ctx, "orders", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.PutTopic(ctx, "orders", api.TopicConfig{}); err != nil {
		t.Fatal(err)
	}

	// The mux holds the table's routes and nothing else.
	rec := recordingMux{}
	e.c.Register(&rec)
	routes := e.c.Routes()
	var want []string
	for _, rt := range routes {
		want = append(want, rt.Method+" "+rt.Pattern)
	}
	if !slices.Equal([]string(rec), want) {
		t.Fatalf("Register mounts %v, the table has %v", rec, want)
	}

	type principal struct {
		grant  string
		grants access.Grants
		cookie string
	}
	var ps []principal
	for i, s := range matrixGrants {
		p := principal{grant: s}
		name := "p" + string(rune('a'+i))
		var secret string
		if s == "" {
			secret = newPrincipal(t, e, name)
		} else {
			secret = newPrincipal(t, e, name, s)
			g, _ := access.ParseGrant(s)
			p.grants = access.Grants{g}
		}
		p.cookie = signIn(t, e, secret)
		ps = append(ps, p)
	}

	for _, rt := range routes {
		rule := rt.Rule
		if !rule.Open && rule.Permission == 0 {
			t.Errorf("%s %s has no rule", rt.Method, rt.Pattern)
			continue
		}
		also, known := matrixAlso[rule.Also]
		if rule.Also != "" && !known {
			t.Errorf("%s %s checks %q, which the matrix does not know: add it to matrixAlso", rt.Method, rt.Pattern, rule.Also)
			continue
		}
		if !rule.Open && !rule.Filtered && rule.Param == "" && rule.Kind != access.AnyKind && rule.Also == "" {
			t.Errorf("%s %s names no resource and says no other check", rt.Method, rt.Pattern)
			continue
		}
		path := matrixPath(rt.Pattern)
		for _, p := range ps {
			refused := false
			switch {
			case rule.Open, rule.Filtered:
			case rule.Param != "" || rule.Kind == access.AnyKind:
				refused = !p.grants.Allows(rule.Permission, rule.Resource("orders")) || also != nil && !also(p.grants)
			default:
				refused = !also(p.grants)
			}
			var body io.Reader
			hdr := []string{"Cookie", p.cookie, "Sec-Fetch-Site", "same-origin"}
			if rt.Method == "POST" && rt.Pattern == "/login" {
				var ct string
				body, ct = loginForm(t, testToken, "/")
				hdr = append(hdr, "Content-Type", ct)
			}
			r := do(t, rt.Method, e.url+path, body, hdr...)
			b, _ := io.ReadAll(r.Body)
			got := r.StatusCode == http.StatusForbidden
			if got != refused || r.StatusCode == http.StatusUnauthorized {
				t.Errorf("%s %s as %q: %s, want refused=%v\n%s", rt.Method, path, p.grant, r.Status, refused, b)
				continue
			}
			if !refused {
				continue
			}
			// The refusal names the missing permission, in the console's shape.
			if rt.Page {
				if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(b), "lacks the "+rule.Permission.String()+" permission") {
					t.Errorf("%s %s as %q: the refusal is no page naming the permission: %s\n%s", rt.Method, path, p.grant, r.Header.Get("Content-Type"), b)
				}
				continue
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil || eb.Error.Code != api.CodeForbidden ||
				!strings.Contains(eb.Error.Message, "lacks the "+rule.Permission.String()+" permission") {
				t.Errorf("%s %s as %q: the refusal is not the API's forbidden: %s", rt.Method, path, p.grant, b)
			}
		}
	}
}

type recordingMux []string

func (m *recordingMux) Handle(pattern string, _ http.Handler) { *m = append(*m, pattern) }

// The console answers a refusal as the native API does: its one row for
// *access.DeniedError in internal/errcode, which the console cannot import.
func TestRefusalsAnswerAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	err := auth.Principal{Name: "ops"}.Check(access.Manage, access.QueueNamed("orders"))
	var denied *access.DeniedError
	if !errors.As(err, &denied) {
		t.Fatalf("Check: %v", err)
	}
	if got, want := forbidden(err), service.ErrorOf(nil, err); *got != *want {
		t.Fatalf("the console answers %+v, the API %+v", got, want)
	}
}

// getJSON GETs a console endpoint with cookie and decodes its answer into v.
func getJSON(t *testing.T, e *env, path, cookie string, v any) int {
	t.Helper()
	r := do(t, "GET", e.url+path, nil, "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %s: %v", path, r.Status, err)
	}
	return r.StatusCode
}

// TestConsoleShowsWhatThePrincipalMaySee: signed in as a principal, the console lists
// only the queues and topics it may browse, refuses the pages of the others, and offers
// only the actions its grants allow; a grant given or taken applies to the sessions
// going on.
func TestConsoleShowsWhatThePrincipalMaySee(t *testing.T) {
	t.Parallel()
	e := start(t, testToken, Options{})
	ctx := context.Background()
	for _, q := range []string{"orders-1", "billing"} {
		if _, err := e.api.PutQueue(ctx, q, api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.api.Send(ctx, "orders-1", client.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ds, err := e.api.Receive(ctx, "orders-1", client.ReceiveOptions{Max: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if _, err := e.api.DeadLetter(ctx, "orders-1", "bad", "", ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"orders-events", "audit"} {
		if _, err := e.api.PutTopic(ctx, tp, api.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.api.PutGroup(ctx, "orders-events", "projector", api.GroupConfig{}); err != nil {
		t.Fatal(err)
	}
	reader := signIn(t, e, newPrincipal(t, e, "reader", "browse queue:orders-*", "browse topic:orders-*"))
	ops := signIn(t, e, newPrincipal(t, e, "ops", "manage queue:orders-*", "send queue:orders-*", "receive queue:orders-*", "receive topic:orders-*", "browse topic:orders-*"))
	player := signIn(t, e, newPrincipal(t, e, "player", "manage queue:playground-*", "manage topic:playground-*"))
	get := func(path, cookie string) (int, string) {
		t.Helper()
		return page(t, e.url+path, "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	}
	has := func(who, path, html string, want bool, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if strings.Contains(html, p) != want {
				t.Errorf("%s on %s: has %q = %v, want %v", who, path, p, !want, want)
			}
		}
	}
	queues := func(cookie string) []string {
		t.Helper()
		var a overviewAnswer
		getJSON(t, e, "/ui/api/overview", cookie, &a)
		var names []string
		for _, q := range a.Queues {
			names = append(names, q.Name)
		}
		return names
	}

	// Who is signed in, and the way out.
	_, html := get("/", reader)
	has("reader", "/", html, true, `Signed in as <strong>reader</strong>`, `action="/logout"`)

	// Lists: only what the principal may browse.
	if got := queues(reader); !slices.Equal(got, []string{"orders-1", "orders-1-dlq"}) {
		t.Errorf("reader's overview lists %v", got)
	}
	if _, html := get("/topics", reader); !strings.Contains(html, `data-topic="orders-events"`) || strings.Contains(html, `data-topic="audit"`) {
		t.Errorf("reader's topics: %s", region(t, html, "topics"))
	}
	// Pages of the others: refused, saying what is missing.
	for path, why := range map[string]string{"/queues/billing": "browse permission on queue:billing", "/topics/audit": "browse permission on topic:audit"} {
		if status, html := get(path, reader); status != http.StatusForbidden || !strings.Contains(html, why) || !strings.Contains(html, "Signed in as") {
			t.Errorf("reader on %s: %d\n%s", path, status, html)
		}
	}
	var eb api.ErrorBody
	if status := getJSON(t, e, "/ui/api/queues/billing/history", reader, &eb); status != http.StatusForbidden || eb.Error == nil || eb.Error.Code != api.CodeForbidden {
		t.Errorf("reader's history of billing: %d %+v", status, eb.Error)
	}

	// Actions: offered only when allowed.
	_, html = get("/queues/orders-1", reader)
	has("reader", "/queues/orders-1", html, false, `id="send-form"`, `id="recv-form"`, `id="purge-open"`, `purge-dialog`, `data-can-manage`)
	_, html = get("/queues/orders-1", ops)
	has("ops", "/queues/orders-1", html, true, `id="send-form"`, `id="recv-form"`, `id="purge-open"`, `purge-dialog`, `data-can-manage`)
	_, html = get("/topics/orders-events", reader)
	has("reader", "/topics/orders-events", html, false, `data-seek=`)
	_, html = get("/topics/orders-events", ops)
	has("ops", "/topics/orders-events", html, true, `data-seek="projector"`)
	var dl deadLetterAnswer
	getJSON(t, e, "/ui/api/dead-letters/orders-1-dlq", reader, &dl)
	if dl.CanManage || dl.RedriveTo["orders-1"] || len(dl.Messages) != 1 {
		t.Errorf("reader's dead letters: may manage %v, redrive to %v, %d messages", dl.CanManage, dl.RedriveTo, len(dl.Messages))
	}
	getJSON(t, e, "/ui/api/dead-letters/orders-1-dlq", ops, &dl)
	if !dl.CanManage || !dl.RedriveTo["orders-1"] {
		t.Errorf("ops's dead letters: may manage %v, redrive to %v", dl.CanManage, dl.RedriveTo)
	}
	// What the pages would call, the native API refuses to the same session.
	if r := do(t, "POST", e.url+"/v1/queues/orders-1/purge", nil, "Cookie", reader, "Sec-Fetch-Site", "same-origin"); r.StatusCode != http.StatusForbidden {
		t.Errorf("reader's purge through the API: %s", r.Status)
	}

	// The playground: offered to the player only, and each run is its starter's.
	_, html = get("/playground", reader)
	has("reader", "/playground", html, true, `id="no-play"`)
	has("reader", "/playground", html, false, `data-run`)
	if r := do(t, "POST", e.url+"/ui/api/playground/absorb", strings.NewReader(`{}`), "Cookie", reader, "Sec-Fetch-Site", "same-origin"); r.StatusCode != http.StatusForbidden {
		t.Errorf("reader starts a lesson: %s", r.Status)
	}
	_, html = get("/playground", player)
	has("player", "/playground", html, true, `data-run`)
	has("player", "/playground", html, false, `id="no-play"`)
	r := do(t, "POST", e.url+"/ui/api/playground/delivery", strings.NewReader(`{}`), "Cookie", player, "Sec-Fetch-Site", "same-origin")
	var run runState
	if err := json.NewDecoder(r.Body).Decode(&run); err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("player starts a lesson: %s %v", r.Status, err)
	}
	runPath := e.url + "/ui/api/playground/runs/" + run.ID
	if r := do(t, "GET", runPath, nil, "Authorization", "Bearer "+testToken); r.StatusCode != http.StatusNotFound {
		t.Errorf("another principal asks for the player's run: %s", r.Status)
	}
	if r := do(t, "DELETE", runPath, nil, "Cookie", player, "Sec-Fetch-Site", "same-origin"); r.StatusCode != http.StatusNoContent {
		t.Errorf("player stops its run: %s", r.Status)
	}

	// A grant given applies to the session going on, as one taken does.
	g, _ := access.ParseGrant("browse queue:billing")
	if _, err := e.b.GrantPrincipal(ctx, "reader", []access.Grant{g}); err != nil {
		t.Fatal(err)
	}
	if got := queues(reader); !slices.Contains(got, "billing") {
		t.Errorf("after the grant, reader's overview lists %v", got)
	}
	if _, err := e.b.RevokePrincipal(ctx, "reader", []access.Grant{g}); err != nil {
		t.Fatal(err)
	}
	if got := queues(reader); slices.Contains(got, "billing") {
		t.Errorf("after the revocation, reader's overview lists %v", got)
	}
}
